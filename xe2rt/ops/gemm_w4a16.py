"""W4A16 GEMM for prompts: out[M, N] = act(a[M, K] . dequant(qw)^T + bias), qw a QuantizedW4 [N, K] (group size 32,
64 or 128, symmetric or with zero points), a and out float16, fp32 accumulation; the weights are dequantized inside the
K loop (spirv_src/gemm_w4a16.cl), never copied whole to fp16.

The one decision (`uses_gemv`): M <= 16 without bias and activation goes to gemv_w4a16's batched decode kernels
(weights read once for all M rows: the memory-bound regime); larger M, or any M with a bias or an activation (the
GEMV kernels have no epilogue; these kernels fuse it), goes to the GEMM kernels below.

Geometry, Xe2 shape (bmg, lnl): a sub-group of 16 lanes owns a 32 x 64 tile of C, a work-group SGS_M x SGS_N such
sub-groups, and when the tiles alone would not fill the chip's hardware threads K is split into `slices` ranges of
64-k steps (dimension 2 of the work-group) whose partial tiles meet in SLM:
    local  = (SGS_N * 16, SGS_M, slices)
    global = (ceil(tiles_n / SGS_N) * SGS_N * 16, ceil(tiles_m / SGS_M) * SGS_M, slices)
    SLM    = (slices - 1) * SGS_M * SGS_N * 32 * 64 floats (<= 64 KB)
A and the packed codes are read with 2D block loads; their rules are checked here before launch (the hardware's
behaviour is undefined when one is broken): a and packed 64-byte aligned, packed rows K / 2 >= 64 bytes (K >= 128),
N and M <= 2^24. Operands that break them are refused by name (no fallback kernel: every LLM projection meets them).
Geometry, CPU shape: one 16-lane packet per (RB x RM) rows x 16 NJ columns:
    global = (ceil(M / (RB RM)) * 16, ceil(N / (16 NJ))), local = (16, 1), static local memory (checked here)

Variants: "native" (default) is the real thing per target: DPAS on bmg/lnl, the fp32 CPU shape on cpu. "vnni" (CPU
devices whose host has AVX512-VNNI, targets.cpu_has_avx512_vnni) multiplies integer code pairs with x rounded to
15-bit fixed point per row and 128-k chunk: about 1.8x faster there, and outside the fp32 bound where one element of
a chunk dwarfs the others (an outlier channel); "avx2" (CPU hosts with AVX2, gemm_w4a16_avx2) is the same kernels
with vpmaddwd for vpdpwssd and a 1 x 64 register tile, bit for bit "vnni"'s results (3.5x the fp32 kernel on a
Zen 3); "auto" is "vnni" where it runs, else "avx2" where that runs, else "native" (what xe2rt.models.llm asks
for). "xe2emu" runs the Xe2 kernels with software DPAS and 2D block reads on any device (how the Xe2 path is tested
on the CPU device); "fp32" names the cpu target's fp32 shape (= "native" there). On a host without AVX-512 (no
avx512f) the cpu target's "native" / "fp32" kernel is gemm_w4a16_cpu256 ("fp32_256" forces it anywhere): the same
kernel with a 2 x 2-packet register tile instead of 6 x 4, bit for bit its results, 2.2-2.4x faster on a Zen 3.
Geometry, VNNI (gemm_w4a16_vnni, built for the cpu only): launch 1 (gemm_w4a16_quantize_x) makes x 15-bit fixed
point per row and 128-k chunk into a workspace (M K/2 ints + M ceil(K/128) scales; cached per thread and queue, a
plan's own while binding), global (M, ceil(K / 128)); launch 2, one work-item per (RB x RM) rows x 64 columns:
    global = (ceil(M / (RB RM)), ceil(N / 64)), local = (1, 1), static local memory (checked here)
"""
from __future__ import annotations

import functools
import weakref

import dpnp
import numpy as np

from .. import targets, validate
from ..errors import InputError, LaunchLimitError
from ..quant import QuantizedW4
from . import gemv_w4a16
from .common import ceil_div, check_native_xe2, int_dot_variant, program_for, workspace, xe2_tile_grid
from .gemm_fp16 import ACTIVATIONS, MAX_DIM, block2d_rule_breaks, check_activation
from .gemv_common import MAX_M as GEMV_MAX_M
from .gemv_common import check_quantized
from .. import launch

