"""LLM decode rows (`python -m xe2rt bench --families decode`): random-weight checkpoints at real model shapes
(xe2rt.models.random, LAYERS decoder layers; the embeddings and lm_head whole), loaded and run by xe2rt.models.llm.

Per model shape and weight format: load seconds, prefill tok/s (a 128-token prompt, to the first token), decode
tok/s at contexts 128 and 2048 (median step of greedy generation, the token read back every step), the bytes a
decode token reads (every linear's weights + the KV cache up to the context), their rate as % of the run's
stream_read bandwidth, host ms per token (the Python time to queue one step, without waiting), kernels per token and
the submissions that queue them: one OpenCL command buffer per step where the queue has them (xe2rt.graph; the
greedy argmax's two launches inside it), else one submission per kernel (the argmax's not counted). At context 128
the same model also decodes launch by launch (XE2RT_NATIVE_GRAPH=0's path), interleaved with the graph's runs.

`--peer llama.cpp=DIR`: the same random weights are written as GGUF (arch "llama", gguf package), quantized with
DIR/llama-quantize --pure (Q4_0 for the W4 g32 row), and DIR/llama-bench -p 128 -n 32 -t <cores> runs in the same
bench run; the rows then carry llama.cpp's tok/s and our ratio. Llama shapes only (the llama arch).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import dpctl
import numpy as np

from .. import config
from .harness import BenchContext, Result

# (model, weights, group_size[, activations]): fp16 against llama.cpp F16, W4 g32 symmetric against Q4_0 (also with
# activations "q8", llama.cpp's own Q8_0 activations, on hosts with AVX2); the MoE model is written as an AWQ g128
# checkpoint (what users download; no 60 GB float copy to quantize on load)
ROWS = [("Llama-3.2-1B", "auto", 128), ("Llama-3.2-1B", "w4", 32), ("Llama-3.2-1B", "w4", 32, "q8"),
        ("Qwen3-0.6B", "w4", 128), ("Qwen3-30B-A3B", "awq", 128)]
QUICK_ROWS = [("tiny-qwen3", "auto", 128), ("tiny-qwen3", "w4", 32), ("tiny-qwen3", "w4", 32, "q8")]  # machinery
PROMPT = 128
DECODE_STEPS = 16


def layers(quick: bool) -> int:
    return config.bench_decode_layers(1 if quick else 4)


def bytes_per_token(model, context: int) -> int:
    """Weights a decode step reads (every linear, the router; MoE: k of E experts) + the KV cache up to context."""
    cfg, w = model.cfg, model.w
    total = int(w["lm_head"].nbytes)
    for layer in w["layers"]:
        for key in ("qkv", "o", "gate_up", "down", "router"):
            if key in layer:
                total += int(layer[key].nbytes)
        if "experts" in layer:
            total += layer["experts"].expert_nbytes() * cfg.experts_per_token
        total += int(layer["ln1"].nbytes) * 2
    return total + 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * 2 * context


class _LaunchCounter:
    def __enter__(self):
        from .. import launch
        self.launch, self.n = launch, 0
        self.orig = launch.ordered_submit

        def counted(*a, **k):
            self.n += 1
            return self.orig(*a, **k)
        launch.ordered_submit = counted
        return self

    def __exit__(self, *exc):
        self.launch.ordered_submit = self.orig


def _decode_rate(model, prompt: np.ndarray, steps: int) -> tuple[float, float, int, float]:
    """(decode s/token median, host s/token to queue a step, kernels/token, submissions/token)."""
    model.generate(prompt, steps)
    per_token = statistics.median(model.step_seconds[1:])
    model.generate(prompt, 1)
    model.queue.wait()
    token = int(prompt[-1])
    host = []
    with _LaunchCounter() as counter:
        for s in range(3):
            t0 = time.perf_counter()
            model._decode(token, len(prompt) + s, greedy=True, wait=False)
            host.append(time.perf_counter() - t0)
            model.queue.wait()
    graph = model._graphs.get((model._bucket(len(prompt) + 1), True)) if model.native_graphs else None
    if graph is not None:
        return per_token, statistics.median(host), graph.launches, 1 + counter.n / 3
    return per_token, statistics.median(host), counter.n / 3, counter.n / 3


def _launch_by_launch(model, prompt: np.ndarray, steps: int, rounds: int = 3) -> str:
    """The same decode launch by launch (the plans, XE2RT_NATIVE_GRAPH=0's path) and as one graph, interleaved:
    a note with both medians and their ratio."""
    rates, before = {False: [], True: []}, model.native_graphs
    try:
        for _ in range(rounds):
            for native in (False, True):
                model.native_graphs = native
                model.generate(prompt, steps)
                rates[native].append(1 / statistics.median(model.step_seconds[1:]))
    finally:
        model.native_graphs = before
    plans, graph = statistics.median(rates[False]), statistics.median(rates[True])
    return (f"; interleaved x{rounds}: launch by launch {plans:.1f} tok/s, one command buffer {graph:.1f} tok/s "
            f"({graph / plans:.2f}x)")


def cases(ctx: BenchContext) -> list[Result]:
    try:
        from ..models import llm
        from ..models import random as rnd
        from ..ops import gemv_w4a16
    except ImportError as exc:
        ctx.say(f"  decode: skipped ({exc}; pip install 'xe2rt[models]')")
        return []
    n_layers = layers(ctx.quick)
    contexts = (PROMPT, 256) if ctx.quick else (PROMPT, 2048)
    results = []
    root = Path(tempfile.mkdtemp(prefix="xe2rt-bench-decode-"))
    peers = getattr(ctx, "peers", {}) or {}
    try:
        written = {}
        for name, weights, group, *act in (QUICK_ROWS if ctx.quick else ROWS):
            activations = act[0] if act else "auto"
            if activations == "q8" and not gemv_w4a16.runs_q8(ctx.queue, ctx.target):
                ctx.say(f"  decode {name} w4 g{group} q8: skipped (gemv_w4a16_avx2_q8 runs on CPU devices with AVX2)")
                continue
            fmt = "awq" if weights == "awq" else "fp16"
            if (name, fmt) not in written:
                ctx.say(f"  decode: writing random {name} {fmt} ({n_layers} layers)")
                written[name, fmt] = rnd.write(name, root / f"{name}-{fmt}", fmt=fmt, layers=n_layers, seed=1,
                                               group=group)
            folder = written[name, fmt]
            weights = "auto" if weights == "awq" else weights
            t0 = time.perf_counter()
            # an in-order queue on the run's device, as llm.load makes by default (docs/llm.md: prefill 1.7-2.2x)
            queue = dpctl.SyclQueue(ctx.queue.sycl_context, ctx.queue.sycl_device, property="in_order")
            model = llm.load(folder, queue=queue, weights=weights, group_size=group,
                             max_tokens=max(contexts) + DECODE_STEPS + 2, progress=False, activations=activations)
            load_s = time.perf_counter() - t0
            kind = ("awq g128" if fmt == "awq" else "fp16") if weights == "auto" else f"{weights} g{group}"
            kind += " q8-act" if activations == "q8" else ""
            if model.cfg.num_experts:
                kind += " (experts W4)"
            rng = np.random.default_rng(0)
            prompt = rng.integers(0, model.cfg.vocab, PROMPT).astype(np.int32)
            model.generate(prompt, 2)  # first calls build kernels
            times = []
            for _ in range(1 if ctx.quick else 3):
                model.generate(prompt, 1)
                times.append(model.step_seconds[0])
            prefill = statistics.median(times)
            ctx.say(f"  decode {name} {kind}: load {load_s:.1f} s, prefill {PROMPT / prefill:.1f} tok/s")
            peer = _peer(ctx, peers, name, weights, group, folder, root) if peers else None
            for context in contexts:
                ids = rng.integers(0, model.cfg.vocab, context).astype(np.int32)
                per_token, host, kernels, submissions = _decode_rate(model, ids, 4 if ctx.quick else DECODE_STEPS)
                nbytes = bytes_per_token(model, context)
                how = "1 command buffer" if submissions != kernels else f"{submissions:.0f} submissions"
                note = (f"load {load_s:.1f} s, prefill {PROMPT / prefill:.1f} tok/s, decode {1 / per_token:.1f} "
                        f"tok/s, host {host * 1e3:.2f} ms/token, {kernels:.0f} kernels/token in {how}, "
                        f"{n_layers} layers")
                if context == PROMPT and submissions != kernels:
                    note += _launch_by_launch(model, ids, 4 if ctx.quick else DECODE_STEPS)
                if peer and context == PROMPT:
                    note += (f"; llama.cpp {peer['label']}: pp128 {peer['pp']:.1f} tok/s, tg {peer['tg']:.1f} tok/s"
                             f" -> decode ratio {1 / per_token / peer['tg']:.2f}x, prefill ratio "
                             f"{PROMPT / prefill / peer['pp']:.2f}x")
                r = Result("decode", f"{name} ctx {context}", kind, per_token, per_token, bytes=nbytes, note=note,
                           read_gbps=ctx.read_gbps)
                results.append(r)
                ctx.say(f"    ctx {context}: {1 / per_token:.1f} tok/s, {nbytes / per_token / 1e9:.1f} GB/s")
            del model
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


# ---------------------------------------------------------------------------------------------------- llama.cpp
def write_gguf(folder: Path, out: Path) -> Path:
    """The fp16 checkpoint at `folder` (Llama) as an F16 GGUF (arch llama, no tokenizer: llama-bench needs none)."""
    import gguf
    from ..models.checkpoint import Checkpoint, read_config
    cfg = read_config(folder)
    if cfg.architecture != "LlamaForCausalLM":
        raise ValueError(f"the llama.cpp peer writes arch llama only, not {cfg.architecture}")
    ck = Checkpoint(folder)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(cfg.hidden)
    w.add_block_count(cfg.layers)
    w.add_feed_forward_length(cfg.intermediate)
    w.add_head_count(cfg.heads)
    w.add_head_count_kv(cfg.kv_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.eps)
    w.add_vocab_size(cfg.vocab)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("none")
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    part = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
            "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
            "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name in ck.tensors:
        if name in names:
            target = names[name]
        else:
            i, rest = name.split(".")[2], ".".join(name.split(".")[3:-1])
            target = f"blk.{i}.{part[rest]}.weight"
        a = ck.fp16(name)
        w.add_tensor(target, a.astype(np.float32) if a.ndim == 1 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _peer(ctx, peers: dict, name: str, weights: str, group: int, folder: Path, root: Path) -> dict | None:
    bindir = peers.get("llama.cpp")
    if bindir is None or not name.startswith("Llama"):
        return None
    bindir = Path(bindir)
    try:
        f16 = root / f"{name}-f16.gguf"
        if not f16.exists():
            write_gguf(folder, f16)
        path, label = f16, "F16"
        if weights == "w4":
            path, label = root / f"{name}-q4_0.gguf", "Q4_0 --pure"
            if not path.exists():
                subprocess.run([str(bindir / "llama-quantize"), "--pure", str(f16), str(path), "Q4_0"], check=True,
                               capture_output=True, timeout=1800)
        threads = str(os.cpu_count() or 2)
        res = subprocess.run([str(bindir / "llama-bench"), "-m", str(path), "-p", str(PROMPT), "-n", "32", "-t",
                              threads, "-o", "json"], check=True, capture_output=True, text=True, timeout=3600)
        rows = json.loads(res.stdout)
        pp = next(r["avg_ts"] for r in rows if r.get("n_prompt") == PROMPT and r.get("n_gen") == 0)
        tg = next(r["avg_ts"] for r in rows if r.get("n_gen") == 32 and r.get("n_prompt") == 0)
        ctx.say(f"    llama.cpp {label}: pp{PROMPT} {pp:.1f} tok/s, tg32 {tg:.1f} tok/s")
        return {"label": label, "pp": pp, "tg": tg}
    except (OSError, subprocess.SubprocessError, ValueError, StopIteration, KeyError) as exc:
        ctx.say(f"    llama.cpp peer failed: {type(exc).__name__}: {exc}")
        return None
