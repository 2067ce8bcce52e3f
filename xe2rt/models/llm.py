"""Decoder LLMs (Llama-3.x, Qwen3, Qwen3-MoE) from Hugging Face folders, every step queued on the device.

    model = xe2rt.models.llm.load(path, queue=None, weights="auto", group_size=128, max_tokens=4096)
    model.logits(ids)                       -> np.float32 [T, V]   (the prompt path from an empty cache)
    model.generate(ids, max_new_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=None, stop=None, stream=None,
                   return_logits=False)     -> np.int32 [n]  (and np.float32 [n, V] with return_logits)

One layer, T tokens at positions [p, p + T) (x: the residual stream, delta: the previous block's output):
  y, x   = rms_norm(delta, ln1, residual=x)        (layer 0: y = rms_norm(x, ln1))
  qkv    = linear(y, qkv)                          q, k, v rows stacked: one launch
  q, k   = rope_kv(q, k, v, positions, k_cache, v_cache, theta, scaling, qk_norm)   (Qwen3's q_norm / k_norm fused)
  a      = prefill_attention(q, k, v) (prompt) | decode_attention(q, k_cache, v_cache, p + 1) (one token)
  delta  = linear(a, o);  y, x = rms_norm(delta, ln2, residual=x)
  dense: delta = linear(silu_mul(linear(y, gate_up)), down)
  MoE:   w, ids = softmax_topk(linear(y, router), k, normalize=norm_topk_prob); delta = moe_ffn_w4a16(y, experts, ...)
         (float experts, held as stored: every expert's FFN weighted by the routing, DecoderLM._moe)
linear(x, W): M <= 16 rows -> gemv_fp16 / gemv_w4a16 / gemv_w8a16 (decode); more -> gemm_fp16 / gemm_w4a16, W8 in
chunks of 16 rows of the batched gemv_w8a16. Then y = rms_norm(delta, norm, residual=x), logits = linear(y, lm_head).
The KV cache is one pair of float16 [Hkv, max_tokens, D] arrays per layer on the device. Sampling runs on the device
(greedy: argmax; otherwise temperature, top-k, top-p over a device sort, with the uniform draw from a seeded numpy
Generator); the host reads back only the chosen token id. A decode step replays xe2rt.bind plans on fixed buffers
(see _decode_plans), decode_attention's included: it reads the length from the device; on an in-order OpenCL queue
with command buffers the step's plans (and the greedy argmax's) are one xe2rt.graph per bucket of lengths, one
submission per token (_step_graph). For W4 layers where
gemv_w4a16 runs them as one kernel (the CPU's VNNI or AVX2 kernels; Xe2 with hidden a multiple of 512) the step
folds ln1 into the qkv GEMV and ln2 + silu_mul into the gate/up GEMV (gemv_w4a16's norm= / silu_mul=).
"""
from __future__ import annotations

import contextlib
import functools
import numbers
import operator
import time

import dpctl
import dpnp
import numpy as np

from .. import _compat, launch, validate
from ..errors import InputError, InputTypeError
from ..ops.common import ceil_div
from ..ops.gemv_common import MAX_M
from ..ops.softmax_stats import MAX_TEMPERATURE, real_temperature
from ..quant import QuantizedW4, QuantizedW8
from .checkpoint import check_mode, read_config, tokenizer_for
from .llm_weights import FloatExperts, device_placer, load_weights, weight_bytes

MOE_CHUNK = 64  # moe_ffn_w4a16 takes at most 64 tokens per call
MLP_CHUNK = 512  # prompt rows per dense-MLP pass (bounds the gate_up and silu temporaries of a long prompt)
ARG_ROW = 512  # xe2rt.topk's largest row (N_MAX)
CANDIDATES = 16  # xe2rt.topk's largest k: the sampling candidates per row of ARG_ROW logits
# Sampling candidate tiers: CANDIDATES per window of 512 logits, then (when those cannot hold the kept set) per window
# of 128: four times the candidates under a lower floor, before a sort of the whole vocabulary
CANDIDATE_WINDOWS = (ARG_ROW, 128)


def _inverse_cdf_host(p: np.ndarray, u: float) -> int:
    """The index i with c[i - 1] <= u c[-1] < c[i] for c = cumsum(p) (p >= 0, float64, some p > 0): token i of a
    categorical with weights p for a draw u in [0, 1); never past the last index of nonzero weight."""
    c = np.cumsum(p)
    return min(int(np.searchsorted(c, u * c[-1], side="right")), int(np.flatnonzero(p)[-1]))


def token_ids(ids, vocab: int, what: str = "ids") -> np.ndarray:
    """A prompt's token ids as np.int32 [T], T >= 1, every id in [0, vocab); InputError / InputTypeError naming the
    first id that breaks a rule (the model's calls and the command line, before it loads the weights)."""
    if hasattr(ids, "__sycl_usm_array_interface__"):  # ids on a device: the host needs them to feed the steps
        ids = dpnp.asnumpy(ids)
    a = np.asarray(ids)
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
        raise InputTypeError(f"{what} must be integer token ids, got dtype {a.dtype}")
    if a.ndim != 1:
        raise InputError(f"{what} must be a 1-D sequence of token ids, got shape {a.shape}")
    if a.size == 0:
        raise InputError(f"{what} is empty: a prompt needs at least one token")
    bad = (a < 0) | (a >= vocab)
    if bad.any():
        j = int(np.argmax(bad))
        raise InputError(f"{what}[{j}] = {int(a[j])} is outside the vocabulary [0, {vocab})")
    return a.astype(np.int32)


def _op(name: str):
    import importlib
    import xe2rt
    fn = getattr(xe2rt, name, None)
    if fn is None:  # an op whose module exists but is not exported yet
        try:
            fn = getattr(importlib.import_module(f"xe2rt.ops.{name}"), name, None)
        except ImportError:
            fn = None
    if fn is None:
        raise NotImplementedError(f"xe2rt.{name} is not in this build (a decoder op of issue 16); the LLM runner "
                                  f"needs it")
    return fn


ACTIVATIONS = ("auto", "q8")  # load(activations=...): the W4 GEMVs' activations


