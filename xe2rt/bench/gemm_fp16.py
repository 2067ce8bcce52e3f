"""FP16 GEMM rows: TFLOP/s = 2 M N K / kernel time; bytes = 2 (M K + K N + M N) (fp16 a, b, out). Weights (b) rotate
through a pool larger than the last-level cache (M = 1 is a GEMV and memory-bound). Alternative: dpnp float32 matmul
(oneMKL), what a dpnp user runs on this device (dpnp has no fp16 matmul on the CPU device), same pool method.
Both b layouts: "nk" ([N, K], the usual weight layout) and "kn" ([K, N])."""
from __future__ import annotations

import dpnp
import numpy as np

from ..ops import gemm_fp16 as op
from .harness import BenchContext, Result

SHAPES = [(1, 4096, 4096), (128, 4096, 4096), (1024, 1024, 1024)]
QUICK_SHAPES = [(16, 256, 256)]


def gemm_fp16_bytes(m: int, n: int, k: int) -> int:
    return 2 * (m * k + k * n + m * n)


def cases(ctx: BenchContext) -> list[Result]:
    results = []
    rng = np.random.default_rng(0)
    for m, n, k in QUICK_SHAPES if ctx.quick else SHAPES:
        a_host = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        b_kn_host = rng.uniform(-1, 1, (k, n)).astype(np.float16)
        a = dpnp.asarray(a_host, sycl_queue=ctx.queue)
        out = dpnp.empty((m, n), dtype=np.float16, sycl_queue=ctx.queue)
        # The alternative first, so its figure and ours share the machine's state as closely as one run allows.
        alt_copies = ctx.copies_for(n * k * 4)
        alt_pool = ctx.pool(b_kn_host.astype(np.float32), alt_copies)
        a32 = a.astype(np.float32)
        alt = ctx.time_wall(lambda i: dpnp.matmul(a32, alt_pool[i % alt_copies]))
        del alt_pool
        for b_layout in ("nk", "kn"):
            ctx.say(f"  gemm_fp16 {m}x{n}x{k} {b_layout}: preparing weight pool")
            b_host = b_kn_host if b_layout == "kn" else np.ascontiguousarray(b_kn_host.T)
            copies = ctx.copies_for(n * k * 2)
            pool = ctx.pool(b_host, copies)
            seconds = ctx.time_events(lambda i: op.run(a, pool[i % copies], b_layout=b_layout, out=out)[1])
            wall = ctx.time_wall(lambda i: op.gemm_fp16(a, pool[i % copies], b_layout=b_layout, out=out))
            del pool
            results.append(Result("gemm_fp16", f"{m}x{n}x{k} {b_layout}", ctx.target, seconds, wall,
                                  bytes=gemm_fp16_bytes(m, n, k), flops=2 * m * n * k,
                                  alternative="dpnp f32 matmul", alt_seconds=alt, note=f"pool {copies} copies",
                                  read_gbps=ctx.last_read_gbps))
    return results
