"""Random-weight checkpoints in the exact Hugging Face layouts, for tests and benchmarks on machines that cannot
download weights:

    python -m xe2rt.models.random NAME OUT [--format fp16|bf16|gptq|awq|compressed-tensors] [--layers N]
                                  [--group G] [--asym] [--gptq-v2] [--shard-mb MB] [--seed S]

NAME is one of the shipped configs (xe2rt/models/configs/*.json: Llama-3.2-1B, Llama-3.1-8B, Qwen3-0.6B, Qwen3-4B,
Qwen3-30B-A3B, and tiny-* test models) or a path to a config.json. OUT gets config.json, model.safetensors (or shards
with model.safetensors.index.json). Tensors are generated and written one at a time (a streaming safetensors
writer), so the largest shapes need no more memory than their largest tensor.

Float weights are N(0, 1/K) (K = input features) so activations keep unit scale through the layers; 4-bit codes are
uniform, scales chosen for the same spread; norm weights 1 + N(0, 0.1^2). The router (mlp.gate), embeddings and
lm_head stay float in every format, as quantizers leave them.
"""
from __future__ import annotations

import json
import math
import re
import struct
import sys
from pathlib import Path

import numpy as np

from ..quant import AWQ_ORDER
from .checkpoint import ITEMSIZE, parse_config

CONFIG_DIR = Path(__file__).parent / "configs"
FORMATS = ("fp16", "bf16", "gptq", "awq", "compressed-tensors")
MODELS = ("Llama-3.2-1B", "Llama-3.1-8B", "Qwen3-0.6B", "Qwen3-4B", "Qwen3-30B-A3B")


def shipped_config(name: str) -> dict:
    from ..errors import InputError
    path = CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        p = Path(name)
        if p.is_dir() and (p / "config.json").is_file():
            p = p / "config.json"
        if not p.is_file():
            names = sorted(f.stem for f in CONFIG_DIR.glob("*.json"))
            raise InputError(f"unknown model {name!r}: shipped configs are {', '.join(names)} (or give a "
                             f"config.json)")
        path = p
    try:
        config = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{path} must hold a JSON table of model settings, got a {type(config).__name__}")
    return config


def linears(cfg) -> list[tuple[str, int, int]]:
    """(prefix, N, K) of every decoder linear, in checkpoint order."""
    h, d = cfg.hidden, cfg.head_dim
    out = []
    for i in range(cfg.layers):
        p = f"model.layers.{i}"
        out += [(f"{p}.self_attn.q_proj", cfg.heads * d, h), (f"{p}.self_attn.k_proj", cfg.kv_heads * d, h),
                (f"{p}.self_attn.v_proj", cfg.kv_heads * d, h), (f"{p}.self_attn.o_proj", h, cfg.heads * d)]
        if cfg.is_moe_layer(i):
            m = cfg.moe_intermediate
            for e in range(cfg.num_experts):
                q = f"{p}.mlp.experts.{e}"
                out += [(f"{q}.gate_proj", m, h), (f"{q}.up_proj", m, h), (f"{q}.down_proj", h, m)]
        else:
            m = cfg.intermediate
            out += [(f"{p}.mlp.gate_proj", m, h), (f"{p}.mlp.up_proj", m, h), (f"{p}.mlp.down_proj", h, m)]
    return out


def float_tensors(cfg) -> list[tuple[str, tuple, str]]:
    """(name, shape, role) of the tensors that stay float in every format."""
    h, d = cfg.hidden, cfg.head_dim
    out = [("model.embed_tokens.weight", (cfg.vocab, h), "embed")]
    for i in range(cfg.layers):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", (h,), "norm"), (f"{p}.post_attention_layernorm.weight", (h,), "norm")]
        if cfg.qk_norm:
            out += [(f"{p}.self_attn.q_norm.weight", (d,), "norm"), (f"{p}.self_attn.k_norm.weight", (d,), "norm")]
        if cfg.is_moe_layer(i):
            out.append((f"{p}.mlp.gate.weight", (cfg.num_experts, h), "router"))
    out.append(("model.norm.weight", (h,), "norm"))
    if not cfg.tie_embeddings:
        out.append(("lm_head.weight", (cfg.vocab, h), "linear"))
    return out


