"""Streaming a decoder checkpoint into the runner's weight layout, one layer at a time.

Per layer (what the runner multiplies with; host objects are placed on the device by `place` as soon as they are
built, so the host holds at most one layer's temporaries):
  ln1, ln2        float16 [H]              input_layernorm, post_attention_layernorm
  q_norm, k_norm  float16 [D]              Qwen3 only
  qkv             [(Hq + 2 Hkv) D, H]      q_proj, k_proj, v_proj rows stacked (one GEMV / GEMM for the three)
  o               [H, Hq D]
  gate_up         [2 I, H]                 gate rows then up rows (silu_mul's [gate | up] halves)
  down            [H, I]
  router          float16 [E, H]           MoE layers: mlp.gate
  experts         FloatExperts or          MoE layers: float experts as stored (weights "auto" / "fp16"), or
                  QuantizedW4Experts       W4 for xe2rt's MoE FFN kernel (4-bit checkpoints; weights="w4"
                                           quantizes float experts with group_size on load)
Linears are float16 numpy [N, K], QuantizedW4 or QuantizedW8 (xe2rt.quant), chosen by `weights` (see
checkpoint.load_linear). Stacking quantized rows keeps the codes as they are (one group size per stack).
"""
from __future__ import annotations

import ctypes
import re
import sys

import numpy as np

from ..errors import InputError
from ..quant import GROUP_SIZES, QuantizedW4, QuantizedW8, SYMMETRIC_ZERO, quantize_w4, quantize_w8
from ..quant_experts import QuantizedW4Experts
from .checkpoint import (Checkpoint, CheckpointError, ModelConfig, UnsupportedModelError, load_linear,
                         quantized_kind)


def stack_rows(parts: list, what: str):
    """One linear from row blocks of the same kind (float16, W4 with one group size, or W8)."""
    kinds = {type(p) for p in parts}
    if len(kinds) != 1:
        raise CheckpointError(f"{what}: its projections are stored in different formats "
                              f"({sorted(k.__name__ for k in kinds)}); they must share one")
    first = parts[0]
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, QuantizedW8):
        return QuantizedW8(np.concatenate([p.qweight for p in parts]), np.concatenate([p.scales for p in parts]))
    sizes = {p.group_size for p in parts}
    if len(sizes) != 1:
        raise CheckpointError(f"{what}: its projections have different group sizes {sorted(sizes)}")
    zeros = None
    if any(p.zeros is not None for p in parts):
        zeros = np.concatenate([p.zero_points() for p in parts])
        zeros = None if (zeros == SYMMETRIC_ZERO).all() else zeros
    return QuantizedW4(np.concatenate([p.packed for p in parts]), np.concatenate([p.scales for p in parts]), zeros,
                       first.group_size)


def _heap_trimmer():
    """glibc's malloc_trim, or None (another C library, another OS). Freed numpy temporaries below glibc's mmap
    threshold (which grows to 32 MB once a large array is freed) stay in the heap, resident, until trimmed: loading a
    model makes many of them, so without trimming they count against the load's peak RSS."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _heap_trimmer()
TRIM_AFTER = 1 << 24  # weights of a linear after which the load trims the heap at once (else at the layer's end)


def release_free_heap() -> None:
    """Return the C heap's free pages to the OS (glibc; nothing elsewhere)."""
    if _TRIM is not None:
        _TRIM(0)


def _progress(total_bytes: int, label: str):
    try:
        from tqdm import tqdm
    except ImportError:  # the models extra brings tqdm; without it, loads are silent
        return None
    return tqdm(total=total_bytes, unit="B", unit_scale=True, desc=label, file=sys.stderr, delay=1.0, leave=False)


def _head_mode(cfg: ModelConfig, weights: str) -> str:
    """How lm_head is held: it follows `weights`; with "auto" it is held as the files store it (a float lm_head, or a
    tied one, stays float16; a quantized one stays W4), as transformers runs a 4-bit checkpoint: GPTQ and AWQ
    checkpoints keep lm_head float whether or not their config names it."""
    if weights != "auto":
        return weights
    return "fp16" if cfg.quant.method is None else "auto"


