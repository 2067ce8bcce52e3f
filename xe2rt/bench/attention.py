"""Decode attention rows (family decode_attention): Llama-3.2-1B, Llama-3.1-8B, Qwen3-4B and Qwen3-30B-A3B heads at
contexts 128, 2048 and 32768.

Bytes: the K and V rows read, 2 x Hkv x length x D x 2, plus q and out (Hq x D x 2 each). The fp32 workspace of the
partials (S x Hq x (D + 2) floats, written and read once, cache-resident) is not counted.
Cache busting: the caches live in one pool of copies ([copies, Hkv, length, D] for k and for v) at least the
harness's pool size (8x the last-level cache, >= 256 MiB); call i reads copy i mod copies.
Time: SYCL profiling span from the split kernel's start to the reduce kernel's end (one kernel when S = 1), median
of a window; the shapes of one context are timed in 5 interleaved rounds, each row with its own probes, and
the round whose ratio to its probe is the row's median is reported (the note lists every round, and each
round's % of the roofline: the larger of bytes / probe and flops / fma peak, the fma_peak kernel run beside the window;
G = 8 at D = 128 does 8 flops per byte of cache, more than this CPU's fma peak over its read bandwidth).
Alternative: the dpnp composition a user writes (caches cast to float32, batched matmul q k^T per kv head, softmax
in float32 with dpnp, matmul with v, cast to float16), by wall clock with the queue drained, in the same run; ours by
wall clock beside it (the public op, warm).
"""
from __future__ import annotations

import dpnp
import numpy as np

import xe2rt

from ..ops import decode_attention as op
from .harness import BenchContext, EventSpan, Result

SHAPES = {"Llama-3.2-1B": (32, 8, 64), "Llama-3.1-8B": (32, 8, 128), "Qwen3-4B": (32, 8, 128),
          "Qwen3-30B-A3B": (32, 4, 128)}
CONTEXTS = (128, 2048, 32768)
QUICK_SHAPES = {"small": (8, 2, 64)}
QUICK_CONTEXTS = (17, 300)
ALT_ITERS = 5


def attention_bytes(hq: int, hkv: int, d: int, length: int) -> int:
    return 2 * hkv * length * d * 2 + 2 * hq * d * 2


def dpnp_composition(q, k_cache, v_cache, length: int, scale: float):
    """What a dpnp user writes: float32 copies (dpnp has no fp16 matmul on the CPU device), GQA by regrouping q."""
    hkv, _, d = k_cache.shape
    qg = q.astype(np.float32).reshape(hkv, -1, d)
    k = k_cache[:, :length].astype(np.float32)
    v = v_cache[:, :length].astype(np.float32)
    s = dpnp.matmul(qg, dpnp.transpose(k, (0, 2, 1))) * scale
    p = dpnp.exp(s - dpnp.max(s, axis=2, keepdims=True))
    p /= dpnp.sum(p, axis=2, keepdims=True)
    return dpnp.matmul(p, v).reshape(-1, d).astype(np.float16)


ROUNDS = 5