def load(path, *, queue=None, weights: str = "auto", group_size: int = 128, max_tokens: int = 4096,
         progress: bool = True, exact: bool = False, activations: str = "auto") -> "DecoderLM":
    """Load a Hugging Face decoder folder (see the module docstring). weights: "auto" keeps what the files hold
    (bfloat16 -> float16, 4-bit formats -> W4), "fp16" dequantizes, "w4" / "w8" quantize float weights on load
    with `group_size` (4-bit checkpoints stay W4; with "auto" their float lm_head is quantized at their own group
    size). max_tokens sizes the KV cache (prompt + generated tokens).
    exact=False lets the W4 layers use the integer-dot kernels where they run (CPU devices with AVX512-VNNI or AVX2:
    activations rounded to 15-bit fixed point per 128 k, finer than llama.cpp's 8-bit; dequant / variant "auto" of
    gemv_w4a16 / gemm_w4a16); exact=True keeps them on the kernels exact in the activations.
    activations="q8" (AVX2 CPU devices, not with exact=True) runs the decode step's W4 GEMVs with the activations
    rounded to signed bytes per 32 k, as llama.cpp's Q8_0 does for its Q4_0 matvec (gemv_w4a16 dequant "avx2_q8",
    about 1.1x the 15-bit kernels' speed on a Zen 3); the prompt keeps the "auto" GEMM."""
    check_mode(weights, group_size)
    if not isinstance(exact, (bool, np.bool_)):
        raise InputTypeError(f"load: exact must be True or False, got {type(exact).__name__} {exact!r}")
    if activations not in ACTIVATIONS:
        raise InputError(f"load: activations must be one of {ACTIVATIONS}, got {activations!r}")
    if exact and activations == "q8":
        raise InputError("load: activations='q8' rounds the activations to 8 bits, which exact=True rules out")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or not 1 <= max_tokens <= 4096:
        raise InputError(f"load: max_tokens must be an int in [1, 4096] (prefill_attention's limit), got "
                         f"{max_tokens!r}")
    if queue is None:  # in order: on the OpenCL CPU device a prompt ran 1.7-2.2x faster than on a default queue
        queue = dpctl.SyclQueue(property="in_order")
    elif not isinstance(queue, dpctl.SyclQueue):
        raise InputTypeError(f"load: queue must be a dpctl.SyclQueue or None, got {type(queue).__name__}")
    cfg = read_config(path)
    tokenizer = tokenizer_for(path)
    for name in ("rms_norm", "rope_kv", "decode_attention", "prefill_attention", "silu_mul", "gemm_w4a16"):
        _op(name)  # fail before reading gigabytes when the build lacks a decoder op
    gemv_dequant = None if exact else "avx2_q8" if activations == "q8" else "auto"
    if gemv_dequant == "avx2_q8":  # refused by name on a device that cannot run it, before any weight is read
        from ..ops import gemv_w4a16
        gemv_w4a16.program_variant(queue, None, gemv_dequant)

    t0 = time.perf_counter()
    cfg, w = load_weights(path, weights, group_size, place=device_placer(queue), progress=progress, cfg=cfg)
    queue.wait()
    return DecoderLM(cfg, w, queue, int(max_tokens), tokenizer, weights, time.perf_counter() - t0, bool(exact),
                     gemv_dequant)


# the op family of each bound plan of a decode step, for the step profile (LLM.timer)
_PLAN_FAMILY = {"ln1": "rms_norm", "ln2": "rms_norm", "qkv": "gemv", "o": "gemv", "router": "gemv", "gate_up": "gemv",
                "down": "gemv"}


