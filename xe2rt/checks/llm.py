"""End-to-end decoder checks: tiny random checkpoints written to a temporary folder, loaded by xe2rt.models.llm, and
compared with the float64 forward of xe2rt.reference.llm over the weights the model multiplies with.

Metric: cosine similarity per row of logits (1 - cos reported as the error; bound 1e-3, the issue's 0.999). fp16
activations through a few layers put about 1e-3 relative error per element into the logits, so 1 - cos sits near
1e-6 when the model is right; a wrong weight, rope angle, cache slot or norm gives 1 - cos of 1e-2 and more.
  prompt:  logits(ids) for a 20-token prompt (the GEMM path, M > 16) against forward(ids)
  decode:  generate 12 greedy tokens with return_logits; the logits of step i against forward(prompt + tokens[:i])
           at its last row (the KV-cache path on its own: every step reads only cached keys and values)
"""
from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import Check, Result

BOUND = 1e-3
RULE = "1 - cosine per row <= 1e-3 (cos >= 0.999): fp16 activations, fp32 accumulation, vs float64 forward"
PROMPT = 20
NEW = 12

# (name, config, random.write options, load options)
CASES = [
    ("llama GQA llama3-rope untied fp16", "tiny-llama", {"fmt": "fp16"}, {}),
    ("llama bf16 -> w8", "tiny-llama", {"fmt": "bf16"}, {"weights": "w8"}),
    ("llama gptq v1 sym g32", "tiny-llama", {"fmt": "gptq", "group": 32}, {}),
    ("llama gptq asym g128", "tiny-llama", {"fmt": "gptq", "group": 128, "sym": False}, {}),
    ("qwen3 tied head_dim 128 fp16", "tiny-qwen3", {"fmt": "fp16"}, {}),
    ("qwen3 fp16 -> w4 g64", "tiny-qwen3", {"fmt": "fp16"}, {"weights": "w4", "group_size": 64}),
    ("qwen3 awq g64", "tiny-qwen3", {"fmt": "awq", "group": 64, "sym": False}, {}),
    ("qwen3-moe E8 k2 fp16", "tiny-qwen3-moe", {"fmt": "fp16"}, {}),
    ("qwen3-moe compressed-tensors g128", "tiny-qwen3-moe", {"fmt": "compressed-tensors", "group": 128}, {}),
]
QUICK = {CASES[0][0], CASES[4][0], CASES[7][0], CASES[2][0]}


@lru_cache(maxsize=None)
def _folder(config: str, opts: tuple) -> Path:
    from ..models import random as rnd
    root = Path(tempfile.mkdtemp(prefix="xe2rt-llm-check-"))
    return rnd.write(config, root / config, seed=11, **dict(opts))


_models: dict = {}


def _model(queue, config, opts, load_opts, target=None):
    """One loaded model per case and queue, shared by its prompt and decode checks (the last case's only). The model
    runs on the target its device resolves to (XE2RT_TARGET included): bmg / lnl on an Xe2 GPU natively, and on
    another device with software DPAS (the whole Xe2 code path, as `XE2RT_TARGET=bmg` runs it on the CPU device)."""
    from .. import targets
    from ..models import llm
    resolved = targets.resolve(queue.sycl_device)
    if target is not None and resolved != target:
        raise RuntimeError(f"the llm checks run the model on the target its device resolves to ({resolved}), not "
                           f"{target}: set XE2RT_TARGET={target}")
    key = (queue, resolved, config, tuple(sorted(opts.items())), tuple(sorted(load_opts.items())))
    if key not in _models:
        _models.clear()
        # an in-order queue on the check's device, as llm.load makes by default: the decode step then runs as one
        # command buffer where the device has them (xe2rt.graphs), the path users take
        import dpctl
        own = queue if queue.is_in_order else dpctl.SyclQueue(queue.sycl_context, queue.sycl_device,
                                                               property="in_order")
        _models[key] = llm.load(_folder(config, key[3]), queue=own, max_tokens=64, progress=False, **load_opts)
    return _models[key]


def _worst(got, want) -> tuple[float, int]:
    from ..reference.llm import cosine_rows
    err = 1.0 - cosine_rows(got, want)
    return float(err.max()), int(err.argmax())


def _prompt(vocab: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, vocab, PROMPT).astype(np.int32)


def run_prompt(queue, config, opts, load_opts, target=None) -> Result:
    from ..reference.llm import forward
    model = _model(queue, config, opts, load_opts, target)
    ids = _prompt(model.cfg.vocab)
    got = model.logits(ids)
    want = forward(model.cfg, model.reference_weights(), ids)
    err, row = _worst(got, want)
    return Result(err, BOUND, "1 - cos (worst row)", RULE, f"row {row} of {len(ids)}")


def run_decode(queue, config, opts, load_opts, target=None) -> Result:
    from ..reference.llm import forward
    model = _model(queue, config, opts, load_opts, target)
    ids = _prompt(model.cfg.vocab)
    tokens, logits = model.generate(ids, NEW, return_logits=True)
    if len(tokens) != NEW or not np.array_equal(tokens, logits.argmax(axis=1)):
        return Result(float("inf"), BOUND, "1 - cos (worst step)", RULE,
                      f"greedy tokens {tokens.tolist()} are not the argmax of their logits")
    full = forward(model.cfg, model.reference_weights(), np.concatenate([ids, tokens[:-1]]))
    err, step = _worst(logits, full[PROMPT - 1:])
    how = "one command buffer each" if any(model._graphs.values()) else "bound plans"
    return Result(err, BOUND, "1 - cos (worst step)", RULE, f"step {step} of {NEW} greedy steps ({how})")


def checks(quick: bool = False) -> list[Check]:
    out = []
    for name, config, opts, load_opts in CASES:
        if quick and name not in QUICK:
            continue
        for kind, fn in (("prompt", run_prompt), ("decode", run_decode)):
            out.append(Check("llm", f"{name} {kind}",
                             lambda queue, target=None, fn=fn, c=config, o=opts, lo=load_opts: fn(queue, c, o, lo,
                                                                                                   target),
                             targets=("cpu", "bmg", "lnl")))
    return out
