"""What every op does between validating its inputs and launching: pick the target and load its program."""
from __future__ import annotations

import math
import os
import threading

import dpctl
import dpnp

from .. import artifacts, launch, module, targets, validate
from ..config import XE2_TARGETS
from ..errors import InputError, InputTypeError, TargetError


_programs: dict = {}
_targets: dict = {}


def target_for(queue: dpctl.SyclQueue, target: str | None) -> str:
    """The target a call on `queue` runs (the per-call target, XE2RT_TARGET, or the device's), cached by what the
    choice depends on: detecting an Xe2 GPU queries the driver."""
    key = (queue, target, os.environ.get("XE2RT_TARGET"))
    chosen = _targets.get(key)
    if chosen is None:
        chosen = targets.resolve(queue.sycl_device, target)
        if len(_targets) > 4096:
            _targets.clear()
        _targets[key] = chosen
    return chosen


def program_for(queue: dpctl.SyclQueue, family: str, target: str | None):
    """The program of `family` for the queue's device (target_for). Cached by everything the choice depends on: the
    queue, the family, the per-call target and both XE2RT_* variables."""
    key = (queue, family, target, os.environ.get("XE2RT_TARGET"), os.environ.get("XE2RT_KERNEL_DIR"),
           module.generation)
    program = _programs.get(key)
    if program is None:
        program = artifacts.load(queue, target_for(queue, target), family)
        if len(_programs) > 4096:
            _programs.clear()
        _programs[key] = program
    return program


def is_xe2(target: str) -> bool:
    return target in XE2_TARGETS


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---- Xe2 GEMM work-group fitting (gemm_fp16's and gemm_w4a16's DPAS kernels) ----
MIN_STEPS_PER_SLICE = 4  # a K slice shorter than 4 K steps costs more in SLM traffic than it gains
MAX_SUBGROUPS_PER_GROUP = 32  # 512 work-items
MAX_SLM_BYTES = 64 * 1024  # Xe2 work-group SLM limit


def xe2_tile_grid(constants: dict, hw_threads: int, tiles_m: int, tiles_n: int, tile_floats: int, steps: int) -> dict:
    """Work-groups of SGS_M x SGS_N sub-groups over a tiles_m x tiles_n grid of sub-group tiles (tile_floats fp32
    each), and K split into up to MAX_KSLICES slices of at least MIN_STEPS_PER_SLICE steps while the tiles alone
    would not fill hw_threads; slices 1.. keep their partial tiles in SLM for slice 0. Shrunk (SGS_M, then SGS_N,
    then the slices) until the group fits MAX_SUBGROUPS_PER_GROUP and MAX_SLM_BYTES. Returns slices, local,
    global (dims: n, m, slice) and slm_floats."""
    sgs_m, sgs_n = min(constants["SGS_M"], tiles_m), min(constants["SGS_N"], tiles_n)
    slices = 1
    while (tiles_m * tiles_n * slices * 2 <= hw_threads and slices * 2 <= constants["MAX_KSLICES"]
           and steps >= slices * 2 * MIN_STEPS_PER_SLICE):
        slices *= 2

    def slm_floats():
        return (slices - 1) * sgs_m * sgs_n * tile_floats

    while sgs_m * sgs_n * slices > MAX_SUBGROUPS_PER_GROUP or slm_floats() * 4 > MAX_SLM_BYTES:
        if sgs_m > 1:
            sgs_m = ceil_div(sgs_m, 2)
        elif sgs_n > 1:
            sgs_n = ceil_div(sgs_n, 2)
        else:
            slices //= 2
    local = (sgs_n * 16, sgs_m, slices)
    global_ = (ceil_div(tiles_n, sgs_n) * local[0], ceil_div(tiles_m, sgs_m) * sgs_m, slices)
    return {"slices": slices, "local": local, "global": global_, "slm_floats": slm_floats()}


def native_xe2(device) -> bool:
    """Whether the device itself is an Xe2 GPU (detected, not a target forced with XE2RT_TARGET): only there do the
    DPAS and 2D block built-ins exist."""
    try:
        return targets.detect(device).target in ("bmg", "lnl")
    except TargetError:
        return False


def dpas_variant(target: str, queue: dpctl.SyclQueue) -> str:
    """The variant of the DPAS families (gemm_fp16, gemm_w4a16, prefill_attention) that runs on this queue for
    `target`: "native", or "xe2emu" (software DPAS and 2D block reads) when an Xe2 target is forced on a device that
    is not an Xe2 GPU, as the tests and the selftest run the Xe2 code path on the CPU device."""
    return "xe2emu" if is_xe2(target) and not native_xe2(queue.sycl_device) else "native"


def check_native_xe2(op: str, native: bool, target: str, queue: dpctl.SyclQueue) -> None:
    """The native bmg/lnl kernels (gemm_fp16, gemm_w4a16, prefill_attention) call the DPAS and 2D block built-ins
    (cl_intel_subgroup_matrix_multiply_accumulate, cl_intel_subgroup_2d_block_io), which only an Xe2 GPU driver
    provides; Intel's CPU runtime, asked to build them, fails without a message. Refuse before that with the reason
    and the fix. `native`: the call runs the family's native kernels (not its xe2emu variant)."""
    if not native or not is_xe2(target):
        return
    device = queue.sycl_device
    if not native_xe2(device):
        raise TargetError(
            f"{op}: target {target!r} needs an Intel Xe2 GPU: its kernels call "
            f"intel_sub_group_f16_f16_matrix_mad_k16 (cl_intel_subgroup_matrix_multiply_accumulate) and "
            f"intel_sub_group_2d_block_read_* (cl_intel_subgroup_2d_block_io), which device {device.name!r} does not "
            f"provide; use target='cpu' or target=None, or xe2rt.ops.{op}.run(..., variant='xe2emu') to run the Xe2 "
            f"kernels with software DPAS and 2D block reads")


