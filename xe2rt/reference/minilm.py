"""float32 numpy forward of all-MiniLM-L6-v2 (the reference for xe2rt.models.minilm): the same weights, unrounded,
every step in float32 (GELU with the exact erf, evaluated in float64 and rounded)."""
from __future__ import annotations

import numpy as np

from .gemm import gelu_erf

LAYERS, HIDDEN, HEADS = 6, 384, 12
HEAD_DIM = HIDDEN // HEADS
LN_EPS = 1e-12


def layer_norm(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    d = x - mean
    var = (d * d).mean(axis=-1, keepdims=True, dtype=np.float32)
    return (d / np.sqrt(var + np.float32(LN_EPS)) * gamma + beta).astype(np.float32)


def encode(ids: np.ndarray, mask: np.ndarray, w: dict) -> np.ndarray:
    """Embeddings [n, 384] float32 for token ids and attention mask [n, L] (padding positions have mask 0)."""
    n, length = ids.shape
    f32 = np.float32

    def lin(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length] \
        + w["embeddings.token_type_embeddings.weight"][0]
    h = layer_norm(x.astype(f32), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    key_bias = ((1.0 - mask.astype(f32)) * np.finfo(f32).min).reshape(n, 1, 1, length).astype(f32)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def heads(t):
            return t.reshape(n, length, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)

        q, k, v = (heads(lin(h, p + "attention.self." + s)) for s in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) * f32(1.0 / np.sqrt(HEAD_DIM)) + key_bias
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        ctx = ((s / s.sum(axis=-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(n, length, HIDDEN)
        h = layer_norm(lin(ctx, p + "attention.output.dense") + h, w[p + "attention.output.LayerNorm.weight"],
                       w[p + "attention.output.LayerNorm.bias"])
        f = gelu_erf(lin(h, p + "intermediate.dense").astype(np.float64)).astype(f32)
        h = layer_norm(lin(f, p + "output.dense") + h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    m = mask.astype(f32)[:, :, None]
    pooled = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), f32(1e-9))
    return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), f32(1e-12))).astype(f32)
