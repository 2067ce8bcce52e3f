"""FP16 GEMV rows: seed 000 bytes = K*2 (x) + N*K*2 (W) + N*2 (y); alternative: dpnp float32 matvec (oneMKL), the
best a dpnp user has, since dpnp has no fp16 matvec on the CPU device."""
from __future__ import annotations

import dpnp
import numpy as np

from ..ops import gemv_fp16 as op
from .harness import BenchContext, Result

SHAPES = [(4096, 14336), (8192, 8192)]
QUICK_SHAPES = [(256, 1024)]
# Batched decode rows: x [M, K] for M = 1, 4, 16 on one shape; bytes M*K*2 + N*K*2 + M*N*2 (weights read once).
BATCH_SHAPE, QUICK_BATCH_SHAPE = (4096, 4096), (256, 1024)
BATCHES = (1, 4, 16)


def gemv_fp16_bytes(n: int, k: int) -> int:
    return k * 2 + n * k * 2 + n * 2


def batched_cases(ctx: BenchContext) -> list[Result]:
    n, k = QUICK_BATCH_SHAPE if ctx.quick else BATCH_SHAPE
    rng = np.random.default_rng(1)
    ctx.say(f"  gemv_fp16 batched {n}x{k}: preparing weight pool")
    w_host = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
    copies = ctx.copies_for(n * k * 2)
    pool = ctx.pool(w_host, copies)
    results = []
    for m in BATCHES:
        x = dpnp.asarray(rng.standard_normal((m, k), dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
        y = dpnp.empty((m, n), dtype=np.float16, sycl_queue=ctx.queue)
        seconds = ctx.time_events(lambda i: op.run(x, pool[i % copies], out=y)[1])
        wall = ctx.time_wall(lambda i: op.gemv_fp16(x, pool[i % copies], out=y))
        results.append(Result("gemv_fp16", f"M={m} {n}x{k}", ctx.target, seconds, wall,
                              bytes=m * k * 2 + n * k * 2 + m * n * 2, flops=2 * m * n * k,
                              note=f"batched decode, weights read once; pool {copies} copies",
                              read_gbps=ctx.last_read_gbps))
    return results


def cases(ctx: BenchContext) -> list[Result]:
    results = []
    rng = np.random.default_rng(0)
    for n, k in QUICK_SHAPES if ctx.quick else SHAPES:
        ctx.say(f"  gemv_fp16 {n}x{k}: preparing weight pool")
        w_host = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
        copies = ctx.copies_for(n * k * 2)
        pool = ctx.pool(w_host, copies)
        x = dpnp.asarray(rng.standard_normal(k, dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
        y = dpnp.empty(n, dtype=np.float16, sycl_queue=ctx.queue)
        seconds = ctx.time_events(lambda i: op.run(x, pool[i % copies], out=y)[1])
        wall = ctx.time_wall(lambda i: op.gemv_fp16(x, pool[i % copies], out=y))
        del pool
        alt_copies = ctx.copies_for(n * k * 4)
        alt_pool = ctx.pool(w_host.astype(np.float32), alt_copies)
        x32 = x.astype(np.float32)
        alt = ctx.time_wall(lambda i: dpnp.matmul(alt_pool[i % alt_copies], x32))
        del alt_pool
        results.append(Result("gemv_fp16", f"{n}x{k}", ctx.target, seconds, wall, bytes=gemv_fp16_bytes(n, k),
                              flops=2 * n * k, alternative="dpnp f32 matvec", alt_seconds=alt,
                              note=f"pool {copies} copies", read_gbps=ctx.last_read_gbps))
    return results + batched_cases(ctx)
