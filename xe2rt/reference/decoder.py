"""float64 numpy references for the small decoder ops (rms_norm, rope_kv, silu_mul), pure numpy so that a model's
forward pass can use them too.

Rounding: the math between HF's materialized fp16 tensors is float64 here; the fp16 tensors HF materializes inside an
op are rounded where HF rounds them (rms_norm's s = x + residual and hidden_states.to(input_dtype); Qwen3's q/k norm
output before the rotation). The op's final rounding to fp16 is left to the caller (functions return float64), so
tests can bound the distance of the op's fp16 output from the exact value.

RoPE angles are HF's: inv_freq in float32 exactly as transformers' _compute_default_rope_parameters and
_compute_llama3_parameters compute it, and angle = float32(position) * inv_freq rounded once to float32 (HF's
`inv_freq @ position_ids` in float32 with autocast off). Cos and sin of that float32 angle are then taken in float64.
"""
from __future__ import annotations

import math

import numpy as np

F16 = np.float16


def _f16(a) -> np.ndarray:
    """Round to fp16 and come back to float64 (a tensor HF materializes in fp16)."""
    return np.asarray(a, dtype=np.float64).astype(F16).astype(np.float64)


def rms_norm_ref(x, weight, eps: float, residual=None):
    """(y, s): s = fp16(x + residual) (x itself without a residual), y = weight * fp16(s * rsqrt(mean(s^2) + eps)) in
    float64 (not rounded to fp16). Normalizes over the last axis; weight has the last axis' length."""
    s = np.asarray(x, dtype=np.float64)
    if residual is not None:
        s = _f16(s + np.asarray(residual, dtype=np.float64))
    r = 1.0 / np.sqrt(np.mean(s * s, axis=-1, keepdims=True) + eps)
    return np.asarray(weight, dtype=np.float64) * _f16(s * r), s


def inv_freq(head_dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
    """float32 [head_dim / 2]: HF's default inv_freq, then the rope_type "llama3" adjustment when `scaling` is given
    (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings), every step in float32.

    The power float32(theta) ** (2i / D) is taken correctly rounded to float32 (from the C library's double pow, one
    element at a time), not by numpy's float32 np.power: that one is vectorized per CPU (SVML on AVX-512 hosts) and
    differs from the correctly rounded power by 1 ulp in some entries, which would make the angles, q, k and the
    cache depend on the host's numpy build. torch's own float32 pow may also differ by 1 ulp in an entry."""
    f32 = np.float32
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)  # exact: D is a power of two
    base = float(f32(theta))
    power = np.array([math.pow(base, float(e)) for e in exponent], dtype=np.float64).astype(f32)
    freq = f32(1.0) / power
    if scaling is None:
        return freq
    factor = f32(scaling["factor"])
    low, high = f32(scaling["low_freq_factor"]), f32(scaling["high_freq_factor"])
    old_context = f32(scaling["original_max_position_embeddings"])
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = f32(2 * math.pi) / freq
    scaled = np.where(wavelen > low_freq_wavelen, freq / factor, freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (f32(1) - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


def rope_angles(positions, freq) -> np.ndarray:
    """float32 [T, D / 2]: float32(position) * inv_freq, one float32 rounding."""
    return np.asarray(positions).astype(np.float32)[:, None] * np.asarray(freq, dtype=np.float32)[None, :]


def rope_ref(x, positions, freq) -> np.ndarray:
    """Rotate-half RoPE of x [T, heads, D] at positions [T] with inv_freq [D / 2], in float64 (not rounded)."""
    x = np.asarray(x, dtype=np.float64)
    half = x.shape[-1] // 2
    angle = rope_angles(positions, freq).astype(np.float64)[:, None, :]
    c, s = np.cos(angle), np.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope_kv_ref(q, k, v, positions, k_cache, v_cache, *, theta, scaling=None, qk_norm=None, write_caches=True):
    """What rope_kv computes: (q_rot, k_rot) float64 and the caches (fp16 copies of the given ones) with the fp16
    rounded k_rot and v written at positions. qk_norm = (q_weight, k_weight, eps): Qwen3's per-head norm first, its
    fp16 output the rotation's input, as in HF. write_caches=False returns the given caches untouched (no copy)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    if qk_norm is not None:
        qw, kw, eps = qk_norm
        q = _f16(rms_norm_ref(q, qw, eps)[0])
        k = _f16(rms_norm_ref(k, kw, eps)[0])
    freq = inv_freq(q.shape[-1], theta, scaling)
    q_rot, k_rot = rope_ref(q, positions, freq), rope_ref(k, positions, freq)
    if not write_caches:
        return q_rot, k_rot, k_cache, v_cache
    k_cache, v_cache = np.array(k_cache, dtype=F16), np.array(v_cache, dtype=F16)
    pos = np.asarray(positions)
    k_cache[:, pos, :] = k_rot.astype(F16).transpose(1, 0, 2)
    v_cache[:, pos, :] = np.asarray(v, dtype=F16).transpose(1, 0, 2)
    return q_rot, k_rot, k_cache, v_cache


def silu_mul_ref(gate_up) -> np.ndarray:
    """silu(gate) * up in float64 for gate_up [T, 2I] (gate = [:, :I], up = [:, I:])."""
    g = np.asarray(gate_up, dtype=np.float64)
    inter = g.shape[-1] // 2
    gate, up = g[..., :inter], g[..., inter:]
    return gate / (1.0 + np.exp(-gate)) * up


def ulp16(a) -> np.ndarray:
    """The fp16 ulp at |a| (2^-24 in and below the subnormal range)."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    e = np.floor(np.log2(np.maximum(a, 2.0**-14)))
    return np.exp2(e - 10)
