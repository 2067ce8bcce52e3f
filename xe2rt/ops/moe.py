"""Fused MoE expert FFN (W4A16) for decode, and the MoE decode layer built on it.

moe_ffn_w4a16: y[t] = sum_j w[t, j] down_e(silu(gate_e x[t]) * up_e x[t]), e = ids[t, j], x float16 [T, H] with
1 <= T <= 64, experts a QuantizedW4Experts (gate_up [E, 2I, H], down [E, H, I]), ids int32 [T, k], w [T, k] float16 or
float32 (as softmax_topk returns them). fp32 accumulation; h = silu(gate) * up and the per-pair outputs stay fp32;
one fp16 rounding of y.

Decomposition (spirv_src/moe_ffn_w4a16.cl), no host readback; pair p = t k + j:
  1. moe_route       1 work-item: counting sort of the T k ids by expert into `meta` (chosen experts in increasing
                     order, one per slot; each slot's pairs in increasing p; count of ids outside [0, E)).
  2. moe_gate_up     work-groups over (group, block of I rows), a group being the pairs that chose one expert:
                     slots = min(E, T k) groups (the most experts T k ids can name); a slot past the chosen experts
                     exits. Each thread reads its expert's RPT gate + RPT up rows once per PB pairs and writes h[p, :]
                     (fp32 workspace [T k, I]).
  3. moe_down        the same over (group, block of H rows) with x = h[p]: ypair (fp32 workspace [T k, H]).
  4. moe_combine     y[t, 8 columns] per work-item: sum over j in order of w[t, j] ypair[t k + j], fp16 out.
  cpu, T k <= FUSED_PAIRS (16: decode, T = 1 and 2 at k = 8): no route launch. Groups are the T k pairs: pair p leads
       the group of its expert when no earlier pair named it, and its thread gathers the group's pairs from the ids
       (O(T k) reads); other groups exit. down's work-item 0 writes meta's two counts. This saves the route kernel
       and, more, the wait for it: it ran in 1 us and the gate_up launch behind it started about 30 us later (the
       host still packing and submitting it), 4% of the Qwen3-30B-A3B T = 1 call.
  All launches are checked and packed before the first is queued.
  Xe2: a 16-lane sub-group per (RPT rows, slot), SGS sub-groups per work-group -> local SGS x 16,
       global slots x ceil(rows / (SGS RPT)) x local.
  cpu: a work-item per (RPT rows of I, or DOWN_RPT rows of H, and group), LOCAL per work-group -> local LOCAL,
       global groups x ceil(rows / (LOCAL RPT)) x LOCAL; rows dealt out strided within the group.
  combine: T H / 8 work-items, local 16 (H is a multiple of 128).
Every expert's weights are read from memory once per call however many tokens chose it: the pairs of an expert are
taken PB at a time, and a further chunk re-reads only the thread's RPT rows, from cache.

ids outside [0, E) (vLLM's expert-parallel convention marks experts of another rank with -1): the pair is dropped,
it contributes zero, and the route kernel counts it on the device (`run` returns that count as a 1-element int32
array). Checking values on the host would need a readback, which an asynchronous op must not do;
`check_ids=True` does it anyway (it waits for the queue) and raises InputError before anything is launched.

moe_layer(x, router_w, experts, k): logits = gemm_fp16(x, router_w, b_layout="nk"), softmax_topk(logits, k),
moe_ffn_w4a16, all queued; everything is validated before the first launch.
"""
from __future__ import annotations

import operator

import dpnp
import numpy as np

from .. import launch, targets, validate
from ..errors import InputError, InputTypeError
from ..quant_experts import QuantizedW4Experts
from . import gemm_fp16 as gemm_op
from . import routing as routing_op
from .common import ceil_div, is_xe2, program_for

OP = "moe_ffn_w4a16"
FAMILY = "moe_ffn_w4a16"
MAX_TOKENS = 64
META_HEAD = 2


def kernel_name(stage: str, qw) -> str:
    return f"moe_{stage}_g{qw.group_size}_{'sym' if qw.symmetric else 'zp'}"