def _pack8(codes: np.ndarray, axis: int, order=range(8)) -> np.ndarray:
    """uint4 codes -> int32 words, 8 consecutive entries along `axis` per word, entry order[j] in bits 4j."""
    c = np.moveaxis(codes.astype(np.uint32), axis, -1)
    c = c.reshape(c.shape[:-1] + (c.shape[-1] // 8, 8))
    words = np.zeros(c.shape[:-1], np.uint32)
    for j, src in enumerate(order):
        words |= c[..., src] << np.uint32(4 * j)
    return np.moveaxis(words, -1, axis).view(np.int32)


class Writer:
    """Streams tensors into safetensors files: the header is computed from the planned (name, dtype, shape) list,
    then each tensor is produced and written in order."""

    def __init__(self, out: Path, plan: list[tuple[str, str, tuple]], shard_bytes: int | None):
        self.out = out
        shards, size = [[]], 0
        for entry in plan:
            nb = math.prod(entry[2]) * ITEMSIZE[entry[1]]
            if shard_bytes and shards[-1] and size + nb > shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append(entry)
            size += nb
        self.shards = shards

    def write(self, produce, metadata: dict | None = None) -> list[Path]:
        names = ["model.safetensors"] if len(self.shards) == 1 else \
            [f"model-{i + 1:05d}-of-{len(self.shards):05d}.safetensors" for i in range(len(self.shards))]
        # weights of an earlier write to this folder go first (as transformers' save_pretrained removes stale
        # shards): a leftover index or shard set would otherwise be what a loader reads
        for old in self.out.iterdir():
            if old.name not in names and (old.name == "model.safetensors.index.json"
                                          or re.fullmatch(r"model(-\d{5}-of-\d{5})?\.safetensors", old.name)):
                old.unlink()
        weight_map = {}
        for fname, shard in zip(names, self.shards):
            table, offset = {"__metadata__": metadata or {"format": "pt"}}, 0
            for name, dtype, shape in shard:
                nb = math.prod(shape) * ITEMSIZE[dtype]
                table[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nb]}
                offset += nb
                weight_map[name] = fname
            header = json.dumps(table, separators=(",", ":")).encode()
            header += b" " * (-len(header) % 8)
            with open(self.out / fname, "wb") as f:
                f.write(struct.pack("<Q", len(header)) + header)
                for name, dtype, shape in shard:
                    a = np.ascontiguousarray(produce(name))
                    assert a.shape == tuple(shape) and a.nbytes == math.prod(shape) * ITEMSIZE[dtype], name
                    f.write(a.tobytes())
        if len(names) > 1:
            total = sum(math.prod(s) * ITEMSIZE[d] for shard in self.shards for _, d, s in shard)
            (self.out / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
        return [self.out / n for n in names]


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even) as uint16."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def quant_config(fmt: str, group: int, sym: bool, v2: bool) -> dict | None:
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False, "sym": sym,
                "checkpoint_format": "gptq_v2" if v2 else "gptq", "damp_percent": 0.01, "static_groups": False,
                "true_sequential": True, "lm_head": False}
    if fmt == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm",
                "modules_to_not_convert": None}
    if fmt == "compressed-tensors":
        return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                              "output_activations": None,
                                              "weights": {"num_bits": 4, "type": "int", "symmetric": sym,
                                                          "strategy": "group", "group_size": group, "actorder": None,
                                                          "dynamic": False, "observer": "minmax"}}},
                "ignore": ["lm_head", "re:.*mlp.gate$"], "kv_cache_scheme": None}
    return None


