"""Decode attention (flash-decoding): one new token's query heads against a KV cache.

decode_attention(q, k_cache, v_cache, length, *, scale=None, out=None, max_length=None): q float16 [Hq, D],
k_cache / v_cache float16 [Hkv, max_tokens, D] C-contiguous (token t of kv head h at [h, t, :]), D 64 or 128,
Hq = G Hkv with 1 <= G <= 16 (query head hq reads kv head hq // G, Hugging Face's repeat_kv order),
1 <= length <= max_tokens (an int, or a one-element int32 device array with max_length). Returns
out[hq] = softmax(scale q[hq] . k[hq // G, t], t < length) . v[hq // G, t] as float16 [Hq, D]; fp32 scores, softmax
and sums, one fp16 rounding. scale defaults to D^-0.5.

Decomposition (spirv_src/decode_attention.cl):
  split rule   S = clamp(ceil(FILL / (Hkv x P)), 1, ceil(length / MIN_CHUNK), MAX_SPLITS) splits of the context,
               each of chunk = roundup(ceil(length / S), 16) whole tokens (the last ones may be short or empty).
               FILL is what fills the device: its hardware threads on Xe2 (xe2rt.targets.hw_threads: BMG-G21 640,
               LNL 256 at 256 GRF), compute units x ITEMS_PER_CU on the cpu; P = sub-groups (Xe2) or work-items (cpu)
               per (kv head, split). MIN_CHUNK (64 tokens Xe2, 256 cpu) keeps a split long enough to amortize its
               partial's write and merge. E.g. Llama-3.1-8B (Hkv 8, G 4) on bmg: S = 80 from 5120 tokens up; on a
               2-core cpu (ITEMS_PER_CU 2): S = 1, the 8 kv heads' work-items already share 2 cores evenly (equal
               work per item, so 2 per core suffice; more splits would only add the reduce launch).
  launch 1     decode_attention_d<D>: one work-group per (kv head, split) with all G query heads of that kv head, so
               each K / V row is read once per call; tokens in blocks of 16 with an online softmax per head; writes
               the split's unnormalized output, max and sum (fp32) to the workspace.
                 Xe2: ceil(G / GH) sub-groups of 16 lanes (GH = 4 heads each) -> local 16 ceil(G / GH),
                      global Hkv S local; D across lanes, K / V rows by sub-group block reads.
                 cpu: one work-item -> local 1, global Hkv S; rows as float16 vectors (vload_half16). On hosts
                      without AVX-512 the same geometry from decode_attention_cpu256 (family(): registers of 8
                      floats, spirv_src/decode_attention.toml), whose kernels for G a multiple of 8 are
                      decode_attention_g8_d<D> / decode_attention_at_g8_d<D> (kernel_names: 8 heads per pass).
  launch 2     decode_attention_reduce_d<D>: per query head M = max m_s, out = sum 2^(m_s - M) o_s /
               sum 2^(m_s - M) l_s.  Xe2: a sub-group per head (global 16 Hq, local 16); cpu: a work-item per head.
  S == 1       (short contexts, and long ones on small cpus) launch 1 normalizes and writes out itself: one launch.
  device length  `length` a one-element int32 device array: launch 1 is decode_attention_at_d<D>, which reads it when
               it runs, clamps it to [1, max_length] and derives the chunk as above; S is chosen for max_length.

Workspace: S x Hq x (D + 2) fp32 floats (partials, then (m, l) pairs). The public op takes it from a cache per
(thread, queue) holding MAX_SPLITS x Hq x (D + 2) floats (grown when a call needs more; 2.1 MB at Hq 32, D 128):
  - warm calls (xe2rt.fastcall) stay cached, because the workspace reaches the recorded op as an ordinary array
    argument of the inner op (an array the op allocated itself would make every call a cold one, as moe's are);
  - no race: successive calls of one thread on one queue are ordered (each launch depends on the previous one through
    dpnp's order manager, or the queue is in-order), and other threads use their own workspace;
  - xe2rt.bind gives the plan a workspace of its own (the plan holds it), so a plan and direct calls never share one.
A call that allocated per call would also pay a USM allocation and a free on the critical path of every token.
"""
from __future__ import annotations

