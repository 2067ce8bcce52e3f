"""FP16 GEMM with fused epilogue: out[M, N] = act(a[M, K] . b + bias), b as [K, N] ("kn") or [N, K] ("nk", the usual
weight layout), fp32 accumulation, one fp16 rounding per output.

Geometry, Xe2 shape (seeds 001/002; gemm_fp16.cl): a sub-group of 16 lanes owns a tile_m x SG_N tile of C (tile_m = 8,
16 or 32: the smallest that covers M, so M = 1 decode does not pay for 32 rows; the fallback kernels stop at 16), a
work-group SGS_M x SGS_N such sub-groups (bmg: 8 x 4 -> 256 x 256), and when the tiles alone would not fill the chip's hardware threads, K is split
into `slices` ranges (dimension 2 of the work-group) whose partial tiles meet in SLM:
    local  = (SGS_N * 16, SGS_M, slices)
    global = (ceil(tiles_n / SGS_N) * SGS_N * 16, ceil(tiles_m / SGS_M) * SGS_M, slices)
    SLM    = (slices - 1) * SGS_M * tile_m * SGS_N * SG_N floats
Geometry, CPU shape: one work-item per register tile:
    nk      RM x RN   global = (ceil(N / RN) rounded up to the local size, ceil(M / RM)), local = (<= 32, 1)
    kn      (KN_RB x KN_RM) x 16 KN_NJ per work-group of 16 (one AVX-512 packet, a lane per column), K in KN_KB
            chunks staged in local memory: global = (ceil(M / (KN_RB KN_RM)) * 16, ceil(N / (16 KN_NJ))), local = (16, 1)
    kn_wR   M <= KN_WIDE_MAX_M: all R = 1, 2 or 4 (>= M) rows x 16 KN_WR_NJ columns per packet, B streamed once:
            global = (16, ceil(N / (16 KN_WR_NJ))), local = (16, 1)

Loads, Xe2 shape: operands that meet the 2D block rules (block2d.h: base 64-byte aligned, row pitch a multiple of 16
bytes, rows of 64 bytes to 2^24 bytes, at most 2^24 rows; i.e. K and, for kn, N multiples of 8 and >= 32) take the
`*_2d` kernels (2D block loads, K step 32, prefetch); others take the fallback kernels (sub-group block reads and
per-lane loads, any alignment). `block2d_rule_breaks` is checked here, before launch, because the hardware's
behaviour is undefined when a rule is broken.

Variants: `variant="native"` (default) is the real thing per target: DPAS on bmg/lnl, the CPU-tuned kernels on cpu.
`variant="xe2emu"` runs the Xe2-shaped kernels with the DPAS and 2D block built-ins replaced by software versions from
the cl_intel_subgroup_matrix_multiply_accumulate and cl_intel_subgroup_2d_block_io specifications, for any target:
that is how the Xe2 code path (2D-block kernels and fallback alike) is run and checked on a CPU device.
"""
from __future__ import annotations

import dpnp
import numpy as np

from .. import artifacts, launch, targets, validate
from ..errors import InputError, LaunchLimitError
from .common import ceil_div, check_native_xe2, xe2_tile_grid

OP = "gemm_fp16"
FAMILIES = {"native": "gemm_fp16", "xe2emu": "gemm_fp16_xe2emu"}
# gelu is the tanh form, gelu_erf the exact erf form (BERT); see gemm_fp16_dpas.h epilogue()
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_erf": 3}
B_LAYOUTS = ("kn", "nk")
TILE_ROWS = (8, 16, 32)
FALLBACK_TILE_ROWS = (8, 16)
DPAS_K = 16
K_STEP_2D = 32
BLOCK2D_MAX = 2**24  # rows and row bytes of a 2D block region
# Work-items per group along N for nk on the CPU device (measured on 2 cores: 32).
CPU_LOCAL_N = {"nk": 32}
KN_PACKET = 16  # work-items per group for kn: one AVX-512 packet (the kernels require sub-group size 16)
KN_WIDE_MAX_M = 4  # kn with at most this many rows: one packet holds them all (kn_w1/w2/w4), no staging
# Row/column indices are 32-bit ints in the kernels (element offsets are 64-bit); tiles reach 256 past an edge.
MAX_DIM = 2**31 - 1 - 256


