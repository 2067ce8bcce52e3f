"""MoE expert FFN reference (float64 from the exact dequantized weights) and the per-row error bound tests apply.

Reference: for each pair (t, j) with e = ids[t, j] in [0, E):
    g = G_e x_t, u = U_e x_t (G_e = gate rows, U_e = up rows of expert e's dequantized gate_up),
    h = silu(g) u,   ypair = D_e h,   y_t = sum_j w[t, j] ypair_(t, j)      (pairs with other ids contribute 0)
all in float64 from the float16 x, the exact weights (experts.dequantize()) and the given w values.

Bound (first order in eps32 = 2^-23; every product of a code with an fp16 or fp32 activation is formed in fp32):
  one W4 dot product a = sum_g s_g sum_(k in g) (q_k - z_g) x_k, computed with bias correction from codes carrying an
  offset M (M = 1024 on Xe2: half 1024 + q; M = 256 on cpu: 1 + q/256 scaled by 256, the larger of its two offsets):
    inner terms   |s_g| (sum_k (M + q_k) |x_k| + (M + z_g) sum_k |x_k|)    summed at most C_IN = 12 deep
                  (sum |x|, not |sum x|: the kernels' partial sums of x, which the correction multiplies, carry
                  rounding errors of that size)
    outer terms   |s_g| sum_k |q_k - z_g| |x_k|                           summed at most K/128 + 8 deep
    e_a = eps32 (C_IN * sum_g inner_g + (K/128 + 8) * sum_g outer_g)
  (per lane: an 8-term fma chain per code phase or word, the bias and zero-point corrections, then one term per
  step / word across K and a 16-lane reduction: at most K/128 + 4 deep; +4 for slack.)
  h = silu(g) u in fp32:   e_h = |silu(g)| e_u + |u| (1.1 e_g + 8 eps32 (|silu(g)| + |g|)) + eps32 |h|
    (|silu'| <= 1.1; exp, the division and the product in fp32 add at most 8 ulp-sized terms)
  ypair = D h, the dot product computed from h~ = h + dh with |dh| <= e_h:
    e_y = sum_i |D_ni| e_h_i + (the W4 dot bound above with x = |h| + e_h)
  y = sum_j w_j ypair_j in fp32, rounded once to fp16:
    e = sum_j |w_j| e_y_j + k eps32 sum_j |w_j ypair_j| + 0.5 eps16 (|y| + e) + the smallest fp16 subnormal
The bound is per output element (row n of token t); `bound` returns it with `reference`.
"""
from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
EPS16 = float(np.finfo(np.float16).eps)
C_IN = 12
ROW_BLOCK = 2048


def silu(g):
    return g / (1.0 + np.exp(-g))


class _ExpertView:
    """Host codes, zero points and scales of one stacked QuantizedW4, read in row blocks of one expert."""

    def __init__(self, qw, rows_per_expert: int):
        host = qw.to_host()
        self.packed = np.asarray(host.packed)
        self.scales = np.asarray(host.scales).astype(np.float64)
        self.zeros = host.zero_points().astype(np.float64)
        self.group = host.group_size
        self.rows = rows_per_expert

    def block(self, e: int, r0: int, r1: int):
        """(q float64 [r, K], z [r, K/G], s [r, K/G]) of rows r0..r1 of expert e."""
        rows = slice(e * self.rows + r0, e * self.rows + r1)
        p = self.packed[rows]
        q = np.empty((p.shape[0], 2 * p.shape[1]))
        q[:, 0::2] = p & 15
        q[:, 1::2] = p >> 4
        return q, self.zeros[rows], self.scales[rows]