class _Row:
    """One shape at one context: its rotating cache pool, buffers and submit(i) (the split and reduce launches)."""

    def __init__(self, ctx: BenchContext, rng, name: str, hq: int, hkv: int, d: int, length: int):
        self.name, self.hq, self.hkv, self.d, self.length = name, hq, hkv, d, length
        self.cache_bytes = hkv * length * d * 2
        self.nbytes, self.flops = attention_bytes(hq, hkv, d, length), 4 * hq * length * d
        self.copies = copies = ctx.copies_for(2 * self.cache_bytes)
        ctx.say(f"  decode_attention {name} Hq {hq} Hkv {hkv} D {d} L {length}: {copies} cache copies")
        one_k = dpnp.asarray(rng.standard_normal((hkv, length, d), dtype=np.float32).astype(np.float16),
                             sycl_queue=ctx.queue)
        one_v = dpnp.asarray(rng.standard_normal((hkv, length, d), dtype=np.float32).astype(np.float16),
                             sycl_queue=ctx.queue)
        self.pool_k = dpnp.empty((copies, hkv, length, d), dtype=np.float16, sycl_queue=ctx.queue)
        self.pool_v = dpnp.empty((copies, hkv, length, d), dtype=np.float16, sycl_queue=ctx.queue)
        for i in range(copies):
            self.pool_k[i] = one_k
            self.pool_v[i] = one_v
        self.ks = [self.pool_k[i] for i in range(copies)]
        self.vs = [self.pool_v[i] for i in range(copies)]
        self.q = dpnp.asarray(rng.standard_normal((hq, d), dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
        self.y = dpnp.empty((hq, d), dtype=np.float16, sycl_queue=ctx.queue)
        self.workspace = dpnp.empty(op.workspace_floats(op.MAX_SPLITS, hq, d), dtype=np.float32, sycl_queue=ctx.queue)
        self.launches = 0

    def submit(self, i: int) -> EventSpan:
        events = []
        op.run(self.q, self.ks[i % self.copies], self.vs[i % self.copies], self.length, self.workspace, out=self.y,
               events=events)
        self.launches = len(events)
        return EventSpan(events)

    def result(self, ctx: BenchContext, seconds: float, read_gbps: float, ratios: list, roof: list) -> Result:
        q, ks, vs, y, length, d, hq, hkv = self.q, self.ks, self.vs, self.y, self.length, self.d, self.hq, self.hkv
        copies = self.copies
        wall = ctx.time_wall(lambda i: xe2rt.decode_attention(q, ks[i % copies], vs[i % copies], length, out=y))
        alt = ctx.time_wall(lambda i: dpnp_composition(q, ks[i % copies], vs[i % copies], length, d ** -0.5),
                            warmup=1, iters=min(ALT_ITERS, ctx.iters))
        family = op.family(ctx.queue, ctx.target)
        c = op.program_for(ctx.queue, family, None).constants
        s, chunk = op.split_plan(c, ctx.target, op._fill(ctx.device, ctx.target, c), hkv, hq // hkv, length)
        return Result("decode_attention", f"{self.name} Hq{hq} Hkv{hkv} D{d} L{length}", ctx.target,
                      seconds, wall, bytes=self.nbytes, flops=self.flops,
                      alternative="dpnp f32 matmul+softmax", alt_seconds=alt,
                      note=f"{family}: S = {s} split(s) of {chunk} tokens, {self.launches} launch(es); K/V "
                           f"{2 * self.cache_bytes / 1e6:.1f} MB per call, {copies} rotating copies; % of probe "
                           f"in {len(ratios)} rounds: " + " ".join(f"{100 * r:.0f}" for r in ratios) + " (median "
                           "reported); % of the roofline max(bytes / probe, flops / fma peak) in the same rounds: "
                           + " ".join(f"{100 * r:.0f}" for r, _ in roof) + " (fma peak "
                           + "-".join(f"{p:.0f}" for p in (min(p for _, p in roof), max(p for _, p in roof)))
                           + " GFLOP/s)", read_gbps=read_gbps)


def cases(ctx: BenchContext) -> list[Result]:
    """The shapes of one context are timed in ROUNDS interleaved rounds (BenchContext.time_rounds): each row's
    figure is its median round against the probe beside it, and the note lists every round."""
    results = []
    rng = np.random.default_rng(0)
    shapes = QUICK_SHAPES if ctx.quick else SHAPES
    for length in QUICK_CONTEXTS if ctx.quick else CONTEXTS:
        rows = [_Row(ctx, rng, name, hq, hkv, d, length) for name, (hq, hkv, d) in shapes.items()]
        timed = ctx.time_rounds([r.submit for r in rows], [r.nbytes for r in rows], rounds=1 if ctx.quick else ROUNDS,
                                flops=[r.flops for r in rows])
        for row, (seconds, read_gbps, ratios, roof) in zip(rows, timed):
            results.append(row.result(ctx, seconds, read_gbps, ratios, roof))
        del rows
    return results
