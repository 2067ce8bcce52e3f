"""Hugging Face decoder checkpoints: config.json, safetensors (single file or shards), quantization formats.

Reading is streamed, tensor by tensor: every file's header is checked against its size first (truncated / corrupt
files named). Integer tensors (packed 4-bit codes, zeros) come through the `safetensors` package's memory-mapped
reader (the mapping dropped every READ_WINDOW bytes); float tensors are read in row slices of CONVERT_SLICE elements
with positioned reads at the header's offsets and converted to float16 slice by slice (numpy has no bfloat16; and a
mapping's touched pages would count in the resident set until unmapped). The two largest tensors (embeddings,
lm_head) go to the device slice by slice, so the host never holds a whole copy of them; nothing holds a float32 copy
of a model.

Quantized linears (names are the module prefix + suffix; see TOOLCHAIN.md section 7 for the bit layouts):
  GPTQ v1 / v2      .qweight .qzeros .scales [.g_idx]   quant_method "gptq", bits 4; desc_act with a permuted g_idx
                    loads only with weights="fp16" (dequantized exactly through g_idx), W4 refuses it by name
  AWQ GEMM          .qweight .qzeros .scales            quant_method "awq", version "gemm", zero_point true
  compressed-tensors .weight_packed .weight_scale [.weight_zero_point] .weight_shape  format "pack-quantized", 4 bit
                    int weights in groups (strategy "group"), symmetric or not
Whether a linear is quantized is read from the tensors present (modules in `ignore` / `modules_to_not_convert` are
plain `.weight`), so a config that disagrees with the files is caught by name.
"""
from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import validate
from ..errors import InputError, Xe2rtError
from ..quant import (GROUP_SIZES, QuantizedW4, QuantizedW8, SYMMETRIC_ZERO, _unpack_nibbles, from_awq, from_gptq,
                     quantize_w4, quantize_w8)

FLOAT32_MAX = float(np.finfo(np.float32).max)

ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
QUANT_METHODS = ("gptq", "awq", "compressed-tensors")
WEIGHT_MODES = ("auto", "fp16", "w4", "w8")
READ_WINDOW = 64 << 20  # bytes read through one mapping before it is reopened (bounds resident file pages)
CONVERT_SLICE = 1 << 20  # elements read (and converted bf16/fp32 -> fp16) at a time
QUANT_SLICE = 1 << 18  # elements quantized at a time when weights='w4' / 'w8' quantize on load
DTYPES = {"F16": np.float16, "F32": np.float32, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "I8": np.int8,
          "BF16": None, "F64": np.float64, "I16": np.int16, "U32": np.uint32, "BOOL": np.bool_}
ITEMSIZE = {"F16": 2, "BF16": 2, "F32": 4, "I32": 4, "I64": 8, "U8": 1, "I8": 1, "F64": 8, "I16": 2, "U32": 4,
            "BOOL": 1}


class CheckpointError(Xe2rtError, ValueError):
    """A checkpoint folder is missing files, holds corrupt or wrong-shaped tensors, or disagrees with its config."""


class UnsupportedModelError(Xe2rtError, ValueError):
    """The architecture or quantization method is not one xe2rt runs (the message lists what is)."""


# ----------------------------------------------------------------------------------------------------------- config
@dataclass
class QuantConfig:
    method: str | None = None  # None: float checkpoint
    bits: int = 16
    group_size: int = 0
    symmetric: bool = True
    desc_act: bool = False
    checkpoint_format: str = "gptq"  # GPTQ only: "gptq" (v1) or "gptq_v2"
    ignore: tuple = ()
    raw: dict = field(default_factory=dict)


@dataclass
class ModelConfig:
    architecture: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    eps: float
    rope_theta: float
    rope_scaling: dict | None
    tie_embeddings: bool
    max_positions: int
    eos_ids: tuple
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    norm_topk_prob: bool = True
    moe_layers: tuple = ()
    quant: QuantConfig = field(default_factory=QuantConfig)
    raw: dict = field(default_factory=dict)

    @property
    def qk_norm(self) -> bool:
        return self.architecture != "LlamaForCausalLM"

    def is_moe_layer(self, i: int) -> bool:
        return i in self.moe_layers


HF_RMS_NORM_EPS, HF_ROPE_THETA = 1e-6, 10000.0
QWEN3_HEAD_DIM = 128  # transformers' Qwen3Config default (Qwen3MoeConfig and LlamaConfig: hidden / heads)


def _field(raw: dict, name: str, kind=int, default=None, path="config.json"):
    value = raw.get(name, default)
    if value is None:
        raise CheckpointError(f"{path}: field {name!r} is missing")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise CheckpointError(f"{path}: {name} must be a positive integer, got {value!r}")
    if kind is float:
        number = validate.real_number(value) if isinstance(value, (int, float)) else None
        if number is None or not 0 < number < math.inf:
            raise CheckpointError(f"{path}: {name} must be a finite positive number, got {validate.shown(value)}")
        return number
    return kind(value)


