"""moe_ffn_w4a16 cases: fused MoE W4A16 FFN against the float64 reference (xe2rt.reference.moe) with its derived
per-element fp32 bound, the plain bar max error <= 1e-2 max|y| + 1e-3, and the invalid-id count exact."""
from __future__ import annotations

import numpy as np

from . import Check, combine, elementwise, exact
from ._util import dev, host, rng

RULE = "per element: reference.moe's fp32 bound (gate/up dots, silu, down dots, weighted sum)"
# (T, E, H, I, k, group, symmetric): tokens that repeat experts (ids drawn from E - 2 experts), T above and below the
# fused-pairs limit, zero points, g32..g128
CASES = [(1, 8, 256, 384, 2, 128, True), (3, 8, 256, 384, 2, 32, False), (16, 8, 256, 384, 2, 64, True),
         (64, 8, 256, 384, 2, 128, True), (7, 5, 384, 256, 1, 64, False)]
QUICK = [(3, 8, 256, 384, 2, 32, False)]


def run_case(queue, target, t, e, h, i, k, group_size, symmetric):
    from ..ops import moe as op
    from ..quant import QuantizedW4
    from ..quant_experts import QuantizedW4Experts
    from ..reference import moe as ref
    g = rng("moe", t, e, h, i, k, group_size, symmetric)

    def stack(rows, kk, scale):
        return QuantizedW4(g.integers(0, 256, size=(rows, kk // 2), dtype=np.uint8),
                           (g.uniform(0.5, 1.5, size=(rows, kk // group_size)) * scale).astype(np.float16),
                           None if symmetric else g.integers(0, 16, size=(rows, kk // group_size), dtype=np.uint8),
                           group_size)

    experts = QuantizedW4Experts(stack(e * 2 * i, h, 0.02), stack(e * h, i, 0.5 / np.sqrt(i)), e)
    x = g.standard_normal((t, h)).astype(np.float16)
    pool = max(e - 2, k)
    ids = np.stack([g.choice(pool, size=k, replace=False) for _ in range(t)]).astype(np.int32).reshape(t, k)
    w = g.uniform(0.1, 1.0, size=(t, k))
    w = (w / w.sum(axis=1, keepdims=True)).astype(np.float16)
    (y, invalid), _ = op.run(dev(x, queue), experts.to_device(queue), dev(ids, queue), dev(w, queue), target=target)
    want, bound = ref.reference(x, experts, ids, w, magic=ref.magic_for(target))
    got = host(y).astype(np.float64)
    values = elementwise(got, want, bound, rule=RULE)
    bar = float(np.abs(got - want).max()) / (1e-2 * float(np.abs(want).max()) + 1e-3)
    values.error = max(values.error, bar)
    return combine(values, exact(host(invalid)[:1], np.array([0]), what="invalid-id count"))


def checks(quick: bool = False) -> list[Check]:
    # the Xe2 binaries build slowly on the CPU device: in the full list they take the quick case (tests/test_moe_xe2.py
    # has more), the cpu binary every case
    return [Check("moe_ffn_w4a16", f"T={c[0]} E={c[1]} H={c[2]} I={c[3]} k={c[4]} g{c[5]} {'sym' if c[6] else 'zp'}",
                  lambda q, t, c=c: run_case(q, t, *c), ("cpu", "bmg", "lnl") if quick or c in QUICK else ("cpu",))
            for c in (QUICK if quick else CASES)]
