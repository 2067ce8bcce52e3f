"""Prefill attention: out[t, h] = sum_{t'} softmax_{t'}(scale q[t, h] . k[t', g]) v[t', g], g = h // (Hq // Hkv) (GQA),
t' <= t when causal; q [T, Hq, D], k and v [T, Hkv, D] float16 (row t of head h at [t, h, :]), fp32 scores and
online softmax (flash attention), one fp16 rounding per output. Kernels and decomposition: spirv_src/prefill_attention.cl.

Geometry, Xe2 shape: a 16-lane sub-group per (16 query rows, query head), lane = query row; a work-group is
`group_heads` consecutive query heads of one KV head at the same rows, so they walk the same K/V tiles (group_heads =
the largest power of two dividing Hq / Hkv, at most GROUP_HEADS):
    local = (16, group_heads)    global = (ceil(T / 16) * 16, Hq)
The rows of one head are a 2D region (width D * 2 bytes, pitch heads * D * 2 bytes, T rows) read with 2D block loads;
its base must be 64-byte aligned (block2d.h), checked here before launch.
Geometry, CPU shape: two launches. kv_f32 copies k and v to one fp32 scratch array, per KV head contiguous, KB zero
rows after each (2 (Hkv T + KB) D floats; 8 elements per work-item):
    global = ceil((T Hkv D + KB D) / 8) rounded up to 64, local = 64
then one 16-wide packet (work-group) per (16 query rows, query head), lane = query row, K/V read from the scratch
KB tokens at a time (local memory: 2 * 16 D floats, q and o per lane):
    local = (16, 1)              global = (ceil(T / 16) * 16, Hq)
Causal launches issue the longest rows first (the kernels reverse the row-block index).

Variants: "native" (default): DPAS on bmg/lnl, the CPU shape on cpu. "xe2emu": the Xe2-shaped kernels with software DPAS
and 2D block reads, for any target, which is how the Xe2 code path runs on a CPU device.
"""
from __future__ import annotations

import numpy as np

from .. import launch, targets, validate
from ..errors import InputError, InputTypeError, LaunchLimitError
from .common import attention_scale, ceil_div, check_native_xe2, program_for, workspace
from .gemm_fp16 import block2d_rule_breaks

OP = "prefill_attention"
FAMILIES = {"native": "prefill_attention", "xe2emu": "prefill_attention_xe2emu"}
HEAD_DIMS = (64, 128)
MAX_TOKENS = 4096
ROWS = 16  # query rows per sub-group (Xe2) or packet (cpu)
LOG2E = 1.4426950408889634


def group_heads(constants: dict, ratio: int) -> int:
    """Heads per Xe2 work-group: the largest power of two dividing the GQA ratio, at most GROUP_HEADS."""
    g = 1
    while g * 2 <= constants["GROUP_HEADS"] and ratio % (g * 2) == 0:
        g *= 2
    return g