def quant_tensors(fmt: str, prefix: str, n: int, k: int, group: int, sym: bool, v2: bool, rng) -> dict:
    """The stored tensors of one random 4-bit linear [N, K] in `fmt`'s layout (codes, scales, zeros)."""
    g = k // group
    zeros = np.full((n, g), 8, np.uint8) if sym else rng.integers(5, 11, (n, g), dtype=np.uint8)
    # codes around each group's zero point (q - z ~ N(0, 2.5^2) rounded, clipped to [0, 15]): weights of mean about 0,
    # as a quantizer makes them from trained weights. Uniform codes (an earlier version) gave q - z a mean of -0.5
    # (symmetric) or 7.5 - z (asymmetric): every linear then added a large constant component, the random model became
    # so ill-conditioned that fp16-sized noise in a float64 forward moved long-prompt logits below cosine 0.999.
    z = np.repeat(zeros, group, axis=1).astype(np.float32)
    codes = np.clip(np.rint(z + 2.5 * rng.standard_normal((n, k), dtype=np.float32)), 0, 15).astype(np.uint8)
    scales = (np.abs(rng.standard_normal((n, g))) * 0.5 + 0.5) / (2.5 * math.sqrt(k))
    scales = scales.astype(np.float16)
    if fmt == "gptq":
        stored = zeros.T.astype(np.int32) - (0 if v2 else 1)  # v1 stores zero - 1
        return {f"{prefix}.qweight": _pack8(codes.T, 0), f"{prefix}.qzeros": _pack8(stored, 1),
                f"{prefix}.scales": np.ascontiguousarray(scales.T), f"{prefix}.g_idx": (np.arange(k) // group)
                .astype(np.int32)}
    if fmt == "awq":
        return {f"{prefix}.qweight": _pack8(codes.T, 1, AWQ_ORDER), f"{prefix}.qzeros": _pack8(zeros.T, 1, AWQ_ORDER),
                f"{prefix}.scales": np.ascontiguousarray(scales.T)}
    out = {f"{prefix}.weight_packed": _pack8(codes, 1), f"{prefix}.weight_scale": scales,
           f"{prefix}.weight_shape": np.array([n, k], np.int64)}
    if not sym:
        out[f"{prefix}.weight_zero_point"] = _pack8(zeros, 0)
    return out


def write(name_or_config, out, *, fmt: str = "fp16", layers: int | None = None, group: int = 128,
          sym: bool = True, gptq_v2: bool = False, shard_mb: float | None = None, seed: int = 0,
          tokenizer: bool = False) -> Path:
    """Write a random checkpoint; returns the folder."""
    if fmt not in FORMATS:
        raise SystemExit(f"unknown format {fmt!r}: supported {', '.join(FORMATS)}")
    raw = dict(shipped_config(name_or_config) if isinstance(name_or_config, str) else name_or_config)
    if layers is not None:
        raw["num_hidden_layers"] = int(layers)
        if "max_window_layers" in raw:
            raw["max_window_layers"] = int(layers)
    raw["torch_dtype"] = "bfloat16" if fmt == "bf16" else "float16"
    q = quant_config(fmt, group, sym, gptq_v2)
    if q is not None:
        raw["quantization_config"] = q
    cfg = parse_config(raw)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fdtype = "BF16" if fmt == "bf16" else "F16"
    plan, quant_parts, float_linears = [], {}, {}
    for name, shape, role in float_tensors(cfg):
        plan.append((name, fdtype, shape))
    for prefix, n, k in linears(cfg):
        if q is None:
            plan.append((f"{prefix}.weight", fdtype, (n, k)))
            float_linears[f"{prefix}.weight"] = (n, k)
            continue
        for pname, dtype, shape in quant_shapes(fmt, prefix, n, k, group, sym):
            plan.append((pname, dtype, shape))
            quant_parts[pname] = (prefix, n, k)
    roles = {name: (shape, role) for name, shape, role in float_tensors(cfg)}
    rng = np.random.default_rng(seed)
    pending: dict = {}

    def produce(name):
        if name in quant_parts:
            if name not in pending:  # a linear's parts are planned together: generate them once
                prefix, n, k = quant_parts[name]
                pending.clear()
                pending.update(quant_tensors(fmt, prefix, n, k, group, sym, gptq_v2, rng))
            return pending.pop(name)
        shape, role = roles[name] if name in roles else (float_linears[name], "linear")
        if role == "norm":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif role == "embed":
            a = rng.standard_normal(shape, dtype=np.float32)
        else:
            a = rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(shape[1]))
        return bf16_bits(a) if fdtype == "BF16" else a.astype(np.float16)

    Writer(out, plan, int(shard_mb * (1 << 20)) if shard_mb else None).write(produce)
    (out / "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True))
    if tokenizer:
        write_tokenizer(out, cfg.vocab)
    return out


def quant_shapes(fmt: str, prefix: str, n: int, k: int, group: int, sym: bool) -> list[tuple[str, str, tuple]]:
    """(name, dtype, shape) of the stored parts of a 4-bit linear [N, K], in quant_tensors' order."""
    g = k // group
    if fmt == "gptq":
        return [(f"{prefix}.qweight", "I32", (k // 8, n)), (f"{prefix}.qzeros", "I32", (g, n // 8)),
                (f"{prefix}.scales", "F16", (g, n)), (f"{prefix}.g_idx", "I32", (k,))]
    if fmt == "awq":
        return [(f"{prefix}.qweight", "I32", (k, n // 8)), (f"{prefix}.qzeros", "I32", (g, n // 8)),
                (f"{prefix}.scales", "F16", (g, n))]
    out = [(f"{prefix}.weight_packed", "I32", (n, k // 8)), (f"{prefix}.weight_scale", "F16", (n, g)),
           (f"{prefix}.weight_shape", "I64", (2,))]
    if not sym:
        out.append((f"{prefix}.weight_zero_point", "I32", (n // 8, g)))
    return out


def write_tokenizer(out: Path, vocab: int) -> None:
    """A word-level tokenizer.json over `vocab` tokens ("w0" .. and single letters), for tests of the text path."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    words = [chr(ord("a") + i) for i in range(26)] + [f"w{i}" for i in range(vocab - 27)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>"] + words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(out / "tokenizer.json"))


def main(argv=None) -> int:
    from ..__main__ import _Parser  # a bad command line in one line and exit status 2, as `python -m xe2rt` has it
    ap = _Parser(prog="python -m xe2rt.models.random",
                                 description="Random-weight checkpoints in the exact Hugging Face layouts, for tests "
                                             "and benchmarks on machines that cannot download weights.")
    ap.add_argument("name", help=f"one of {', '.join(MODELS)}, tiny-llama, tiny-qwen3, tiny-qwen3-moe, or a "
                                 f"config.json")
    ap.add_argument("out", help="the folder to write (config.json, model.safetensors or shards)")
    ap.add_argument("--format", default="fp16", choices=FORMATS)
    ap.add_argument("--layers", type=int, default=None, help="decoder layers to write (default: the config's)")
    ap.add_argument("--group", type=int, default=128, help="4-bit group size (32, 64, 128)")
    ap.add_argument("--asym", action="store_true", help="4-bit with zero points (GPTQ and compressed-tensors; AWQ "
                                                        "always has them)")
    ap.add_argument("--gptq-v2", action="store_true", help="GPTQ checkpoint_format gptq_v2 (zeros stored as-is)")
    ap.add_argument("--shard-mb", type=float, default=None, help="split into shards of at most this size")
    ap.add_argument("--tokenizer", action="store_true", help="also write a word-level tokenizer.json")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.group not in (32, 64, 128):
        ap.error(f"--group must be 32, 64 or 128, got {a.group}")
    if a.layers is not None and a.layers < 1:
        ap.error(f"--layers must be >= 1, got {a.layers}")
    if a.seed < 0:
        ap.error(f"--seed must be >= 0, got {a.seed}")
    if a.shard_mb is not None and not a.shard_mb > 0:
        ap.error(f"--shard-mb must be > 0, got {a.shard_mb}")
    if (a.asym or a.gptq_v2) and a.format in ("fp16", "bf16"):
        ap.error(f"--asym and --gptq-v2 apply to the 4-bit formats, not --format {a.format}")
    from ..errors import Xe2rtError
    try:
        out = write(a.name, a.out, fmt=a.format, layers=a.layers, group=a.group, sym=not a.asym, gptq_v2=a.gptq_v2,
                    shard_mb=a.shard_mb, seed=a.seed, tokenizer=a.tokenizer)
    except (Xe2rtError, OSError) as exc:
        print(f"python -m xe2rt.models.random: error: {exc}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    print(f"wrote {out} ({size / 1e6:.1f} MB, format {a.format})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