def geometry(constants: dict, target: str, stage: str, n_slots: int, n_rows: int) -> tuple[int, int]:
    """(global, local) of a gate_up / down launch over n_slots groups (expert slots, or pairs on the fused cpu path)
    of n_rows output rows each."""
    if is_xe2(target):
        local, rows_per_group = constants["SGS"] * constants["SG"], constants["SGS"] * constants["RPT"]
    else:
        rpt = constants["RPT"] if stage == "gate_up" else constants["DOWN_RPT"]
        local, rows_per_group = constants["LOCAL"], constants["LOCAL"] * rpt
    return n_slots * ceil_div(n_rows, rows_per_group) * local, local


def meta_size(n_slots: int, pairs: int, experts: int) -> int:
    return META_HEAD + n_slots + (n_slots + 1) + pairs + experts


def _check_experts(op: str, experts) -> None:
    if not isinstance(experts, QuantizedW4Experts):
        raise InputTypeError(f"{op}: experts must be a QuantizedW4Experts (xe2rt.quantize_w4_experts / "
                             f"experts_from_gptq / experts_from_awq), got {type(experts).__name__}")
    experts.check(op)
    if experts.sycl_queue is None:
        raise InputError(f"{op}: experts' parts are numpy (host) arrays; the kernels need them on the device: "
                         f"experts = experts.to_device(x.sycl_queue)")


def _expert_parts(experts) -> dict:
    """Every device array of the experts, by name: an `out` overlapping any of them would overwrite the weights."""
    parts = {}
    for stack in ("gate_up", "down"):
        qw = getattr(experts, stack)
        for name in ("packed", "scales", "zeros"):
            if getattr(qw, name) is not None:
                parts[f"experts.{stack}.{name}"] = getattr(qw, name)
    return parts


def _check_xe2_alignment(op: str, chosen: str, x, experts) -> None:
    """Xe2 targets read the packed weights with sub-group block reads and x with dword loads."""
    if is_xe2(chosen) and x.shape[0]:
        for name, part, align in (("experts.gate_up.packed", experts.gate_up.packed, 16),
                                  ("experts.down.packed", experts.down.packed, 16), ("x", x, 4)):
            if validate._byte_range(part)[0] % align:
                raise InputError(f"{op}: {name} must start {align}-byte aligned on Xe2 targets (sub-group block reads "
                                 f"/ dword loads); it is a view with an odd offset: pass dpnp.copy({name})")


def _check_routing(op: str, x, topk_ids, topk_weights, experts) -> int:
    """Shapes and dtypes of x [T, H], ids [T, k], weights [T, k] against the experts; returns k."""
    n_exp, hidden, _ = experts.shape
    validate.device_array(op, "x", x, dtypes=[np.float16], ndims=[2])
    validate.device_array(op, "topk_ids", topk_ids, dtypes=[np.int32], ndims=[2])
    validate.device_array(op, "topk_weights", topk_weights, dtypes=[np.float16, np.float32], ndims=[2])
    t, h = x.shape
    if h != hidden:
        raise InputError(f"{op}: x is [T, H] = {tuple(x.shape)} but the experts have H = {hidden} "
                         f"(gate_up [E*2I, H] = {experts.gate_up.shape}); H must match")
    if t > MAX_TOKENS:
        raise InputError(f"{op}: T = {t} tokens exceeds the decode limit of {MAX_TOKENS}; use a grouped GEMM for "
                         f"prefill or split the batch")
    if topk_ids.shape[0] != t:
        raise InputError(f"{op}: topk_ids must be [T, k] with T = {t} (x's rows), got {tuple(topk_ids.shape)}")
    k = topk_ids.shape[1]
    if not 1 <= k <= n_exp:
        raise InputError(f"{op}: k = {k} (topk_ids [T, k] = {tuple(topk_ids.shape)}) must satisfy "
                         f"1 <= k <= E = {n_exp}")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise InputError(f"{op}: topk_weights must have topk_ids' shape {tuple(topk_ids.shape)}, got "
                         f"{tuple(topk_weights.shape)}")
    return k


