"""W4A16 GEMM rows (family gemm_w4a16): prompt-sized projections of Llama-3.2-1B (gate/up 8192 x 2048, down
2048 x 8192), Llama-3.1-8B (gate/up 14336 x 4096) and Qwen3-4B (gate/up 9728 x 2560), N x K, at M = 128 and 512
prompt tokens, weights W4 group 128 symmetric (the common GPTQ / AWQ / llm-compressor export).

Per shape, in the same run and one after the other: gemm_fp16 on the same shape (weights fp16 [N, K], b_layout "nk",
the layout a checkpoint has), then gemm_w4a16, whose row carries the dpnp composition a user writes without it
(dequantize to float32 with dpnp on every call, then dpnp's float32 matmul; dpnp has no fp16 matmul on the CPU
device) as its alternative, and in its note the kernel-time ratio fp16 / w4 (the issue's bar at M = 128: >= 0.8)
and the share of the device's fp32 multiply-add peak measured in this run (fma_peak, ctx.fma_gflops).
Bytes by seed 000's formulas: W4 M K 2 (a) + N K / 2 (codes) + N (K / G) 2 (scales) + M N 2 (out); fp16 2 (M K + N K +
M N). These rows are compute-bound (2 M N K flop for a quarter, resp. half, of a byte per weight): %readBW is given
for completeness. Weights rotate through a small pool (at least 2 copies; each call is 0.1-2 s of compute, so the
weights of the previous call are long evicted anyway), and only ITERS launches are timed: one M = 512 call at the
8B shape is 60 GFLOP.
"""
from __future__ import annotations

import dpnp
import numpy as np

from ..ops import gemm_fp16 as fp16_op
from ..ops import gemm_w4a16 as op
from ..ops.common import int_dot_variant
from ..quant import QuantizedW4
from .harness import BenchContext, Result
from .quant import _w4_pool, dpnp_dequant_matvec_w4

GROUP = 128
SHAPES = [("llama3.2-1b up", 8192, 2048), ("llama3.2-1b down", 2048, 8192), ("llama3.1-8b up", 14336, 4096),
          ("qwen3-4b up", 9728, 2560)]
QUICK_SHAPES = [("small", 256, 512)]
TOKENS = (128, 512)
QUICK_TOKENS = (32,)
ITERS = 3
MAX_COPIES = 3


def w4_bytes(m: int, n: int, k: int, g: int) -> int:
    return m * k * 2 + n * k // 2 + n * (k // g) * 2 + m * n * 2


def cases(ctx: BenchContext) -> list[Result]:
    results = []
    rng = np.random.default_rng(5)
    saved_iters = ctx.iters
    ctx.iters = min(saved_iters, ITERS)
    try:
        for label, n, k in QUICK_SHAPES if ctx.quick else SHAPES:
            ctx.say(f"  gemm_w4a16 {label} {n}x{k}: preparing weights")
            host = QuantizedW4(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8),
                               (rng.uniform(0.5, 1.5, size=(n, k // GROUP)) / (8 * np.sqrt(k))).astype(np.float16),
                               None, GROUP)
            copies = min(MAX_COPIES, ctx.copies_for(host.nbytes))
            pool = _w4_pool(ctx, host, copies)
            fp16_pool = [pool[i].dequantize(np.float16) for i in range(min(copies, 2))]
            for m in QUICK_TOKENS if ctx.quick else TOKENS:
                a = dpnp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float16), sycl_queue=ctx.queue)
                a32 = a.astype(np.float32)
                out = dpnp.empty((m, n), dtype=np.float16, sycl_queue=ctx.queue)
                flops = 2 * m * n * k
                case = f"M={m} {n}x{k}"
                f16 = ctx.time_events(lambda i: fp16_op.run(a, fp16_pool[i % len(fp16_pool)], b_layout="nk",
                                                             out=out)[1])
                f16_read = ctx.last_read_gbps
                f16_wall = ctx.time_wall(lambda i: fp16_op.gemm_fp16(a, fp16_pool[i % len(fp16_pool)],
                                                                     b_layout="nk", out=out))
                def w4_launches(i, variant="native"):  # every launch (the integer-dot kernels' x conversion too)
                    events = []
                    op.run(a, pool[i % copies], out=out, events=events, variant=variant)
                    return events

                w4 = ctx.time_events(w4_launches)
                w4_read = ctx.last_read_gbps
                w4_wall = ctx.time_wall(lambda i: op.gemm_w4a16(a, pool[i % copies], out=out))
                alt = ctx.time_wall(lambda i: dpnp_dequant_matvec_w4(pool[i % copies], a32.T), warmup=1)
                peak = ctx.fma_gflops

                def pct_peak(seconds):
                    return f"{100 * flops / seconds / 1e9 / peak:.1f}% of fp32 fma peak ({peak:.0f} GFLOP/s)"

                results.append(Result("gemm_w4a16", case, f"{ctx.target}:fp16", f16, f16_wall,
                                      bytes=2 * (m * k + n * k + m * n), flops=flops,
                                      note=f"gemm_fp16 nk, same shape; {pct_peak(f16)}; {label}",
                                      read_gbps=f16_read))
                results.append(Result("gemm_w4a16", case, f"{ctx.target}:w4g{GROUP}", w4, w4_wall,
                                      bytes=w4_bytes(m, n, k, GROUP), flops=flops,
                                      alternative="dpnp deq f32+matmul", alt_seconds=alt,
                                      note=f"fp16/w4 kernel time {f16 / w4:.2f}x; {pct_peak(w4)}; pool {copies} "
                                           f"copies; {label}", read_gbps=w4_read))
                ctx.say(f"    M={m}: fp16 {f16 * 1e3:.1f} ms, w4 {w4 * 1e3:.1f} ms (fp16/w4 {f16 / w4:.2f}x), "
                        f"dpnp {alt * 1e3:.1f} ms")
                variant = int_dot_variant(op.OP, "variant", "auto", ctx.target, ctx.queue)
                if variant:  # the integer-dot kernels "auto" (the LLM runner's prefill) takes
                    fast = ctx.time_events(lambda i: w4_launches(i, variant))
                    fast_read = ctx.last_read_gbps
                    fast_wall = ctx.time_wall(lambda i: op.run(a, pool[i % copies], out=out, variant=variant)[0])
                    results.append(Result("gemm_w4a16", case, f"{ctx.target}:w4g{GROUP}:{variant}", fast,
                                          fast_wall, bytes=w4_bytes(m, n, k, GROUP), flops=flops,
                                          note=f"variant {variant!r} (what 'auto' and xe2rt.models.llm take here; x "
                                               f"in 15-bit fixed point); fp16/w4 kernel time {f16 / fast:.2f}x; "
                                               f"{pct_peak(fast)}; {label}", read_gbps=fast_read))
                    ctx.say(f"    M={m}: w4 {variant} {fast * 1e3:.1f} ms (fp16/w4 {f16 / fast:.2f}x)")
            del pool, fp16_pool
    finally:
        ctx.iters = saved_iters
    return results