def geometry(constants: dict, t: int, hq: int, hkv: int) -> dict:
    rows = ceil_div(t, ROWS) * ROWS
    if constants["XE2_SHAPE"]:
        return {"local": (ROWS, group_heads(constants, hq // hkv)), "global": (rows, hq)}
    return {"local": (ROWS, 1), "global": (rows, hq)}


def cpu_static_slm_bytes(constants: dict, d: int) -> int:
    """Local memory the CPU-shaped kernel declares (q_st, o_st in prefill_attention.cl)."""
    return 4 * 2 * ROWS * d


def cpu_scratch_floats(constants: dict, t: int, hkv: int, d: int) -> int:
    """fp32 K and V copy of the CPU shape: per array Hkv T rows plus KB zero rows, D floats each."""
    return 2 * (hkv * t + constants["KB"]) * d


CONVERT_LOCAL = 64


def _validate(q, k, v, causal, scale, out):
    if not isinstance(causal, (bool, np.bool_)):
        raise InputTypeError(f"{OP}: causal must be True or False, got {type(causal).__name__} {causal!r}")
    for name, a in (("q", q), ("k", k), ("v", v)):
        validate.device_array(OP, name, a, dtypes=[np.float16], ndims=[3])
    t, hq, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise InputError(f"{OP}: k and v must have the same shape [T, Hkv, D], got k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)}")
    t_k, hkv, d_k = k.shape
    if t_k != t:
        raise InputError(f"{OP}: q and k/v must have the same number of tokens T (prefill: every token attends to "
                         f"the prompt), got q {tuple(q.shape)} (T = {t}) and k {tuple(k.shape)} (T = {t_k})")
    if d_k != d:
        raise InputError(f"{OP}: q and k/v must have the same head_dim D, got q {tuple(q.shape)} (D = {d}) and k "
                         f"{tuple(k.shape)} (D = {d_k})")
    if d not in HEAD_DIMS:
        raise InputError(f"{OP}: head_dim D must be 64 or 128, got {d} (q shape {tuple(q.shape)})")
    if not 1 <= t <= MAX_TOKENS:
        raise InputError(f"{OP}: the number of tokens T must be in [1, {MAX_TOKENS}], got {t}; split a longer prompt "
                         f"into chunks")
    if hkv < 1 or hq < 1 or hq % hkv:
        raise InputError(f"{OP}: query heads Hq = {hq} must be a positive multiple of KV heads Hkv = {hkv} (GQA)")
    attention_scale(OP, scale, d)
    queue = validate.same_queue(OP, q=q, k=k, v=v, out=out)
    validate.require_fp16(OP, queue)
    if out is not None:
        validate.out_array(OP, out, shape=(t, hq, d), dtype=np.float16, queue=queue, inputs={"q": q, "k": k, "v": v})
    return queue, t, hq, hkv, d


def block2d_breaks(q, k, v, t: int, hq: int, hkv: int, d: int) -> list[str]:
    """Why the operands break the 2D block rules (empty: they meet them). Head offsets are multiples of 128 bytes, so
    each array's base decides; widths (D * 2 bytes), pitches (heads * D * 2) and heights (T <= 4096) always pass."""
    breaks = []
    for name, a, heads in (("q", q, hq), ("k", k, hkv), ("v", v, hkv)):
        breaks += block2d_rule_breaks(name, validate.address(a), 2 * d, t, 2 * heads * d)
    return breaks


def run(q, k, v, *, causal: bool = True, scale=None, out=None, target: str | None = None, variant: str = "native",
        events: list | None = None):
    """Validate, launch, return (out, event of the last launch); `events`, a list, receives every launch's event in
    order (the benchmark times their span)."""
    if variant not in FAMILIES:
        raise InputError(f"{OP}: variant must be one of {sorted(FAMILIES)}, got {variant!r}")
    queue, t, hq, hkv, d = _validate(q, k, v, causal, scale, out)
    chosen = targets.resolve(queue.sycl_device, target)
    check_native_xe2(OP, variant == "native", chosen, queue)
    program = program_for(queue, FAMILIES[variant], chosen)
    constants = program.constants
    if constants["XE2_SHAPE"]:
        breaks = block2d_breaks(q, k, v, t, hq, hkv, d)
        if breaks:
            raise InputError(f"{OP}: the Xe2 kernels read q, k and v with 2D block loads, whose rules these arrays "
                             f"break: {'; '.join(breaks)}. A fresh array (dpnp.copy) starts 64-byte aligned.")
    elif cpu_static_slm_bytes(constants, d) > queue.sycl_device.local_mem_size:
        raise LaunchLimitError(f"{OP}: the cpu kernel needs {cpu_static_slm_bytes(constants, d)} bytes of local "
                               f"memory at D = {d}; device {queue.sycl_device.name!r} has "
                               f"{queue.sycl_device.local_mem_size}. Rebuild with a smaller KB.")
    scale_log2 = attention_scale(OP, scale, d) * LOG2E
    o = out if out is not None else launch.new_output((t, hq, d), np.float16, queue)
    geo = geometry(constants, t, hq, hkv)
    if constants["XE2_SHAPE"]:
        event = launch.launch(program.kernel(f"{OP}_d{d}"), [q, k, v, o, t, hq, hkv, int(bool(causal)), scale_log2],
                              geo["global"], geo["local"], queue)
        if events is not None:
            events.append(event)
        return o, event
    # K and V in fp32: the thread's scratch for this queue (common.workspace), not a fresh array per call: the host
    # runs ahead of the queue, and a model's prompt would otherwise hold every layer's scratch at once until its
    # kernels ran (16 layers x 16 MB at a 4000-token Llama-3.2-1B prompt)
    kv32 = workspace(OP, queue, cpu_scratch_floats(constants, t, hkv, d), np.float32)
    items = ceil_div(ceil_div(t * hkv * d + constants["KB"] * d, 8), CONVERT_LOCAL) * CONVERT_LOCAL
    steps = [launch.prepare(program.kernel(f"{OP}_kv_f32"), [k, v, kv32, t, hkv, d], items, CONVERT_LOCAL, queue),
             launch.prepare(program.kernel(f"{OP}_d{d}"), [q, kv32, o, t, hq, hkv, int(bool(causal)), scale_log2],
                            geo["global"], geo["local"], queue)]
    events = [] if events is None else events
    events.extend(launch.enqueue(step) for step in steps)
    return o, events[-1]


def prefill_attention(q, k, v, *, causal: bool = True, scale=None, out=None, target: str | None = None):
    """Attention of a prompt: q [T, Hq, D], k and v [T, Hkv, D] float16 (D 64 or 128, Hq a multiple of Hkv,
    T <= 4096) -> [T, Hq, D] float16, softmax(scale q k^T) v per head with KV head h // (Hq // Hkv), a causal mask when
    `causal`, scale default D^-0.5; fp32 scores, running max and sum. Returns without waiting. `target` forces a
    kernel target (bmg, lnl, cpu)."""
    return run(q, k, v, causal=causal, scale=scale, out=out, target=target)[0]