def check_activation(op: str, activation) -> None:
    """activation is None or one of ACTIVATIONS' names (shared with gemm_w4a16)."""
    if not (activation is None or isinstance(activation, str)) or activation not in ACTIVATIONS:
        raise InputError(f"{op}: activation must be None, 'relu', 'gelu' (tanh form) or 'gelu_erf' (exact erf "
                         f"form), got {activation!r}")


def block2d_rule_breaks(name: str, address: int, row_bytes: int, rows: int, pitch: int) -> list[str]:
    """The rules of cl_intel_subgroup_2d_block_io a region must meet (block2d.h); empty when it meets them all."""
    breaks = []
    if address % 64:
        breaks.append(f"{name} starts at 0x{address:x}, not 64-byte aligned")
    if not 64 <= row_bytes <= BLOCK2D_MAX:
        breaks.append(f"{name} rows are {row_bytes} bytes, outside [64, 2^24]")
    if row_bytes % 4:
        breaks.append(f"{name} rows are {row_bytes} bytes, not a multiple of 4")
    if pitch % 16 or pitch < row_bytes:
        breaks.append(f"{name} row pitch is {pitch} bytes, not a multiple of 16")
    if not 0 < rows <= BLOCK2D_MAX:
        breaks.append(f"{name} has {rows} rows, outside [1, 2^24]")
    return breaks


def block2d_breaks(a, b, b_layout: str, m: int, n: int, k: int) -> list[str]:
    """Why the operands cannot take the 2D-block kernels (empty: they can). a is [M, K]; b is [K, N] or [N, K]."""
    breaks = block2d_rule_breaks("a", validate.address(a), 2 * k, m, 2 * k)
    if b_layout == "kn":
        breaks += block2d_rule_breaks("b", validate.address(b), 2 * n, k, 2 * n)
    else:
        breaks += block2d_rule_breaks("b", validate.address(b), 2 * k, n, 2 * k)
    return breaks


def xe2_geometry(constants: dict, hw_threads: int, m: int, n: int, k: int, use_2d: bool = True) -> dict:
    rows = TILE_ROWS if use_2d else FALLBACK_TILE_ROWS
    tile_m = next(t for t in rows if m <= t) if m <= rows[-1] else rows[-1]
    sg_n = constants["SG_N"]
    grid = xe2_tile_grid(constants, hw_threads, ceil_div(m, tile_m), ceil_div(n, sg_n), tile_m * sg_n,
                         ceil_div(k, K_STEP_2D if use_2d else DPAS_K))
    return {"tile_m": tile_m, **grid, "kernel": f"m{tile_m}_2d" if use_2d else f"m{tile_m}"}


def kn_static_slm_bytes(constants: dict) -> int:
    """Local memory the cache-blocked cpu kn kernel declares statically (b_st, a_st, acc_st in gemm_fp16.cl); the
    launch helper only sees dynamic SLM, so this op checks it against the device."""
    c = constants
    floats = (c["KN_KB"] * 16 * c["KN_NJ"] + c["KN_RB"] * c["KN_RM"] * c["KN_KB"]
              + c["KN_RB"] * c["KN_RM"] * c["KN_NJ"] * 16)
    return 4 * floats


def cpu_geometry(constants: dict, b_layout: str, m: int, n: int) -> dict:
    if b_layout == "kn":
        # One 16-lane packet per work-group; group dim 0 walks row blocks so consecutive groups share a B strip.
        if m <= KN_WIDE_MAX_M:
            rows = next(r for r in (1, 2, 4) if m <= r)
            kernel, rm, nj = f"kn_w{rows}", rows, constants[f"KN_W{rows}_NJ"]
        else:
            kernel, rm, nj = "kn", constants["KN_RB"] * constants["KN_RM"], constants["KN_NJ"]
        return {"kernel": kernel, "local": (KN_PACKET, 1),
                "global": (ceil_div(m, rm) * KN_PACKET, ceil_div(n, KN_PACKET * nj))}
    items_n = ceil_div(n, constants["RN"])
    local_n = min(CPU_LOCAL_N[b_layout], items_n)
    return {"kernel": "nk", "local": (local_n, 1),
            "global": (ceil_div(items_n, local_n) * local_n, ceil_div(m, constants["RM"]))}


