"""softmax_stats cases against reference.routing.softmax_stats: the maximum m bit for bit (NaN where the row holds a
NaN), the sum s within a derived fp32 bound.

Bound on |s - s_ref| for a row of n values, with A_j = (m - x_j) / t >= 0 and u = 2^-24:
  - each term's exponent (x - m) scale, scale = log2(e) / t rounded once on the host, takes 3 roundings (x - m, the
    scale, the product; both shapes), so it is off by <= 3 u A_j log2(e) in base 2, i.e. <= 3 u A_j relative in the
    term (the bound allows 4 u A_j), and 2^x itself (the CPU polynomial: <= 9e-8 plus its last product; Xe2's
    built-in exp2: <= 3 ulp) by <= 6 u:
    |e_j' - e_j| <= e_j (4 u A_j + 6 u) (to first order), and sum_j e_j A_j <= n max(A e^-A) = n / e;
  - summation: at most n / 16 terms in sequence per lane, then 4 tree levels and a tail of < 16: <= (n / 16 + 20) u s;
  - terms below 2^-126 may be 0: <= n 2^-125.
  B = u (1.5 n + (n / 16 + 26) s_ref) + n 2^-125.
Rows with +-inf are exact: an all -inf row is (-inf, n), a row with +inf is (+inf, the number of +inf entries)."""
from __future__ import annotations

import numpy as np

from . import Check, Result, combine, exact
from ._util import dev, host, rng

ALL = ("cpu", "bmg", "lnl")
U = 2.0 ** -24
# (rows, n): a 128K vocabulary in rows of 512 (the sampler's layout), odd lengths (the Xe2 shape's element path and
# the CPU tail), one value, long rows
SHAPES = [(251, 512), (1, 1), (3, 17), (67, 128), (5, 1000), (2, 4096)]
QUICK = [(251, 512), (3, 17)]
TEMPERATURES = (1.0, 0.7, 2.0, 1e-20)


def bound(n: int, s_ref: np.ndarray) -> np.ndarray:
    return U * (1.5 * n + (n / 16 + 26) * s_ref) + n * 2.0 ** -125


def inputs(rows: int, n: int, dtype) -> np.ndarray:
    """Logit-like rows (spread 4), with special rows when there are at least 4: all -inf, one +inf, two +inf, a NaN."""
    x = (rng("softmax_stats", rows, n, np.dtype(dtype).char).standard_normal((rows, n)) * 4.0).astype(dtype)
    if rows >= 4:
        x[0] = -np.inf
        x[1, n // 3] = np.inf
        x[2, [0, n - 1]] = np.inf
        x[3, n // 2] = np.nan
    return x


def run_case(queue, target, rows: int, n: int, dtype, t: float) -> Result:
    import xe2rt
    from ..reference import routing as ref
    x = inputs(rows, n, dtype)
    want = ref.softmax_stats(x, t)
    got = host(xe2rt.softmax_stats(dev(x, queue), temperature=t, target=target)).astype(np.float64)
    if got.shape != want.shape:
        return Result(np.inf, 1.0, "shape", "", f"got {got.shape}, want {want.shape}")
    m_ok = exact(np.where(np.isnan(got[:, 0]), -1.0, got[:, 0]).view(np.uint64),
                 np.where(np.isnan(want[:, 0]), -1.0, want[:, 0]).view(np.uint64), what="row maxima")
    nan_ok = exact(np.isnan(got[:, 1]), np.isnan(want[:, 1]), what="NaN sums")
    finite = ~np.isnan(want[:, 1])
    err = np.abs(got[finite, 1] - want[finite, 1])
    ratio = err / bound(n, want[finite, 1])
    worst = int(np.argmax(ratio)) if ratio.size else 0
    s_ok = Result(float(ratio.max()) if ratio.size else 0.0, 1.0, "max |s - s_ref| / B",
                  "B = 2^-24 (1.5 n + (n / 16 + 26) s_ref) + n 2^-125",
                  f"worst row {int(np.flatnonzero(finite)[worst])}: |s - s_ref| {err[worst]:.3g}" if ratio.size else "")
    return combine(m_ok, nan_ok, s_ok)


def checks(quick: bool = False) -> list[Check]:
    out = []
    for rows, n in (QUICK if quick else SHAPES):
        for dtype in ((np.float16,) if quick else (np.float16, np.float32)):
            for t in ((1.0, 0.7) if quick else TEMPERATURES):
                out.append(Check("softmax_stats", f"rows={rows} n={n} {np.dtype(dtype).name} t={t:g}",
                                 lambda q, tg, r=rows, n=n, d=dtype, t=t: run_case(q, tg, r, n, d, t), ALL))
    return out
