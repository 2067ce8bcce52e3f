"""Fused MoE expert FFN rows (family key moe_ffn_w4a16): Qwen3-30B-A3B and Mixtral-8x7B shapes at T = 1, 4, 16.

Bytes: the routed experts' bytes, i.e. codes + scales (+ zero points) of gate_up and down of every distinct chosen
expert, plus activations (x and y fp16, ids int32, weights fp16). The fp32 workspaces (h and the per-pair outputs,
T k (I + H) floats, written and read once, cache-resident) are not counted.
Cache busting: every expert of the model lives on the device once (Qwen3: 128 experts, 302 MB; Mixtral: 8 experts,
705 MB; both above 8x this machine's last-level cache or 256 MiB) and each timed call takes the next routing of a
pool of random routings, so consecutive calls read different experts. Routings are drawn uniformly (distinct experts
per token) and only those with the most common number of distinct experts are kept, so every call reads the same
bytes. Time: SYCL profiling span from the route kernel's start to the combine kernel's end (median of the loop).
Compute floor: each row's note gives the time its multiply-adds (2 T k 3 H I FLOP) take at the device's fp32
multiply-add peak measured in the same run (fma_peak): at T = 16 that floor, not the bytes, bounds the shared row.
Alternative: the dpnp composition a user writes (ids read back; per chosen expert: dequantize gate_up and down to
float32 with dpnp, matmul of the expert's tokens, silu * up, matmul, weighted add), by wall clock with the queue
drained, in the same run. Its iteration count is capped (5) because one Mixtral expert dequantizes 470 MB of float32.
"""
from __future__ import annotations

import math
from collections import Counter

import dpnp
import numpy as np

from ..ops import moe as op
from ..quant import QuantizedW4
from ..quant_experts import QuantizedW4Experts
from .harness import BenchContext, EventSpan, Result

GROUP = 128
SHAPES = {"qwen3_30b_a3b": (128, 8, 2048, 768), "mixtral_8x7b": (8, 2, 4096, 14336)}
QUICK_SHAPES = {"small": (16, 4, 256, 256)}
TOKENS = (1, 4, 16)
SHARED_TOKENS = 16  # plus one row where these tokens all choose the same k experts
ALT_ITERS = 5


