"""W4A16 and W8A16 GEMV rows (family keys gemv_w4a16 and gemv_w8a16, modules of those names re-export the cases).

Bytes by seed 000's formulas: W4A16 K*2 (x) + N*K/2 (codes) + N*(K/G)*2 (scales) [+ N*(K/G) zero points] + N*2 (y);
W8A16 K*2 + N*K + N*2 (scales) + N*2 (y). Both dequant variants of W4A16 are timed (the target's default first), so
the default can be checked against the other in the same run. The note gives GB/s counted in int4 code bytes only.
Alternative: what a dpnp user does without these kernels, dequantize to float32 with dpnp on every call, then the
dpnp (oneMKL) float32 matvec; dpnp has no fp16 matvec on the CPU device.
"""
from __future__ import annotations

import dpnp
import numpy as np

from ..ops import gemv_w4a16 as w4_op
from ..ops.common import int_dot_variant
from ..ops import gemv_w8a16 as w8_op
from ..quant import QuantizedW4, QuantizedW8
from .harness import BenchContext, Result

SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096)]
QUICK_SHAPES = [(256, 1024)]
GROUP = 128
# Batched decode rows (x [M, K], weights read once): M = 1, 4, 16 on one shape; x and y bytes scale with M.
BATCH_SHAPE, QUICK_BATCH_SHAPE = (4096, 4096), (256, 1024)
BATCHES = (1, 4, 16)