def _flag(raw: dict, name: str, default: bool, path="config.json") -> bool:
    """A JSON true / false field (absent or null: the default); a string such as "false" is refused rather than
    read as true."""
    value = raw.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(f"{path}: {name} must be true or false, got {value!r}")
    return value


def parse_quant(raw: dict | None, path: str = "config.json") -> QuantConfig:
    if not raw:
        return QuantConfig()
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: quantization_config must be a table, got {raw!r}")
    try:
        return _parse_quant(raw, path)
    except (CheckpointError, UnsupportedModelError):
        raise
    except (AttributeError, TypeError, ValueError) as exc:  # a field of the wrong JSON kind
        raise CheckpointError(f"{path}: malformed quantization_config ({type(exc).__name__}: {exc}): "
                              f"{str(raw)[:300]}") from None


def _parse_quant(raw: dict, path: str) -> QuantConfig:
    method = raw.get("quant_method")
    if method not in QUANT_METHODS:
        raise UnsupportedModelError(f"{path}: quantization_config.quant_method {method!r} is not supported; "
                                    f"supported: {', '.join(QUANT_METHODS)} (4-bit weights), or a float checkpoint")
    if method == "compressed-tensors":
        fmt = raw.get("format")
        if fmt != "pack-quantized":
            raise UnsupportedModelError(f"{path}: compressed-tensors format {fmt!r} is not supported; supported: "
                                        f"'pack-quantized' (W4A16)")
        groups = raw.get("config_groups") or {}
        specs = [g.get("weights") or {} for g in groups.values()]
        if len(specs) != 1:
            raise UnsupportedModelError(f"{path}: compressed-tensors with {len(specs)} config_groups is not supported;"
                                        f" supported: one group of 4-bit int weights")
        w = specs[0]
        if (w.get("num_bits"), w.get("type"), w.get("strategy")) != (4, "int", "group") or w.get("dynamic"):
            raise UnsupportedModelError(f"{path}: compressed-tensors weights {w} are not supported; supported: "
                                        f"num_bits 4, type int, strategy group, static")
        if w.get("actorder") not in (None, False, "static"):
            raise UnsupportedModelError(f"{path}: compressed-tensors actorder {w.get('actorder')!r} (permuted groups)"
                                        f" is not supported; supported: actorder null or 'static'")
        for g in groups.values():
            if g.get("input_activations"):
                raise UnsupportedModelError(f"{path}: quantized input activations are not supported (W4A16 only)")
        return QuantConfig("compressed-tensors", 4, int(w.get("group_size") or 0),
                           _flag(w, "symmetric", True, f"{path} quantization_config weights"),
                           ignore=tuple(raw.get("ignore") or ()), raw=raw)
    bits = raw.get("bits", raw.get("w_bit"))
    if bits != 4:
        raise UnsupportedModelError(f"{path}: {method} with bits = {bits!r} is not supported; supported: 4")
    group = raw.get("group_size", raw.get("q_group_size"))
    if method == "awq":
        version = str(raw.get("version", "gemm")).lower()
        if version != "gemm":
            raise UnsupportedModelError(f"{path}: AWQ version {version!r} is not supported; supported: 'gemm'")
        if not _flag(raw, "zero_point", True, f"{path} quantization_config"):
            raise UnsupportedModelError(f"{path}: AWQ with zero_point false is not supported; supported: zero_point "
                                        f"true (the AutoAWQ default)")
        return QuantConfig("awq", 4, int(group or 0), False, ignore=tuple(raw.get("modules_to_not_convert") or ()),
                           raw=raw)
    fmt = raw.get("checkpoint_format", "gptq")
    if fmt not in ("gptq", "gptq_v2"):
        raise UnsupportedModelError(f"{path}: GPTQ checkpoint_format {fmt!r} is not supported; supported: 'gptq' "
                                    f"(v1), 'gptq_v2'")
    where = f"{path} quantization_config"
    return QuantConfig("gptq", 4, int(group or 0), _flag(raw, "sym", True, where), _flag(raw, "desc_act", False, where),
                       fmt, raw=raw)


def _rope_fields(raw: dict, path: str):
    """(rope_scaling, a table holding rope_theta unless it is absent) as config.json gives them: transformers >= 5
    writes one table `rope_parameters` (rope_theta, rope_type and the scaling's own fields) where earlier versions
    wrote `rope_theta` and `rope_scaling`; as in transformers, rope_parameters wins where both are present."""
    params = raw.get("rope_parameters")
    if params is None:
        return raw.get("rope_scaling"), raw
    if not isinstance(params, dict):
        raise CheckpointError(f"{path}: rope_parameters must be a table (or null), got {validate.shown(params)}")
    if params and all(isinstance(v, dict) for v in params.values()):
        raise UnsupportedModelError(f"{path}: rope_parameters per attention type ({', '.join(map(str, params))}) "
                                    f"is not supported; supported: one table for every layer")
    scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    return (scaling or None), (params if "rope_theta" in params else raw)


