"""Float64 numpy forward of the decoder LLMs xe2rt runs (Llama, Qwen3, Qwen3-MoE), written from the Hugging Face
modeling code's math, independent of xe2rt's kernels.

`forward(cfg, weights, ids) -> float64 logits [T, V]` for a prompt from position 0. `weights` maps the checkpoint's
names (model.layers.{i}.self_attn.q_proj, ... without the ".weight" suffix for linears; norms and embeddings by
their full names) to float arrays: dequantized exactly for quantized linears (QuantizedW4.dequantize). The MoE
experts are "model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj".

RoPE: inv_freq = theta^(-2j/D); with rope_scaling llama3 exactly as transformers' _compute_llama3_parameters
(wavelen = 2 pi / inv_freq; below high_freq_wavelen kept, above low_freq_wavelen divided by factor, in between the
smooth interpolation); rotate-half convention on [x1, x2] halves of the head.
"""
from __future__ import annotations

import math

import numpy as np


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None) -> np.ndarray:
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if not scaling:
        return inv
    factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """x [T, heads, D] rotated (rotate-half) by angle positions[t] * inv_freq."""
    ang = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, D/2]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=1)[:, None, :]
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def attention(q, k, v) -> np.ndarray:
    """Causal GQA attention: q [T, Hq, D], k, v [T, Hkv, D] -> [T, Hq, D]."""
    t, hq, d = q.shape
    rep = hq // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(d)
    s = np.where(np.tril(np.ones((t, t), bool))[None], s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", s, v)


def moe(cfg, w, p: str, x: np.ndarray) -> np.ndarray:
    logits = x @ w[f"{p}.mlp.gate.weight"].T
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    k = cfg.experts_per_token
    top = np.argsort(-prob, axis=1, kind="stable")[:, :k]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        wt = prob[t, top[t]]
        if cfg.norm_topk_prob:
            wt = wt / wt.sum()
        for e, we in zip(top[t], wt):
            q = f"{p}.mlp.experts.{e}"
            h = silu(w[f"{q}.gate_proj"] @ x[t]) * (w[f"{q}.up_proj"] @ x[t])
            out[t] += we * (w[f"{q}.down_proj"] @ h)
    return out


def forward(cfg, weights: dict, ids) -> np.ndarray:
    """Logits float64 [T, V] of the prompt `ids` (positions 0..T-1)."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    ids = np.asarray(ids, np.int64)
    t = len(ids)
    d, hq, hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
    inv = rope_inv_freq(d, cfg.rope_theta, cfg.rope_scaling)
    pos = np.arange(t)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg.layers):
        p = f"model.layers.{i}"
        h = rms_norm(x, w[f"{p}.input_layernorm.weight"], cfg.eps)
        q = (h @ w[f"{p}.self_attn.q_proj"].T).reshape(t, hq, d)
        k = (h @ w[f"{p}.self_attn.k_proj"].T).reshape(t, hkv, d)
        v = (h @ w[f"{p}.self_attn.v_proj"].T).reshape(t, hkv, d)
        if cfg.qk_norm:
            q = rms_norm(q, w[f"{p}.self_attn.q_norm.weight"], cfg.eps)
            k = rms_norm(k, w[f"{p}.self_attn.k_norm.weight"], cfg.eps)
        a = attention(rope(q, pos, inv), rope(k, pos, inv), v).reshape(t, hq * d)
        x = x + a @ w[f"{p}.self_attn.o_proj"].T
        h = rms_norm(x, w[f"{p}.post_attention_layernorm.weight"], cfg.eps)
        if cfg.is_moe_layer(i):
            x = x + moe(cfg, w, p, h)
        else:
            g = silu(h @ w[f"{p}.mlp.gate_proj"].T) * (h @ w[f"{p}.mlp.up_proj"].T)
            x = x + g @ w[f"{p}.mlp.down_proj"].T
    x = rms_norm(x, w["model.norm.weight"], cfg.eps)
    head = w["lm_head"] if "lm_head" in w else w["model.embed_tokens.weight"]
    return x @ head.T


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