OP = "gemm_w4a16"
FAMILIES = {"native": "gemm_w4a16", "xe2emu": "gemm_w4a16_xe2emu", "vnni": "gemm_w4a16_vnni",
            "avx2": "gemm_w4a16_avx2", "fp32": "gemm_w4a16", "fp32_256": "gemm_w4a16_cpu256"}
VNNI_KC = 128  # gemm_w4a16.cl KC: k per x scale
TILE_M, TILE_N, K_STEP = 32, 64, 64
CPU_PACKET = 16


def uses_gemv(m: int, bias, activation) -> bool:
    """The one decision: batched decode GEMV (weights read once for all rows) or the GEMM kernels."""
    return m <= GEMV_MAX_M and bias is None and activation is None


def kernel_name(symmetric: bool) -> str:
    """One kernel per symmetric / zero-point; the group size is an argument."""
    return f"{OP}_{'sym' if symmetric else 'zp'}"


def block2d_breaks(a, qw: QuantizedW4, m: int, n: int, k: int) -> list[str]:
    """Why a and qw's codes cannot be read with 2D block loads (empty: they can)."""
    return (block2d_rule_breaks("a", validate.address(a), 2 * k, m, 2 * k)
            + block2d_rule_breaks("qw.packed", validate.address(qw.packed), k // 2, n, k // 2))


def xe2_geometry(constants: dict, hw_threads: int, m: int, n: int, k: int) -> dict:
    return xe2_tile_grid(constants, hw_threads, ceil_div(m, TILE_M), ceil_div(n, TILE_N), TILE_M * TILE_N,
                         ceil_div(k, K_STEP))


def cpu_static_slm_bytes(constants: dict) -> int:
    """Local memory the cpu kernel declares statically (b_st, a_st, acc_st in gemm_w4a16.cl; the VNNI kernel's bq,
    ws, acc_st)."""
    rows, cols, kb = constants["RB"] * constants["RM"], 16 * constants["NJ"], constants["KB"]
    if constants.get("VNNI_GEMM"):
        return 4 * (VNNI_KC // 2 * 64 + VNNI_KC // 32 * 64 + rows * 64)
    return 4 * (kb * cols + rows * kb + rows * cols)


def cpu_geometry(constants: dict, m: int, n: int) -> dict:
    rows, cols = constants["RB"] * constants["RM"], 16 * constants["NJ"]
    if constants.get("VNNI_GEMM"):
        return {"global": (ceil_div(m, rows), ceil_div(n, 64)), "local": (1, 1)}
    return {"global": (ceil_div(m, rows) * CPU_PACKET, ceil_div(n, cols)), "local": (CPU_PACKET, 1)}


def vnni_workspace_ints(m: int, k: int) -> int:
    """Ints of the VNNI kernels' x workspace: the pairs, then one scale per row and chunk."""
    return m * (k // 2) + m * ceil_div(k, VNNI_KC)


def resolve_family(variant: str, target: str, queue) -> str:
    """The family a call runs: "vnni" / "avx2" where they run (refused by name elsewhere), "auto" the VNNI one on a
    CPU device with AVX512-VNNI, the AVX2 one (the same integers) on one with AVX2 only, and "native" otherwise."""
    int_dot = int_dot_variant(OP, "variant", variant, target, queue)
    if variant in ("fp32", "fp32_256") and target != "cpu":
        raise InputError(f"{OP}: variant={variant!r} is the cpu target's fp32 kernel; this call's target is "
                         f"{target!r}")
    if variant == "auto":
        variant = int_dot or "native"
    if variant in ("native", "fp32") and targets.cpu_256bit(queue.sycl_device, target):
        variant = "fp32_256"  # the same kernel with a register tile for 256-bit vectors (bit for bit its results)
    return FAMILIES[variant]


FP16_MAX = 65504.0
_weight_bounds: dict = {}  # id(scales' usm_ndarray) -> (weakref to it, id of zeros' usm_ndarray, bound)


def _forget_bound(key: int, ref) -> None:
    hit = _weight_bounds.get(key)
    if hit is not None and hit[0] is ref:
        del _weight_bounds[key]


def fp16_weight_bound(qw: QuantizedW4) -> float:
    """The largest |(q - z) s| qw's codes can dequantize to from a finite scale: max over groups of |s| max(z,
    |15 - z|) (z = 8 when symmetric). Non-finite scales are left out: they give non-finite outputs on every kernel, as
    in the reference. Computed on the host from one read of the scales (and zeros), once per scales array (cached
    while it lives; a change of the scales' contents in place is not noticed): dpnp's float32 abs and multiply run on
    oneMKL VM, which can deadlock on an in-order queue (xe2rt._compat.before_vm; seen on this path)."""
    scales, zeros = validate.usm_view(qw.scales), None if qw.zeros is None else validate.usm_view(qw.zeros)
    hit = _weight_bounds.get(id(scales))
    if hit is not None and hit[0]() is scales and hit[1] == id(zeros):
        return hit[2]
    s = np.abs(launch.to_host(scales).astype(np.float32))
    s = np.where(np.isfinite(s), s, np.float32(0))
    if zeros is None:
        bound = 8.0 * float(s.max(initial=0.0))
    else:
        z = launch.to_host(zeros).astype(np.float32)
        bound = float((s * np.maximum(z, np.abs(np.float32(15) - z))).max(initial=0.0))
    ref = weakref.ref(scales, functools.partial(_forget_bound, id(scales)))
    _weight_bounds[id(scales)] = (ref, id(zeros), bound)
    return bound


def check_inputs(a, qw, bias, activation, out):
    """Everything about the call's arrays; returns (queue, m, n, k)."""
    check_activation(OP, activation)
    validate.device_array(OP, "a", a, dtypes=[np.float16], ndims=[2])
    if isinstance(qw, QuantizedW4) and qw.sycl_queue is None:
        qw.check(OP)
        raise InputError(f"{OP}: qw's parts are numpy (host) arrays; the kernels need them on a's queue: "
                         f"qw = qw.to_device(a.sycl_queue)")
    check_quantized(OP, qw, QuantizedW4, "xe2rt.quantize_w4 / from_gptq / from_awq")
    m, k = a.shape
    n, k_w = qw.shape
    if k_w != k:
        raise InputError(f"{OP}: a is [M, K] = {tuple(a.shape)} (K = {k}) but qw is [N, K] = {(n, k_w)} "
                         f"(K = {k_w}); K must match")
    queue = a.sycl_queue
    if qw.sycl_queue != queue:
        raise InputError(f"{OP}: qw's parts are on another queue than a; weights must live on a's queue: "
                         f"qw = qw.to_device(a.sycl_queue)")
    if bias is not None:
        validate.device_array(OP, "bias", bias, dtypes=[np.float16], ndims=[1])
        if bias.shape[0] != n:
            raise InputError(f"{OP}: bias must have length N = {n} (one per output column), got {bias.shape[0]}")
    validate.same_queue(OP, a=a, bias=bias, out=out)
    validate.require_fp16(OP, queue)
    if out is not None:
        validate.out_array(OP, out, shape=(m, n), dtype=np.float16, queue=queue,
                           inputs={"a": a, "qw.packed": qw.packed, "qw.scales": qw.scales, "qw.zeros": qw.zeros,
                                   "bias": bias})
    for name, value in (("M", m), ("N", n), ("K", k)):
        if value > MAX_DIM:
            raise InputError(f"{OP}: {name} = {value} exceeds {MAX_DIM} (2^31 - 257): the kernels index rows and "
                             f"columns with 32-bit ints")
    return queue, m, n, k


def run(a, qw, *, bias=None, activation=None, out=None, target: str | None = None, variant: str = "native",
        events: list | None = None):
    """Validate, launch, and return (out, event); event is None when nothing needed launching. `events`, a list,
    receives the event of every launch (the VNNI kernels make two), for timing."""
    if not isinstance(variant, str) or (variant not in FAMILIES and variant != "auto"):
        raise InputError(f"{OP}: variant must be one of {sorted(FAMILIES) + ['auto']}, got {variant!r}")
    queue, m, n, k = check_inputs(a, qw, bias, activation, out)
    if uses_gemv(m, bias, activation):
        dequant = variant if variant in ("vnni", "avx2", "auto") else None
        return gemv_w4a16.run(a, qw, out=out, target=target, dequant=dequant)
    chosen = targets.resolve(queue.sycl_device, target)
    family = resolve_family(variant, chosen, queue)
    check_native_xe2(OP, family in (FAMILIES["native"], FAMILIES["fp32_256"]), chosen, queue)
    program = program_for(queue, family, chosen)
    constants = program.constants
    xe2_shape = bool(constants["XE2_SHAPE"])
    if xe2_shape and m and n and k:
        breaks = block2d_breaks(a, qw, m, n, k)
        if breaks:
            raise InputError(f"{OP}: the Xe2 kernels (target {program.target!r}) read a and qw.packed with 2D block "
                             f"loads, whose rules these operands break: {'; '.join(breaks)}. K must be >= 128 (code "
                             f"rows of >= 64 bytes) and both arrays 64-byte aligned (a fresh dpnp array is)")
        bound = fp16_weight_bound(qw)
        if bound > FP16_MAX:
            raise InputError(f"{OP}: the Xe2 kernels (target {program.target!r}) round each dequantized weight "
                             f"(q - z) * s to float16 for DPAS, and qw's scales allow |(q - z) s| up to {bound:.6g}, "
                             f"past float16's largest finite value {FP16_MAX:.0f} (such weights would become inf); "
                             f"scale the weights down, or multiply at most 16 rows per call (gemv_w4a16's kernels "
                             f"dequantize in float32)")
    if not xe2_shape and cpu_static_slm_bytes(constants) > queue.sycl_device.local_mem_size:
        raise LaunchLimitError(
            f"{OP}: the cpu kernel needs {cpu_static_slm_bytes(constants)} bytes of local memory; device "
            f"{queue.sycl_device.name!r} has {queue.sycl_device.local_mem_size}. Rebuild with smaller RB / KB in "
            f"spirv_src/gemm_w4a16.toml.")
    c = out if out is not None else launch.new_output((m, n), np.float16, queue)
    if m == 0 or n == 0:
        return c, None
    packed, scales = qw.packed, qw.scales
    zeros = qw.packed if qw.zeros is None else qw.zeros  # the symmetric kernels never read it
    if k == 0:  # act(bias) from the kernels' empty K loop; zero-size arrays have no pointer to pass
        a = scales = dpnp.zeros(1, dtype=np.float16, sycl_queue=queue)
        packed = zeros = dpnp.zeros(1, dtype=np.uint8, sycl_queue=queue)
    args = [a, packed, scales, zeros, bias if bias is not None else c, c, m, n, k, qw.group_size,
            int(bias is not None), ACTIVATIONS[activation]]
    kernel = program.kernel(kernel_name(qw.symmetric))
    if constants.get("VNNI_GEMM"):  # launch 1: x as fixed point into the workspace the GEMM reads
        if k:
            xq = workspace(OP, queue, vnni_workspace_ints(m, k), np.int32)
            first = launch.launch(program.kernel("gemm_w4a16_quantize_x"), [a, xq, m, k], (m, ceil_div(k, VNNI_KC)),
                                  (1, 1), queue)
            if events is not None:
                events.append(first)
        else:  # K = 0: act(bias) from the empty K loop; nothing is read
            xq = dpnp.zeros(1, dtype=np.int32, sycl_queue=queue)
        args[0] = xq
    if xe2_shape:
        geo = xe2_geometry(constants, targets.hw_threads(queue.sycl_device, program.target), m, n, k)
        args.append(launch.LocalMemory(4 * max(1, geo["slm_floats"])))
    else:
        geo = cpu_geometry(constants, m, n)
    event = launch.launch(kernel, args, geo["global"], geo["local"], queue)
    if events is not None:
        events.append(event)
    return c, event


def gemm_w4a16(a, qw: QuantizedW4, *, bias=None, activation=None, out=None, target: str | None = None):
    """out = activation(a @ dequant(qw).T + bias) for float16 a [M, K] and qw a QuantizedW4 [N, K] (device parts on
    a's queue), optional float16 bias [N], activation None, "relu", "gelu" (tanh form) or "gelu_erf"; fp32
    accumulation, one rounding to float16 [M, N]. M <= 16 without bias and activation runs gemv_w4a16's batched decode
    kernels, everything else the W4A16 GEMM kernels. `target` forces a kernel target (bmg, lnl, cpu)."""
    return run(a, qw, bias=bias, activation=activation, out=out, target=target)[0]