def load_weights(folder, weights: str = "auto", group_size: int = 128, *, place=lambda x: x, progress: bool = True,
                 cfg: ModelConfig | None = None):
    """(cfg, dict) with "embed", "norm", "lm_head" and "layers" (a list of per-layer dicts, layout above); every
    array / quantized weight passed through `place` as soon as it is built."""
    from .checkpoint import read_config
    cfg = cfg or read_config(folder)
    ckpt = Checkpoint(folder)
    group_size = load_group_size(cfg, weights, group_size)
    h, d, hq, hkv = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads
    bar = _progress(ckpt.nbytes, f"loading {folder}") if progress else None
    last = [0]

    def tick(trim: bool = True):
        if trim:  # what the host-side temporaries of the last tensors leave resident
            release_free_heap()
        if bar is not None:
            bar.update(ckpt.bytes_read - last[0])
            last[0] = ckpt.bytes_read

    def linear(prefix, n, k, mode=weights):
        w = load_linear(ckpt, cfg, prefix, n, k, mode, group_size)
        # trimming after every small linear (an MoE layer has hundreds) gives pages back that the next one faults in
        # again: 1.3 -> 2.3 s for a 128-expert model; after a large one (an lm_head) and every layer it pays
        tick(trim=n * k >= TRIM_AFTER)
        return w

    try:
        _check_names(ckpt, cfg)
        _check_group_size(ckpt, cfg, weights, group_size)
        embed_kind = quantized_kind(ckpt, "model.embed_tokens")
        if embed_kind != "float":
            raise UnsupportedModelError(f"{folder}: model.embed_tokens is stored quantized; supported: float "
                                        f"embeddings")
        out = {"layers": []}
        for i in range(cfg.layers):
            p = f"model.layers.{i}"
            layer = {"ln1": place(ckpt.fp16(f"{p}.input_layernorm.weight", (h,))),
                     "ln2": place(ckpt.fp16(f"{p}.post_attention_layernorm.weight", (h,)))}
            if cfg.qk_norm:
                layer["q_norm"] = place(ckpt.fp16(f"{p}.self_attn.q_norm.weight", (d,)))
                layer["k_norm"] = place(ckpt.fp16(f"{p}.self_attn.k_norm.weight", (d,)))
            qkv = [linear(f"{p}.self_attn.{name}_proj", n, h) for name, n in (("q", hq * d), ("k", hkv * d),
                                                                              ("v", hkv * d))]
            layer["qkv"] = place(stack_rows(qkv, f"{p}.self_attn"))
            del qkv
            layer["o"] = place(linear(f"{p}.self_attn.o_proj", h, hq * d))
            if cfg.is_moe_layer(i):
                layer["router"] = place(ckpt.fp16(f"{p}.mlp.gate.weight", (cfg.num_experts, h)))
                layer["experts"] = place(_experts(ckpt, cfg, p, linear, group_size, weights))
            else:
                m = cfg.intermediate
                layer["gate_up"] = place(stack_rows([linear(f"{p}.mlp.gate_proj", m, h),
                                                     linear(f"{p}.mlp.up_proj", m, h)], f"{p}.mlp"))
                layer["down"] = place(linear(f"{p}.mlp.down_proj", h, m))
            out["layers"].append(layer)
            tick()
        out["norm"] = place(ckpt.fp16("model.norm.weight", (h,)))
        head_mode = _head_mode(cfg, weights)
        if cfg.tie_embeddings and "lm_head.weight" in ckpt and not _same(ckpt, "lm_head.weight",
                                                                           "model.embed_tokens.weight"):
            raise CheckpointError(f"{folder}: config.json says tie_word_embeddings true but lm_head.weight differs "
                                  f"from model.embed_tokens.weight")
        streamed = getattr(place, "rows", None)
        if streamed is not None:
            # the largest tensors go to the device in row slices: no whole host copy beside the device one
            out["embed"] = streamed((cfg.vocab, h), ckpt.fp16_rows("model.embed_tokens.weight", (cfg.vocab, h)))
            tick()
            if cfg.tie_embeddings and head_mode in ("w4", "w8"):  # quantized from the embeddings, slice by slice
                if bar is not None:  # the embeddings are read a second time: the bar's total grows by them
                    t = ckpt.tensors["model.embed_tokens.weight"]
                    bar.total += t.end - t.begin
                    bar.refresh()
                out["lm_head"] = place(linear("model.embed_tokens", cfg.vocab, h, head_mode))
            elif cfg.tie_embeddings:
                out["lm_head"] = out["embed"]
            elif quantized_kind(ckpt, "lm_head") == "float" and head_mode in ("auto", "fp16"):
                out["lm_head"] = streamed((cfg.vocab, h), ckpt.fp16_rows("lm_head.weight", (cfg.vocab, h)))
            else:
                out["lm_head"] = place(linear("lm_head", cfg.vocab, h, head_mode))
        else:
            embed = ckpt.fp16("model.embed_tokens.weight", (cfg.vocab, h))
            tick()
            if cfg.tie_embeddings:
                if head_mode == "w4":
                    head = quantize_w4(embed, group_size=group_size)
                elif head_mode == "w8":
                    head = quantize_w8(embed)
                else:
                    head = embed
            else:
                head = linear("lm_head", cfg.vocab, h, head_mode)
            out["embed"] = place(embed)
            del embed
            out["lm_head"] = place(head)
            del head
        tick()
        _check_all_used(ckpt, cfg)
    finally:
        ckpt.close()
        if bar is not None:
            bar.close()
    return cfg, out


