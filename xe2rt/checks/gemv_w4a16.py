"""gemv_w4a16 cases: every target's binary, both dequant variants (and on the cpu the integer-dot kernels where the
host runs them: "vnni" with AVX512-VNNI, "avx2" and "avx2_q8" with AVX2),
symmetric and zero-point weights, against the float64 reference of dequantize() (xe2rt.reference.quant); the fused
kernels (norm= / residual= / silu_mul=; VNNI on the cpu, and bmg / lnl) against the float64 rms_norm / silu_mul
references too (FUSED_RULE).

Bound per row (reference.quant.w4_kernel_bound): fp32 accumulation over the kernel's K slices, including the
bias-corrected variant's magic offset (1024 code units for the fp16 magic, 256 for the CPU wide step), then one fp16
rounding; for the integer-dot kernels also sum |w| |x' - x| with x' the fixed-point x they multiply (avx2_q8: the
8-bit x per 32 k, reference.quant.q8_x); and max error <= 1e-2 max|y| (not for avx2_q8, whose x error scales with
sum |w| |x|, which the bound holds, and not with |y|)."""
from __future__ import annotations

import numpy as np

from . import Check, elementwise
from ._util import dev, host, rng
from ..ops.common import INT_DOT_FLAGS
from ..ops.gemv_w4a16 import Q8_FLAGS

FLAGS = {**INT_DOT_FLAGS, **Q8_FLAGS}  # the cpu-only variants and the host CPU flag each needs

RULE = ("per row: fp32 accumulation (magic offset of the variant included) over the K slices + 0.5 ulp16 |ref| "
        "(integer dot: + sum |w| |x' - x| for the fixed-point or 8-bit x')")
ALL = ("cpu", "bmg", "lnl")
# (N, K, group, symmetric, dequant): N tails; K = 4224 not a multiple of VL 512; K not a multiple of 128 exercises the
# CPU wide path's per-group tail.
SHAPES = [(n, k, g, s, d) for n, k in [(1, 4224), (7, 4224), (1000, 1024), (13, 8448)]
          for g in (32, 64, 128) for s in (True, False) for d in ("magic", "plain", *FLAGS)]
# 448 = 3 x 128 + 64, 352 = 2 x 128 + 96, 160 = 128 + 32; K = 96 has no whole 128-k step
TAILS = [(n, k, g, s, d) for n, k, g, s in [(19, 448, 64, True), (45, 352, 32, False), (9, 160, 32, True),
                                            (17, 96, 32, False), (23, 448, 64, False)]
         for d in ("magic", "plain", *FLAGS)]
LLM = [(n, k, g, s, None) for n, k in [(4096, 14336), (14336, 4096), (9728, 2560), (2560, 9728)]
       for g, s in [(128, True), (32, False)]]
QUICK = [(45, 352, 32, False, None)]