def random_experts(ctx: BenchContext, rng, e, h, i) -> QuantizedW4Experts:
    def stack(rows, k, scale):
        packed = dpnp.asarray(rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8), sycl_queue=ctx.queue)
        scales = dpnp.asarray((rng.uniform(0.5, 1.5, size=(rows, k // GROUP)) * scale).astype(np.float16),
                              sycl_queue=ctx.queue)
        return QuantizedW4(packed, scales, None, GROUP)
    return QuantizedW4Experts(stack(e * 2 * i, h, 0.02), stack(e * h, i, 0.5 / np.sqrt(i)), e)


def routings(rng, count: int, t: int, k: int, e: int):
    """`count` random routings ids [T, k] with the most common number of distinct experts, and that number."""
    draws = [np.stack([rng.choice(e, size=k, replace=False) for _ in range(t)]).astype(np.int32)
             for _ in range(8 * count)]
    distinct = Counter(len(np.unique(d)) for d in draws)
    typical = distinct.most_common(1)[0][0]
    kept = [d for d in draws if len(np.unique(d)) == typical][:count]
    return kept, typical


def shared_routings(rng, count: int, t: int, k: int, e: int):
    """`count` routings in which all T tokens choose the same k experts (in their own order): what a batch of
    related tokens (speculative-decoding drafts, one prompt's continuations) can look like. The k experts change
    from routing to routing, so consecutive calls still read different weights."""
    kept = []
    for _ in range(count):
        chosen = rng.choice(e, size=k, replace=False)
        kept.append(np.stack([rng.permutation(chosen) for _ in range(t)]).astype(np.int32))
    return kept, k


def moe_bytes(experts: QuantizedW4Experts, distinct: int, t: int, k: int) -> int:
    h = experts.hidden
    return distinct * experts.expert_nbytes() + 2 * t * h * 2 + t * k * (4 + 2)


def dpnp_composition(x32, experts: QuantizedW4Experts, ids_dev, w_dev):
    """What a dpnp user writes without a fused kernel: read the routing back, then per chosen expert dequantize to
    float32 and run the expert's tokens through it."""
    e_count, h, i = experts.shape
    ids = dpnp.asnumpy(ids_dev)
    w = w_dev.astype(np.float32)
    y = dpnp.zeros((x32.shape[0], h), dtype=np.float32, sycl_queue=x32.sycl_queue)
    for e in np.unique(ids):
        tok, slot = np.nonzero(ids == e)
        gu = _dequant_rows(experts.gate_up, e * 2 * i, 2 * i)
        a = dpnp.matmul(x32[tok], gu.T)
        hh = a[:, :i] / (1.0 + dpnp.exp(-a[:, :i])) * a[:, i:]
        dn = _dequant_rows(experts.down, e * h, h)
        y[tok] += w[tok, slot][:, None] * dpnp.matmul(hh, dn.T)
    return y.astype(np.float16)


def _dequant_rows(qw: QuantizedW4, r0: int, n: int):
    k = qw.shape[1]
    packed = qw.packed[r0:r0 + n]
    q = dpnp.stack([packed & 15, packed >> 4], axis=-1).reshape(n, k // qw.group_size, qw.group_size)
    zeros = 8.0 if qw.zeros is None else qw.zeros[r0:r0 + n].astype(np.float32)[:, :, None]
    return ((q.astype(np.float32) - zeros) * qw.scales[r0:r0 + n].astype(np.float32)[:, :, None]).reshape(n, k)


def cases(ctx: BenchContext) -> list[Result]:
    results = []
    if not math.isfinite(ctx.fma_gflops):
        ctx.measure_fma_peak()
    rng = np.random.default_rng(0)
    for name, (e, k, h, i) in (QUICK_SHAPES if ctx.quick else SHAPES).items():
        ctx.say(f"  moe_ffn_w4a16 {name}: preparing {e} experts")
        experts = random_experts(ctx, rng, e, h, i)
        for t, shared in [(1, False)] if ctx.quick else [(t, False) for t in TOKENS] + [(SHARED_TOKENS, True)]:
            n = ctx.iters + 2
            ids_host, distinct = (shared_routings if shared else routings)(rng, n, t, k, e)
            n = len(ids_host)
            ids = [dpnp.asarray(d, sycl_queue=ctx.queue) for d in ids_host]
            weights = []
            for _ in range(n):
                w = rng.uniform(0.1, 1.0, size=(t, k))
                weights.append(dpnp.asarray((w / w.sum(axis=1, keepdims=True)).astype(np.float16),
                                            sycl_queue=ctx.queue))
            x = dpnp.asarray(rng.standard_normal((t, h)).astype(np.float16), sycl_queue=ctx.queue)
            x32 = x.astype(np.float32)
            y = dpnp.empty((t, h), dtype=np.float16, sycl_queue=ctx.queue)

            def submit(j):
                events = []
                op.run(x, experts, ids[j % n], weights[j % n], out=y, events=events)
                return EventSpan(events)

            seconds = ctx.time_events(submit)
            read_gbps = ctx.last_read_gbps
            wall = ctx.time_wall(lambda j: op.moe_ffn_w4a16(x, experts, ids[j % n], weights[j % n], out=y))
            alt = ctx.time_wall(lambda j: dpnp_composition(x32, experts, ids[j % n], weights[j % n]),
                                warmup=1, iters=min(ALT_ITERS, ctx.iters))
            nbytes = moe_bytes(experts, distinct, t, k)
            flops = 2 * t * k * 3 * h * i
            how = "all tokens on the same experts" if shared else "random routings"
            # the multiply-adds alone, at the device's measured fp32 multiply-add peak (fma_peak): no kernel can be
            # faster, whatever it reads
            floor = flops / (ctx.fma_gflops * 1e9)
            results.append(Result("moe_ffn_w4a16", f"{name} E{e} k{k} H{h} I{i} T{t}{' shared' if shared else ''} "
                                  f"g{GROUP}", ctx.target, seconds,
                                  wall, bytes=nbytes, flops=flops,
                                  alternative="dpnp deq f32+matmul per expert", alt_seconds=alt,
                                  note=f"{distinct} distinct experts per call ({nbytes / 1e6:.1f} MB); "
                                       f"{n} rotating {how}; multiply-adds at the measured fp32 peak "
                                       f"{ctx.fma_gflops:.0f} GFLOP/s: {floor * 1e3:.3f} ms "
                                       f"({100 * floor / seconds:.0f}% of this time)", read_gbps=read_gbps))
        del experts
    return results