def load_group_size(cfg: ModelConfig, weights: str, group_size: int) -> int:
    """The group size of W4 quantization on load: `group_size`, except that with weights="auto" a 4-bit checkpoint's
    float experts are quantized at the checkpoint's own group size, like its other layers (a g64 checkpoint whose
    hidden size 128 does not divide loads with the default arguments)."""
    own = cfg.quant.group_size
    return own if weights == "auto" and cfg.quant.method and own in GROUP_SIZES else group_size


def _check_group_size(ckpt: Checkpoint, cfg: ModelConfig, weights: str, g: int) -> None:
    """Before anything is read: every float linear that W4 quantization on load will group has a K that g divides
    (quantize_w4 would refuse it only after the layers before it were loaded, without naming the tensor)."""
    head = _head_mode(cfg, weights) == "w4"
    linears = []
    if weights == "w4":
        for i in range(cfg.layers):
            p = f"model.layers.{i}"
            names = [("self_attn.q_proj", cfg.hidden), ("self_attn.k_proj", cfg.hidden),
                     ("self_attn.v_proj", cfg.hidden), ("self_attn.o_proj", cfg.heads * cfg.head_dim)]
            if not cfg.is_moe_layer(i):  # experts: hidden and moe_intermediate_size are multiples of 128
                names += [("mlp.gate_proj", cfg.hidden), ("mlp.up_proj", cfg.hidden),
                          ("mlp.down_proj", cfg.intermediate)]
            linears += [(f"{p}.{name}", k, quantized_kind(ckpt, f"{p}.{name}") == "float") for name, k in names]
    linears.append(("lm_head", cfg.hidden, head and (cfg.tie_embeddings or quantized_kind(ckpt, "lm_head") == "float")))
    for prefix, k, quantized_on_load in linears:
        if quantized_on_load and k % g:
            fits = [s for s in GROUP_SIZES if k % s == 0]
            raise InputError(f"load: group_size {g} does not divide K = {k} of {prefix}, which weights={weights!r} "
                             f"quantizes to W4 on load; group sizes that divide it: {fits or 'none'}"
                             + ("" if fits else " (use weights='fp16' or 'w8')"))


def _check_names(ckpt: Checkpoint, cfg: ModelConfig) -> None:
    """Before anything is read: tensors of layers past num_hidden_layers, linear biases (the supported
    architectures have none; all-zero ones, which some exporters write, are accepted and ignored), and a
    quantization_config over files that hold no quantized tensor."""
    for name in sorted(ckpt.tensors):
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= cfg.layers:
            raise CheckpointError(f"{ckpt.folder}: tensor {name!r} belongs to layer {m.group(1)}, but config.json "
                                  f"says num_hidden_layers = {cfg.layers}: the config disagrees with the tensors")
        if name.endswith(".bias") and np.any(ckpt.raw(name) != 0):
            raise UnsupportedModelError(f"{ckpt.folder}: tensor {name!r} holds nonzero biases; {cfg.architecture} "
                                        f"as xe2rt runs it has no linear biases (attention_bias and mlp_bias false)")
    if cfg.quant.method and not any(name.endswith((".qweight", ".weight_packed")) for name in ckpt.tensors):
        raise CheckpointError(f"{ckpt.folder}: config.json's quantization_config says {cfg.quant.method!r}, but no "
                              f"tensor is stored quantized (no .qweight or .weight_packed): the files are a float "
                              f"checkpoint; remove quantization_config from config.json, or load the quantized files")


def _check_all_used(ckpt: Checkpoint, cfg: ModelConfig) -> None:
    """After loading: every stored tensor was used, or the config describes another model than the files."""
    unused = ckpt.unused()
    if unused:
        more = f" and {len(unused) - 5} more" if len(unused) > 5 else ""
        raise CheckpointError(f"{ckpt.folder}: {len(unused)} stored tensors are not used by {cfg.architecture} as "
                              f"config.json describes it: {', '.join(map(repr, unused[:5]))}{more}; the config "
                              f"disagrees with the tensors")


def _same(ckpt: Checkpoint, a: str, b: str) -> bool:
    """Two float tensors hold the same values (compared slice by slice)."""
    if ckpt.info(a).shape != ckpt.info(b).shape:
        return False
    return all(np.array_equal(x, y) for (_, x), (_, y) in zip(ckpt.fp16_rows(a), ckpt.fp16_rows(b)))