def _w4_dots(view: _ExpertView, e: int, xs: np.ndarray, magic: float | None = None, xabs: np.ndarray | None = None,
             dx: np.ndarray | None = None):
    """One pass over expert e's rows (each row block dequantized once) for activations xs [P, K] (float64):
    (a [P, rows], e_a [P, rows] or None, prop [P, rows] or None). With magic, e_a is the W4 dot bound for the
    magnitudes xabs (|x| + dx); with dx, prop = dx @ |W|^T (the propagation of the activations' own error)."""
    g = view.group
    p, k = xs.shape
    out = np.empty((p, view.rows))
    err = np.empty((p, view.rows)) if magic is not None else None
    prop = np.empty((p, view.rows)) if dx is not None else None
    if magic is not None:
        xg_sum = np.abs(xabs.reshape(p, k // g, g).sum(axis=2))  # [P, K/G]
    for r0 in range(0, view.rows, ROW_BLOCK):
        r1 = min(r0 + ROW_BLOCK, view.rows)
        q, z, s = view.block(e, r0, r1)
        w = ((q.reshape(r1 - r0, k // g, g) - z[:, :, None]) * s[:, :, None]).reshape(r1 - r0, k)
        out[:, r0:r1] = xs @ w.T
        if magic is None and dx is None:
            continue
        wabs = np.abs(w, out=w)
        if dx is not None:
            prop[:, r0:r1] = dx @ wabs.T
        if magic is not None:
            sa = np.abs(s)
            q += magic
            inner = (q.reshape(r1 - r0, k // g, g) * sa[:, :, None]).reshape(r1 - r0, k) @ xabs.T
            inner += ((magic + z) * sa) @ xg_sum.T
            outer = wabs @ xabs.T
            err[:, r0:r1] = (EPS32 * (C_IN * inner + (k / 128 + 8) * outer)).T
    return out, err, prop


def _pairs(ids: np.ndarray, n_exp: int):
    """expert -> list of pair indices p = t k + j (valid ids only)."""
    flat = ids.reshape(-1)
    return {int(e): np.nonzero(flat == e)[0] for e in np.unique(flat) if 0 <= e < n_exp}


def reference(x, experts, ids, weights, *, magic: float | None = None):
    """float64 y [T, H]; with magic (the kernels' code offset, 1024 on Xe2, 256 on cpu) also the per-element bound
    [T, H] derived in the module docstring. Returns (y, bound or None)."""
    x = np.asarray(x, dtype=np.float64)
    ids = np.asarray(ids)
    w = np.asarray(weights, dtype=np.float64)
    n_exp, hidden, inter = experts.shape
    t, k = ids.shape
    gu = _ExpertView(experts.gate_up, 2 * inter)
    dn = _ExpertView(experts.down, hidden)
    ypair = np.zeros((t * k, hidden))
    e_y = np.zeros((t * k, hidden))
    for e, pairs in _pairs(ids, n_exp).items():
        xs = x[pairs // k]
        a, ea, _ = _w4_dots(gu, e, xs, magic, np.abs(xs))
        g, u = a[:, :inter], a[:, inter:]
        sg = silu(g)
        h = sg * u
        if magic is None:
            ypair[pairs] = _w4_dots(dn, e, h)[0]
            continue
        eg, eu = ea[:, :inter], ea[:, inter:]
        e_h = np.abs(sg) * eu + np.abs(u) * (1.1 * eg + 8 * EPS32 * (np.abs(sg) + np.abs(g))) + EPS32 * np.abs(h)
        habs = np.abs(h) + e_h
        ypair[pairs], acc, propagated = _w4_dots(dn, e, h, magic, habs, e_h)
        e_y[pairs] = propagated + acc
    valid = ((ids >= 0) & (ids < n_exp)).reshape(-1)
    wf = np.where(valid, w.reshape(-1), 0.0)[:, None]
    contrib = (wf * ypair).reshape(t, k, hidden)
    y = contrib.sum(axis=1)
    if magic is None:
        return y, None
    e = ((np.abs(wf) * e_y).reshape(t, k, hidden).sum(axis=1) + k * EPS32 * np.abs(contrib).sum(axis=1))
    bound = e + 0.5 * EPS16 * (np.abs(y) + e) + float(np.finfo(np.float16).smallest_subnormal)
    return y, bound


def magic_for(target: str) -> float:
    """The code offset M the target's kernels carry (see the module docstring)."""
    return 256.0 if target == "cpu" else 1024.0