def run(a, b, *, bias=None, activation=None, b_layout: str = "kn", out=None, target: str | None = None,
        variant: str = "native"):
    """Validate, launch, and return (out, event); event is None when nothing needed launching."""
    if not isinstance(b_layout, str) or b_layout not in B_LAYOUTS:
        raise InputError(f"{OP}: b_layout must be 'kn' (b is [K, N]) or 'nk' (b is [N, K]), got {b_layout!r}")
    check_activation(OP, activation)
    if not isinstance(variant, str) or variant not in FAMILIES:
        raise InputError(f"{OP}: variant must be one of {sorted(FAMILIES)}, got {variant!r}")
    validate.device_array(OP, "a", a, dtypes=[np.float16], ndims=[2])
    validate.device_array(OP, "b", b, dtypes=[np.float16], ndims=[2])
    m, k = a.shape
    n, k_b = (b.shape[1], b.shape[0]) if b_layout == "kn" else b.shape
    if k_b != k:
        shape_name = "[K, N]" if b_layout == "kn" else "[N, K]"
        raise InputError(f"{OP}: inner dimensions differ: a is [M, K] = {tuple(a.shape)} (K = {k}) but b is "
                         f"{shape_name} = {tuple(b.shape)} (K = {k_b}) with b_layout={b_layout!r}")
    if bias is not None:
        validate.device_array(OP, "bias", bias, dtypes=[np.float16], ndims=[1])
        if bias.shape[0] != n:
            raise InputError(f"{OP}: bias must have length N = {n} (one per output column), got {bias.shape[0]}")
    queue = validate.same_queue(OP, a=a, b=b, bias=bias, out=out)
    validate.require_fp16(OP, queue)
    if out is not None:
        validate.out_array(OP, out, shape=(m, n), dtype=np.float16, queue=queue,
                           inputs={"a": a, "b": b, "bias": bias})
    for name, value in (("M", m), ("N", n), ("K", k)):
        if value > MAX_DIM:
            raise InputError(f"{OP}: {name} = {value} exceeds {MAX_DIM} (2^31 - 257): the kernels index rows and "
                             f"columns with 32-bit ints (element offsets are 64-bit, so M*N*K itself is not limited)")
    chosen = targets.resolve(queue.sycl_device, target)
    check_native_xe2(OP, variant == "native", chosen, queue)
    program = artifacts.load(queue, chosen, FAMILIES[variant])
    c = out if out is not None else launch.new_output((m, n), np.float16, queue)
    if m == 0 or n == 0:
        return c, None
    if k == 0:  # the kernels handle K = 0 (no steps: act(bias)), but a zero-size array has no pointer to pass
        a = b = dpnp.zeros(1, dtype=np.float16, sycl_queue=queue)
    args = [a, b, bias if bias is not None else c, c, m, n, k, int(bias is not None), ACTIVATIONS[activation]]
    constants = program.constants
    if constants["XE2_SHAPE"]:
        use_2d = not block2d_breaks(a, b, b_layout, m, n, k)
        geo = xe2_geometry(constants, targets.hw_threads(queue.sycl_device, program.target), m, n, k, use_2d)
        kernel = program.kernel(f"{OP}_{b_layout}_{geo['kernel']}")
        args.append(launch.LocalMemory(4 * max(1, geo["slm_floats"])))
    else:
        geo = cpu_geometry(constants, b_layout, m, n)
        kernel = program.kernel(f"{OP}_{geo['kernel']}")
        if geo["kernel"] == "kn" and kn_static_slm_bytes(constants) > queue.sycl_device.local_mem_size:
            raise LaunchLimitError(
                f"{OP}: the cpu kn kernel needs {kn_static_slm_bytes(constants)} bytes of local memory; device "
                f"{queue.sycl_device.name!r} has {queue.sycl_device.local_mem_size}. Pass b_layout='nk' with b "
                f"transposed, or rebuild with smaller KN_RB / KN_KB in spirv_src/gemm_fp16.toml.")
    event = launch.launch(kernel, args, geo["global"], geo["local"], queue)
    return c, event


def gemm_fp16(a, b, *, bias=None, activation=None, b_layout: str = "kn", out=None, target: str | None = None):
    """out = activation(a @ B + bias) for float16 a [M, K] and b [K, N] (b_layout="kn") or [N, K] ("nk", the usual
    weight layout, B = b.T), optional float16 bias [N], activation None, "relu", "gelu" (tanh form) or "gelu_erf" (erf form), accumulated in
    fp32 and rounded once to float16 [M, N] on a's queue. `target` forces a kernel target (bmg, lnl, cpu)."""
    return run(a, b, bias=bias, activation=activation, b_layout=b_layout, out=out, target=target)[0]
