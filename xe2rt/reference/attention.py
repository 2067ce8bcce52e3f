"""float64 references for attention (decoder layers), and the error bound of the prefill kernels."""
from __future__ import annotations

import math

import numpy as np

U16 = 2.0**-11  # fp16 unit roundoff (round to nearest)
U32 = 2.0**-24  # fp32 unit roundoff
EXP2_ULP = 3  # OpenCL C exp2 (full profile): <= 3 ulp
ROW_CHUNK = 512  # rows per step: the T x T score block of one head stays small at T = 4096


def _heads(q, k):
    t, hq, d = q.shape
    hkv = k.shape[1]
    return t, hq, hkv, d, hq // hkv


def prefill_attention_ref(q, k, v, *, causal: bool = True, scale: float | None = None) -> np.ndarray:
    """out[t, h] = sum_{t'} softmax_{t'}(scale q[t, h] . k[t', g]) v[t', g] in float64, g = h // (Hq // Hkv),
    t' <= t when causal. q [T, Hq, D], k and v [T, Hkv, D] (any float dtype, taken exactly)."""
    t, hq, hkv, d, ratio = _heads(q, k)
    scale = d ** -0.5 if scale is None else float(scale)
    q64, k64, v64 = (np.asarray(a, np.float64) for a in (q, k, v))
    out = np.empty((t, hq, d))
    cols = np.arange(t)
    for h in range(hq):
        g = h // ratio
        for r0 in range(0, t, ROW_CHUNK):
            rows = np.arange(r0, min(r0 + ROW_CHUNK, t))
            n = rows[-1] + 1 if causal else t  # causal: later tokens have no weight
            s = scale * (q64[rows, h] @ k64[:n, g].T)
            if causal:
                s = np.where(cols[None, :n] <= rows[:, None], s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[rows, h] = (p @ v64[:n, g]) / p.sum(axis=1, keepdims=True)
    return out


BOUND_RULE = ("elementwise |out - ref| <= Vd [2 delta / (1 - delta) + 2 (T + T/16 + 2) u32] + u16 (|ref| + that) "
              "+ 2^-24, Vd = max_t' |v[t', g, d]|, delta = ln2 (D + 2) u32 |scale| log2(e) max_t' sum_d |q k| "
              "(fp32 scores) + 3 ulp32 (exp2) + u16 (weights rounded to fp16 for DPAS)")


def prefill_attention_bound(q, k, v, ref, *, causal: bool = True, scale: float | None = None) -> np.ndarray:
    """Elementwise error bound of the prefill kernels against prefill_attention_ref (BOUND_RULE).

    A perturbation of every softmax weight by a relative delta_t' (|delta| <= delta) moves a normalized weighted
    average by at most 2 delta / (1 - delta) times the largest |v| it averages. The weights' deltas: the fp32 score
    error (D products and the scale: (D + 2) u32 |scale log2 e| sum_d |q k| in base-2 units, a factor 2^x ~ 1 + ln2 x
    on the weight), exp2's 3 ulp, and the fp16 rounding of the weights the Xe2 kernels feed to DPAS (the sum adds the
    same rounded weights). The running max cancels between numerator and denominator. Accumulating T terms and T / 16
    rescales in fp32 (numerator and denominator) adds 2 (T + T/16 + 2) u32 Vd; the fp16 store u16 |out|."""
    t, hq, hkv, d, ratio = _heads(q, k)
    scale = d ** -0.5 if scale is None else float(scale)
    q64, k64, v64 = (np.abs(np.asarray(a, np.float64)) for a in (q, k, v))
    cols = np.arange(t)
    bound = np.empty((t, hq, d))
    acc = 2 * (t + math.ceil(t / 16) + 2) * U32
    for h in range(hq):
        g = h // ratio
        vmax = v64[:, g].max(axis=0)  # over all tokens: >= the visible ones
        for r0 in range(0, t, ROW_CHUNK):
            rows = np.arange(r0, min(r0 + ROW_CHUNK, t))
            n = rows[-1] + 1 if causal else t
            mag = q64[rows, h] @ k64[:n, g].T
            if causal:
                mag = np.where(cols[None, :n] <= rows[:, None], mag, 0.0)
            score_err = (d + 2) * U32 * abs(scale) * math.log2(math.e) * mag.max(axis=1)
            delta = math.log(2) * score_err * (1 + 1e-6) + EXP2_ULP * 2 * U32 + U16
            pre = vmax[None, :] * (2 * delta / (1 - delta))[:, None] + acc * vmax[None, :]
            bound[rows, h] = pre + U16 * (np.abs(ref[rows, h]) + pre) + 2.0**-24
    return bound
