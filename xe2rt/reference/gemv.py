"""GEMV references and the error bounds the tests apply."""
from __future__ import annotations

import numpy as np


def gemv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """float64 y = w @ x of the given (already rounded) inputs; x [K] or [1, K] gives y [N], x [M, K] (M > 1) y [M, N].
    w is converted to float64 once for all rows."""
    x64 = np.asarray(x, dtype=np.float64)
    w64 = np.asarray(w, dtype=np.float64)
    if x64.ndim == 2 and x64.shape[0] > 1:
        return x64 @ w64.T
    return w64 @ x64.reshape(-1)


def fp32_accumulation_bound(x: np.ndarray, w: np.ndarray, out_dtype=np.float16) -> np.ndarray:
    """Per-row bound on |y - ref| for fp32 accumulation of exact fp16 products followed by one rounding to out_dtype:
    K * eps32 * sum|w*x| (any summation order) plus half an output ulp of |ref|. x as for gemv (per x row)."""
    mag = gemv(np.abs(np.asarray(x, dtype=np.float64)), np.abs(np.asarray(w, dtype=np.float64)))
    ref = np.abs(gemv(x, w))
    k = np.shape(x)[-1]
    eps32 = np.finfo(np.float32).eps
    out_eps = np.finfo(out_dtype).eps
    return k * eps32 * mag + 0.5 * out_eps * ref + np.finfo(out_dtype).smallest_subnormal
