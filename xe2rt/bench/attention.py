"""Decode attention rows (family decode_attention): Llama-3.2-1B, Llama-3.1-8B, Qwen3-4B and Qwen3-30B-A3B heads at
contexts 128, 2048 and 32768.

Bytes: the K and V rows read, 2 x Hkv x length x D x 2, plus q and out (Hq x D x 2 each). The fp32 workspace of the
partials (S x Hq x (D + 2) floats, written and read once, cache-resident) is not counted.
Cache busting: the caches live in one pool of copies ([copies, Hkv, length, D] for k and for v) at least the
harness's pool size (8x the last-level cache, >= 256 MiB); call i reads copy i mod copies.
Time: SYCL profiling span from the split kernel's start to the reduce kernel's end (one kernel when S = 1), median.
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


def cases(ctx: BenchContext) -> list[Result]:
    results = []
    rng = np.random.default_rng(0)
    for name, (hq, hkv, d) in (QUICK_SHAPES if ctx.quick else SHAPES).items():
        for length in QUICK_CONTEXTS if ctx.quick else CONTEXTS:
            cache_bytes = hkv * length * d * 2
            copies = ctx.copies_for(2 * cache_bytes)
            ctx.say(f"  decode_attention {name} Hq {hq} Hkv {hkv} D {d} L {length}: {copies} cache copies")
            one_k = dpnp.asarray(rng.standard_normal((hkv, length, d), dtype=np.float32).astype(np.float16),
                                 sycl_queue=ctx.queue)
            one_v = dpnp.asarray(rng.standard_normal((hkv, length, d), dtype=np.float32).astype(np.float16),
                                 sycl_queue=ctx.queue)
            pool_k = dpnp.empty((copies, hkv, length, d), dtype=np.float16, sycl_queue=ctx.queue)
            pool_v = dpnp.empty((copies, hkv, length, d), dtype=np.float16, sycl_queue=ctx.queue)
            for i in range(copies):
                pool_k[i] = one_k
                pool_v[i] = one_v
            del one_k, one_v
            ks = [pool_k[i] for i in range(copies)]
            vs = [pool_v[i] for i in range(copies)]
            q = dpnp.asarray(rng.standard_normal((hq, d), dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
            y = dpnp.empty((hq, d), dtype=np.float16, sycl_queue=ctx.queue)
            workspace = dpnp.empty(op.workspace_floats(op.MAX_SPLITS, hq, d), dtype=np.float32,
                                   sycl_queue=ctx.queue)
            plan = []

            def submit(i):
                events = []
                op.run(q, ks[i % copies], vs[i % copies], length, workspace, out=y, events=events)
                plan.append(len(events))
                return EventSpan(events)

            seconds = ctx.time_events(submit)
            read_gbps = ctx.last_read_gbps
            wall = ctx.time_wall(lambda i: xe2rt.decode_attention(q, ks[i % copies], vs[i % copies], length, out=y))
            alt = ctx.time_wall(lambda i: dpnp_composition(q, ks[i % copies], vs[i % copies], length, d ** -0.5),
                                warmup=1, iters=min(ALT_ITERS, ctx.iters))
            c = op.program_for(ctx.queue, op.FAMILY, None).constants
            s, chunk = op.split_plan(c, ctx.target, op._fill(ctx.device, ctx.target, c), hkv, hq // hkv, length)
            nbytes = attention_bytes(hq, hkv, d, length)
            results.append(Result("decode_attention", f"{name} Hq{hq} Hkv{hkv} D{d} L{length}", ctx.target,
                                  seconds, wall, bytes=nbytes, flops=4 * hq * length * d,
                                  alternative="dpnp f32 matmul+softmax", alt_seconds=alt,
                                  note=f"S = {s} split(s) of {chunk} tokens, {plan[-1]} launch(es); K/V "
                                       f"{2 * cache_bytes / 1e6:.1f} MB per call, {copies} rotating copies",
                                  read_gbps=read_gbps))
            del ks, vs, pool_k, pool_v
    return results
