"""MoE routing rows (seed 003): softmax + top-k + normalize over router logits [rows, n].
Bytes = rows * n * itemsize (logits in) + rows * k * (itemsize + 4) (values and int32 indices out).
Alternative: the numpy pipeline a user writes (xe2rt.reference.routing.numpy_pipeline: fp32 softmax, argpartition,
sort of the kept k, normalize) on host arrays, timed by wall clock in the same run; rows/s for both go in the note.

One more row, softmax_stats at temperature 0.7 over a float16 vocabulary of 128256 logits in rows of 512 (LLM
sampling's vocabulary pass): bytes = the logits read + 8 per row written; alternative: the dpnp composition (max per
row, subtract, divide, exp, sum per row; the queue drained before each oneMKL VM call, as xe2rt.models.llm had to),
timed by wall clock in the same run.
"""
from __future__ import annotations

import numpy as np

from ..ops import routing as op
from ..ops import softmax_stats as stats_op
from ..reference.routing import numpy_pipeline
from .harness import BenchContext, Result

ROWS = 32768
CASES = [(np.float16, 128, 8), (np.float16, 256, 8), (np.float32, 128, 8), (np.float32, 256, 8)]
QUICK_CASES = [(np.float16, 128, 8)]


def routing_bytes(rows: int, n: int, k: int, dtype) -> int:
    size = np.dtype(dtype).itemsize
    return rows * n * size + rows * k * (size + 4)


def cases(ctx: BenchContext) -> list[Result]:
    results = []
    rng = np.random.default_rng(0)
    rows = 1024 if ctx.quick else ROWS
    for dtype, n, k in QUICK_CASES if ctx.quick else CASES:
        tag = np.dtype(dtype).name
        ctx.say(f"  softmax_topk {tag} {rows}x{n} k={k}")
        host = (rng.standard_normal((rows, n), dtype=np.float32) * 2).astype(dtype)
        copies = ctx.copies_for(host.nbytes)
        pool = ctx.pool(host, copies)
        values = pool[0][:, :k].copy()
        indices = pool[0][:, :k].astype(np.int32)
        out = (values, indices)
        seconds = ctx.time_events(lambda i: op.run("softmax_topk", pool[i % copies], k, op.MODE_SOFTMAX_NORMALIZE,
                                                   out=out)[1])
        wall = ctx.time_wall(lambda i: op.softmax_topk(pool[i % copies], k, out=out))
        del pool
        alt = ctx.time_wall(lambda i: numpy_pipeline(host, k))
        results.append(Result("softmax_topk", f"{tag} {rows}x{n} k{k}", ctx.target, seconds, wall,
                              bytes=routing_bytes(rows, n, k, dtype), alternative="numpy pipeline",
                              alt_seconds=alt,
                              note=f"kernel {rows / seconds / 1e6:.2f} M rows/s, op {rows / wall / 1e6:.2f} M rows/s, "
                                   f"numpy {rows / alt / 1e6:.3f} M rows/s; pool {copies} copies",
                              read_gbps=ctx.last_read_gbps))
    results.append(_stats_row(ctx, rng))
    return results


def _stats_row(ctx: BenchContext, rng, vocab: int = 128256, n: int = 512, t: float = 0.7) -> Result:
    import dpnp
    rows = 8 if ctx.quick else -(-vocab // n)
    ctx.say(f"  softmax_stats float16 {rows}x{n}")
    host = (rng.standard_normal((rows, n), dtype=np.float32) * 4).astype(np.float16)
    copies = ctx.copies_for(host.nbytes)
    pool = ctx.pool(host, copies)
    out = stats_op.softmax_stats(pool[0], temperature=t)
    seconds = ctx.time_events(lambda i: stats_op.run(pool[i % copies], temperature=t, out=out)[1])
    wall = ctx.time_wall(lambda i: stats_op.softmax_stats(pool[i % copies], temperature=t, out=out))
    q = ctx.queue

    def composition(i):
        x = pool[i % copies].astype(np.float32)
        m = dpnp.max(x, axis=1, keepdims=True)
        q.wait()
        d = dpnp.subtract(x, m)
        q.wait()
        d = dpnp.divide(d, np.float32(t))
        q.wait()
        return m, dpnp.sum(dpnp.exp(d), axis=1)

    alt = ctx.time_wall(composition)
    return Result("softmax_stats", f"stats f16 {rows}x{n} t{t:g}", ctx.target, seconds, wall,
                  bytes=rows * n * 2 + rows * 8, alternative="dpnp composition", alt_seconds=alt,
                  note=f"softmax_stats: kernel {seconds * 1e6:.1f} us, op {wall * 1e6:.1f} us, dpnp "
                       f"{alt * 1e6:.1f} us; pool {copies} copies", read_gbps=ctx.last_read_gbps)