class FloatExperts:
    """A MoE layer's experts held in float16, as a float checkpoint stores them (weights "auto" / "fp16"): gate_up
    [E, 2 I, H] (each expert's gate rows, then its up rows) and down [E, H, I]. xe2rt.models.llm runs them exactly
    with the fp16 GEMV / GEMM kernels (every expert, weighted by the routing: DecoderLM._moe); the W4 MoE kernel
    takes QuantizedW4Experts (weights="w4", or a 4-bit checkpoint)."""

    def __init__(self, gate_up, down, num_experts: int):
        self.gate_up, self.down, self.num_experts = gate_up, down, int(num_experts)

    @property
    def nbytes(self) -> int:
        return int(self.gate_up.nbytes) + int(self.down.nbytes)

    def to_device(self, queue) -> "FloatExperts":
        import dpnp
        return FloatExperts(dpnp.asarray(self.gate_up, sycl_queue=queue), dpnp.asarray(self.down, sycl_queue=queue),
                            self.num_experts)

    def to_host(self) -> "FloatExperts":
        import dpnp
        host = [a if isinstance(a, np.ndarray) else dpnp.asnumpy(a) for a in (self.gate_up, self.down)]
        return FloatExperts(*host, self.num_experts)

    def dequantize(self):
        """(gate_up, down) as numpy float16 arrays (the weights themselves: nothing to dequantize)."""
        host = self.to_host()
        return host.gate_up, host.down


def _experts(ckpt: Checkpoint, cfg: ModelConfig, p: str, linear, group_size: int, weights: str):
    """The experts of MoE layer p: FloatExperts when every expert is stored float and weights is "auto" or "fp16" (or
    weights is "fp16": 4-bit experts dequantized), else QuantizedW4Experts (float ones quantized with group_size)."""
    h, m, e = cfg.hidden, cfg.moe_intermediate, cfg.num_experts
    names = [f"{p}.mlp.experts.{x}.{n}" for x in range(e) for n in ("gate_proj", "up_proj", "down_proj")]
    stored_float = all(quantized_kind(ckpt, n) == "float" for n in names)
    if weights == "fp16" or (weights == "auto" and stored_float):
        gate_up = np.empty((e, 2 * m, h), np.float16)
        down = np.empty((e, h, m), np.float16)
        for x in range(e):
            q = f"{p}.mlp.experts.{x}"
            gate_up[x, :m] = linear(f"{q}.gate_proj", m, h, "fp16")
            gate_up[x, m:] = linear(f"{q}.up_proj", m, h, "fp16")
            down[x] = linear(f"{q}.down_proj", h, m, "fp16")
        return FloatExperts(gate_up, down, e)
    if h % 128 or m % 128:
        raise UnsupportedModelError(f"{ckpt.folder}: MoE hidden {h} and moe_intermediate_size {m} must be multiples "
                                    f"of 128 (xe2rt.moe_ffn_w4a16, the W4 experts' kernel; weights='fp16' holds "
                                    f"float experts)")

    def w4(prefix, n, k):
        w = linear(prefix, n, k, "auto")
        if isinstance(w, np.ndarray):
            w = quantize_w4(w, group_size=group_size)
        return w

    gate_up, down = [], []
    for x in range(e):
        q = f"{p}.mlp.experts.{x}"
        gate_up.append(w4(f"{q}.gate_proj", m, h))
        gate_up.append(w4(f"{q}.up_proj", m, h))
        down.append(w4(f"{q}.down_proj", h, m))
    try:
        return QuantizedW4Experts(stack_rows(gate_up, f"{p}.mlp.experts"), stack_rows(down, f"{p}.mlp.experts"), e)
    except InputError as exc:
        raise CheckpointError(f"{ckpt.folder}: {p}.mlp.experts: {exc}") from None


def device_placer(queue):
    """place() for load_weights: numpy arrays and quantized weights onto `queue`."""
    import dpnp

    def place(obj):
        if isinstance(obj, (QuantizedW4, QuantizedW8, QuantizedW4Experts, FloatExperts)):
            return obj.to_device(queue)
        return dpnp.asarray(obj, sycl_queue=queue)

    def rows(shape, slices):
        dest = dpnp.empty(shape, dtype=np.float16, sycl_queue=queue)
        for r, part in slices:
            dest[r:r + len(part)] = dpnp.asarray(part, sycl_queue=queue)
        return dest
    place.rows = rows
    return place


def weight_bytes(obj, _seen=None) -> int:
    """Bytes of the arrays under a load_weights dict (a tied lm_head, the embeddings' own array, counted once)."""
    seen = set() if _seen is None else _seen
    if isinstance(obj, dict):
        return sum(weight_bytes(v, seen) for v in obj.values())
    if isinstance(obj, list):
        return sum(weight_bytes(v, seen) for v in obj)
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    return int(obj.nbytes)