import math
import operator

import dpnp
import numpy as np

from .. import fastcall, launch, targets, validate
from ..errors import InputError, InputTypeError
from .common import attention_scale, ceil_div, is_xe2, program_for, workspace

OP = "decode_attention"
FAMILY = "decode_attention"
CPU256_FAMILY = "decode_attention_cpu256"  # the cpu kernels shaped for 16 ymm registers (decode_attention.toml)
HEAD_DIMS = (64, 128)
MAX_GQA = 16
MAX_SPLITS = 128  # also the workspace capacity per (Hq, D); = MAX_SPLITS in decode_attention.toml
LOG2E = 1.0 / math.log(2.0)

_fill_cache: dict = {}


def _fill(device, target: str, constants: dict) -> int:
    """Work-items (cpu) or sub-groups (Xe2) that fill the device."""
    key = (device, target)
    fill = _fill_cache.get(key)
    if fill is None:
        if is_xe2(target):
            fill = targets.hw_threads(device, target)
        else:
            fill = max(1, device.max_compute_units) * constants["ITEMS_PER_CU"]
        _fill_cache[key] = fill
    return fill


def family(queue, target: str) -> str:
    """The family a call runs: on the cpu target of a host without AVX-512 (no avx512f: 16 vector registers of 8
    floats) the kernels shaped for it, decode_attention_cpu256; the default family everywhere else."""
    return CPU256_FAMILY if targets.cpu_256bit(queue.sycl_device, target) else FAMILY


def split_plan(constants: dict, target: str, fill: int, hkv: int, g: int, length: int) -> tuple[int, int]:
    """(S, chunk): the split rule written in the module docstring."""
    per_split = ceil_div(g, constants["GH"]) if is_xe2(target) else 1
    s = ceil_div(fill, hkv * per_split)
    s = max(1, min(s, ceil_div(length, constants["MIN_CHUNK"]), constants["MAX_SPLITS"]))
    bt = constants["BT"]
    chunk = ceil_div(ceil_div(length, s), bt) * bt
    return s, chunk


def workspace_floats(splits: int, hq: int, d: int) -> int:
    return splits * hq * (d + 2)


def _check(q, k_cache, v_cache, length, scale, out, max_length=None):
    validate.device_array(OP, "q", q, dtypes=[np.float16], ndims=[2])
    validate.device_array(OP, "k_cache", k_cache, dtypes=[np.float16], ndims=[3])
    validate.device_array(OP, "v_cache", v_cache, dtypes=[np.float16], ndims=[3])
    hkv, max_tokens, d = k_cache.shape
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise InputError(f"{OP}: v_cache must have k_cache's shape [Hkv, max_tokens, D] = {tuple(k_cache.shape)}, "
                         f"got {tuple(v_cache.shape)}")
    if d not in HEAD_DIMS:
        raise InputError(f"{OP}: head_dim D must be 64 or 128, got D = {d} (k_cache [Hkv, max_tokens, D] = "
                         f"{tuple(k_cache.shape)})")
    hq, dq = q.shape
    if dq != d:
        raise InputError(f"{OP}: q must be [Hq, D] with the caches' D = {d}, got {tuple(q.shape)}")
    if hkv < 1 or hq % hkv:
        raise InputError(f"{OP}: the query heads Hq = {hq} must be a multiple of the kv heads Hkv = {hkv} (GQA)")
    g = hq // hkv
    if not 1 <= g <= MAX_GQA:
        raise InputError(f"{OP}: query heads per kv head Hq / Hkv = {hq} / {hkv} = {g} must be within 1..{MAX_GQA}")
    length_at = None
    if isinstance(length, np.ndarray):
        raise InputTypeError(f"{OP}: length must be an int or a one-element int32 device array, got a numpy array "
                             f"{length!r}: pass int(length[0]), or dpnp.asarray(length, sycl_queue=q.sycl_queue) "
                             f"for a length read on the device")
    if validate.usm_view(length) is not None:  # a device length, read when the kernel runs
        validate.device_array(OP, "length", length, dtypes=[np.int32], ndims=[1])
        if length.shape[0] != 1:
            raise InputError(f"{OP}: a device length must be an int32 array of one element, got shape "
                             f"{tuple(length.shape)}")
        if isinstance(max_length, (bool, np.bool_)) or not isinstance(max_length, (int, np.integer)):
            raise InputTypeError(f"{OP}: a device length needs max_length, an int bounding its value (it sets the "
                                 f"split count), got {type(max_length).__name__} {max_length!r}")
        length_at, length = length, operator.index(max_length)
        what = "max_length"
    elif max_length is not None:
        raise InputError(f"{OP}: max_length applies to a device length only; with an int length pass length alone "
                         f"(got length {length!r}, max_length {max_length!r})")
    elif isinstance(length, (bool, np.bool_)) or not isinstance(length, (int, np.integer)):
        raise InputTypeError(f"{OP}: length must be an int or a one-element int32 device array, got "
                             f"{type(length).__name__} {length!r}")
    else:
        length = operator.index(length)
        what = "length"
    if not 1 <= length <= max_tokens:
        raise InputError(f"{OP}: {what} must satisfy 1 <= {what} <= max_tokens = {max_tokens} (the caches' "
                         f"axis 1), got {length}")
    qscale = float(np.float32(attention_scale(OP, scale, d) * LOG2E))
    queue = validate.same_queue(OP, q=q, k_cache=k_cache, v_cache=v_cache, length=length_at, out=out)
    validate.require_fp16(OP, queue)
    # token indices in the kernels are 32-bit, and a split's end (start + chunk) may pass length by up to a chunk
    validate.fits_int32(OP, max_tokens_x_2=2 * max_tokens + 32, Hq_x_D=hq * d)
    if out is not None:
        validate.out_array(OP, out, shape=(hq, d), dtype=np.float16, queue=queue,
                           inputs={"q": q, "k_cache": k_cache, "v_cache": v_cache, "length": length_at})
    return queue, hkv, max_tokens, d, hq, g, length, length_at, qscale