def parse_config(raw: dict, path: str = "config.json") -> ModelConfig:
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: must hold a JSON table of model settings, got a {type(raw).__name__}")

    def field(name: str, kind=int, default=None):
        return _field(raw, name, kind, default, path)

    archs = raw.get("architectures") or []
    if not isinstance(archs, list):
        raise CheckpointError(f"{path}: architectures must be a list of names, got {archs!r}")
    arch = archs[0] if len(archs) == 1 else None
    if arch not in ARCHITECTURES:
        raise UnsupportedModelError(f"{path}: architectures {archs!r} is not supported; supported: "
                                    f"{', '.join(ARCHITECTURES)}")
    for flag in ("attention_bias", "mlp_bias"):
        if _flag(raw, flag, False, path):
            raise UnsupportedModelError(f"{path}: {flag} = true is not supported (the {arch} checkpoints xe2rt runs "
                                        f"have no linear biases)")
    if raw.get("hidden_act", "silu") != "silu":
        raise UnsupportedModelError(f"{path}: hidden_act {raw.get('hidden_act')!r} is not supported; supported: silu")
    if _flag(raw, "use_sliding_window", False, path):
        raise UnsupportedModelError(f"{path}: use_sliding_window = true is not supported")
    hidden = field("hidden_size")
    heads = field("num_attention_heads")
    kv_heads = field("num_key_value_heads", default=heads)
    # absent head_dim: transformers' default, 128 for Qwen3Config, hidden_size // num_attention_heads otherwise
    head_dim = field("head_dim") if raw.get("head_dim") is not None else \
        QWEN3_HEAD_DIM if arch == "Qwen3ForCausalLM" else hidden // heads
    if heads % kv_heads:
        raise CheckpointError(f"{path}: num_attention_heads {heads} must be a multiple of num_key_value_heads "
                              f"{kv_heads}")
    if head_dim not in (64, 128):
        raise UnsupportedModelError(f"{path}: head_dim {head_dim} is not supported; supported: 64, 128")
    scaling, theta_from = _rope_fields(raw, path)
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = None  # transformers' name for plain rotary embedding, the same as null
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise CheckpointError(f"{path}: rope_scaling must be a table (or null), got {scaling!r}")
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind != "llama3":
            raise UnsupportedModelError(f"{path}: rope_scaling type {kind!r} is not supported; supported: none, "
                                        f"'llama3'")
        for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            _field(scaling, key, float, path=f"{path} rope_scaling")
        if not scaling["high_freq_factor"] > scaling["low_freq_factor"]:
            raise CheckpointError(f"{path}: rope_scaling high_freq_factor must exceed low_freq_factor, got {scaling}")
        from ..ops.decoder_small import scaling_key
        try:  # the rules rope_kv applies at every call (float32's range: the frequencies are computed in float32)
            scaling_key(scaling)
        except InputError as error:
            raise CheckpointError(f"{path}: rope_scaling: {error}") from None
    eos_ids = _eos_ids(raw, path)
    layers = field("num_hidden_layers")
    # absent: the defaults of transformers' LlamaConfig, Qwen3Config and Qwen3MoeConfig
    eps = field("rms_norm_eps", float, HF_RMS_NORM_EPS)
    theta = _field(theta_from, "rope_theta", float, HF_ROPE_THETA, path)
    if eps > FLOAT32_MAX:  # the kernels take eps as a float
        raise CheckpointError(f"{path}: rms_norm_eps must be at most float32's largest number, got {eps!r}")
    if not theta > 1:  # rope_kv's rule: a base of 1 or less gives no rotation that depends on the position
        raise CheckpointError(f"{path}: rope_theta must be a finite number > 1, got {theta!r}")
    max_positions = 4096 if raw.get("max_position_embeddings") is None else field("max_position_embeddings")
    cfg = ModelConfig(arch, hidden, layers, heads, kv_heads, int(head_dim), field("intermediate_size"),
                      field("vocab_size"), eps, theta, scaling, _flag(raw, "tie_word_embeddings", False, path),
                      max_positions, eos_ids, quant=parse_quant(raw.get("quantization_config"), path), raw=raw)
    if arch == "Qwen3MoeForCausalLM":
        # transformers >= 5 writes num_local_experts (num_experts before)
        cfg.num_experts = field("num_local_experts") if raw.get("num_experts") is None and \
            raw.get("num_local_experts") is not None else field("num_experts")
        cfg.experts_per_token = field("num_experts_per_tok")
        cfg.moe_intermediate = field("moe_intermediate_size")
        cfg.norm_topk_prob = _flag(raw, "norm_topk_prob", False, path)
        step = 1 if raw.get("decoder_sparse_step") is None else field("decoder_sparse_step")
        dense = raw.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(type(i) is int and 0 <= i < layers for i in dense):
            raise CheckpointError(f"{path}: mlp_only_layers must be a list of layer indices in [0, "
                                  f"num_hidden_layers = {layers}), got {validate.shown(dense)}")
        dense = set(dense)
        cfg.moe_layers = tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
        if cfg.experts_per_token > cfg.num_experts:
            raise CheckpointError(f"{path}: num_experts_per_tok {cfg.experts_per_token} exceeds num_experts "
                                  f"{cfg.num_experts}")
    return cfg