def _batched(ctx: BenchContext, family: str, run, pool: list, copies: int, n: int, k: int, weight_bytes: int,
             case: str) -> list[Result]:
    rng = np.random.default_rng(2)
    results = []
    for m in BATCHES:
        x = dpnp.asarray(rng.standard_normal((m, k), dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
        y = dpnp.empty((m, n), dtype=np.float16, sycl_queue=ctx.queue)
        seconds = ctx.time_events(lambda i: run(x, pool[i % copies], out=y)[1])
        wall = ctx.time_wall(lambda i: run(x, pool[i % copies], out=y)[0])
        results.append(Result(family, f"M={m} {n}x{k}{case}", ctx.target, seconds, wall,
                              bytes=m * k * 2 + weight_bytes + m * n * 2, flops=2 * m * n * k,
                              note=f"batched decode, weights read once; pool {copies} copies",
                              read_gbps=ctx.last_read_gbps))
    return results


def batched_w4(ctx: BenchContext) -> list[Result]:
    n, k = QUICK_BATCH_SHAPE if ctx.quick else BATCH_SHAPE
    rng = np.random.default_rng(3)
    g = 32
    host = QuantizedW4(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8),
                       (rng.uniform(0.5, 1.5, size=(n, k // g)) * 0.01).astype(np.float16),
                       rng.integers(0, 16, size=(n, k // g), dtype=np.uint8), g)
    copies = ctx.copies_for(host.nbytes)
    pool = _w4_pool(ctx, host, copies)
    weight_bytes = w4_bytes(n, k, g, False) - k * 2 - n * 2
    return _batched(ctx, "gemv_w4a16", w4_op.run, pool, copies, n, k, weight_bytes, f" g{g}zp")


def batched_w8(ctx: BenchContext) -> list[Result]:
    n, k = QUICK_BATCH_SHAPE if ctx.quick else BATCH_SHAPE
    rng = np.random.default_rng(4)
    q8 = dpnp.asarray(rng.integers(-127, 128, size=(n, k), dtype=np.int8), sycl_queue=ctx.queue)
    s8 = dpnp.asarray((rng.uniform(0.5, 1.5, size=n) * 1e-3).astype(np.float16), sycl_queue=ctx.queue)
    copies = ctx.copies_for(n * k)
    pool = [QuantizedW8(q8, s8)] + [QuantizedW8(dpnp.copy(q8), dpnp.copy(s8)) for _ in range(copies - 1)]
    return _batched(ctx, "gemv_w8a16", w8_op.run, pool, copies, n, k, n * k + n * 2, "")


def w4_bytes(n: int, k: int, group_size: int, symmetric: bool) -> int:
    zeros = 0 if symmetric else n * (k // group_size)
    return k * 2 + n * k // 2 + n * (k // group_size) * 2 + zeros + n * 2


def w8_bytes(n: int, k: int) -> int:
    return k * 2 + n * k + n * 2 + n * 2


def dpnp_dequant_matvec_w4(qw: QuantizedW4, x32):
    n, k = qw.shape
    q = dpnp.stack([qw.packed & 15, qw.packed >> 4], axis=-1).reshape(n, k // qw.group_size, qw.group_size)
    zeros = 8.0 if qw.zeros is None else qw.zeros.astype(np.float32)[:, :, None]
    w = (q.astype(np.float32) - zeros) * qw.scales.astype(np.float32)[:, :, None]
    return dpnp.matmul(w.reshape(n, k), x32)


def dpnp_dequant_matvec_w8(qw: QuantizedW8, x32):
    w = qw.qweight.astype(np.float32) * qw.scales.astype(np.float32)[:, None]
    return dpnp.matmul(w, x32)


def _w4_pool(ctx: BenchContext, host: QuantizedW4, copies: int) -> list[QuantizedW4]:
    first = host.to_device(ctx.queue)
    pool = [first]
    for _ in range(copies - 1):
        pool.append(QuantizedW4(dpnp.copy(first.packed), dpnp.copy(first.scales),
                                None if first.zeros is None else dpnp.copy(first.zeros), first.group_size))
    return pool


def _shapes(ctx: BenchContext):
    rng = np.random.default_rng(0)
    for n, k in QUICK_SHAPES if ctx.quick else SHAPES:
        x = dpnp.asarray(rng.standard_normal(k, dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
        yield rng, n, k, x, x.astype(np.float32), dpnp.empty(n, dtype=np.float16, sycl_queue=ctx.queue)


def cases_w4(ctx: BenchContext) -> list[Result]:
    results = []
    for rng, n, k, x, x32, y in _shapes(ctx):
        ctx.say(f"  gemv_w4a16 {n}x{k} g{GROUP}: preparing weight pool")
        host = QuantizedW4(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8),
                           (rng.uniform(0.5, 1.5, size=(n, k // GROUP)) * 0.01).astype(np.float16), None, GROUP)
        nbytes = w4_bytes(n, k, GROUP, True)
        copies = ctx.copies_for(host.nbytes)
        pool = _w4_pool(ctx, host, copies)
        chosen = w4_op.program_variant(ctx.queue, ctx.target, None)
        variants = ["magic", "plain"] if chosen.constants["DEQUANT_MAGIC"] else ["plain", "magic"]
        int_dot = int_dot_variant(w4_op.OP, "dequant", "auto", ctx.target, ctx.queue)
        if int_dot:  # CPUs with AVX512-VNNI or AVX2: the integer-dot kernel the LLM runner asks for
            variants.append(int_dot)
        if w4_op.runs_q8(ctx.queue, ctx.target):
            variants.append("avx2_q8")  # AVX2: x as Q8_0 (llm.load(activations="q8"))
        timed = []
        for dq in variants:
            seconds = ctx.time_events(lambda i: w4_op.run(x, pool[i % copies], out=y, dequant=dq)[1])
            wall = ctx.time_wall(lambda i: w4_op.gemv_w4a16(x, pool[i % copies], out=y, dequant=dq))
            timed.append((dq, seconds, wall, ctx.last_read_gbps))
        alt = ctx.time_wall(lambda i: dpnp_dequant_matvec_w4(pool[i % copies], x32), warmup=1)
        del pool
        for dq, seconds, wall, read_gbps in timed:
            tag = "default" if dq == variants[0] else "other"
            how = {"magic": "bias correction", "plain": "per-element", "vnni": "AVX512-VNNI integer dot products",
                   "avx2": "AVX2 integer dot products", "avx2_q8": "AVX2 vpmaddubsw, x as Q8_0 per 32 k"}[dq]
            results.append(Result("gemv_w4a16", f"{n}x{k} g{GROUP}", f"{ctx.target}:{dq}", seconds, wall,
                                  bytes=nbytes, flops=2 * n * k, alternative="dpnp deq f32+matvec", alt_seconds=alt,
                                  note=f"{tag} dequant ({how}); "
                                       f"int4 codes {n * k / 2 / seconds / 1e9:.1f} GB/s; pool {copies} copies",
                                  read_gbps=read_gbps))

        # the other end of the format space: group 32 with zero points (default dequant only)
        g = 32
        host = QuantizedW4(host.packed, (rng.uniform(0.5, 1.5, size=(n, k // g)) * 0.01).astype(np.float16),
                           rng.integers(0, 16, size=(n, k // g), dtype=np.uint8), g)
        copies = ctx.copies_for(host.nbytes)
        pool = _w4_pool(ctx, host, copies)
        seconds = ctx.time_events(lambda i: w4_op.run(x, pool[i % copies], out=y)[1])
        wall = ctx.time_wall(lambda i: w4_op.gemv_w4a16(x, pool[i % copies], out=y))
        del pool
        default = variants[0]
        results.append(Result("gemv_w4a16", f"{n}x{k} g{g}zp", f"{ctx.target}:{default}",
                              seconds, wall, bytes=w4_bytes(n, k, g, False), flops=2 * n * k,
                              note=f"default dequant; int4 codes {n * k / 2 / seconds / 1e9:.1f} GB/s; "
                                   f"pool {copies} copies", read_gbps=ctx.last_read_gbps))
    return results + batched_w4(ctx)


def cases_w8(ctx: BenchContext) -> list[Result]:
    results = []
    for rng, n, k, x, x32, y in _shapes(ctx):
        ctx.say(f"  gemv_w8a16 {n}x{k}: preparing weight pool")
        q8 = dpnp.asarray(rng.integers(-127, 128, size=(n, k), dtype=np.int8), sycl_queue=ctx.queue)
        s8 = dpnp.asarray((rng.uniform(0.5, 1.5, size=n) * 1e-3).astype(np.float16), sycl_queue=ctx.queue)
        copies = ctx.copies_for(n * k)
        pool8 = [QuantizedW8(q8, s8)] + [QuantizedW8(dpnp.copy(q8), dpnp.copy(s8)) for _ in range(copies - 1)]
        seconds = ctx.time_events(lambda i: w8_op.run(x, pool8[i % copies], out=y)[1])
        wall = ctx.time_wall(lambda i: w8_op.gemv_w8a16(x, pool8[i % copies], out=y))
        alt = ctx.time_wall(lambda i: dpnp_dequant_matvec_w8(pool8[i % copies], x32), warmup=1)
        del pool8
        results.append(Result("gemv_w8a16", f"{n}x{k}", ctx.target, seconds, wall, bytes=w8_bytes(n, k),
                              flops=2 * n * k, alternative="dpnp deq f32+matvec", alt_seconds=alt,
                              note=f"pool {copies} copies", read_gbps=ctx.last_read_gbps))
    return results + batched_w8(ctx)
