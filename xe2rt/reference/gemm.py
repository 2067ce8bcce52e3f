"""GEMM references (float64 from the exact fp16 inputs) and the error bound the tests apply."""
from __future__ import annotations

import numpy as np

GELU_C = np.sqrt(2.0 / np.pi)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh form of GELU, as the kernels compute it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x**3)))


def dense_b(b: np.ndarray, b_layout: str) -> np.ndarray:
    """B as [K, N] in float64."""
    b = np.asarray(b, dtype=np.float64)
    return b if b_layout == "kn" else b.T


def gemm(a, b, *, bias=None, activation=None, b_layout="kn") -> np.ndarray:
    """float64 act(a @ B + bias)."""
    y = np.asarray(a, dtype=np.float64) @ dense_b(b, b_layout)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    if activation == "relu":
        y = np.maximum(y, 0.0)
    elif activation == "gelu":
        y = gelu_tanh(y)
    elif activation is not None:
        raise ValueError(activation)
    return y


def error_bound(a, b, *, bias=None, activation=None, b_layout="kn", out_dtype=np.float16) -> np.ndarray:
    """Elementwise bound on |out - gemm(...)| for fp32 accumulation of exact fp16 products, an fp32 epilogue and one
    rounding to out_dtype:
      pre-activation error  e = K eps32 sum_k |a_mk b_kn| + eps32 (|a.B| + |bias|)      (any summation order)
      activation            relu is 1-Lipschitz; gelu (tanh form) has |gelu'| <= 1.13, and its fp32 evaluation adds
                            at most 8 eps32 (|x| + 1)
      output rounding       0.5 eps16 |ref| + the smallest fp16 subnormal
    """
    a64 = np.abs(np.asarray(a, dtype=np.float64))
    b64 = np.abs(dense_b(b, b_layout))
    k = a64.shape[1]
    eps32 = float(np.finfo(np.float32).eps)
    pre = np.asarray(a, dtype=np.float64) @ dense_b(b, b_layout)
    if bias is not None:
        pre = pre + np.asarray(bias, dtype=np.float64)
    bias_mag = 0.0 if bias is None else np.abs(np.asarray(bias, dtype=np.float64))
    e = k * eps32 * (a64 @ b64) + eps32 * (np.abs(pre) + bias_mag)
    if activation == "gelu":
        e = 1.13 * e + 8 * eps32 * (np.abs(pre) + 1.0)
    ref = gemm(a, b, bias=bias, activation=activation, b_layout=b_layout)
    out_eps = float(np.finfo(out_dtype).eps)
    return e + 0.5 * out_eps * (np.abs(ref) + e) + float(np.finfo(out_dtype).smallest_subnormal)
