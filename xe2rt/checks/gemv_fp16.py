"""gemv_fp16 cases: every target's binary against the float64 reference (xe2rt.reference.gemv).

Bound per row: fp32 accumulation of exact fp16 products in any order, then one rounding to fp16
(reference.gemv.fp32_accumulation_bound: K eps32 sum|w x| + 0.5 ulp16 |y|), and max error <= 1e-2 max|y|."""
from __future__ import annotations

import numpy as np

from . import Check, elementwise
from ._util import dev, host, rng

REL_BAR = 1e-2
RULE = "per row: K eps32 sum|w x| + 0.5 ulp16 |ref| (fp32 accumulation, one fp16 rounding)"
CPU_SHAPES = [(n, k) for n in (1, 7, 1000, 4096, 8192) for k in (128, 1000, 4096, 4224)]
# the cpu kernel reads rows of K <= SEQ_K_MAX (6144) one after another and longer rows side by side: both sides of
# the switch, with and without a tail past the last 8 halves, and the Llama-3.1-8B down projection
CPU_SHAPES += [(7, 6144), (9, 6145), (1000, 6152), (130, 8200), (33, 14343), (4096, 14336)]
# The Xe2-shaped binaries run slowly on the CPU device (TOOLCHAIN 6): all tails, one real-model shape.
XE2_SHAPES = [(1, 128), (7, 1000), (1000, 4224), (33, 4097), (4096, 4096)]
QUICK_SHAPES = [(7, 1000), (1000, 4224), (4096, 4096)]
BATCHED = [(2, 1000, 4224), (5, 333, 1000), (16, 4096, 4096)]  # (M, N, K)


def make(n: int, k: int, m: int = 0):
    g = rng("gemv_fp16", n, k, m)
    w = g.standard_normal((n, k), dtype=np.float32).astype(np.float16)
    x = g.standard_normal((m, k) if m else k, dtype=np.float32).astype(np.float16)
    return x, w


def run_case(queue, target, n, k, m=0):
    import xe2rt
    from ..reference.gemv import fp32_accumulation_bound, gemv
    x, w = make(n, k, m)
    y = host(xe2rt.gemv_fp16(dev(x, queue), dev(w, queue), target=target)).astype(np.float64)
    rows = x if m else x[None]
    ref = gemv(rows, w).reshape(len(rows), -1)  # w converted once for all rows
    bound = fp32_accumulation_bound(rows, w).reshape(len(rows), -1)
    return elementwise(y.reshape(ref.shape), ref, bound, rel_bar=REL_BAR, rule=RULE)


def _case(n, k, targets, m=0):
    name = f"M={m} N={n} K={k}" if m else f"N={n} K={k}"
    return Check("gemv_fp16", name, lambda q, t, n=n, k=k, m=m: run_case(q, t, n, k, m), targets)


def checks(quick: bool = False) -> list[Check]:
    if quick:
        return [_case(n, k, ("cpu", "bmg", "lnl")) for n, k in QUICK_SHAPES[:2]] + \
               [_case(n, k, ("cpu", "bmg", "lnl"), m) for m, n, k in BATCHED[1:2]]
    shapes = {}
    for s in CPU_SHAPES:
        shapes.setdefault(s, set()).add("cpu")
    for s in XE2_SHAPES:
        shapes.setdefault(s, set()).update(("cpu", "bmg", "lnl"))
    out = [_case(n, k, tuple(sorted(t))) for (n, k), t in shapes.items()]
    return out + [_case(n, k, ("cpu", "bmg", "lnl"), m) for m, n, k in BATCHED]