def run(x, experts, topk_ids, topk_weights, *, out=None, target: str | None = None, check_ids: bool = False,
        events: list | None = None):
    """Validate, launch, and return ((y, invalid_ids), event): invalid_ids is a 1-element int32 device array, the
    number of ids outside [0, E) that were dropped; event (the last launch's) None when nothing was launched (T = 0).
    `events`, a list, receives the launches' events in order (the benchmark times their span)."""
    _check_experts(OP, experts)
    k = _check_routing(OP, x, topk_ids, topk_weights, experts)
    if not isinstance(check_ids, (bool, np.bool_)):
        raise InputTypeError(f"{OP}: check_ids must be True or False, got {check_ids!r}")
    n_exp, hidden, inter = experts.shape
    gu, dn = experts.gate_up, experts.down
    queue = validate.same_queue(OP, x=x, topk_ids=topk_ids, topk_weights=topk_weights, experts=experts,
                                out=out)
    validate.require_fp16(OP, queue)
    t = x.shape[0]
    if out is not None:
        validate.out_array(OP, out, shape=(t, hidden), dtype=np.float16, queue=queue,
                           inputs={"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights,
                                   **_expert_parts(experts)})
    # row indices (E * 2I, E * H) are 32-bit in the kernels; byte offsets are 64-bit
    validate.fits_int32(OP, E_x_2I=gu.shape[0], E_x_H=dn.shape[0])
    chosen = targets.resolve(queue.sycl_device, target)
    _check_xe2_alignment(OP, chosen, x, experts)
    program = program_for(queue, FAMILY, chosen)
    if check_ids and t:
        host_ids = launch.to_host(topk_ids)  # synchronizing, by request
        bad = (host_ids < 0) | (host_ids >= n_exp)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise InputError(f"{OP}: topk_ids must lie in [0, E = {n_exp}); {int(bad.sum())} do not (first: "
                             f"topk_ids[{r}, {c}] = {int(host_ids[r, c])})")
    y = out if out is not None else dpnp.empty((t, hidden), dtype=np.float16, sycl_queue=queue)
    pairs = t * k
    n_slots = min(n_exp, pairs)
    c = program.constants
    xe2 = is_xe2(program.target)
    fused = not xe2 and pairs <= c["FUSED_PAIRS"]  # cpu: no route launch, gate_up and down group the ids themselves
    meta = dpnp.empty(meta_size(n_slots, pairs, n_exp) if t and not fused else META_HEAD, dtype=np.int32,
                      sycl_queue=queue)
    if t == 0:
        meta.fill(0)  # nothing routed, nothing dropped; no kernel launched
        return (y, meta[1:2]), None
    h = dpnp.empty((pairs, inter), dtype=np.float32, sycl_queue=queue)
    ypair = dpnp.empty((pairs, hidden), dtype=np.float32, sycl_queue=queue)
    gu_zeros = gu.packed if gu.zeros is None else gu.zeros  # the symmetric kernels never read it
    dn_zeros = dn.packed if dn.zeros is None else dn.zeros
    wtag = "wf16" if topk_weights.dtype == np.float16 else "wf32"

    # every launch is checked and packed before the first is queued: the route kernel takes about a microsecond and
    # packing a launch tens of them, so packing in between left gate_up waiting for the host
    steps = [] if fused else [launch.prepare(program.kernel("moe_route"), [topk_ids, meta, pairs, n_exp, n_slots], 1,
                                             1, queue)]
    # cpu kernels take the ids too (fused: they group them themselves); gate_up never reads `act` and down never
    # reads `x`: they are passed only to fill the shared signature
    cpu_args = [] if xe2 else [topk_ids]
    cpu_tail = [] if xe2 else [pairs, n_exp, int(fused)]
    groups = pairs if fused else n_slots
    for stage, qw, zeros, out_, rows in (("gate_up", gu, gu_zeros, h, inter), ("down", dn, dn_zeros, ypair, hidden)):
        g, l = geometry(c, program.target, stage, groups, rows)
        steps.append(launch.prepare(program.kernel(kernel_name(stage, qw)),
                                    [x, h, qw.packed, qw.scales, zeros, meta, *cpu_args, out_, k, hidden, inter,
                                     n_slots, *cpu_tail], g, l, queue))
    steps.append(launch.prepare(program.kernel(f"moe_combine_{wtag}"), [topk_weights, topk_ids, ypair, y, k, n_exp,
                                                                       hidden], t * hidden // 8, 16, queue))
    events = [] if events is None else events
    events.extend(launch.enqueue(step) for step in steps)
    return (y, meta[1:2]), events[-1]


def moe_ffn_w4a16(x, experts: QuantizedW4Experts, topk_ids, topk_weights, *, out=None, target: str | None = None,
                  check_ids: bool = False):
    """Fused MoE expert FFN for decode: y [T, H] float16 = sum_j topk_weights[t, j] *
    down_e(silu(gate_e x[t]) * up_e x[t]) with e = topk_ids[t, j], for float16 x [T, H] (1 <= T <= 64; T = 0 gives
    an empty y and launches nothing), experts a QuantizedW4Experts on x's queue, topk_ids int32 [T, k] and
    topk_weights float16/float32 [T, k] as softmax_topk returns them. Ids outside [0, E) contribute zero (counted on
    the device, see xe2rt.ops.moe.run); check_ids=True reads the ids back first (synchronizing) and raises
    InputError for such ids before anything is launched. Asynchronous otherwise."""
    return run(x, experts, topk_ids, topk_weights, out=out, target=target, check_ids=check_ids)[0][0]


def _check_router(op: str, x, router_w, experts, k):
    n_exp, hidden, _ = experts.shape
    validate.device_array(op, "router_w", router_w, dtypes=[np.float16], ndims=[2])
    if tuple(router_w.shape) != (n_exp, hidden):
        raise InputError(f"{op}: router_w must be [E, H] = {(n_exp, hidden)} to match the experts, got "
                         f"{tuple(router_w.shape)}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputTypeError(f"{op}: k must be an int, got {type(k).__name__} {k!r}")
    k = operator.index(k)
    if not 1 <= k <= min(n_exp, 16):
        raise InputError(f"{op}: k must satisfy 1 <= k <= min(E, 16) = {min(n_exp, 16)}, got {k}")
    return k


def run_layer(x, router_w, experts, k, *, out=None, target: str | None = None):
    """Validate everything, then queue router GEMM, softmax_topk and moe_ffn_w4a16. Returns
    ((y, topk_weights, topk_ids), event)."""
    op = "moe_layer"
    _check_experts(op, experts)
    k = _check_router(op, x, router_w, experts, k)
    n_exp, hidden, _ = experts.shape
    validate.device_array(op, "x", x, dtypes=[np.float16], ndims=[2])
    t = x.shape[0]
    queue = validate.same_queue(op, x=x, router_w=router_w, experts=experts, out=out)
    # what the three ops check, with the arrays they will be given, before the first launch
    ids = dpnp.empty((t, k), dtype=np.int32, sycl_queue=queue)
    weights = dpnp.empty((t, k), dtype=np.float16, sycl_queue=queue)
    _check_routing(op, x, ids, weights, experts)
    program_for(queue, FAMILY, target)  # loads (or fails) before the first launch
    _check_xe2_alignment(op, targets.resolve(queue.sycl_device, target), x, experts)
    if out is not None:  # moe_ffn_w4a16's own check of out comes after the router's launches: all of it here
        validate.out_array(op, out, shape=(t, hidden), dtype=np.float16, queue=queue,
                           inputs={"x": x, "router_w": router_w, **_expert_parts(experts)})
    routing_program = program_for(queue, routing_op.FAMILY, target)
    routing_op._check_k(op, k, n_exp, routing_program.constants, routing_program.target)
    if t == 0:
        y = out if out is not None else dpnp.empty((0, hidden), dtype=np.float16, sycl_queue=queue)
        return (y, weights, ids), None
    logits, _ = gemm_op.run(x, router_w, b_layout="nk", target=target)
    (weights, ids), _ = routing_op.run("softmax_topk", logits, k, routing_op.MODE_SOFTMAX_NORMALIZE,
                                       out=(weights, ids), target=target)
    (y, _), event = run(x, experts, ids, weights, out=out, target=target)
    return (y, weights, ids), event


def moe_layer(x, router_w, experts: QuantizedW4Experts, k: int, *, out=None, target: str | None = None):
    """A MoE decode layer: logits = x @ router_w.T (float16 router_w [E, H], fp32 accumulation, float16 logits),
    (topk_weights, topk_ids) = softmax_topk(logits, k), y = moe_ffn_w4a16(x, experts, topk_ids, topk_weights).
    All queued asynchronously; every input is validated before the first launch. Returns y float16 [T, H]."""
    return run_layer(x, router_w, experts, k, out=out, target=target)[0][0]