def random_qw(g, n, k, group_size, symmetric):
    """Uniform random codes and zero points (every code and zero point occurs), LLM-sized fp16 scales."""
    from ..quant import QuantizedW4
    packed = g.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    scales = (g.uniform(0.5, 1.5, size=(n, k // group_size)) * 0.01).astype(np.float16)
    zeros = None if symmetric else g.integers(0, 16, size=(n, k // group_size), dtype=np.uint8)
    return QuantizedW4(packed, scales, zeros, group_size)


def run_case(queue, target, n, k, group_size, symmetric, dequant):
    from ..ops import gemv_w4a16 as op
    from ..reference import quant as ref_q
    g = rng("gemv_w4a16", n, k, group_size, symmetric)
    qw = random_qw(g, n, k, group_size, symmetric).to_device(queue)
    x = g.standard_normal(k).astype(np.float16)
    y_dev, _ = op.run(dev(x, queue), qw, target=target, dequant=dequant)
    y = host(y_dev).astype(np.float64).reshape(-1)
    bound = ref_q.w4_kernel_bound(x, qw, op.program_variant(queue, target, dequant).constants)
    # the 8-bit x's error scales with sum |w| |x|, not with |y|: its bar is the derived bound alone
    return elementwise(y, ref_q.gemv_w4(x, qw), bound, rel_bar=None if dequant in Q8_FLAGS else 1e-2, rule=RULE)


FUSED_RULE = ("h = dequant(W) x16, x16 = fp16(rms_norm(x [+ residual])) or x: the GEMV's row bound at x16 + "
              "2 sum |w| ulp16(x16) (the kernel's x16 in the last place; Xe2, which skips x16's two roundings and "
              "scales by r at the end: <= 1.5 ulp16, + 2^-20 sum |w| |x16| for r's fp32 rounding); silu_mul: g, u "
              "each within that + their fp16 rounding e, y within 1.1 (|u| + e_u) e_g + |silu(g)| e_u + 1e-5 |y| + "
              "ulp16(y); s = fp16(x + residual) exactly")
# the fused kernels (gemv_w4a16's norm= / residual= / silu_mul=): form, N, K, group, symmetric; VNNI (cpu) and Xe2
FORMS = ("norm", "norm+res", "silu", "norm+res+silu")
FUSED = [(form, n, k, g, s) for form in FORMS
         for n, k, g, s in [(3072, 2048, 32, True), (1000, 1024, 128, False), (20, 128, 64, True)]]
FUSED_XE2 = [(form, n, k, g, s) for form in FORMS
             for n, k, g, s in [(3072, 2048, 32, True), (1002, 1024, 128, False), (6, 512, 64, True)]]


def run_fused_case(queue, target, form, n, k, group_size, symmetric, dequant, eps=1e-5):
    """gemv_w4a16 with norm= (form contains "norm"), residual= ("res") and silu_mul= ("silu") against float64: the
    Result of s (exact) if that fails, else of y (FUSED_RULE)."""
    from . import exact
    from ..ops import gemv_w4a16 as op
    from ..ops.common import is_xe2
    from ..reference import decoder as ref_d, quant as ref_q
    g = rng("gemv_w4a16 fused", form, n, k, group_size, symmetric)
    qw = random_qw(g, n, k, group_size, symmetric).to_device(queue)
    x = g.standard_normal(k).astype(np.float16)
    res = g.standard_normal(k).astype(np.float16)
    w = (1.0 + 0.2 * g.standard_normal(k)).astype(np.float16)
    kwargs = {"silu_mul": "silu" in form}
    if "norm" in form:
        kwargs["norm"] = (dev(w, queue), eps)
    if "res" in form:
        kwargs["residual"] = dev(res, queue)
    got, _ = op.run_fused(dev(x, queue), qw, target=target, dequant=dequant, **kwargs)
    if "res" in form:
        got, s = got
        s_ref = (x.astype(np.float64) + res).astype(np.float16)
        check = exact(host(s), s_ref, what="s = fp16(x + residual)")
        if not check.passed:
            return check
    pre = ref_d.rms_norm_ref(x[None], w, eps, res[None] if "res" in form else None)[0][0] if "norm" in form else x
    x16 = pre.astype(np.float16)
    h = ref_q.gemv_w4(x16, qw)
    program = op.program_variant(queue, target, dequant)
    w_abs = np.abs(qw.to_host().dequantize(np.float64))
    e_h = ref_q.w4_kernel_bound(x16, qw, program.constants) + 2 * w_abs @ ref_d.ulp16(x16)
    if "norm" in form and is_xe2(program.target):
        e_h = e_h + 2.0**-20 * (w_abs @ np.abs(x16.astype(np.float64)))
    if "silu" in form:
        i = n // 2
        gate, up = h[:i], h[i:]
        e_g = e_h[:i] + ref_d.ulp16(np.abs(gate) + e_h[:i])
        e_u = e_h[i:] + ref_d.ulp16(np.abs(up) + e_h[i:])
        ref = ref_d.silu_mul_ref(h[None, :])[0]
        bound = 1.1 * (np.abs(up) + e_u) * e_g + np.abs(gate / (1 + np.exp(-gate))) * e_u
        bound = bound + 1e-5 * np.abs(ref) + ref_d.ulp16(np.abs(ref) + bound)
    else:
        ref, bound = h, e_h
    return elementwise(host(got).astype(np.float64).reshape(-1), ref, bound, rule=FUSED_RULE)


def _fused(form, n, k, gs, sym, deq):
    name = f"{form} N={n} K={k} g{gs} {'sym' if sym else 'zp'} {deq} (one launch)"
    return Check("gemv_w4a16", name, lambda q, t: run_fused_case(q, t, form, n, k, gs, sym, deq), ("cpu",),
                 cpu_flag=FLAGS[deq])


def _fused_xe2(form, n, k, gs, sym):
    name = f"{form} N={n} K={k} g{gs} {'sym' if sym else 'zp'} (one launch)"
    return Check("gemv_w4a16", name, lambda q, t: run_fused_case(q, t, form, n, k, gs, sym, None), ("bmg", "lnl"))


def _case(n, k, gs, sym, deq, targets):
    name = f"N={n} K={k} g{gs} {'sym' if sym else 'zp'} {deq or 'default'}"
    if deq in FLAGS:  # the cpu target's integer-dot kernels: CPU devices with that instruction set only
        targets = tuple(t for t in targets if t == "cpu")
    return Check("gemv_w4a16", name, lambda q, t: run_case(q, t, n, k, gs, sym, deq), targets,
                 cpu_flag=FLAGS.get(deq, ""))


def checks(quick: bool = False) -> list[Check]:
    if quick:
        return [_case(*c, ALL) for c in QUICK]
    return [_case(*c, ALL) for c in SHAPES + TAILS] + [_case(*c, ("cpu",)) for c in LLM] + \
        [_fused(*c, d) for c in FUSED for d in FLAGS] + [_fused_xe2(*c) for c in FUSED_XE2]