class DecoderLM:
    def __init__(self, cfg, w: dict, queue, max_tokens: int, tokenizer, weights: str, load_seconds: float,
                 exact: bool = False, gemv_dequant: str | None = "auto"):
        self.cfg, self.w, self.queue, self.max_tokens = cfg, w, queue, max_tokens
        self.tokenizer, self.weights, self.load_seconds = tokenizer, weights, load_seconds
        self.weight_bytes = weight_bytes(w)
        self.exact = exact  # load(exact=...): W4 layers on the kernels exact in the activations
        self.gemv_dequant = None if exact else gemv_dequant  # the W4 GEMVs' dequant (load's exact / activations)
        from .. import targets
        from ..ops.common import dpas_variant
        # the prompt's GEMMs and attention: software DPAS when an Xe2 target is forced on another device
        # (XE2RT_TARGET=bmg on the CPU device runs the whole model through the Xe2 code path)
        self._dpas = dpas_variant(targets.resolve(queue.sycl_device), queue)
        shape = (cfg.kv_heads, max_tokens, cfg.head_dim)
        self.k_cache = [dpnp.zeros(shape, dtype=np.float16, sycl_queue=queue) for _ in range(cfg.layers)]
        self.v_cache = [dpnp.zeros(shape, dtype=np.float16, sycl_queue=queue) for _ in range(cfg.layers)]
        self.cache_bytes = 2 * cfg.layers * int(np.prod(shape)) * 2
        self.positions = dpnp.arange(max_tokens, dtype=np.int32, sycl_queue=queue)
        # Greedy argmax in two xe2rt.topk launches (rows of ARG_ROW logits, then the row maxima): the decode
        # logits row lives in a buffer padded to whole rows with -inf, so no copy is needed.
        rows = -(-cfg.vocab // ARG_ROW)
        self._arg_rows = rows if rows <= ARG_ROW else 0
        self._logit_buf = self._logit_row = None
        if self._arg_rows:
            self._logit_buf = dpnp.full(rows * ARG_ROW, -np.inf, dtype=np.float16, sycl_queue=queue)
            self._logit_row = self._logit_buf[:cfg.vocab].reshape(1, cfg.vocab)
        self.timer = None  # set by profile_step(): called with a family name after each op
        self._dec = None  # the decode step's buffers and xe2rt.bind plans, made at the first decode step
        self._busy = None  # the call running now (_exclusive)
        self.step_seconds: list = []  # seconds of each step of the latest generate: [prompt + first token, decode...]
        self._argmax = None
        # the decode step as one xe2rt.graph per (bucket of lengths, greedy): one OpenCL command buffer where the queue
        # allows (xe2rt.graphs), None where it does not (the plans are then called one by one)
        from .. import config
        self.native_graphs = config.native_graph_enabled()
        self._graphs: dict = {}
        self._argmax_done = False  # the latest step's graph ran the greedy argmax (reset by every step and prompt)
        self._stats = None  # (temperature, its softmax_stats plan, the plan's output memory, a host array)
        self._candidates = {}  # window -> the topk plan of the sampling candidates, its outputs' memory, host arrays
        self._host_argmax = (np.empty(1, np.int32), np.empty(max(self._arg_rows, 1), np.int32))
        # positions come from our own arange: the op's optional readback check of them would wait every step
        import inspect
        self._rope_extra = {"check_positions": False} if "check_positions" in inspect.signature(
            _op("rope_kv")).parameters else {}

    # ------------------------------------------------------------------------------------------------- checks
    def _check_ids(self, ids, what: str = "ids") -> np.ndarray:
        a = token_ids(ids, self.cfg.vocab, what)
        if a.size > self.max_tokens:
            raise InputError(f"{what} has {a.size} tokens; the KV cache holds max_tokens = {self.max_tokens}")
        return a

    # ---------------------------------------------------------------------------------------------- the steps
    def _t(self, family: str):
        if self.timer is not None:
            self.timer(family)

    def _moe(self, y, experts, ids, wt, out):
        """out [T, H] = the MoE FFN of y [T, H] for the routing (ids, wt) [T, k]: moe_ffn_w4a16 for W4 experts; float
        experts exactly, with the fp16 GEMV / GEMM kernels: every expert's silu(y G_e) * (y U_e) D_e, weighted by
        r[t, e] (wt[t, j] where ids[t, j] == e, else 0) and summed in float32, one rounding to float16. That computes
        all E experts where k are chosen (E / k times the work of the W4 kernel): the exact path for float
        checkpoints, which weights="w4" replaces by the fast one."""
        import xe2rt
        if not isinstance(experts, FloatExperts):
            xe2rt.moe_ffn_w4a16(y, experts, ids, wt, out=out)
            self._t("moe_ffn_w4a16")
            return out
        e_all = experts.num_experts
        r = dpnp.zeros((y.shape[0], e_all), dtype=np.float32, sycl_queue=self.queue)
        columns = dpnp.arange(e_all, dtype=np.int32, sycl_queue=self.queue)
        for j in range(ids.shape[1]):
            r += (ids[:, j:j + 1] == columns) * wt[:, j:j + 1].astype(np.float32)
        acc = dpnp.zeros(out.shape, dtype=np.float32, sycl_queue=self.queue)
        silu_mul = _op("silu_mul")
        for e in range(e_all):
            act = silu_mul(self._linear(y, experts.gate_up[e]))
            acc += r[:, e:e + 1] * self._linear(act, experts.down[e]).astype(np.float32)
        out[...] = acc.astype(np.float16)
        self._t("moe float experts")
        return out

    def _linear(self, x, w, out=None):
        m = x.shape[0]
        import xe2rt
        if isinstance(w, QuantizedW4):
            from ..ops import gemm_w4a16
            fast = not self.exact  # the integer-dot kernels where they run ("auto")
            y = xe2rt.gemv_w4a16(x, w, out=out, dequant=self.gemv_dequant) if m <= MAX_M else \
                gemm_w4a16.run(x, w, out=out, variant=self._dpas if self._dpas != "native" else
                               "auto" if fast else "native")[0]
            self._t("w4 gemv" if m <= MAX_M else "w4 gemm")
            return y
        if isinstance(w, QuantizedW8):
            if m <= MAX_M:
                y = xe2rt.gemv_w8a16(x, w, out=out)
            else:
                y = out if out is not None else dpnp.empty((m, w.shape[0]), dtype=np.float16, sycl_queue=self.queue)
                for r in range(0, m, MAX_M):
                    xe2rt.gemv_w8a16(x[r:r + MAX_M], w, out=y[r:r + MAX_M])
            self._t("w8 gemv")
            return y
        if m <= MAX_M:
            y = xe2rt.gemv_fp16(x, w, out=out)
        elif self._dpas == "native":
            y = xe2rt.gemm_fp16(x, w, b_layout="nk", out=out)
        else:
            from ..ops import gemm_fp16
            y = gemm_fp16.run(x, w, b_layout="nk", out=out, variant=self._dpas)[0]
        self._t("fp16 gemv" if m <= MAX_M else "fp16 gemm")
        return y

    def _fuses(self, w, silu_mul: bool = False) -> bool:
        """Whether a decode step folds the rms_norm before linear w (and with silu_mul the SiLU-and-multiply after
        it) into its GEMV: W4 weights (not loaded exact=True) where gemv_w4a16 runs that as one kernel (the VNNI
        kernels, the AVX2 ones, or Xe2 with K a multiple of 512)."""
        from ..ops import gemv_w4a16
        return isinstance(w, QuantizedW4) and not self.exact and gemv_w4a16.fuses(self.queue, w, silu_mul=silu_mul,
                                                                                  dequant=self.gemv_dequant)

    def _empty(self, *shape, dtype=np.float16):
        """An uninitialized device array on the model's queue (the step's and the prompt's buffers)."""
        return dpnp.empty(shape, dtype=dtype, sycl_queue=self.queue)

    def _forward(self, tok, start: int, last_only: bool):
        """Logits fp16 [T or 1, V] for tokens at positions [start, start+T): `tok` a device int array [T] (gathered
        from the embeddings on the device) or a host int (one decode token: its embedding row is a view, no launch;
        rms_norm never writes its inputs, so the view is only read)."""
        if isinstance(tok, int) and start > 0 and last_only:
            return self._decode(tok, start)  # one decode token: the bound plans
        self._argmax_done = False  # these logits are new: no step's graph chose from them
        cfg, w = self.cfg, self.w
        rms_norm, rope_kv = _op("rms_norm"), _op("rope_kv")
        import xe2rt
        d, hq, hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
        if isinstance(tok, int):
            t, x = 1, w["embed"][tok:tok + 1]
        else:
            t = int(tok.shape[0])
            x = dpnp.take(w["embed"], tok, axis=0)
            self._t("embedding")
        pos = self.positions[start:start + t]
        # One set of activation buffers for every layer of this call: the queue runs behind the host, and an array the
        # host drops is freed only once the kernels queued on it have run, so fresh arrays per layer would all be
        # alive at once (16 layers x a 2048-token prompt's temporaries: gigabytes). The ops are ordered on the queue,
        # so layer i + 1 overwriting a buffer waits for layer i's readers.
        buf = self._empty
        h, inter = cfg.hidden, cfg.intermediate
        ys, xs, qkv, delta_buf = buf(t, h), [buf(t, h), buf(t, h)], buf(t, (hq + 2 * hkv) * d), buf(t, h)
        heads = (buf(t, hq, d), buf(t, hkv, d), buf(t, hkv, d)) if t > 1 else None
        attn = buf(t, hq, d) if t > 1 else None
        dense = not all("experts" in layer for layer in w["layers"])
        rows = min(t, MLP_CHUNK)  # the dense MLP is row-wise: its two widest temporaries hold MLP_CHUNK rows at most
        gate_up, act = (buf(rows, 2 * inter), buf(rows, inter)) if dense else (None, None)
        cur, delta = 0, None
        for i, layer in enumerate(w["layers"]):
            if delta is None:
                y = rms_norm(x, layer["ln1"], eps=cfg.eps, out=ys)
            else:
                y, x = rms_norm(delta, layer["ln1"], eps=cfg.eps, residual=x, out=(ys, xs[cur]))
                cur = 1 - cur
            self._t("rms_norm")
            self._linear(y, layer["qkv"], out=qkv)
            q, k, v = (qkv[:, a:b] for a, b in ((0, hq * d), (hq * d, (hq + hkv) * d), ((hq + hkv) * d, None)))
            if t > 1:  # column blocks of [T, N] are strided; the ops take C-contiguous [T, heads, D]
                for src, dst in zip((q, k, v), heads):
                    dst.reshape(t, -1)[...] = src
                q, k, v = heads
                self._t("copies")
            q, k, v = q.reshape(t, hq, d), k.reshape(t, hkv, d), v.reshape(t, hkv, d)
            qk_norm = (layer["q_norm"], layer["k_norm"], cfg.eps) if cfg.qk_norm else None
            rope_kv(q, k, v, pos, self.k_cache[i], self.v_cache[i], theta=cfg.rope_theta, scaling=cfg.rope_scaling,
                    qk_norm=qk_norm, **self._rope_extra)
            self._t("rope_kv")
            if t == 1 and start > 0:
                a = _op("decode_attention")(q.reshape(hq, d), self.k_cache[i], self.v_cache[i], start + 1)
                self._t("decode_attention")
            else:
                if start:
                    raise InputError("a prompt continues only from an empty cache")
                if self._dpas == "native":
                    a = _op("prefill_attention")(q, k, v, causal=True, out=attn)
                else:
                    from ..ops import prefill_attention
                    a = prefill_attention.run(q, k, v, causal=True, variant=self._dpas, out=attn)[0]
                self._t("prefill_attention")
            delta = self._linear(a.reshape(t, hq * d), layer["o"], out=delta_buf)
            y, x = rms_norm(delta, layer["ln2"], eps=cfg.eps, residual=x, out=(ys, xs[cur]))
            cur = 1 - cur
            self._t("rms_norm")
            if "experts" in layer:
                logits = self._linear(y, layer["router"])
                delta = delta_buf
                for r in range(0, t, MOE_CHUNK):
                    wt, ids = xe2rt.softmax_topk(logits[r:r + MOE_CHUNK], cfg.experts_per_token,
                                                 normalize=cfg.norm_topk_prob)
                    self._t("softmax_topk")
                    self._moe(y[r:r + MOE_CHUNK], layer["experts"], ids, wt, delta[r:r + MOE_CHUNK])
            else:
                delta = delta_buf
                # equal chunks of at most MLP_CHUNK rows: a prompt's rows all take the GEMM path (a short last chunk
                # would take the GEMV kernels, whose rounding differs, so a row would depend on the prompt's length)
                step = ceil_div(t, ceil_div(t, MLP_CHUNK))
                for r in range(0, t, step):
                    n = min(step, t - r)
                    g = _op("silu_mul")(self._linear(y[r:r + n], layer["gate_up"], out=gate_up[:n]), out=act[:n])
                    self._t("silu_mul")
                    self._linear(g, layer["down"], out=delta[r:r + n])
        y, _ = rms_norm(delta, w["norm"], eps=cfg.eps, residual=x, out=(ys, xs[cur]))
        self._t("rms_norm")
        if last_only and t > 1:
            y = y[t - 1:t]
        return self._linear(y, w["lm_head"], out=self._logit_row if (last_only or t == 1) else None)

    def _decode_plans(self) -> list:
        """Bind the decode step once: fixed buffers for every intermediate (x ping-pongs between two residual
        buffers, since rms_norm's sum may not overwrite its own residual input) and one xe2rt.bind plan per op whose
        arguments never change. Per layer: [ln1, qkv, rope_kv, (attention), o, ln2, ffn plans...]. The position
        and the length (position + 1) live in a two-element device array that rope_kv and decode_attention read
        when they run; the attention plans are made per power-of-two bucket of lengths (`_attention`), since the
        split count follows the length, and share one workspace."""
        if self._dec is not None:
            return self._dec
        import xe2rt
        cfg, w, q = self.cfg, self.w, self.queue
        rms_norm, rope_kv, silu_mul = _op("rms_norm"), _op("rope_kv"), _op("silu_mul")
        d, hq, hkv, h = cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.hidden

        buf = self._empty
        xs = (buf(1, h), buf(1, h))  # the residual stream, alternating
        y, delta = buf(1, h), buf(1, h)
        qkv = buf(1, (hq + 2 * hkv) * d)
        qv, kv, vv = (qkv[:, a:b].reshape(1, n, d) for a, b, n in
                      ((0, hq * d, hq), (hq * d, (hq + hkv) * d, hkv), ((hq + hkv) * d, None, hkv)))
        attn = buf(hq, d)
        poslen = buf(2, dtype=np.int32)  # [position, length] of the token a step decodes
        pos = poslen[0:1]
        cur = 0
        layers = []
        fused = self._fuses
        # the folded gate/up GEMV's output, shared by the dense layers like y and delta
        act = buf(1, cfg.intermediate) if any("experts" not in layer for layer in w["layers"]) else None
        for i, layer in enumerate(w["layers"]):
            p = {}
            # ln1 folded into the qkv GEMV where that is one kernel (gemv_w4a16's norm prologue), else its own plan
            if fused(layer["qkv"]):
                norm = (layer["ln1"], cfg.eps)
                deq = self.gemv_dequant
                p["qkv"] = xe2rt.bind(xe2rt.gemv_w4a16, xs[0], layer["qkv"], norm=norm, out=qkv, dequant=deq) \
                    if i == 0 else xe2rt.bind(xe2rt.gemv_w4a16, delta, layer["qkv"], norm=norm, residual=xs[cur],
                                              out=(qkv, xs[1 - cur]), dequant=deq)
            else:
                p["ln1"] = xe2rt.bind(rms_norm, xs[0], layer["ln1"], eps=cfg.eps, out=y) if i == 0 else \
                    xe2rt.bind(rms_norm, delta, layer["ln1"], eps=cfg.eps, residual=xs[cur], out=(y, xs[1 - cur]))
                p["qkv"] = xe2rt.bind(self._linear, y, layer["qkv"], out=qkv)
            cur = cur if i == 0 else 1 - cur
            qk_norm = (layer["q_norm"], layer["k_norm"], cfg.eps) if cfg.qk_norm else None
            p["rope_kv"] = xe2rt.bind(rope_kv, qv, kv, vv, pos, self.k_cache[i], self.v_cache[i],
                                      theta=cfg.rope_theta, scaling=cfg.rope_scaling, qk_norm=qk_norm,
                                      **self._rope_extra)
            p["o"] = xe2rt.bind(self._linear, attn.reshape(1, hq * d), layer["o"], out=delta)
            if "experts" not in layer and fused(layer["gate_up"], silu_mul=True):
                # ln2 and silu_mul folded into the gate/up GEMV (gemv_w4a16's norm= and silu_mul=)
                p["gate_up"] = xe2rt.bind(xe2rt.gemv_w4a16, delta, layer["gate_up"], norm=(layer["ln2"], cfg.eps),
                                          residual=xs[cur], silu_mul=True, out=(act, xs[1 - cur]),
                                          dequant=self.gemv_dequant)
                p["down"] = xe2rt.bind(self._linear, act, layer["down"], out=delta)
                cur = 1 - cur
                layers.append(p)
                continue
            p["ln2"] = xe2rt.bind(rms_norm, delta, layer["ln2"], eps=cfg.eps, residual=xs[cur], out=(y, xs[1 - cur]))
            cur = 1 - cur
            if "experts" in layer:
                p["router"] = xe2rt.bind(self._linear, y, layer["router"])
                p["softmax_topk"] = xe2rt.bind(xe2rt.softmax_topk, p["router"].result, cfg.experts_per_token,
                                               normalize=cfg.norm_topk_prob)
                wt, ids = p["softmax_topk"].result
                if isinstance(layer["experts"], FloatExperts):  # dpnp work as well as launches: called, not bound
                    p["moe_float"] = functools.partial(self._moe, y, layer["experts"], ids, wt, delta)
                else:
                    p["moe_ffn_w4a16"] = xe2rt.bind(xe2rt.moe_ffn_w4a16, y, layer["experts"], ids, wt, out=delta)
            else:
                p["gate_up"] = xe2rt.bind(self._linear, y, layer["gate_up"])
                p["silu_mul"] = xe2rt.bind(silu_mul, p["gate_up"].result)
                p["down"] = xe2rt.bind(self._linear, p["silu_mul"].result, layer["down"], out=delta)
            layers.append(p)
        logits = self._logit_row if self._logit_row is not None else buf(1, cfg.vocab)
        # the final norm stays its own launch: folded into the lm_head GEMV, each of its many work-groups would
        # normalize x again (measured slower: 3256 against 3233 us at 128256 x 2048)
        norm = xe2rt.bind(rms_norm, delta, w["norm"], eps=cfg.eps, residual=xs[cur], out=(y, xs[1 - cur]))
        head = xe2rt.bind(self._linear, y, w["lm_head"], out=logits)
        from ..ops import decode_attention as attention
        attention.build_kernels(q, d, hq // hkv)  # the merge kernel too: a later bucket of lengths may need splits
        self._dec = {"x": xs[0], "poslen": poslen, "q": qv.reshape(hq, d), "attn": attn, "layers": layers,
                     "x_memory": launch.memory_at(xs[0].get_array()),
                     "poslen_memory": launch.memory_at(poslen.get_array()),
                     "embed": w["embed"].get_array(), "row_bytes": h * 2, "host_poslen": np.zeros(2, np.int32),
                     "norm": norm, "head": head, "logits": logits, "attention": {},
                     "attn_ws": buf(attention.workspace_floats(attention.MAX_SPLITS, hq, d), dtype=np.float32)}
        return self._dec

    def _bucket(self, length: int) -> int:
        """The attention plans' bucket of a length: the smallest power of two >= length, at least 64, at most
        max_tokens."""
        return min(self.max_tokens, max(64, 1 << (length - 1).bit_length()))

    def _attention(self, i: int, length: int):
        """Layer i's decode attention plan for a step of this length: bound once per bucket of lengths (_bucket),
        the length read from the device."""
        dec = self._dec
        bucket = self._bucket(length)
        plan = dec["attention"].get((i, bucket))
        if plan is None:
            import xe2rt
            from ..ops import decode_attention as attention
            plan = dec["attention"][(i, bucket)] = xe2rt.bind(
                attention._with_workspace, dec["q"], self.k_cache[i], self.v_cache[i], dec["poslen"][1:2],
                dec["attn_ws"], max_length=bucket, out=dec["attn"])
        return plan

    def _step_plans(self, length: int):
        """(kernel family, plan) of a decode step of this length, in the order they run: per layer its plans with
        the attention of the length's bucket after rope_kv, then the final norm and the lm_head."""
        dec = self._dec
        for i, p in enumerate(dec["layers"]):
            for name, plan in p.items():
                yield _PLAN_FAMILY.get(name, name), plan
                if name == "rope_kv":
                    yield "decode_attention", self._attention(i, length)
        yield "rms_norm", dec["norm"]
        yield "gemv", dec["head"]

    def _step_graph(self, length: int, greedy: bool):
        """The decode step of this length's bucket as one native xe2rt.graph: every layer's plans, the final norm and
        the lm_head, and with `greedy` the argmax's two launches; None while profile_step times each op, when
        native graphs are off (XE2RT_NATIVE_GRAPH=0, `native_graphs`), or where the graph would not be one command
        buffer (a step that is not all plans, a queue or device without command buffers): the step then calls its
        plans one by one, which is what a graph replaying launch by launch would do."""
        if self.timer is not None or not self.native_graphs:
            return None
        greedy = bool(greedy) and self._arg_rows > 0
        key = (self._bucket(length), greedy)
        graph = self._graphs.get(key, False)
        if graph is False:
            import xe2rt
            plans = [plan for _, plan in self._step_plans(length)]
            if greedy:
                plans += self._argmax_plans()[:2]
            graph = None
            if all(isinstance(plan, xe2rt.Plan) for plan in plans):  # a float-experts MoE step calls dpnp work
                graph = xe2rt.graph(plans)
                graph = graph if graph.native else None
            self._graphs[key] = graph
        return graph

    def _decode(self, token: int, start: int, greedy: bool = False, wait: bool = True):
        """One decode step (token at position `start` > 0, the cache holding [0, start)): logits fp16 [1, V] in a
        fixed buffer. Through the step's native graph when there is one (the greedy argmax included when `greedy`;
        waited for unless `wait` is False, and then the caller waits with self.queue.wait()), else through the
        bound plans, queued without waiting."""
        self._argmax_done = False
        dec = self._decode_plans()
        # the embedding row into the fixed residual buffer, [position, length] (read by rope_kv and the attention on
        # the device) from a fixed host array: two queue.memcpy_async, about 10 us each against about 100 us per
        # dpnp slice assignment
        q = self.queue
        manager = dpctl.utils.SequentialOrderManager[q]
        deps = [] if q.is_in_order else manager.submitted_events
        host_poslen = dec["host_poslen"]
        host_poslen[0], host_poslen[1] = start, start + 1  # the previous step's copy completed: its token was read
        events = [q.memcpy_async(dec["x_memory"], launch.memory_at(dec["embed"][token]), dec["row_bytes"],
                                 deps),
                  q.memcpy_async(dec["poslen_memory"], host_poslen, host_poslen.nbytes, deps)]
        for event in events:
            manager.add_event_pair(event, event)
        self._t("embedding")
        graph = self._step_graph(start + 1, greedy)
        if graph is not None:
            graph()
            if wait:
                graph.wait()  # on the CPU device the waiting thread helps run the step (xe2rt.graphs)
            self._argmax_done = bool(greedy) and self._arg_rows > 0
            return dec["logits"]
        for family, plan in self._step_plans(start + 1):
            plan()
            self._t(family)
        return dec["logits"]

    # ----------------------------------------------------------------------------------------------- public
    def logits(self, ids) -> np.ndarray:
        """float32 [T, V]: the logits of every prompt position, computed from an empty cache."""
        a = self._check_ids(ids)
        with self._exclusive("logits"):
            tok = dpnp.asarray(a, sycl_queue=self.queue)
            return dpnp.asnumpy(self._forward(tok, 0, False)).astype(np.float32)

    @contextlib.contextmanager
    def _exclusive(self, op: str):
        """One call at a time per model: a call made while another runs (from generate's stream callback, or another
        thread) would overwrite the KV cache the running one decodes from."""
        if self._busy is not None:
            raise InputError(f"{op}: this model is in the middle of {self._busy} (called from its stream callback, or "
                             f"from another thread); its KV cache belongs to that call: call {op} after it returns, "
                             f"or load a second model")
        self._busy = op
        try:
            yield
        finally:
            self._busy = None

    def generate(self, ids, max_new_tokens: int, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed=None, stop=None, stream=None, return_logits: bool = False):
        """New tokens (np.int32 [n], n <= max_new_tokens; generation ends after a token in `stop`). Greedy at
        temperature 0; otherwise softmax(logits / temperature) restricted to the top_k most likely (0: all) and the
        smallest set whose probability reaches top_p. stream(token_id) is called as each token is chosen."""
        a = self._check_ids(ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise InputTypeError(f"generate: max_new_tokens must be an int, got {max_new_tokens!r}")
        if max_new_tokens < 0:
            raise InputError(f"generate: max_new_tokens must be >= 0, got {max_new_tokens}")
        if a.size + max_new_tokens > self.max_tokens:
            raise InputError(f"generate: prompt ({a.size} tokens) + max_new_tokens ({max_new_tokens}) = "
                             f"{a.size + max_new_tokens} exceeds max_tokens = {self.max_tokens} (the KV cache size "
                             f"given to load)")
        t = real_temperature("generate", temperature, "a real number >= 0")
        if not 0 <= t <= MAX_TEMPERATURE:  # NaN fails too
            raise InputError(f"generate: temperature must be a number in [0, 2^120] (0: greedy; xe2rt.softmax_stats' "
                             f"largest), got {validate.shown(temperature)}")
        temperature = t
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 0 <= top_k:
            raise InputError(f"generate: top_k must be an int >= 0 (0: no limit), got {top_k!r}")
        if isinstance(top_p, (bool, np.bool_)) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1:
            raise InputError(f"generate: top_p must be in (0, 1], got {top_p!r}")
        stops = set()
        if stop is not None:
            # a 0-d array (numpy or dpnp) is one id, as a scalar is
            single = isinstance(stop, (int, np.integer, np.bool_)) or getattr(stop, "ndim", None) == 0
            try:
                items = [stop] if single else list(stop)
                if any(isinstance(s, (bool, np.bool_)) or getattr(s, "dtype", None) == np.bool_ for s in items):
                    raise TypeError  # True would read as token id 1
                stops = {operator.index(s) for s in items}
            except (TypeError, IndexError):  # dpnp's __index__ of a non-integer array raises IndexError
                raise InputTypeError(f"generate: stop must be a token id or an iterable of token ids (integers, not "
                                     f"bools), got {validate.shown(stop)}") from None
        if stream is not None and not callable(stream):
            raise InputTypeError(f"generate: stream must be callable (called with each token id), got "
                                 f"{type(stream).__name__}")
        if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            raise InputError(f"generate: seed must be None or an int >= 0 (numpy's default_rng seed), got {seed!r}")
        with self._exclusive("generate"):
            rng = np.random.default_rng(seed)
            out, kept = [], []
            self.step_seconds = []
            if max_new_tokens == 0:
                return (np.zeros(0, np.int32), np.zeros((0, self.cfg.vocab), np.float32)) if return_logits else \
                    np.zeros(0, np.int32)
            t0 = time.perf_counter()
            logits = self._forward(dpnp.asarray(a, sycl_queue=self.queue), 0, True)
            pos = a.size
            while True:
                if return_logits:
                    kept.append(dpnp.asnumpy(logits[0]).astype(np.float32))
                token = self._choose(logits, temperature, top_k, top_p, rng)  # the one readback of a step
                t1 = time.perf_counter()
                self.step_seconds.append(t1 - t0)
                t0 = t1
                out.append(token)
                if stream is not None:
                    stream(token)
                if len(out) == max_new_tokens or token in stops:
                    break
                logits = self._decode(token, pos, greedy=np.float32(temperature) == 0)
                pos += 1
            tokens = np.asarray(out, np.int32)
            return (tokens, np.stack(kept)) if return_logits else tokens

    def _choose(self, logits, temperature, top_k, top_p, rng) -> int:
        """The next token, chosen on the device from logits [1, V]; only the choice is read back."""
        if np.float32(temperature) == 0:  # 0, or a temperature below float32's smallest: greedy (the limit)
            if self._arg_rows and logits is self._logit_row:
                rows, top, idx_memory, row_memory = self._argmax_plans()
                if self._argmax_done:  # the step's graph ran them
                    self._argmax_done = False
                else:
                    rows()
                    top()
                self._t("argmax")
                host_row, host_idx = self._host_argmax
                launch.read_back([(row_memory, host_row), (idx_memory, host_idx)], self.queue)
                r = int(host_row[0])
                return r * ARG_ROW + int(host_idx[r])
            return int(dpnp.asnumpy(dpnp.argmax(logits[0])))
        u = min(np.float32(rng.random()), np.float32(1 - 2**-24))  # one draw per token; below 1 also in fp32
        t = np.float32(temperature)
        if self._arg_rows and logits is self._logit_row and t >= np.finfo(np.float32).tiny:
            token = self._sample_rows(float(t), top_k, top_p, float(u))
            if token is not None:
                return token if token >= 0 else int(dpnp.asnumpy(dpnp.argmax(logits[0])))
        else:
            m = float(dpnp.asnumpy(dpnp.max(logits[0])))
            if np.isnan(m) or m == np.inf:  # a NaN or +inf logit: the token greedy decoding picks (the limit)
                return int(dpnp.asnumpy(dpnp.argmax(logits[0])))
            if top_k == 0 and top_p >= 1:  # the categorical in vocabulary order: no sort needed
                p = self._exp_shifted(logits[0].astype(np.float32), np.float32(m), t)
                return int(dpnp.asnumpy(self._inverse_cdf(dpnp.cumsum(p), u))[0])
        row = logits[0].astype(np.float32)
        order = dpnp.argsort(row, descending=True)  # the order does not depend on the temperature
        if top_k:
            order = order[:top_k]
        vals = row[order]
        p = self._nucleus(self._exp_shifted(vals, vals[0], t), top_p)
        return int(dpnp.asnumpy(order[self._inverse_cdf(dpnp.cumsum(p), u)])[0])

    def _argmax_plans(self) -> tuple:
        """(rows plan, top plan, device memory of the row's index, of the row maxima's index): the greedy argmax of
        the padded logits row in two xe2rt.topk launches, bound at first use."""
        if self._argmax is None:
            import xe2rt
            rows = xe2rt.bind(xe2rt.topk, self._logit_buf.reshape(self._arg_rows, ARG_ROW), 1)
            top = xe2rt.bind(xe2rt.topk, rows.result[0].reshape(1, self._arg_rows), 1)
            # the memory objects the readback copies from (the plans return the same arrays every call)
            self._argmax = (rows, top, launch.memory_at(rows.result[1].get_array()),
                            launch.memory_at(top.result[1].get_array()))
        return self._argmax

    def _sample_rows(self, t: float, top_k: int, top_p: float, u: float) -> int | None:
        """A sampled token from the logits buffer's rows of ARG_ROW: the device makes the one pass over the
        vocabulary (xe2rt.softmax_stats: each row's maximum m_r and sum s_r of exp((x - m_r) / t); with top_k or
        top_p also xe2rt.topk: each row's CANDIDATES largest logits), and the host chooses in float64 from what it
        reads back (8 bytes a row, plus 96 with candidates: 26 KB for 128K tokens). With M the largest m_r, row r
        holds the mass w_r = s_r exp((m_r - M) / t) of the categorical softmax(logits / t).
          - temperature alone: the draw picks the row by the w_r, then that row's ARG_ROW logits are read back and the
            rest of the draw picks the token in it;
          - top_k / top_p: no token outside the candidates exceeds `floor`, the largest of the rows' last candidates,
            so when the top_k set (with top_k) or the kept top_p prefix (without) ends above it, the candidates hold
            exactly the tokens a full sort keeps, and the choice is the same; the top_p mass without top_k is the
            vocabulary's, the sum of the w_r. When the rows' candidates cannot show it, CANDIDATES per window of 128
            are tried (one more topk launch and readback) before giving up.
        -1 when a logit is NaN or +inf, or all are -inf (the caller then picks as greedy decoding does); None when the
        candidates cannot be shown to hold the kept set (a flat distribution, ties at the floor): the caller sorts."""
        import xe2rt
        rows = self._arg_rows
        grid = self._logit_buf.reshape(rows, ARG_ROW)
        if self._stats is None or self._stats[0] != t:
            plan = xe2rt.bind(xe2rt.softmax_stats, grid, temperature=t)
            self._stats = (t, plan, launch.memory_at(plan.result.get_array()), np.empty((rows, 2), np.float32))
        _, stats, stats_memory, host_stats = self._stats
        stats()
        pairs = [(stats_memory, host_stats)]
        want_candidates = bool(top_k) or top_p < 1
        if want_candidates:
            pairs += self._candidate_plan(ARG_ROW)
        self._t("sample")
        launch.read_back(pairs, self.queue)
        m, s = host_stats[:, 0].astype(np.float64), host_stats[:, 1].astype(np.float64)
        big = m.max()
        if np.isnan(s).any() or np.isnan(m).any() or big == np.inf or big == -np.inf:
            return -1
        with np.errstate(under="ignore"):
            w = s * np.exp((m - big) / t)
        if not want_candidates:
            cw = np.cumsum(w)
            r = _inverse_cdf_host(w, u)
            rest = min(max((u * cw[-1] - (cw[r - 1] if r else 0.0)) / w[r], 0.0), 1.0)
            row = np.empty(ARG_ROW, np.float16)
            launch.read_back([(launch.memory_at(grid[r].get_array()), row)], self.queue)
            x = row.astype(np.float64)
            with np.errstate(invalid="ignore", under="ignore"):
                e = np.where(x == m[r], 1.0, np.exp((x - m[r]) / t))
            return r * ARG_ROW + _inverse_cdf_host(e, rest)
        for width in CANDIDATE_WINDOWS:
            if width != ARG_ROW:  # the next tier: CANDIDATES per narrower window, a lower floor
                launch.read_back(self._candidate_plan(width), self.queue)
            _, _, host_vals, host_idx = self._candidates[width]
            token = self._from_candidates(host_vals, host_idx, width, w.sum(), big, t, top_k, top_p, u)
            if token is not None:
                return token
        return None

    def _candidate_plan(self, width: int) -> list:
        """Launch the bound xe2rt.topk plan of CANDIDATES per window of `width` logits (made at the first use) and
        return its (device memory, host array) pairs for launch.read_back."""
        import xe2rt
        if width not in self._candidates:
            plan = xe2rt.bind(xe2rt.topk, self._logit_buf.reshape(-1, width), CANDIDATES)
            n = self._logit_buf.shape[0] // width
            self._candidates[width] = (plan, [launch.memory_at(a.get_array()) for a in plan.result],
                                       np.empty((n, CANDIDATES), np.float16), np.empty((n, CANDIDATES), np.int32))
        plan, memory, host_vals, host_idx = self._candidates[width]
        plan()
        return [(memory[0], host_vals), (memory[1], host_idx)]

    def _from_candidates(self, host_vals, host_idx, width: int, total: float, big: float, t: float, top_k: int,
                         top_p: float, u: float) -> int | None:
        """The top_k / top_p choice from the CANDIDATES largest logits of each window of `width` (see _sample_rows),
        or None when they cannot be shown to hold the kept set. total: the vocabulary's mass relative to big."""
        vals = host_vals.astype(np.float64)
        ids = host_idx + np.arange(0, vals.shape[0] * width, width, dtype=np.int32)[:, None]
        floor = vals[:, -1].max()
        real = ids < self.cfg.vocab
        v, i = vals[real], ids[real]
        order = np.lexsort((i, -v))  # value descending, the lower id first on ties (topk's rule)
        v, i = v[order], i[order]
        if top_k:
            if top_k > v.size:
                return None
            v, i = v[:top_k], i[:top_k]
        with np.errstate(under="ignore"):
            p = np.exp((v - big) / t)
        kept = v.size
        if top_p < 1:
            mass = p.sum() if top_k else total
            kept = int(np.count_nonzero(np.cumsum(p) - p < top_p * mass))  # the mass before a token short of top_p
            if kept == v.size and not top_k:
                return None
            p = p[:kept]
        if not (v[v.size - 1 if top_k else kept - 1] > floor):
            return None
        return int(i[_inverse_cdf_host(p, u)])

    def _vm(self, fn, *args):
        """fn(*args) from a drained queue, for dpnp's functions that run on oneMKL VM on the CPU device (add,
        subtract, multiply, divide, exp): VM waits for its dependencies holding the GIL, and a dependency may be
        the host task by which an earlier dpnp call releases its arguments, which needs the GIL: a deadlock (seen
        with dpnp 0.20, dpctl 0.22.1, once per tens to hundreds of sampled tokens; xe2rt._compat.before_vm)."""
        _compat.before_vm(self.queue)
        return fn(*args)

    def _exp_shifted(self, x, top, t):
        """exp((x - top) / t) in fp32: (x - top) / t <= 0 for top the largest, so no overflow at any temperature
        (logits / 1e-39 was inf, then NaN)."""
        return self._vm(dpnp.exp, self._vm(dpnp.divide, self._vm(dpnp.subtract, x, top), t))

    def _nucleus(self, p, top_p: float):
        """p with the tokens past the top_p prefix zeroed, for p in descending order of the logits (already cut to
        the top_k when top_k is set, so the mass is the top_k's, as transformers applies top_p after top_k; else the
        whole vocabulary's). A top_p below fp32's smallest normal (0 in fp32) would keep nothing, so it is raised to
        it: the most likely token stays, as with any small top_p."""
        if top_p >= 1:
            return p
        c = dpnp.cumsum(p)
        limit = self._vm(dpnp.multiply, c[-1], np.float32(max(top_p, np.finfo(np.float32).tiny)))
        keep = self._vm(dpnp.subtract, c, p) < limit  # the mass before a token is still short of top_p
        return dpnp.where(keep, p, 0)

    def _inverse_cdf(self, cdf, u):
        """The index i with cdf[i - 1] <= u cdf[-1] < cdf[i]: a one-element index array. Never past the last token
        of nonzero probability, even when u cdf[-1] rounds to cdf[-1]."""
        total = cdf[-1:]
        j = dpnp.searchsorted(cdf, self._vm(dpnp.multiply, total, u), side="right")
        return dpnp.minimum(j, dpnp.searchsorted(cdf, total, side="left"))

    # ----------------------------------------------------------------------------------------------- tools
    def reference_weights(self) -> dict:
        """The weights this model multiplies with, as float64 numpy by checkpoint name (for
        xe2rt.reference.llm.forward); quantized ones dequantized exactly."""
        cfg, w = self.cfg, self.w
        d, hq, hkv = cfg.head_dim, cfg.heads, cfg.kv_heads

        def f(x):
            if isinstance(x, (QuantizedW4, QuantizedW8)):
                return np.asarray(x.to_host().dequantize(np.float64))
            return dpnp.asnumpy(x).astype(np.float64)

        out = {"model.embed_tokens.weight": f(w["embed"]), "model.norm.weight": f(w["norm"]),
               "lm_head": f(w["lm_head"])}
        for i, layer in enumerate(w["layers"]):
            p = f"model.layers.{i}"
            out[f"{p}.input_layernorm.weight"] = f(layer["ln1"])
            out[f"{p}.post_attention_layernorm.weight"] = f(layer["ln2"])
            if cfg.qk_norm:
                out[f"{p}.self_attn.q_norm.weight"] = f(layer["q_norm"])
                out[f"{p}.self_attn.k_norm.weight"] = f(layer["k_norm"])
            qkv = f(layer["qkv"])
            out[f"{p}.self_attn.q_proj"] = qkv[:hq * d]
            out[f"{p}.self_attn.k_proj"] = qkv[hq * d:(hq + hkv) * d]
            out[f"{p}.self_attn.v_proj"] = qkv[(hq + hkv) * d:]
            out[f"{p}.self_attn.o_proj"] = f(layer["o"])
            if "experts" in layer:
                out[f"{p}.mlp.gate.weight"] = f(layer["router"])
                gu, dn = layer["experts"].to_host().dequantize()
                m = cfg.moe_intermediate
                for e in range(cfg.num_experts):
                    out[f"{p}.mlp.experts.{e}.gate_proj"] = gu[e, :m].astype(np.float64)
                    out[f"{p}.mlp.experts.{e}.up_proj"] = gu[e, m:].astype(np.float64)
                    out[f"{p}.mlp.experts.{e}.down_proj"] = dn[e].astype(np.float64)
            else:
                gu = f(layer["gate_up"])
                out[f"{p}.mlp.gate_proj"], out[f"{p}.mlp.up_proj"] = np.split(gu, 2)
                out[f"{p}.mlp.down_proj"] = f(layer["down"])
        return out

    def profile_step(self, ids, steps: int = 4) -> dict:
        """Seconds per kernel family of a decode step after the prompt `ids`, each op timed on its own (the queue
        waited for after every op, so the parts add up to more than an unsynchronized step)."""
        a = self._check_ids(ids)
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise InputError(f"profile_step: steps must be an int >= 1, got {steps!r}")
        if a.size + steps > self.max_tokens:
            raise InputError(f"profile_step: prompt + steps exceeds max_tokens = {self.max_tokens}")
        with self._exclusive("profile_step"):
            times: dict = {}
            logits = self._forward(dpnp.asarray(a, sycl_queue=self.queue), 0, True)
            token = self._choose(logits, 0.0, 0, 1.0, None)
            self.queue.wait()
            last = [time.perf_counter()]

            def timer(family):
                self.queue.wait()
                now = time.perf_counter()
                times[family] = times.get(family, 0.0) + now - last[0]
                last[0] = now

            self._decode_plans()  # bound before timing: binding is a one-off, not part of a step
            self.queue.wait()
            last[0] = time.perf_counter()
            self.timer = timer
            try:
                for s in range(steps):
                    logits = self._decode(token, a.size + s)
                    token = self._choose(logits, 0.0, 0, 1.0, None)
                    timer("argmax readback")
            finally:
                self.timer = None
            return {k: v / steps for k, v in times.items()}

    def decode(self, tokens) -> str:
        if self.tokenizer is None:
            return " ".join(str(int(t)) for t in tokens)
        return self.tokenizer.decode([int(t) for t in tokens])

    def encode(self, text: str) -> np.ndarray:
        if self.tokenizer is None:
            raise InputError("this model folder has no tokenizer.json: pass token ids (--prompt-ids)")
        return np.asarray(self.tokenizer.encode(text).ids, np.int32)
