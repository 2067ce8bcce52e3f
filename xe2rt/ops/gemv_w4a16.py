"""W4A16 GEMV for decode (x [K], or [M, K] with M <= 16 sharing one read of the weights):
y[N] = dequant(W)[N, K] . x[K], uint4 weights with per-group fp16 scales (and optional zero points), fp16 x and y,
fp32 accumulation.

Geometry (seed 000, gemv_common.geometry): ceil(N / ROWS) work-groups of ROWS rows, K split into K_SPLIT slices
reduced in SLM.
  Xe2 targets: one SG-lane sub-group per (RPT rows, slice), 512 k per block read -> local ROWS / RPT x K_SPLIT x SG
  cpu target:  one work-item per (RPT rows, slice), slices of whole groups        -> local ROWS / RPT x K_SPLIT
RPT rows share every x load (and, with bias correction, every sum of x).
Dequant variants (seed 004): "magic" (bias correction: (1024 + q) straight into the products, (1024 + z) * sum(x)
subtracted once per group) and "plain" (per-element subtraction). Family gemv_w4a16 holds each target's default,
gemv_w4a16_alt the other; the variant is the DEQUANT_MAGIC constant in the manifest. Both are exact in x (fp16 x
times the codes is exact in fp32), the default on every device. "vnni" (family gemv_w4a16_vnni, built for the cpu
only, M = 1, CPU devices whose host has AVX512-VNNI: targets.cpu_has_avx512_vnni) asks for integer dot products of
the codes with x as 15-bit fixed point per 128-k step (gemv_w4a16.cl's header): x is then rounded to a multiple of
2^-14 of its step's largest |x| (elements within 2^3 of the largest exactly), about 1.6x faster, and outside the fp32
bound where one element of a step dwarfs the others (an outlier channel). "auto" is "vnni" where it runs (M = 1 on
such a host), else the default: what xe2rt.models.llm asks for.
"""
from __future__ import annotations

from .. import launch
from ..errors import InputError
from ..quant import QuantizedW4
from .common import program_for, target_for, vnni_available
from .gemv_common import check_decode_inputs, check_quantized, geometry, launch_args, output
from .gemv_common import kernel_name as batched_name

OP = "gemv_w4a16"
FAMILIES = ("gemv_w4a16", "gemv_w4a16_alt")
VNNI_FAMILY = "gemv_w4a16_vnni"
DEQUANT = {"magic": 1, "plain": 0}
DEQUANT_NAMES = ("magic", "plain", "vnni", "auto")


def kernel_name(group_size: int, symmetric: bool, m: int = 1) -> str:
    return batched_name(f"{OP}_g{group_size}_{'sym' if symmetric else 'zp'}", m)


def program_variant(queue, target: str | None, dequant: str | None, m: int = 1):
    """The program of the requested dequant variant (None: the target's default, family gemv_w4a16; "auto": "vnni"
    where it runs, else the default; the batched kernels are those of gemv_w4a16 in every variant)."""
    if dequant is not None and dequant not in DEQUANT_NAMES:
        raise InputError(f"{OP}: dequant must be None, 'magic', 'plain', 'vnni' or 'auto', got {dequant!r}")
    # the target first, so that a call that runs the VNNI kernels loads no other program (a tidy-up: the CPU runtime
    # compiles a kernel only when it is first created, so loading the default family cost little)
    vnni = vnni_available(OP, "dequant='vnni'", dequant == "vnni", target_for(queue, target), queue)
    if vnni and dequant in ("auto", "vnni") and m == 1:
        return program_for(queue, VNNI_FAMILY, "cpu")
    program = program_for(queue, FAMILIES[0], target)
    if dequant not in DEQUANT or program.constants["DEQUANT_MAGIC"] == DEQUANT[dequant]:
        return program
    return program_for(queue, FAMILIES[1], program.target)


def run(x, qw, *, out=None, target: str | None = None, dequant: str | None = None):
    """Validate, launch, and return (y, event); event is None when nothing needed launching."""
    check_quantized(OP, qw, QuantizedW4, "xe2rt.quantize_w4 / from_gptq / from_awq")
    n, k = qw.shape
    queue, y_shape, m = check_decode_inputs(OP, x, n, k, {"packed": qw.packed, "scales": qw.scales, "zeros": qw.zeros},
                                         out, qw=qw)
    program = program_variant(queue, target, dequant, m)
    y, done = output(out, y_shape, queue, n, k, m)
    if done:
        return y, None
    global_size, local_size, slm_floats = geometry(program.constants, program.target, n, m, k)
    zeros = qw.packed if qw.zeros is None else qw.zeros  # the symmetric kernels never read it
    kernel = program.kernel(kernel_name(qw.group_size, qw.symmetric, m))
    event = launch.launch(kernel, launch_args(m, [x, qw.packed, qw.scales, zeros, y], n, k, slm_floats), global_size,
                          local_size, queue)
    return y, event


def gemv_w4a16(x, qw: QuantizedW4, *, out=None, target: str | None = None, dequant: str | None = None):
    """y = dequant(qw) @ x for float16 x [K] (y [N]) or x [M, K] with M <= 16 (y [M, N] = x @ dequant(qw).T), qw a
    QuantizedW4 [N, K] with device parts on x's queue; fp32 accumulation, y float16. `dequant` ("magic" / "plain";
    "vnni": integer dot products with x rounded to 15-bit fixed point per 128 k, CPU devices with AVX512-VNNI only;
    "auto": "vnni" where it runs, else the default) overrides the target's default variant (M = 1 only: the batched
    kernels dequantize exactly first either way);
    `target` forces a kernel target (bmg, lnl, cpu) for this call."""
    return run(x, qw, out=out, target=target, dequant=dequant)[0]
