"""Prefill attention rows (family "prefill_attention"): causal, at the head shapes of Llama-3.2-1B, Llama-3.1-8B /
Qwen3-4B and Qwen3-30B-A3B, T = 128 and 2048. Attention prefill is compute-bound: flops = 4 D Hq T (T + 1) / 2 (QK^T and
PV over the visible half, 2 per multiply-add), quoted as % of the device's measured fp32 multiply-add peak
(the fma_peak kernel, measured right before and after each row, the higher of the two) in the note. Bytes: q, k, v read and out written once (2 bytes each).
Alternative: the dpnp composition a user would write, in float32 (dpnp has no fp16 matmul on the CPU device): K/V
heads repeated for GQA, batched scores, additive causal mask, max-subtracted exp, normalize, batched PV, back to fp16.
T = 2048 rows use fewer iterations (each launch takes a large fraction of a second on a CPU)."""
from __future__ import annotations

import math

import dpnp
import numpy as np

from ..ops import prefill_attention as op
from .harness import BenchContext, EventSpan, Result

SHAPES = {"Llama-3.2-1B": (32, 8, 64), "Llama-3.1-8B/Qwen3-4B": (32, 8, 128), "Qwen3-30B-A3B": (32, 4, 128)}
TOKENS = (128, 2048)
QUICK_SHAPES = {"Llama-3.2-1B": (32, 8, 64)}
QUICK_TOKENS = (32,)
LONG_ITERS = 3  # timed launches per T = 2048 row (at most ctx.iters), after one warm-up
ALT_ITERS = 3


def attention_flops(t: int, hq: int, d: int, causal: bool = True) -> int:
    pairs = t * (t + 1) // 2 if causal else t * t
    return 4 * d * hq * pairs


def dpnp_composition(q32, k32, v32, ratio: int, mask, scale: float):
    """What a dpnp user writes for causal GQA attention (float32)."""
    k_rep = dpnp.repeat(k32, ratio, axis=1) if ratio > 1 else k32
    v_rep = dpnp.repeat(v32, ratio, axis=1) if ratio > 1 else v32
    s = dpnp.matmul(dpnp.transpose(q32, (1, 0, 2)), dpnp.transpose(k_rep, (1, 2, 0))) * scale + mask
    p = dpnp.exp(s - dpnp.max(s, axis=-1, keepdims=True))
    p /= dpnp.sum(p, axis=-1, keepdims=True)
    return dpnp.transpose(dpnp.matmul(p, dpnp.transpose(v_rep, (1, 0, 2))), (1, 0, 2)).astype(np.float16)


def cases(ctx: BenchContext) -> list[Result]:
    if not math.isfinite(ctx.fma_gflops):
        ctx.measure_fma_peak()
    results = []
    rng = np.random.default_rng(0)
    for name, (hq, hkv, d) in (QUICK_SHAPES if ctx.quick else SHAPES).items():
        for t in QUICK_TOKENS if ctx.quick else TOKENS:
            ctx.say(f"  prefill_attention {name} T={t}")
            q = dpnp.asarray(rng.standard_normal((t, hq, d)).astype(np.float16), sycl_queue=ctx.queue)
            k = dpnp.asarray(rng.standard_normal((t, hkv, d)).astype(np.float16), sycl_queue=ctx.queue)
            v = dpnp.asarray(rng.standard_normal((t, hkv, d)).astype(np.float16), sycl_queue=ctx.queue)
            out = dpnp.empty((t, hq, d), dtype=np.float16, sycl_queue=ctx.queue)
            scale = d ** -0.5
            saved = ctx.iters
            peak_before = ctx.measure_fma_peak(record=False)
            ctx.iters = min(saved, LONG_ITERS) if t > 512 else saved
            try:
                # The alternative first, so both figures share the machine's state as closely as one run allows.
                q32, k32, v32 = q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
                mask = dpnp.asarray(np.triu(np.full((t, t), -np.inf, np.float32), 1), sycl_queue=ctx.queue)
                alt = ctx.time_wall(lambda j: dpnp_composition(q32, k32, v32, hq // hkv, mask, scale),
                                    warmup=1, iters=min(ALT_ITERS, ctx.iters))
                del q32, k32, v32, mask
                def submit(j):
                    events = []
                    op.run(q, k, v, out=out, events=events)
                    return EventSpan(events)  # cpu: the fp32 K/V copy and the attention launch

                warm = 1 if t > 512 else 2
                seconds = ctx.time_events(submit, warmup=warm)
                wall = ctx.time_wall(lambda j: op.prefill_attention(q, k, v, out=out), warmup=warm)
                iters = ctx.iters
            finally:
                ctx.iters = saved
            # The peak bracketing this row (the higher of before and after): on a shared machine the multiply-add
            # rate drifts as much as the read bandwidth does.
            peak = max(peak_before, ctx.measure_fma_peak(record=False))
            flops = attention_flops(t, hq, d)
            pct = 100 * flops / seconds / (peak * 1e9)
            results.append(Result("prefill_attention", f"{name} Hq{hq} Hkv{hkv} D{d} T{t} causal", ctx.target,
                                  seconds, wall, bytes=2 * (2 * t * hq * d + 2 * t * hkv * d), flops=flops,
                                  alternative="dpnp f32 composition", alt_seconds=alt,
                                  note=f"{pct:.0f}% of the fp32 multiply-add peak measured around this row "
                                       f"({peak:.1f} GFLOP/s, fma_peak); median of {iters}",
                                  read_gbps=ctx.last_read_gbps))
    return results