def run(q, k_cache, v_cache, length, workspace=None, *, scale=None, out=None, max_length=None,
        target: str | None = None, splits: int | None = None, events: list | None = None):
    """Validate, launch, return (y, event of the last launch). `workspace`: a float32 1-D device array on q's queue
    of at least workspace_floats(S, Hq, D) floats (None: allocated for this call). `splits` overrides the split rule
    (tests: empty splits, many splits); `events`, a list, receives every launch's event (the benchmark's span)."""
    queue, hkv, max_tokens, d, hq, g, length, length_at, qscale = _check(q, k_cache, v_cache, length, scale, out,
                                                                          max_length)
    chosen = targets.resolve(queue.sycl_device, target)
    if is_xe2(chosen):
        for name, a in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
            if validate._byte_range(a)[0] % 16:
                raise InputError(f"{OP}: {name} must start 16-byte aligned on Xe2 targets (sub-group block reads); "
                                 f"it is a view with an odd offset: pass dpnp.copy({name})")
    program = program_for(queue, family(queue, chosen), chosen)
    c = program.constants
    if splits is None:
        s, chunk = split_plan(c, program.target, _fill(queue.sycl_device, program.target, c), hkv, g, length)
    else:
        if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= c["MAX_SPLITS"]:
            raise InputError(f"{OP}: splits must be an int in 1..{c['MAX_SPLITS']}, got {splits!r}")
        s, chunk = splits, ceil_div(ceil_div(length, splits), c["BT"]) * c["BT"]
    need = workspace_floats(s, hq, d) if s > 1 else 1
    if workspace is None:
        workspace = dpnp.empty(need, dtype=np.float32, sycl_queue=queue)
    else:
        validate.device_array(OP, "workspace", workspace, dtypes=[np.float32], ndims=[1])
        if workspace.size < need or workspace.sycl_queue != queue:
            raise InputError(f"{OP}: workspace must hold {need} floats on q's queue, got {workspace.size}")
        for name, a in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("length", length_at), ("out", out)):
            if a is not None and validate.overlaps(workspace, a):
                raise InputError(f"{OP}: workspace overlaps {name}")
    y = out if out is not None else launch.new_output((hq, d), np.float16, queue)
    if is_xe2(program.target):
        local = ceil_div(g, c["GH"]) * c["SG"]
        split_geometry, reduce_geometry = (hkv * s * local, local), (hq * c["SG"], c["SG"])
    else:
        split_geometry, reduce_geometry = (hkv * s, 1), (hq, 1)
    split_name, split_at_name, reduce_name = kernel_names(d, g, program)
    if length_at is None:
        split = [program.kernel(split_name),
                 [q, k_cache, v_cache, workspace, y, g, hq, s, max_tokens, length, chunk, qscale, int(s == 1)]]
    else:  # the kernel reads the length and derives the chunk as split_plan does
        split = [program.kernel(split_at_name),
                 [q, k_cache, v_cache, workspace, y, g, hq, s, max_tokens, length_at, length, qscale, int(s == 1)]]
    steps = [launch.prepare(*split, *split_geometry, queue)]
    if s > 1:
        steps.append(launch.prepare(program.kernel(reduce_name), [workspace, y, hq, s],
                                    *reduce_geometry, queue))
    events = [] if events is None else events
    events.extend(launch.enqueue(step) for step in steps)
    return y, events[-1]


