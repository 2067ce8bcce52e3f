"""GEMM references (float64 from the exact fp16 inputs) and the error bound the tests apply."""
from __future__ import annotations

import numpy as np

GELU_C = np.sqrt(2.0 / np.pi)
EPS32 = float(np.finfo(np.float32).eps)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh form of GELU, as the kernels compute it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x**3)))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """The exact (erf) form of GELU that BERT uses: 0.5 x (1 + erf(x / sqrt(2)))."""
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[np.float64])(x / np.sqrt(2.0)))


def dense_b(b: np.ndarray, b_layout: str) -> np.ndarray:
    """B as [K, N] in float64."""
    b = np.asarray(b, dtype=np.float64)
    return b if b_layout == "kn" else b.T


def products(a, b, b_layout="kn") -> tuple[np.ndarray, np.ndarray]:
    """(a @ B, |a| @ |B|) in float64: the exact product and the magnitude the accumulation error scales with."""
    a64, b64 = np.asarray(a, dtype=np.float64), dense_b(b, b_layout)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def epilogue(pre: np.ndarray, bias=None, activation=None) -> np.ndarray:
    y = pre if bias is None else pre + np.asarray(bias, dtype=np.float64)
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "gelu":
        return gelu_tanh(y)
    if activation == "gelu_erf":
        return gelu_erf(y)
    if activation is not None:
        raise ValueError(f"unknown activation {activation!r}")
    return y


def gemm(a, b, *, bias=None, activation=None, b_layout="kn") -> np.ndarray:
    """float64 act(a @ B + bias)."""
    return epilogue(products(a, b, b_layout)[0], bias, activation)


def error_bound_from(pre, mag, k: int, *, bias=None, activation=None, out_dtype=np.float16) -> np.ndarray:
    """Elementwise bound on |out - ref| for fp32 accumulation of exact fp16 products (any order), an fp32 epilogue
    and one rounding to out_dtype:
      pre-activation   e = K eps32 sum_k |a_mk b_kn| + eps32 (|a.B + bias| + |bias|)
      activation       relu is 1-Lipschitz; gelu (tanh form) has |gelu'| <= 1.13 and its fp32 evaluation adds at most
                       8 eps32 (|x| + 1); gelu_erf has |gelu'| <= 1.13 too and OpenCL's erf is within 16 ulp, so its
                       fp32 evaluation adds at most 16 eps32 (|x| + 1)
      output rounding  0.5 eps16 (|ref| + e) + the smallest fp16 subnormal
    """
    bias64 = 0.0 if bias is None else np.abs(np.asarray(bias, dtype=np.float64))
    x = pre if bias is None else pre + np.asarray(bias, dtype=np.float64)
    e = k * EPS32 * mag + EPS32 * (np.abs(x) + bias64)
    if activation == "gelu":
        e = 1.13 * e + 8 * EPS32 * (np.abs(x) + 1.0)
    elif activation == "gelu_erf":
        e = 1.13 * e + 16 * EPS32 * (np.abs(x) + 1.0)
    ref = epilogue(pre, bias, activation)
    out_eps = float(np.finfo(out_dtype).eps)
    return e + 0.5 * out_eps * (np.abs(ref) + e) + float(np.finfo(out_dtype).smallest_subnormal)


def error_bound(a, b, *, bias=None, activation=None, b_layout="kn", out_dtype=np.float16) -> np.ndarray:
    pre, mag = products(a, b, b_layout)
    return error_bound_from(pre, mag, np.shape(a)[1], bias=bias, activation=activation, out_dtype=out_dtype)


def dpas_spec(a_regs: np.ndarray, b_regs: np.ndarray, acc_regs: np.ndarray) -> np.ndarray:
    """cl_intel_subgroup_matrix_multiply_accumulate, sub-group size 16, f16 x f16 + f32, M = 8, K = 16, N = 16, on raw
    per-lane registers: a_regs int16 [16 lanes, 8], b_regs int32 [16 lanes, 8], acc_regs float32 [16 lanes, 8].
    Returns the result registers [16 lanes, 8] in float64 (exact sum)."""
    a_mat = np.ascontiguousarray(a_regs, dtype=np.int16).view(np.float16).astype(np.float64).T  # [m, k]: lane k
    b_mat = np.ascontiguousarray(b_regs, dtype=np.int32).view(np.float16).astype(np.float64).T  # [k, n]: lane n
    c = acc_regs.astype(np.float64).T + a_mat @ b_mat  # [m, n]
    return c.T
