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
bound where one element of a step dwarfs the others (an outlier channel). "avx2" (family gemv_w4a16_avx2, CPU hosts
with AVX2) is the same kernels with the integer dot done by vpmaddwd on codes widened to 16 bits: bit for bit the
"vnni" results, 1.5-2.1x the default's speed on a Zen 3. "auto" is "vnni" where it runs, else "avx2" where that runs
(M = 1 on such a host), else the default: what xe2rt.models.llm asks for. "avx2_q8" (family gemv_w4a16_avx2_q8, AVX2
hosts, opt-in: "auto" never picks it) rounds x to signed bytes with one fp32 scale per 32 k, as llama.cpp's Q8_0 does
for its Q4_0 dot, so the codes stay bytes and vpmaddubsw multiplies 32 pairs per instruction: the bound gains
sum |w| |x' - x| with x' = reference.quant.q8_x(x), |x' - x| <= max |x| / 254 per 32 k (`xe2rt.models.llm.load(...,
activations="q8")`).

Folded decoder ops (norm=, residual=, silu_mul=): the rms_norm before a projection and the SiLU-and-multiply after a
[gate; up] projection, as xe2rt.rms_norm / xe2rt.silu_mul compute them. One launch of a _norm, _silu or _norm_silu
kernel where `fuses` says so, at M = 1: the VNNI kernels (norm: K a multiple of 128; silu_mul: I even), with the
separate ops' fp16 values bit for bit; the Xe2 kernels (K a multiple of the 512-k block read, arrays 16-byte aligned),
silu_mul bit for bit and the norm applied as r (W (w s)) at the end, without the separate ops' two fp16 roundings of
the normalized x (checks.gemv_w4a16.FUSED_RULE bounds it). Elsewhere (the exact cpu kernels, odd shapes) the ops run
in turn. Geometry as the plain kernel, plus ROWS x K_SPLIT SLM floats (the norm's scale, or its per-slice sums). A decode step of
xe2rt.models.llm folds ln1 into qkv and ln2 + silu_mul into gate/up: 3 launches fewer per dense layer. The final norm
stays its own launch: in the lm_head GEMV each of its 251 work-groups (128256 rows) would normalize x again, measured
slower there (3256 against 3233 us).
"""
from __future__ import annotations

import dpnp
import numpy as np

from .. import launch, validate
from ..errors import InputError, InputTypeError
from ..quant import QuantizedW4
from .common import host_isa_available, int_dot_variant, is_xe2, program_for, target_for
from .gemv_common import check_decode_inputs, check_quantized, geometry, launch_args, output
from .gemv_common import kernel_name as batched_name

OP = "gemv_w4a16"
FAMILIES = ("gemv_w4a16", "gemv_w4a16_alt")
VNNI_FAMILY = "gemv_w4a16_vnni"
AVX2_FAMILY = "gemv_w4a16_avx2"  # the VNNI kernels' integer dot with AVX2's vpmaddwd: the same results bit for bit
Q8_FAMILY = "gemv_w4a16_avx2_q8"  # AVX2, x as 8-bit integers per 32 k (llama.cpp's Q8_0), vpmaddubsw; opt-in only
INT_DOT_FAMILIES = {"vnni": VNNI_FAMILY, "avx2": AVX2_FAMILY, "avx2_q8": Q8_FAMILY}
Q8_FLAGS = {"avx2_q8": "avx2"}  # beside ops.common.INT_DOT_FLAGS: the host CPU flag it needs; "auto" never picks it
DEQUANT = {"magic": 1, "plain": 0}
DEQUANT_NAMES = ("magic", "plain", "vnni", "avx2", "avx2_q8", "auto")
_F16 = [np.float16]


def runs_q8(queue, target: str | None = None) -> bool:
    """Whether dequant "avx2_q8" runs for `target` (default: the queue's) on the queue's device."""
    return host_isa_available("", "", False, target_for(queue, target), queue, Q8_FLAGS["avx2_q8"])


def kernel_name(group_size: int, symmetric: bool, m: int = 1) -> str:
    return batched_name(f"{OP}_g{group_size}_{'sym' if symmetric else 'zp'}", m)


def program_variant(queue, target: str | None, dequant: str | None, m: int = 1):
    """The program of the requested dequant variant (None: the target's default, family gemv_w4a16; "auto": the
    integer-dot kernels where they run, "vnni" before "avx2", else the default; the batched kernels are those of
    gemv_w4a16 in every variant)."""
    if dequant is not None and dequant not in DEQUANT_NAMES:
        raise InputError(f"{OP}: dequant must be None, 'magic', 'plain', 'vnni', 'avx2', 'avx2_q8' or 'auto', "
                         f"got {dequant!r}")
    # the target first, so that a call that runs the integer-dot kernels loads no other program (a tidy-up: the CPU
    # runtime compiles a kernel only when it is first created, so loading the default family cost little)
    int_dot = int_dot_variant(OP, "dequant", dequant, target_for(queue, target), queue, extra=Q8_FLAGS)
    if int_dot and m == 1:
        return program_for(queue, INT_DOT_FAMILIES[int_dot], "cpu")
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


def _check_fused(x, qw, norm, residual, silu_mul, out) -> tuple:
    """The checks of a call with norm= / silu_mul=, all before anything is launched: returns (queue, norm weight, eps,
    y_out, s_out, y shape, M)."""
    from .decoder_small import _eps, _no_overlap
    if residual is not None and norm is None:
        raise InputError(f"{OP}: residual= is the residual of the norm (s = x + residual); it needs norm=(weight, eps)")
    weight = eps = None
    if norm is not None:
        if not isinstance(norm, (tuple, list)) or len(norm) != 2:
            got = f"a {type(norm).__name__} of {len(norm)}" if isinstance(norm, (tuple, list)) else type(norm).__name__
            raise InputTypeError(f"{OP}: norm must be a (weight, eps) pair (the rms_norm applied to x first), got {got}")
        weight, eps = norm[0], _eps(OP, norm[1], "norm's eps")
        validate.device_array(OP, "norm weight", weight, dtypes=_F16, ndims=[1])
    validate.device_array(OP, "x", x, dtypes=_F16, ndims=[1, 2])
    n, k = qw.shape
    if x.shape[-1] != k:
        raise InputError(f"{OP}: x has K = {x.shape[-1]} but qw is [N, K] = {(n, k)}; K must match")
    if norm is not None and k == 0:
        raise InputError(f"{OP}: norm= needs K >= 1 (the mean of x's squares), got qw {(n, k)}")
    if silu_mul and n % 2:
        raise InputError(f"{OP}: silu_mul=True needs qw's rows as [gate; up], N = 2 I, got N = {n}")
    if weight is not None and tuple(weight.shape) != (k,):
        raise InputError(f"{OP}: the norm weight must have shape {(k,)} (K), got {tuple(weight.shape)}")
    if residual is not None:
        validate.device_array(OP, "residual", residual, dtypes=_F16, ndims=[1, 2])
        if tuple(residual.shape) != tuple(x.shape):
            raise InputError(f"{OP}: residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    y_out = s_out = None
    if residual is not None and out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise InputTypeError(f"{OP}: with residual, out must be a (y, s) tuple of two dpnp arrays, got "
                                 f"{type(out).__name__}")
        y_out, s_out = out
    elif out is not None:
        if isinstance(out, (tuple, list)):
            raise InputTypeError(f"{OP}: out is a (y, s) pair only with residual= (s = x + residual); without it out "
                                 f"is y alone")
        y_out = out
    queue = validate.same_queue(OP, x=x, qw=qw, **{"norm weight": weight}, residual=residual, out=y_out, s=s_out)
    m = x.shape[0] if x.ndim == 2 else 1
    width = n // 2 if silu_mul else n
    y_shape = (m, width) if x.ndim == 2 else (width,)
    inputs = {"x": x, "packed": qw.packed, "scales": qw.scales, "zeros": qw.zeros}
    if y_out is not None:
        validate.out_array(OP, y_out, shape=y_shape, dtype=np.float16, queue=queue, inputs=inputs)
    if s_out is not None:
        validate.out_array(OP, s_out, shape=x.shape, dtype=np.float16, queue=queue, inputs=inputs, name="out s")
    written = {"out y": y_out, "out s": s_out}
    _no_overlap(OP, {a: b for a, b in written.items() if b is not None},
                {"x": x, "residual": residual, "norm weight": weight})
    return queue, weight, eps, y_out, s_out, y_shape, m


def _view(a, shape: tuple):
    """A view of device array `a` (dpnp or usm_ndarray) with this shape: what the ops in turn pass each other."""
    return dpnp.asarray(a).reshape(shape)


def _aligned(*arrays) -> bool:
    """Every given array starts at a 16-byte address (the Xe2 fused kernels' block reads and vector loads)."""
    return all(validate.address(a) % 16 == 0 for a in arrays if a is not None)


def _fuses(program, m: int, n: int, k: int, norm: bool, silu_mul: bool, aligned: bool = True) -> bool:
    """One kernel: the VNNI kernels (norm: K a multiple of 128; silu_mul: I even), or the Xe2 kernels (K a multiple
    of the 512-k block read, 16-byte aligned arrays); M = 1 and N > 0 either way."""
    if m != 1 or n == 0:
        return False
    if program.name in INT_DOT_FAMILIES.values():
        return (k % 128 == 0 or not norm) and (n % 4 == 0 or not silu_mul)
    return is_xe2(program.target) and k % (32 * program.constants["SG"]) == 0 and aligned


def fuses(queue, qw: QuantizedW4, *, norm: bool = True, silu_mul: bool = False, dequant: str | None = None,
          m: int = 1, target: str | None = None) -> bool:
    """Whether gemv_w4a16(..., norm=..., silu_mul=...) on this queue runs as one kernel (else as the ops in turn),
    for x, residual, norm weight and out arrays at 16-byte addresses (as fresh dpnp arrays are)."""
    return _fuses(program_variant(queue, target, dequant, m), m, *qw.shape, norm, silu_mul, _aligned(qw.packed))


def run_fused(x, qw, *, norm=None, residual=None, silu_mul=False, out=None, target: str | None = None,
              dequant: str | None = None):
    """gemv_w4a16 with norm= and / or silu_mul=; returns (result, event). One kernel (_norm, _silu or _norm_silu of
    the VNNI family or of the Xe2 binaries) where _fuses says so, else the ops in turn (rms_norm into a new array, the
    GEMV, silu_mul)."""
    check_quantized(OP, qw, QuantizedW4, "xe2rt.quantize_w4 / from_gptq / from_awq")
    if not isinstance(silu_mul, (bool, np.bool_)):
        raise InputTypeError(f"{OP}: silu_mul must be True or False, got {silu_mul!r}")
    silu_mul = bool(silu_mul)
    if norm is None and residual is None and not silu_mul:  # nothing to fold (silu_mul=np.False_)
        return run(x, qw, out=out, target=target, dequant=dequant)
    queue, weight, eps, y_out, s_out, y_shape, m = _check_fused(x, qw, norm, residual, silu_mul, out)
    n, k = qw.shape
    # the GEMV's own checks (x stands in for the norm's output: same shape, dtype and queue)
    check_decode_inputs(OP, x, n, k, {"packed": qw.packed, "scales": qw.scales, "zeros": qw.zeros}, None, qw=qw)
    program = program_variant(queue, target, dequant, m)
    if not _fuses(program, m, n, k, norm is not None, silu_mul, _aligned(x, residual, weight, y_out, s_out, qw.packed)):
        from . import decoder_small
        act, event, s_given = x, None, s_out
        if norm is not None:
            x2 = _view(x, (m, k))
            if residual is None:
                act, event = decoder_small.run_rms_norm(x2, weight, eps=eps, target=target)
            else:
                pair = None if s_out is None else (launch.new_output(x2.shape, np.float16, queue),
                                                   _view(s_out, x2.shape))
                (act, s2), event = decoder_small.run_rms_norm(x2, weight, eps=eps, residual=_view(residual, x2.shape),
                                                              out=pair, target=target)
                s_out = s_given if s_given is not None else s2.reshape(x.shape)
            act = act.reshape(x.shape)
        if not silu_mul:
            y, last = run(act, qw, out=y_out, target=target, dequant=dequant)
        elif n == 0:  # nothing to multiply: an empty y (numpy's result), as the plain call gives
            y, last = (y_out if y_out is not None else launch.new_output(y_shape, np.float16, queue)), None
        else:
            h, _ = run(act, qw, target=target, dequant=dequant)
            y, last = decoder_small.run_silu_mul(h.reshape(m, n), out=None if y_out is None else
                                                 _view(y_out, (m, n // 2)), target=target)
            y = y_out if y_out is not None else y.reshape(y_shape)
        return (y if residual is None else (y, s_out)), (last if last is not None else event)
    y = y_out if y_out is not None else launch.new_output(y_shape, np.float16, queue)
    if residual is not None and s_out is None:
        s_out = launch.new_output(x.shape, np.float16, queue)
    global_size, local_size, slm_floats = geometry(program.constants, program.target, n, m, k)
    zeros = qw.packed if qw.zeros is None else qw.zeros
    name = kernel_name(qw.group_size, qw.symmetric) + ("_norm" if norm is not None else "") + \
        ("_silu" if silu_mul else "")
    # the norm's SLM after the kernel's own: one float (VNNI, after x's fixed point) or a sum of squares per row
    # group and K slice (Xe2, after the partial sums); ROWS x K_SPLIT floats cover both
    args = launch_args(m, [x, qw.packed, qw.scales, zeros, y], n, k,
                       slm_floats + program.constants["ROWS"] * program.constants["K_SPLIT"])
    args += [x if residual is None else residual, x if weight is None else weight, y if s_out is None else s_out,
             0.0 if eps is None else eps, int(residual is not None)]
    event = launch.launch(program.kernel(name), args, global_size, local_size, queue)
    return (y if residual is None else (y, s_out)), event


def gemv_w4a16(x, qw: QuantizedW4, *, out=None, target: str | None = None, dequant: str | None = None, norm=None,
               residual=None, silu_mul: bool = False):
    """y = dequant(qw) @ x for float16 x [K] (y [N]) or x [M, K] with M <= 16 (y [M, N] = x @ dequant(qw).T), qw a
    QuantizedW4 [N, K] with device parts on x's queue; fp32 accumulation, y float16. `dequant` ("magic" / "plain";
    "vnni": integer dot products with x rounded to 15-bit fixed point per 128 k, CPU devices with AVX512-VNNI only;
    "avx2": the same integers on CPU devices with AVX2; "avx2_q8": AVX2 with x rounded to 8-bit integers per 32 k,
    as llama.cpp's Q8_0 activations, opt-in only; "auto": "vnni", else "avx2", where it runs, else the
    default) overrides the target's default variant (M = 1 only: the batched kernels dequantize exactly first either
    way);
    `target` forces a kernel target (bmg, lnl, cpu) for this call.

    The ops a decoder layer puts around its projections, as xe2rt.rms_norm / xe2rt.silu_mul compute them:
      norm=(weight, eps): the product takes rms_norm(x, weight, eps=eps, residual=residual); with residual (x's
        shape) the call returns (y, s), s = x + residual (out, if given, is the (y, s) pair);
      silu_mul=True: qw's rows are [gate; up] (N = 2 I) and y = silu(gate . x) * (up . x), [I] or [M, I].
    One launch at M = 1 (`fuses`) on an AVX512-VNNI CPU with dequant "vnni" / "auto" (norm: K a multiple of 128;
    silu_mul: I even), the separate ops' fp16 values bit for bit; and on Xe2 (K a multiple of 512, arrays 16-byte
    aligned), silu_mul bit for bit and the norm as a scale of the row sums, without the separate ops' two fp16
    roundings of the normalized x (within a derived bound; where that x would overflow fp16, |weight s r| > 65504,
    the separate ops give inf / NaN and the Xe2 kernel the finite product). Elsewhere the ops run in turn."""
    if norm is None and residual is None and silu_mul is False:
        return run(x, qw, out=out, target=target, dequant=dequant)[0]
    return run_fused(x, qw, norm=norm, residual=residual, silu_mul=silu_mul, out=out, target=target,
                     dequant=dequant)[0]
