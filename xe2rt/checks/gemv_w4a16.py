"""gemv_w4a16 cases: every target's binary, both dequant variants (and on CPUs with AVX512-VNNI the VNNI kernels),
symmetric and zero-point weights, against the float64 reference of dequantize() (xe2rt.reference.quant).

Bound per row (reference.quant.w4_kernel_bound): fp32 accumulation over the kernel's K slices, including the
bias-corrected variant's magic offset (1024 code units for the fp16 magic, 256 for the CPU wide step), then one fp16
rounding; for the VNNI kernels also sum |w| |x' - x| with x' the fixed-point x they multiply; and max error <= 1e-2
max|y|."""
from __future__ import annotations

import numpy as np

from . import Check, elementwise
from ._util import dev, host, rng

RULE = ("per row: fp32 accumulation (magic offset of the variant included) over the K slices + 0.5 ulp16 |ref| "
        "(VNNI: + sum |w| |x' - x| for the fixed-point x')")
ALL = ("cpu", "bmg", "lnl")
# (N, K, group, symmetric, dequant): N tails; K = 4224 not a multiple of VL 512; K not a multiple of 128 exercises the
# CPU wide path's per-group tail.
SHAPES = [(n, k, g, s, d) for n, k in [(1, 4224), (7, 4224), (1000, 1024), (13, 8448)]
          for g in (32, 64, 128) for s in (True, False) for d in ("magic", "plain", "vnni")]
# 448 = 3 x 128 + 64, 352 = 2 x 128 + 96, 160 = 128 + 32; K = 96 has no whole 128-k step
TAILS = [(n, k, g, s, d) for n, k, g, s in [(19, 448, 64, True), (45, 352, 32, False), (9, 160, 32, True),
                                            (17, 96, 32, False), (23, 448, 64, False)]
         for d in ("magic", "plain", "vnni")]
LLM = [(n, k, g, s, None) for n, k in [(4096, 14336), (14336, 4096), (9728, 2560), (2560, 9728)]
       for g, s in [(128, True), (32, False)]]
QUICK = [(45, 352, 32, False, None)]


def random_qw(g, n, k, group_size, symmetric):
    """Uniform random codes and zero points (every code and zero point occurs), LLM-sized fp16 scales."""
    from ..quant import QuantizedW4
    packed = g.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    scales = (g.uniform(0.5, 1.5, size=(n, k // group_size)) * 0.01).astype(np.float16)
    zeros = None if symmetric else g.integers(0, 16, size=(n, k // group_size), dtype=np.uint8)
    return QuantizedW4(packed, scales, zeros, group_size)


def run_case(queue, target, n, k, group_size, symmetric, dequant):
    from ..ops import gemv_w4a16 as op
    from ..reference import quant as ref_q
    g = rng("gemv_w4a16", n, k, group_size, symmetric)
    qw = random_qw(g, n, k, group_size, symmetric).to_device(queue)
    x = g.standard_normal(k).astype(np.float16)
    y_dev, _ = op.run(dev(x, queue), qw, target=target, dequant=dequant)
    y = host(y_dev).astype(np.float64).reshape(-1)
    bound = ref_q.w4_kernel_bound(x, qw, op.program_variant(queue, target, dequant).constants)
    return elementwise(y, ref_q.gemv_w4(x, qw), bound, rel_bar=1e-2, rule=RULE)


def _case(n, k, gs, sym, deq, targets):
    name = f"N={n} K={k} g{gs} {'sym' if sym else 'zp'} {deq or 'default'}"
    if deq == "vnni":  # the cpu target's VNNI kernels: CPU devices with AVX512-VNNI only
        targets = tuple(t for t in targets if t == "cpu")
    return Check("gemv_w4a16", name, lambda q, t: run_case(q, t, n, k, gs, sym, deq), targets, cpu_vnni=deq == "vnni")


def checks(quick: bool = False) -> list[Check]:
    if quick:
        return [_case(*c, ALL) for c in QUICK]
    return [_case(*c, ALL) for c in SHAPES + TAILS] + [_case(*c, ("cpu",)) for c in LLM]
