"""Attention references (float64 numpy) and the error bounds the tests apply.

decode_attention_ref / decode_attention_bound: one new token against a KV cache (xe2rt.decode_attention).
prefill_attention_ref / prefill_attention_bound: a prompt with online softmax (xe2rt.prefill_attention).
"""
from __future__ import annotations

import math

import numpy as np

U32 = 2.0 ** -24  # unit roundoff of fp32
U16 = 2.0 ** -11  # unit roundoff of fp16
LOG2E = 1.0 / math.log(2.0)
EXP2_ULPS = 4  # OpenCL C exp2 is within 3 ulp (full profile); one more for margin; 1 ulp <= 2 U32 relative
MAX_SPLITS = 128  # xe2rt.ops.decode_attention: no call uses more splits
BLOCK = 16  # tokens per block (one rescale of the running state per block at most)


def _scores(q, k_cache, v_cache, length, scale):
    """float64 q [Hkv, G, D], k and v [Hkv, length, D], the exact scores z [Hkv, G, length] and scale. Query head hq
    reads kv head hq // G (Hugging Face's repeat_kv order), so q's rows regroup as [Hkv, G] without copying k / v."""
    k = np.asarray(k_cache[:, :length], dtype=np.float64)
    v = np.asarray(v_cache[:, :length], dtype=np.float64)
    hkv, _, d = k.shape
    q = np.asarray(q, dtype=np.float64).reshape(hkv, -1, d)
    scale = d ** -0.5 if scale is None else float(scale)
    return q, k, v, np.einsum("kgd,ktd->kgt", q, k) * scale, scale


def decode_attention_ref(q, k_cache, v_cache, length: int, scale: float | None = None) -> np.ndarray:
    """float64 softmax(scale q k^T) v over tokens [0, length) of the given (already fp16) inputs: q [Hq, D],
    caches [Hkv, max_tokens, D] -> [Hq, D]."""
    q, k, v, z, _ = _scores(q, k_cache, v_cache, length, scale)
    p = np.exp(z - z.max(axis=2, keepdims=True))
    y = np.einsum("kgt,ktd->kgd", p, v) / p.sum(axis=2, keepdims=True)
    return y.reshape(-1, k.shape[2])


def decode_attention_bound(q, k_cache, v_cache, length: int, scale: float | None = None) -> np.ndarray:
    """Per element bound on |y - ref| for the kernels' fp32 evaluation and one fp16 rounding of y.

    Scores are computed in the log2 domain: q~ = fl32(q c), c = fl32(scale log2 e), s_t = fp32 dot(q~, k_t) of D
    terms, so |s_t - log2e z_t| <= E_t = (D + 3) u32 c A_t with A_t = sum |q k_t| (c's, q~'s and the dot's roundings).
    Every token's weight p_t = 2^(s_t - m) then carries a relative error, common factors aside, of at most
      eps = (2^E - 1)                        score errors (E = max E_t)
          + ln2 u32 3R                       rounding of the exponent arguments: s_t - m, the rescales
                                             m_old - m_new (they telescope: their sum <= R) and the merge m_s - M;
                                             R = 2.1 c max A_t bounds every score difference
          + 2 EXP2_ULPS u32 (B + 2)          exp2 of p_t, of at most B = ceil(length / 16) rescales, of the merge
    and reweighting by (1 + eps_t) moves y by at most eps / (1 - eps) W, W = sum p|v - y| / sum p (exact p).
    The fp32 sums o = sum p v and l = sum p (rescales, the per-split sums, the S-way merge and the division
    included) take at most n = length + B + MAX_SPLITS + 8 roundings each: gamma_n (P + |y|) / (1 - gamma_n),
    P = sum p|v| / sum p. Then one rounding to fp16: u16 |y| plus half the smallest fp16 subnormal.
    """
    q, k, v, z, scale = _scores(q, k_cache, v_cache, length, scale)
    d = k.shape[2]
    c = abs(scale) * LOG2E  # a negative scale flips the scores, not their error
    a_max = np.einsum("kgd,ktd->kgt", np.abs(q), np.abs(k)).max(axis=2)  # max_t A_t per head [Hkv, G]
    e_max = (d + 3) * U32 * c * a_max
    r = 2.1 * c * a_max
    blocks = -(-length // BLOCK)
    eps = (np.exp2(e_max) - 1.0) + math.log(2.0) * U32 * 3 * r + 2 * EXP2_ULPS * U32 * (blocks + 2)
    p = np.exp(z - z.max(axis=2, keepdims=True))
    psum = p.sum(axis=2, keepdims=True)
    y = np.einsum("kgt,ktd->kgd", p, v) / psum
    big_p = np.einsum("kgt,ktd->kgd", p, np.abs(v)) / psum
    # W = sum p |v - y| / sum p, per kv head and 2048 tokens at a time (small temporaries at long contexts)
    w = np.zeros_like(y)
    for h in range(len(v)):
        for t in range(0, length, 2048):
            diff = np.abs(v[h, None, t:t + 2048, :] - y[h, :, None, :])
            w[h] += np.einsum("gt,gtd->gd", p[h, :, t:t + 2048], diff)
    w /= psum
    n = length + blocks + MAX_SPLITS + 8
    gamma = n * U32 / (1 - n * U32)
    fp32 = eps[..., None] / (1 - eps[..., None]) * w + gamma * (big_p + np.abs(y)) / (1 - gamma)
    bound = fp32 * (1 + U16) + U16 * np.abs(y) + 2.0 ** -25
    return bound.reshape(-1, d)
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
            seen = cols[None, :n] <= rows[:, None] if causal else np.ones((len(rows), n), bool)
            s = np.where(seen, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            vg = v64[:n, g]
            bad = ~np.isfinite(vg).all(axis=1)  # tokens whose v holds inf / NaN: they count only where seen
            num = p @ np.where(bad[:, None], 0.0, vg)
            for j in np.nonzero(bad)[0]:  # (a masked token has weight 0, and 0 * inf would be NaN)
                with np.errstate(invalid="ignore"):  # that 0 * inf is computed, then not selected
                    num += np.where(seen[:, j:j + 1], p[:, j:j + 1] * vg[j][None, :], 0.0)
            out[rows, h] = num / p.sum(axis=1, keepdims=True)
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