def _json_file(path: Path):
    """The parsed contents of a JSON file of the folder; a file that is not JSON is named."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None


def _eos_ids(raw: dict, path: str) -> tuple:
    """The eos_token_id of a config.json or generation_config.json (an id, a list of ids or absent) as a tuple."""
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    if not all(type(t) is int and t >= 0 for t in eos_ids):
        raise CheckpointError(f"{path}: eos_token_id must be a token id or a list of token ids, got {eos!r}")
    return eos_ids


def _generation_eos_ids(folder: Path) -> tuple:
    """The stop ids of generation_config.json when the folder has one (what transformers' generate stops at: an
    instruct model's end-of-turn ids are often only there), () otherwise."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return ()
    raw = _json_file(path)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: must hold a JSON object, got {type(raw).__name__}")
    return _eos_ids(raw, str(path))


def read_config(folder) -> ModelConfig:
    path = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise CheckpointError(f"model folder {str(folder)!r} does not exist (or is not a directory)")
    if not path.is_file():
        raise CheckpointError(f"{folder}: no config.json; a Hugging Face model folder holds config.json and "
                              f"model.safetensors (or shards with model.safetensors.index.json)")
    cfg = parse_config(_json_file(path), str(path))
    extra = [t for t in _generation_eos_ids(Path(folder)) if t not in cfg.eos_ids]
    if extra:
        cfg.eos_ids = cfg.eos_ids + tuple(extra)
    return cfg


# ------------------------------------------------------------------------------------------------------ safetensors
@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str
    shape: tuple
    begin: int  # absolute byte offsets in the file
    end: int


def read_header(path: Path) -> dict[str, TensorInfo]:
    """The tensor table of one safetensors file, checked against the file size (truncated / corrupt files named)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: corrupt safetensors file ({size} bytes, shorter than its 8-byte header "
                                  f"length)")
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, 100 << 20):
            raise CheckpointError(f"{path}: corrupt safetensors file (header length {n} does not fit the file's "
                                  f"{size} bytes)")
        try:
            table = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{path}: corrupt safetensors header ({exc})") from None
    if not isinstance(table, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (a JSON {type(table).__name__}, not a table of "
                              f"tensors)")
    out = {}
    base = 8 + n
    for name, meta in table.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = meta["dtype"], tuple(int(s) for s in meta["shape"]), meta["data_offsets"]
            if not all(type(v) is int for v in (b, e)) or not all(type(v) is int and v >= 0 for v in meta["shape"]):
                raise TypeError("offsets and shape must be non-negative integers")
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: corrupt safetensors header entry for {name!r}: {meta}") from None
        if dtype not in ITEMSIZE:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype}, which xe2rt does not read")
        if e - b != math.prod(shape) * ITEMSIZE[dtype] or b < 0:
            raise CheckpointError(f"{path}: corrupt safetensors header: {name!r} {dtype}{list(shape)} spans bytes "
                                  f"[{b}, {e})")
        if base + e > size:
            raise CheckpointError(f"{path}: truncated safetensors file: tensor {name!r} ends at byte {base + e} but "
                                  f"the file has {size} bytes")
        out[name] = TensorInfo(path, dtype, shape, base + b, base + e)
    spans = sorted((t.begin, t.end, name) for name, t in out.items() if t.end > t.begin)
    for (b0, e0, first), (b1, _, second) in zip(spans, spans[1:]):
        if b1 < e0:  # the format lays tensors out back to back; overlapping ones would alias each other's bytes
            raise CheckpointError(f"{path}: corrupt safetensors header: tensors {first!r} and {second!r} overlap "
                                  f"(bytes [{b0 - base}, {e0 - base}) and from {b1 - base})")
    return out


class Checkpoint:
    """The tensors of a model folder: model.safetensors when it exists, else the shards that
    model.safetensors.index.json names (transformers' order)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        index = self.folder / "model.safetensors.index.json"
        single = self.folder / "model.safetensors"
        if single.is_file():  # as transformers looks: the single file first, then the index of shards
            weight_map, files = None, ["model.safetensors"]
        elif index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{index}: corrupt index ({exc!r}); it must hold a 'weight_map'") from None
            if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                           for k, v in weight_map.items()):
                raise CheckpointError(f"{index}: corrupt index: 'weight_map' must map tensor names to shard file "
                                      f"names, got {str(weight_map)[:200]}")
            files = sorted(set(weight_map.values()))
            for name in files:
                if Path(name).name != name:
                    raise CheckpointError(f"{index}: shard {name!r} is not a file name in {self.folder} (shards "
                                          f"live beside the index)")
        else:
            raise CheckpointError(f"{self.folder}: no model.safetensors and no model.safetensors.index.json")
        self.tensors: dict[str, TensorInfo] = {}
        for name in files:
            path = self.folder / name
            if not path.is_file():
                raise CheckpointError(f"{index}: shard {name!r} is missing from {self.folder}")
            header = read_header(path)
            for tensor in header.keys() & self.tensors.keys():
                raise CheckpointError(f"{self.folder}: tensor {tensor!r} is stored twice, in "
                                      f"{self.tensors[tensor].file.name!r} and {name!r}")
            self.tensors.update(header)
        if weight_map is not None:
            for name, shard in weight_map.items():
                info = self.tensors.get(name)
                if info is None or info.file.name != shard:
                    raise CheckpointError(f"{index}: tensor {name!r} is listed in {shard!r} but that shard does not "
                                          f"hold it")
        self._handle = None
        self._handle_file = None
        self._window = 0
        self.bytes_read = 0
        self.used: set[str] = set()  # the tensors a loader asked for (info), for unused()

    @property
    def nbytes(self) -> int:
        return sum(t.end - t.begin for t in self.tensors.values())

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str, shape: tuple | None = None, dtypes: tuple | None = None) -> TensorInfo:
        t = self.tensors.get(name)
        if t is None:
            raise CheckpointError(f"{self.folder}: tensor {name!r} is missing")
        if shape is not None and t.shape != tuple(shape):
            raise CheckpointError(f"{self.folder}: tensor {name!r} has shape {list(t.shape)}, expected "
                                  f"{list(shape)} from config.json")
        if dtypes is not None and t.dtype not in dtypes:
            raise CheckpointError(f"{self.folder}: tensor {name!r} is {t.dtype}, expected one of {list(dtypes)}")
        self.used.add(name)
        return t

    def unused(self) -> list[str]:
        """The stored tensors no loader asked for, but the rotary inv_freq buffers older checkpoints carry (the
        loader computes them from the config)."""
        return sorted(n for n in self.tensors.keys() - self.used if not n.endswith("rotary_emb.inv_freq"))

    def _open(self, file: Path):
        from safetensors import safe_open
        if self._handle_file != file or self._window > READ_WINDOW:
            self.close()
            try:
                self._handle = safe_open(str(file), framework="numpy")
            except Exception as exc:  # the package's SafetensorError: a file our header check accepted
                raise CheckpointError(f"{file}: safetensors could not open it: {exc}") from None
            self._handle_file, self._window = file, 0
        return self._handle

    def close(self) -> None:
        self._handle = self._handle_file = None  # drops the mapping

    def raw(self, name: str, shape: tuple | None = None, dtypes: tuple | None = None) -> np.ndarray:
        """The tensor as stored (bfloat16 as its uint16 bits)."""
        t = self.info(name, shape, dtypes)
        self.bytes_read += t.end - t.begin
        if t.dtype == "BF16":
            mm = np.memmap(t.file, dtype=np.uint16, mode="r", offset=t.begin, shape=t.shape)
            out = np.array(mm)
            del mm
            return out
        handle = self._open(t.file)
        self._window += t.end - t.begin
        return handle.get_tensor(name)

    def fp16_rows(self, name: str, shape: tuple | None = None):
        """(first row, float16 rows) slices of a float tensor, about CONVERT_SLICE elements each, converted slice by
        slice (bfloat16 / float32 values that overflow float16 raise, naming the tensor). Float tensors, nearly all
        of a model's bytes, are read with positioned reads rather than through a mapping: mapped file pages count
        in the process's resident set until unmapped, which would double a large tensor's footprint."""
        t = self.info(name, shape, ("F16", "BF16", "F32"))
        rows = t.shape[0] if t.shape else 1
        per_row = max(1, math.prod(t.shape[1:]))
        step = max(1, CONVERT_SLICE // per_row)
        src_dtype = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32}[t.dtype]
        itemsize = ITEMSIZE[t.dtype]
        with open(t.file, "rb") as f:
            for r in range(0, rows, step):
                n = min(step, rows - r)
                f.seek(t.begin + r * per_row * itemsize)
                part = np.fromfile(f, dtype=src_dtype, count=n * per_row).reshape(n, per_row)
                if part.shape[0] != n:
                    raise CheckpointError(f"{t.file}: truncated while reading {name!r}")
                self.bytes_read += part.nbytes
                if t.dtype == "F16":
                    f32 = half = part
                else:
                    f32 = (part.astype(np.uint32) << np.uint32(16)).view(np.float32) if t.dtype == "BF16" else part
                    with np.errstate(over="ignore"):
                        half = f32.astype(np.float16)
                finite = np.isfinite(half)
                if not finite.all():  # a value that overflows float16, or inf / NaN in the file itself
                    j = np.argwhere(~finite)[0]
                    index = tuple(int(i) for i in np.unravel_index((r + int(j[0])) * per_row + int(j[1]), t.shape))
                    value = float(f32[j[0], j[1]])
                    if math.isfinite(value):
                        raise CheckpointError(f"{self.folder}: tensor {name!r} ({t.dtype}) holds {value:.6g} at "
                                              f"{index}, which overflows float16 (max 65504)")
                    raise CheckpointError(f"{self.folder}: tensor {name!r} ({t.dtype}) holds {value} at {index}: "
                                          f"non-finite weights (a corrupt file, or a diverged checkpoint)")
                del f32
                yield r, half.reshape((n,) + t.shape[1:])

    def f32(self, name: str, shape: tuple | None = None) -> np.ndarray:
        """A small float tensor (scales) as float32, exactly as stored (float16 / bfloat16 / float32 widen without
        rounding), for dequantizing with one rounding to float16 at the end."""
        t = self.info(name, shape, ("F16", "BF16", "F32"))
        a = self.raw(name, shape)
        if t.dtype == "BF16":
            return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return np.asarray(a, dtype=np.float32)

    def fp16(self, name: str, shape: tuple | None = None) -> np.ndarray:
        """A float tensor as float16 numpy (bfloat16 / float32 converted; overflow raises naming the tensor)."""
        t = self.info(name, shape, ("F16", "BF16", "F32"))
        out = np.empty(t.shape, np.float16)
        view = out.reshape((t.shape[0] if t.shape else 1,) + t.shape[1:])
        for r, part in self.fp16_rows(name, shape):
            view[r:r + len(part)] = part
        return out


