"""References for the quantized GEMVs (float64 from the exact dequantized weights) and the error bounds tests apply."""
from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
MAGIC_HALF = 1024.0  # (q | 0x6400) read as half


def _rows(n: int, block: int = 512):
    for r in range(0, n, block):
        yield slice(r, min(r + block, n))


class QuantView:
    def __init__(self, host_qw):
        self.packed = np.asarray(host_qw.packed)

    def codes(self, rows: slice) -> np.ndarray:
        p = self.packed[rows]
        q = np.empty((p.shape[0], 2 * p.shape[1]), dtype=np.float64)
        q[:, 0::2] = p & 15
        q[:, 1::2] = p >> 4
        return q


def gemv_w4(x, qw) -> np.ndarray:
    """float64 y = dequantize(qw) @ x, computed in row blocks (no [N, K] float64 temporary)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    host = qw.to_host()
    n, k = host.shape
    g = host.group_size
    view = QuantView(host)
    zeros, scales = host.zero_points().astype(np.float64), np.asarray(host.scales).astype(np.float64)
    y = np.empty(n)
    xg = x.reshape(-1, g) if k else x.reshape(0, g)
    for rows in _rows(n):
        q = view.codes(rows).reshape(-1, k // g, g)
        dots = np.einsum("rgk,gk->rg", q, xg) - zeros[rows] * xg.sum(axis=1)
        y[rows] = (dots * scales[rows]).sum(axis=1)
    return y


def gemv_w8(x, qw) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    host = qw.to_host()
    return (np.asarray(host.qweight).astype(np.float64) @ x) * np.asarray(host.scales).astype(np.float64)


def _fixed_point(xs: np.ndarray) -> np.ndarray:
    """Each row of xs rounded to nearest even at a multiple of sx = 2^(e - 13), e = floor(log2(max |row|)) (at
    least -24, fp16's smallest exponent)."""
    m = np.abs(xs).max(axis=-1, keepdims=True)
    e = np.where(m > 0, np.floor(np.log2(np.where(m > 0, m, 1.0))), -24.0)
    sx = np.exp2(np.maximum(e, -24.0) - 13.0)
    return np.round(xs / sx) * sx


def vnni_x(x, *, tail: bool = False) -> np.ndarray:
    """x as the VNNI kernels read it, per 128-k chunk in 15-bit fixed point (_fixed_point). gemv_w4a16_vnni
    (WIDE_STEP 2) rounds every whole 128-k step and reads the tail past the last one as it is (its per-group fp32
    path); gemm_w4a16_vnni rounds the shorter last chunk too (`tail=True`), with its own scale. x [K] or [M, K]."""
    x = np.array(x, dtype=np.float64)
    k = x.shape[-1]
    steps = k // 128
    if steps:
        head = x[..., :steps * 128]
        x[..., :steps * 128] = _fixed_point(head.reshape(*head.shape[:-1], steps, 128)).reshape(head.shape)
    if tail and k % 128:
        x[..., steps * 128:] = _fixed_point(x[..., steps * 128:])
    return x


def q8_x(x):
    """x as gemv_w4a16_avx2_q8 (X_Q8) multiplies it, in float64: every whole 128-k step per 32 k as xi d, d =
    fp32(max |x| / 127) and xi = rte(x fp32(127 / max |x|)) (0 where the 32 are all 0), as llama.cpp's Q8_0; the tail
    past the last whole step as it is. Returns (x', e): e = 2^-24 |x'| per element for the kernel's fp32 product of
    the weight scale and d."""
    x = np.array(x, dtype=np.float64).reshape(-1)
    head = x[: (x.size // 128) * 128].reshape(-1, 32)
    amax = np.abs(head).max(axis=1, keepdims=True).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float64)
    d = (amax / np.float32(127)).astype(np.float32).astype(np.float64)
    x[: head.size] = (np.rint(head * inv) * d).reshape(-1)  # x inv exact in float64, rounded once as the fma does
    return x, np.abs(x) * 2.0**-24


def gemm_w4_x_error(a, qw) -> np.ndarray:
    """|vnni_x(a, tail=True) - a| @ |W|^T: how far the VNNI GEMM's fixed-point a can move each output."""
    a64 = np.asarray(a, dtype=np.float64)
    w = np.abs(np.asarray(qw.to_host().dequantize(np.float64), dtype=np.float64))
    return np.abs(vnni_x(a64, tail=True) - a64) @ w.T


def w4_kernel_bound(x, qw, constants: dict) -> np.ndarray:
    """The bound of the gemv_w4a16 program whose manifest constants are `constants` (one x row): w4_fp32_bound
    with the program's summation (magic offset: 1024 code units for the fp16 magic, 256 for the CPU wide step, 0 for
    the integer convert and the VNNI step), and for the VNNI step (WIDE_STEP 2) the rounding of x to its per-step
    grid: x enters the products as vnni_x(x), an exact integer dot, so |y - ref| gains sum_k |w_k| |vnni_x(x)_k - x_k|
    (w the exact dequantized weights) and the fp32 terms are those of |x| + that rounding; for the Q8 step (X_Q8)
    x enters as q8_x(x), plus 2^-24 of it for the scale product."""
    wide = constants.get("WIDE_STEP", 0)
    magic = 1024.0 if constants.get("HALF_MAGIC") else (256.0 if wide == 1 else 0.0)
    if constants.get("X_Q8"):  # x as 8-bit integers per 32 k (q8_x), then the scale product's rounding
        xq, scale_error = q8_x(x)
        dx = np.abs(xq - np.asarray(x, dtype=np.float64).reshape(-1)) + scale_error
    else:
        dx = np.abs(vnni_x(x) - np.asarray(x, dtype=np.float64).reshape(-1)) if wide == 2 else None
    return w4_fp32_bound(x, qw, bias_corrected=bool(constants["DEQUANT_MAGIC"]), magic_value=magic,
                         k_split=constants["K_SPLIT"], x_error=dx)


def w4_fp32_bound(x, qw, *, bias_corrected: bool, magic_value: float, k_split: int = 1, x_error=None) -> np.ndarray:
    """Per-row bound on |y - gemv_w4| for the kernels' summation structure (first-order, eps32 = 2^-23):
    inside a group each lane sums at most G/16 + 2 terms whose size is |(magic_value + q) x| and, for bias
    correction, (magic_value + z)|sum x|; across groups, lanes and slices the partial sums are the exact
    |s (q - z) x| terms, at most K/32 + 16 + K_SPLIT deep. Plus half an fp16 ulp for the rounded output.
    `x_error` (per element, >= 0): the kernel multiplies an x that differs from x by at most that (the VNNI step's
    rounding); the bound gains sum |w| x_error (with the output's rounding of it) and |x| + x_error in the terms."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    dx = None if x_error is None else np.asarray(x_error, dtype=np.float64).reshape(-1)
    host = qw.to_host()
    n, k = host.shape
    g = host.group_size
    view = QuantView(host)
    zeros, scales = host.zero_points().astype(np.float64), np.abs(np.asarray(host.scales).astype(np.float64))
    xa = (np.abs(x) if dx is None else np.abs(x) + dx).reshape(-1, g)
    xsum = np.abs(x.reshape(-1, g).sum(axis=1)) + (0.0 if dx is None else dx.reshape(-1, g).sum(axis=1))
    inner = np.empty(n)
    outer = np.empty(n)
    shift = np.zeros(n)  # sum_k |w_k| x_error_k
    for rows in _rows(n):
        q = view.codes(rows).reshape(-1, k // g, g)
        wabs = np.abs(q - zeros[rows][:, :, None])
        exact = np.einsum("rgk,gk->rg", wabs, xa)
        if bias_corrected:
            terms = np.einsum("rgk,gk->rg", q + magic_value, xa) + (magic_value + zeros[rows]) * xsum
        else:
            terms = exact
        inner[rows] = (terms * scales[rows]).sum(axis=1)
        outer[rows] = (exact * scales[rows]).sum(axis=1)
        if dx is not None:
            shift[rows] = (np.einsum("rgk,gk->rg", wabs, dx.reshape(-1, g)) * scales[rows]).sum(axis=1)
    ref = np.abs(gemv_w4(x, qw))
    depth_in, depth_out = g // 16 + 2, k // 32 + 16 + k_split  # K/32: the per-byte path of unaligned rows
    return (EPS32 * (depth_in * inner + depth_out * outer) + shift + 0.5 * np.finfo(np.float16).eps * (ref + shift)
            + np.finfo(np.float16).smallest_subnormal)


def w8_fp32_bound(x, qw, *, k_split: int = 1) -> np.ndarray:
    """Per-row bound for fp32 accumulation of the exact int8 x fp16 products (at most K/16 + 16 + K_SPLIT deep per
    lane, then the scale), plus half an fp16 ulp of the output."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    host = qw.to_host()
    k = host.shape[1]
    s = np.abs(np.asarray(host.scales).astype(np.float64))
    mag = (np.abs(np.asarray(host.qweight).astype(np.float64)) @ np.abs(x)) * s
    ref = np.abs(gemv_w8(x, qw))
    depth = k // 16 + 16 + k_split + 1
    return EPS32 * depth * mag + 0.5 * np.finfo(np.float16).eps * ref + np.finfo(np.float16).smallest_subnormal


def seed000_failures(y, ref, abs_tol: float = 1.0, rel_tol: float = 0.02) -> np.ndarray:
    """Indices failing seed 000's rule: fail only where |y - ref| > abs_tol and the relative error > rel_tol."""
    y = np.asarray(y, dtype=np.float64)
    diff = np.abs(y - ref)
    rel = diff / np.maximum(np.abs(ref), 1e-30)
    return np.nonzero((diff > abs_tol) & (rel > rel_tol))[0]


def gemm_w4(a, qw, *, bias=None, activation=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 act(a @ W^T + bias) for a [M, K] and W = qw.dequantize() [N, K] (the exact dequantized weights), with
    the pieces the bound needs: returns (ref, pre = a @ W^T, mag = |a| @ |W|^T)."""
    from . import gemm
    w = np.asarray(qw.to_host().dequantize(np.float64), dtype=np.float64)
    a64 = np.asarray(a, dtype=np.float64)
    pre, mag = a64 @ w.T, np.abs(a64) @ np.abs(w).T
    return gemm.epilogue(pre, bias, activation), pre, mag


def gemm_w4_bound(a, pre, mag, *, bias=None, activation=None, fp16_weights: bool, x_error=None) -> np.ndarray:
    """Elementwise bound on |out - gemm_w4| (reference.gemm.error_bound_from, K + 1 terms deep: the fp32 kernels'
    exact weights (q - z) s, up to 16 significant bits, times an fp16 a may round once more per product), plus, when
    the kernel rounds each weight to fp16 before multiplying (the Xe2 DPAS operand), half an fp16 ulp of every weight:
    2^-11 sum_k |a w| + 2^-25 sum_k |a| (fp16 subnormal weights: an absolute 2^-25). `x_error`
    (gemm_w4_x_error, the VNNI kernels): the products are of a fixed-point a within that of a, which adds to the
    operand error and to the magnitudes the fp32 terms scale with (the integer dot products themselves are exact)."""
    from . import gemm
    k = np.shape(a)[1]
    extra = 0.0
    if fp16_weights:
        extra = 2.0**-11 * mag + 2.0**-25 * np.abs(np.asarray(a, dtype=np.float64)).sum(axis=1, keepdims=True)
    if x_error is not None:
        extra = extra + x_error
        mag = mag + x_error
    return gemm.error_bound_from(pre, mag, k + 1, bias=bias, activation=activation, operand_error=extra)