def build_kernels(queue, d: int, g: int, target: str | None = None) -> None:
    """Build the three kernels a decode loop at head_dim d and G query heads per kv head may launch (the split kernel
    with an int or a device length, and the merge that runs once a length needs more than one split), so that the
    first step whose length needs the merge does not build it in the middle of a decode (xe2rt.models.llm calls this
    when it binds a step)."""
    chosen = targets.resolve(queue.sycl_device, target)
    program = program_for(queue, family(queue, chosen), chosen)
    for name in kernel_names(d, g, program):
        program.kernel(name)


def kernel_names(d: int, g: int, program) -> tuple[str, str, str]:
    """(split kernel with an int length, split kernel reading a device length, merge) for head_dim d and G query
    heads per kv head: the heads-in-lanes kernels (decode_attention_g8_*, decode_attention_cpu256 only) when G is a
    multiple of 8 and the program has them."""
    g8 = "g8_" if g % 8 == 0 and f"decode_attention_g8_d{d}" in program.kernel_names else ""
    return f"decode_attention_{g8}d{d}", f"decode_attention_at_{g8}d{d}", f"decode_attention_reduce_d{d}"


def _with_workspace(q, k_cache, v_cache, length, workspace, *, scale=None, out=None, max_length=None,
                    target: str | None = None):
    return run(q, k_cache, v_cache, length, workspace, scale=scale, out=out, max_length=max_length, target=target)[0]


_cached_op = fastcall.cached(_with_workspace)


def _workspace_for(q):
    """The workspace for a call with this q: the thread's cached one for q's queue (a plan's own while binding);
    None when q is not a plausible argument (the op then raises its own error, or allocates)."""
    u = validate.usm_view(q)
    if u is None or u.ndim != 2 or u.dtype != np.float16 or u.shape[1] not in HEAD_DIMS or not 1 <= u.shape[0] <= 4096:
        return None
    return workspace(OP, u.sycl_queue, workspace_floats(MAX_SPLITS, u.shape[0], u.shape[1]), np.float32)


def decode_attention(q, k_cache, v_cache, length, *, scale: float | None = None, out=None, max_length=None,
                     target: str | None = None):
    """Attention of one new token: q float16 [Hq, D] against k_cache / v_cache float16 [Hkv, max_tokens, D] over
    tokens [0, length) (the token's own k / v already written at length - 1). GQA with Hq / Hkv in 1..16, D 64 or
    128, scale default D^-0.5, fp32 softmax. Returns float16 [Hq, D] (or fills `out`) without waiting.

    `length` is an int, or a one-element int32 device array that the kernel reads when it runs, so that one plan
    (xe2rt.bind) serves every step of a decode loop. A device length needs `max_length`, an int in 1..max_tokens:
    the split count is chosen for it, and the kernel clamps the value it reads to [1, max_length] (it cannot be
    checked before launch without waiting for the device)."""
    if max_length is None:
        return _cached_op(q, k_cache, v_cache, length, _workspace_for(q), scale=scale, out=out, target=target)
    return _cached_op(q, k_cache, v_cache, length, _workspace_for(q), scale=scale, out=out, max_length=max_length,
                      target=target)
