"""References for softmax_topk, topk and softmax_stats, in float64 from the exact (already rounded) inputs,
implementing the stated rules exactly:

Ordering: value descending; NaN ranks above +Inf (all NaNs equal); -0.0 == +0.0; equal values keep the lower index
first.
Softmax of a row, with m = its maximum: e_i = 1 where x_i == m (also when m is +-Inf), else exp(x_i - m); p = e / sum(e).
So a row with +Inf entries splits all probability equally among them, an all -Inf row is uniform, and a row with
any NaN has NaN probabilities everywhere (its indices still follow the ordering rule).
normalize=True: the kept p divided by their sum, i.e. e_kept / sum(e_kept).
"""
from __future__ import annotations

import numpy as np


def topk_order(x: np.ndarray) -> np.ndarray:
    """Per-row permutation [rows, n] of x [rows, n] under the ordering rule."""
    x = np.asarray(x, dtype=np.float64)
    nan = np.isnan(x)
    descending = -np.where(nan, 0.0, x)
    # lexsort: last key is primary; it is stable, so equal (nan, value) pairs keep the lower index first.
    return np.lexsort((descending, ~nan), axis=-1)


def topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values in x's dtype, int32 indices), both [rows, k]."""
    x = np.asarray(x)
    idx = topk_order(x)[:, :k]
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)


def softmax(x: np.ndarray) -> np.ndarray:
    """float64 softmax of each row under the rules above."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=-1, keepdims=True)  # NaN when the row has a NaN
        e = np.where(x == m, 1.0, np.exp(x - m))
        e = np.where(np.isnan(m), np.nan, e)
        return e / np.sum(e, axis=-1, keepdims=True)


def softmax_topk(x: np.ndarray, k: int, normalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, int32 indices), both [rows, k]."""
    idx = topk_order(x)[:, :k]
    p = np.take_along_axis(softmax(x), idx, axis=-1)
    if normalize:
        p = p / np.sum(p, axis=-1, keepdims=True)
    return p, idx.astype(np.int32)


def softmax_stats(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """float64 [rows, 2]: per row (m, s) with m = the maximum and s = sum(e), e_i = 1 where x_i == m, else
    exp((x_i - m) / temperature) (the softmax rule above at a temperature). A row with a NaN gives (NaN, NaN)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.max(x, axis=-1, keepdims=True)  # NaN when the row has a NaN
        e = np.where(x == m, 1.0, np.exp((x - m) / float(temperature)))
        s = np.sum(e, axis=-1)
    return np.stack([np.where(np.isnan(s), np.nan, m[..., 0]), s], axis=-1)


def tolerances(dtype) -> tuple[float, float]:
    """(rtol, atol) for softmax_topk values against the float64 reference: fp32 exp and division, then one rounding
    to the output dtype; atol covers results that land among the output's subnormals."""
    if np.dtype(dtype) == np.float16:
        return 2e-3, float(np.finfo(np.float16).smallest_subnormal)
    return 1e-3, 1e-30


def numpy_pipeline(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """What a numpy user writes for MoE routing (no special-value rules): softmax, argpartition, sort, normalize.
    Used as the benchmark baseline."""
    xf = x.astype(np.float32, copy=False)
    e = np.exp(xf - xf.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    part = np.argpartition(-p, k - 1, axis=-1)[:, :k]
    pv = np.take_along_axis(p, part, axis=-1)
    order = np.argsort(-pv, axis=-1, kind="stable")
    idx = np.take_along_axis(part, order, axis=-1)
    vals = np.take_along_axis(pv, order, axis=-1)
    vals = vals / vals.sum(axis=-1, keepdims=True)
    return vals.astype(x.dtype), idx.astype(np.int32)