def host_isa_available(op: str, option: str, requested: bool, target: str, queue: dpctl.SyclQueue,
                       flag: str = "avx512_vnni") -> bool:
    """Whether a call on `target` and the queue's device can run the cpu kernels that call the instructions of host
    CPU flag `flag` (the *_vnni kernels: avx512_vnni; gemv_w4a16_avx2: avx2; targets.cpu_has_flag); a call that
    asked for them (`requested`, by `option`, e.g. "dequant='vnni'") where they cannot is refused."""
    available = target == "cpu" and targets.cpu_has_flag(queue.sycl_device, flag)
    if requested and not available:
        raise InputError(f"{op}: {option} needs the cpu target on a CPU device whose host has "
                         f"{targets.HOST_ISA_NAMES[flag]}; this call's target is {target!r} on "
                         f"{queue.sycl_device.name!r}")
    return available


# The integer-dot variants of the W4 GEMV and GEMM (cpu target only), in the order "auto" prefers them, with the host
# CPU flag each one's binaries need: "vnni" (vpdpbusd / vpdpwssd) and "avx2" (vpmaddwd, the same integers).
INT_DOT_FLAGS = {"vnni": "avx512_vnni", "avx2": "avx2"}


def int_dot_variants(target: str, queue: dpctl.SyclQueue) -> tuple[str, ...]:
    """The integer-dot variants whose binaries run for `target` on the queue's device, in the order "auto" prefers
    them."""
    return tuple(v for v, flag in INT_DOT_FLAGS.items() if host_isa_available("", "", False, target, queue, flag))


def int_dot_variant(op: str, option: str, requested, target: str, queue: dpctl.SyclQueue,
                    extra: dict | None = None) -> str | None:
    """The integer-dot variant a call asking for `requested` (its `option`, e.g. "dequant") runs: `requested` itself
    where it names one (refused by name where the host cannot run it), for "auto" the first that runs here, else
    None."""
    flags = {**INT_DOT_FLAGS, **(extra or {})}  # `extra`: an op's own variants that "auto" never picks
    if requested in flags:
        host_isa_available(op, f"{option}={requested!r}", True, target, queue, flags[requested])
        return requested
    if requested == "auto":
        return next(iter(int_dot_variants(target, queue)), None)
    return None


_per_thread = threading.local()
MAX_WORKSPACES = 8  # (owner, queue) scratch arrays a thread keeps; the least recently used beyond that are dropped


def workspace(owner: str, queue: dpctl.SyclQueue, n: int, dtype):
    """Device scratch of at least n elements of dtype for `owner`'s launches on `queue`: the thread's cached array
    (grown as needed, so it keeps the largest size asked for; calls of one thread on one queue are ordered, so they
    may share it, and other threads have their own), or a fresh one while recording, so that a plan (xe2rt.bind)
    keeps its own and plans and direct calls never share one. A thread keeps the MAX_WORKSPACES most recently used
    (owner, queue) arrays: a loop over fresh queues does not pile them up (a dropped array stays alive until the
    kernels queued on it have run, like any launch argument)."""
    if launch.is_recording():
        return dpnp.empty(n, dtype=dtype, sycl_queue=queue)
    cache = getattr(_per_thread, "workspaces", None)
    if cache is None:
        cache = _per_thread.workspaces = {}
    key = (owner, queue)
    ws = cache.pop(key, None)
    if ws is None or ws.size < n:
        ws = dpnp.empty(n, dtype=dtype, sycl_queue=queue)
    cache[key] = ws  # the most recently used last
    while len(cache) > MAX_WORKSPACES:
        del cache[next(iter(cache))]
    return ws


FP16_MAX, FP32_MAX = 65504.0, 3.4028234663852886e38


def attention_scale(op: str, scale, d: int) -> float:
    """The attention ops' score scale (None: D^-0.5), checked: a real number, finite, and small enough that no score
    can overflow fp32, |scale| * log2(e) * D * 65504^2 <= fp32's max (the kernels scale q by scale * log2(e) and take
    dot products of D fp16 terms; past that a score could be inf and the softmax NaN or wrong)."""
    if scale is None:
        return d ** -0.5
    value = validate.real_number(scale)
    if value is None:
        raise InputTypeError(f"{op}: scale must be a real number or None (D^-0.5), got {type(scale).__name__} "
                             f"{scale!r}")
    if not math.isfinite(value):
        raise InputError(f"{op}: scale must be finite, got {validate.shown(scale)}")
    limit = FP32_MAX / (math.log2(math.e) * d * FP16_MAX * FP16_MAX)
    if abs(value) > limit:
        raise InputError(f"{op}: |scale| must be <= {limit:.3g} for D = {d} (so that no fp32 score "
                         f"scale * log2(e) * q.k can overflow with fp16 q and k), got {scale!r}")
    return value