# ---------------------------------------------------------------------------------------------------------- linears
def quantized_kind(ckpt: Checkpoint, prefix: str) -> str:
    """'float', 'gptq_awq' (.qweight) or 'ct' (.weight_packed): what the files hold for this linear."""
    if f"{prefix}.weight" in ckpt:
        return "float"
    if f"{prefix}.qweight" in ckpt:
        return "qweight"
    if f"{prefix}.weight_packed" in ckpt:
        return "ct"
    raise CheckpointError(f"{ckpt.folder}: tensor {prefix + '.weight'!r} is missing (nor is {prefix} stored "
                          f"quantized: no .qweight or .weight_packed)")


def _group_of(owner: str, k: int, groups: int) -> int:
    if groups == 0 or k % groups:
        raise CheckpointError(f"{owner}: {groups} scale groups do not divide K = {k}")
    g = k // groups
    return g


def _gptq(ckpt: Checkpoint, prefix: str, n: int, k: int, q: QuantConfig, want_float: bool):
    owner = f"{ckpt.folder}: {prefix}"
    qweight = ckpt.raw(f"{prefix}.qweight", (k // 8, n), ("I32",))
    scales = ckpt.fp16(f"{prefix}.scales")
    g = _group_of(owner, k, scales.shape[0])
    if not (q.group_size in (0, g) or (q.group_size == -1 and g == k)):  # -1: one group per row
        raise CheckpointError(f"{owner}: scales imply group size {g} but config.json says group_size "
                              f"{q.group_size}")
    if scales.shape != (k // g, n):
        raise CheckpointError(f"{owner}.scales has shape {list(scales.shape)}, expected {[k // g, n]}")
    qzeros = ckpt.raw(f"{prefix}.qzeros", (k // g, n // 8), ("I32",))
    g_idx = ckpt.raw(f"{prefix}.g_idx", (k,), ("I32", "I64")) if f"{prefix}.g_idx" in ckpt else None
    permuted = g_idx is not None and not np.array_equal(g_idx, np.arange(k) // g)
    if permuted or want_float:
        codes = _unpack_nibbles(qweight.view(np.uint32).T).reshape(n, k)  # [n, k]
        zeros = _unpack_nibbles(qzeros.view(np.uint32)).reshape(k // g, n).astype(np.int32)
        if q.checkpoint_format == "gptq":
            if (zeros == 15).any():  # the same rule as from_gptq, which the W4 path applies
                gz, col = (int(v[0]) for v in np.nonzero(zeros == 15))
                raise CheckpointError(f"{owner}: v1 qzeros store zero - 1; group {gz}, column {col} stores 15, i.e. "
                                      f"zero point 16, which 4 bits cannot hold (is this a gptq_v2 checkpoint?)")
            zeros = zeros + 1
        gi = g_idx.astype(np.int64) if g_idx is not None else np.arange(k) // g
        bad = (gi < 0) | (gi >= k // g)
        if bad.any():
            j = int(np.argmax(bad))
            raise CheckpointError(f"{owner}.g_idx[{j}] = {int(gi[j])} is outside the groups [0, {k // g})")
        if permuted and not want_float:
            advice = "load with weights='fp16' (dequantized exactly through g_idx) or use a desc_act=false checkpoint"
            raise UnsupportedModelError(f"{owner}: GPTQ desc_act (act-order) with a permuted g_idx cannot be held as "
                                        f"W4 groups of consecutive k; {advice}")
        return _dequant_fp16(owner, codes, zeros.T, ckpt.f32(f"{prefix}.scales").T, gi)
    if g not in GROUP_SIZES:
        raise UnsupportedModelError(f"{owner}: group size {g} is not supported for W4; supported: {GROUP_SIZES} "
                                    f"(or weights='fp16')")
    try:
        return from_gptq(qweight, qzeros, scales, checkpoint_format=q.checkpoint_format)
    except InputError as exc:
        raise CheckpointError(f"{owner}: {exc}") from None


def _awq(ckpt: Checkpoint, prefix: str, n: int, k: int, q: QuantConfig, want_float: bool):
    owner = f"{ckpt.folder}: {prefix}"
    qweight = ckpt.raw(f"{prefix}.qweight", (k, n // 8), ("I32",))
    scales = ckpt.fp16(f"{prefix}.scales")
    g = _group_of(owner, k, scales.shape[0])
    if scales.shape != (k // g, n):
        raise CheckpointError(f"{owner}.scales has shape {list(scales.shape)}, expected {[k // g, n]}")
    if q.group_size not in (0, g):
        raise CheckpointError(f"{owner}: scales imply group size {g} but config.json says group_size {q.group_size}")
    qzeros = ckpt.raw(f"{prefix}.qzeros", (k // g, n // 8), ("I32",))
    if g not in GROUP_SIZES:
        raise UnsupportedModelError(f"{owner}: AWQ group size {g} is not supported; supported: {GROUP_SIZES}")
    try:
        qw = from_awq(qweight, qzeros, scales)
    except InputError as exc:
        raise CheckpointError(f"{owner}: {exc}") from None
    if not want_float:
        return qw
    codes = np.empty((n, k), np.uint8)  # QuantizedW4's packing: k even in the low nibble
    codes[:, 0::2], codes[:, 1::2] = qw.packed & 15, qw.packed >> 4
    return _dequant_fp16(owner, codes, qw.zero_points(), ckpt.f32(f"{prefix}.scales").T, np.arange(k) // g)


def _compressed(ckpt: Checkpoint, prefix: str, n: int, k: int, q: QuantConfig, want_float: bool):
    owner = f"{ckpt.folder}: {prefix}"
    if f"{prefix}.weight_shape" in ckpt:
        ws = ckpt.raw(f"{prefix}.weight_shape").reshape(-1)
        if tuple(int(v) for v in ws) != (n, k):
            raise CheckpointError(f"{owner}.weight_shape is {ws.tolist()}, expected {[n, k]} from config.json")
    packed = ckpt.raw(f"{prefix}.weight_packed", (n, k // 8), ("I32",))
    scales = ckpt.fp16(f"{prefix}.weight_scale")
    if scales.ndim != 2 or scales.shape[0] != n:
        raise CheckpointError(f"{owner}.weight_scale has shape {list(scales.shape)}, expected [{n}, K/group]")
    g = _group_of(owner, k, scales.shape[1])
    if q.group_size not in (0, g):
        raise CheckpointError(f"{owner}: weight_scale implies group size {g} but config.json says group_size "
                              f"{q.group_size}")
    codes = _unpack_nibbles(packed.view(np.uint32)).reshape(n, k)  # k = 8j + i in bits 4i
    if f"{prefix}.weight_zero_point" in ckpt:
        zp = ckpt.raw(f"{prefix}.weight_zero_point", (n // 8, k // g), ("I32",))
        zeros = _unpack_nibbles(zp.view(np.uint32).T).reshape(k // g, n).T  # row n = 8m + i in bits 4i
        zeros = np.ascontiguousarray(zeros)
    elif not q.symmetric:
        raise CheckpointError(f"{owner}: config.json says symmetric false but {prefix}.weight_zero_point is missing")
    else:
        zeros = None
    if want_float or g not in GROUP_SIZES:
        if not want_float:
            raise UnsupportedModelError(f"{owner}: group size {g} is not supported for W4; supported: {GROUP_SIZES}")
        z = zeros if zeros is not None else np.full((n, k // g), 8)
        return _dequant_fp16(owner, codes, z, ckpt.f32(f"{prefix}.weight_scale"), np.arange(k) // g)
    packed_u8 = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    if zeros is not None and (zeros == SYMMETRIC_ZERO).all():
        zeros = None
    return QuantizedW4(packed_u8, scales, None if zeros is None else zeros.astype(np.uint8), g)


def _dequant_fp16(owner: str, codes: np.ndarray, zeros: np.ndarray, scales: np.ndarray, group: np.ndarray):
    """weights="fp16": (codes - zeros[:, group]) * scales[:, group] as float16, rounded once. codes [N, K] 4-bit
    integers, zeros and scales [N, groups] (the scales as stored: float16, bfloat16 or float32), group [K] each k's
    group. A 4-bit difference times a float32 scale is exact in float64, so the one rounding is float64 -> float16;
    row blocks bound the temporaries. A value past float16's range is an error naming the tensor."""
    n, k = codes.shape
    out = np.empty((n, k), np.float16)
    for r in range(0, n, 1024):
        rows = slice(r, r + 1024)
        w = (codes[rows].astype(np.float64) - zeros[rows][:, group]) * scales[rows].astype(np.float64)[:, group]
        with np.errstate(over="ignore"):
            out[rows] = w
    if np.isinf(out).any():
        raise CheckpointError(f"{owner}: dequantized weights overflow float16")
    return out


def load_linear(ckpt: Checkpoint, cfg: ModelConfig, prefix: str, n: int, k: int, mode: str, group_size: int):
    """One linear layer [N, K] as float16 numpy, QuantizedW4 or QuantizedW8 (host parts), per `mode`:
    auto keeps what the files hold, fp16 dequantizes, w4 / w8 quantize float weights (4-bit ones stay W4)."""
    kind = quantized_kind(ckpt, prefix)
    q = cfg.quant
    if kind == "float":
        if mode in ("w4", "w8"):  # rows quantize independently: slice by slice into the result, no whole copy
            out = None
            step = max(1, QUANT_SLICE // k)  # the quantizers' float32 temporaries: a few times QUANT_SLICE * 4 bytes
            for r0, rows in ckpt.fp16_rows(f"{prefix}.weight", (n, k)):
                rows = rows.reshape(-1, k)
                for i in range(0, len(rows), step):
                    part = quantize_w4(rows[i:i + step], group_size=group_size) if mode == "w4" else \
                        quantize_w8(rows[i:i + step])
                    fields = (part.packed, part.scales) if mode == "w4" else (part.qweight, part.scales)
                    if out is None:
                        out = [np.empty((n,) + f.shape[1:], f.dtype) for f in fields]
                    for dest, f in zip(out, fields):
                        dest[r0 + i:r0 + i + len(f)] = f
                    del part, fields
            return QuantizedW4(out[0], out[1], None, group_size) if mode == "w4" else QuantizedW8(out[0], out[1])
        return ckpt.fp16(f"{prefix}.weight", (n, k))
    if mode == "w8":
        raise UnsupportedModelError(f"{ckpt.folder}: {prefix} is stored 4-bit; weights='w8' needs float weights "
                                    f"(use 'auto' or 'fp16')")
    if kind == "qweight" and q.method not in ("gptq", "awq"):
        raise CheckpointError(f"{ckpt.folder}: {prefix}.qweight is a GPTQ/AWQ tensor but config.json's "
                              f"quantization_config.quant_method is {q.method!r}")
    if kind == "ct" and q.method != "compressed-tensors":
        raise CheckpointError(f"{ckpt.folder}: {prefix}.weight_packed is a compressed-tensors tensor but "
                              f"config.json's quantization_config.quant_method is {q.method!r}")
    want_float = mode == "fp16"
    if kind == "ct":
        return _compressed(ckpt, prefix, n, k, q, want_float)
    if q.method == "awq":
        return _awq(ckpt, prefix, n, k, q, want_float)
    return _gptq(ckpt, prefix, n, k, q, want_float)


def nbytes(w) -> int:
    return int(w.nbytes)


def tokenizer_for(folder):
    """The `tokenizers` Tokenizer of tokenizer.json, or None when the folder has none."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise CheckpointError(f"{path}: the tokenizers package could not read it: {exc}") from None


def check_mode(weights: str, group_size) -> None:
    if weights not in WEIGHT_MODES:
        raise InputError(f"load: weights must be one of {WEIGHT_MODES}, got {weights!r}")
    if group_size not in GROUP_SIZES:
        raise InputError(f"load: group_size must be one of {GROUP_SIZES}, got {group_size!r}")


def env_rss_bytes() -> int:
    """Peak resident set of this process (ru_maxrss) in bytes."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 if os.name == "posix" else 0


def current_rss_bytes() -> int | None:
    """Resident set of this process now (Linux: /proc/self/statm), None where the OS does not say."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError, IndexError):
        return None
