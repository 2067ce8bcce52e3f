"""softmax_topk and topk cases: indices exact (the kernels rank the exact inputs by the reference's rule), values
within reference.routing.tolerances (fp32 rtol 1e-3, fp16 2e-3 plus one fp16 subnormal); topk values bit for bit."""
from __future__ import annotations

import numpy as np

from . import Check, Result, combine, exact
from ._util import dev, host, rng

ALL = ("cpu", "bmg", "lnl")
SHAPES = [(8, 2), (32, 4), (60, 4), (64, 8), (128, 8), (160, 6), (256, 8), (512, 10),  # compile-time variants
          (1, 1), (7, 3), (100, 5), (128, 16), (511, 7)]  # runtime (n, k)
QUICK = [(128, 8), (100, 5)]


def run_case(queue, target, n, k, dtype):
    import xe2rt
    from ..reference import routing as ref
    x = (rng("softmax_topk", n, k, np.dtype(dtype).char).standard_normal((67, n)) * 3.0).astype(dtype)
    want_v, want_i = ref.softmax_topk(x, k, True)
    got_v, got_i = xe2rt.softmax_topk(dev(x, queue), k, target=target)
    rtol, atol = ref.tolerances(x.dtype)
    gv = host(got_v).astype(np.float64)
    err = np.abs(gv - want_v)
    lim = atol + rtol * np.abs(want_v)
    ratio = float((err / lim).max())
    values = Result(ratio, 1.0, "max |v - ref| / (atol + rtol |ref|)", f"rtol {rtol:g}, atol {atol:g}")
    tv, ti = xe2rt.topk(dev(x, queue), k, target=target)
    tref_v, tref_i = ref.topk(x, k)
    return combine(exact(host(got_i), want_i, what="softmax_topk indices"), values,
                   exact(host(ti), tref_i, what="topk indices"),
                   exact(host(tv).view(np.uint8), tref_v.view(np.uint8), what="topk value bytes"))


def checks(quick: bool = False) -> list[Check]:
    out = []
    for n, k in (QUICK if quick else SHAPES):
        for dtype in ((np.float16,) if quick else (np.float16, np.float32)):
            out.append(Check("softmax_topk", f"rows=67 n={n} k={k} {np.dtype(dtype).name}",
                             lambda q, t, n=n, k=k, d=dtype: run_case(q, t, n, k, d), ALL))
    return out
