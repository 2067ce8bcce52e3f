"""gemv_w8a16 cases: every target's binary against the float64 reference of dequantize() (xe2rt.reference.quant).

Bound per row (reference.quant.w8_fp32_bound): fp32 accumulation of the exact int8 x fp16 products over the
kernel's K slices, then one fp16 rounding; and max error <= 1e-2 max|y|."""
from __future__ import annotations

import numpy as np

from . import Check, elementwise
from ._util import dev, host, rng

RULE = "per row: fp32 accumulation over the K slices of exact int8 x fp16 products + 0.5 ulp16 |ref|"
# K = 4224 is not a multiple of VL 512; K = 1000 and 4100 leave Xe2 rows unaligned for block reads (K % 16 != 0)
SHAPES = [(1, 4224), (7, 4224), (1000, 1000), (7, 4100), (3, 13)]
LLM = [(4096, 14336), (14336, 4096), (9728, 2560), (2560, 9728)]
QUICK = [(7, 4100)]


def run_case(queue, target, n, k):
    import xe2rt
    from ..ops import gemv_w8a16 as op
    from ..quant import QuantizedW8
    from ..reference import quant as ref_q
    g = rng("gemv_w8a16", n, k)
    qw = QuantizedW8(g.integers(-127, 128, size=(n, k), dtype=np.int8),
                     (g.uniform(0.5, 1.5, size=n) * 0.001).astype(np.float16)).to_device(queue)
    x = g.standard_normal(k).astype(np.float16)
    y = host(xe2rt.gemv_w8a16(dev(x, queue), qw, target=target)).astype(np.float64).reshape(-1)
    k_split = op.program_for(queue, op.OP, target).constants["K_SPLIT"]
    return elementwise(y, ref_q.gemv_w8(x, qw), ref_q.w8_fp32_bound(x, qw, k_split=k_split), rel_bar=1e-2, rule=RULE)


def _case(n, k, targets):
    return Check("gemv_w8a16", f"N={n} K={k}", lambda q, t, n=n, k=k: run_case(q, t, n, k), targets)


def checks(quick: bool = False) -> list[Check]:
    all_targets = ("cpu", "bmg", "lnl")
    if quick:
        return [_case(n, k, all_targets) for n, k in QUICK]
    return [_case(n, k, all_targets) for n, k in SHAPES] + [_case(n, k, ("cpu",)) for n, k in LLM]
