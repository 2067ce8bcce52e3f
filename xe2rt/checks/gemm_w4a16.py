"""gemm_w4a16 correctness cases (protocol: xe2rt/checks/__init__.py).

Each case quantizes random weights (xe2rt.quantize_w4, every group size, symmetric and with zero points), runs
xe2rt's op and compares with the float64 reference of the exact dequantized weights (reference.quant.gemm_w4).
Bound, elementwise (reference.quant.gemm_w4_bound): fp32 accumulation over K of the products, K + 1 terms deep,
K eps32 sum|a w|, the epilogue's fp32 terms, half an fp16 ulp of the output; on the Xe2 kernels (which round each
weight (q - z) s to fp16 for DPAS) plus 2^-11 sum|a w| + 2^-25 sum|a|. The Result's error is max(|out - ref| / bound)
over the output, which must be <= 1.

Targets: "cpu" runs the CPU-shaped kernels; "bmg"/"lnl" run the Xe2 kernels, natively on an Xe2 GPU and through the
software DPAS / 2D block built-ins (variant xe2emu) on any other device; those cases are kept small (emulation).
The xe2emu builds for bmg / lnl use the emulation's own K step (the native step with software built-ins spilled in
IGC); the "(native Xe2 step, software built-ins)" cases run the xe2emu build for cpu, whose K step is the native one.
"""
from __future__ import annotations

import numpy as np

from . import Check, Result
from ..ops.common import INT_DOT_FLAGS

FAMILY = "gemm_w4a16"
XE2 = ("bmg", "lnl")
ALL = ("cpu", "bmg", "lnl")


def _variant(queue, target: str | None) -> tuple[str | None, str]:
    from .. import targets
    from ..errors import TargetError
    if target in XE2:
        try:
            native = targets.detect(queue.sycl_device).target in XE2
        except TargetError:
            native = False
        return target, "native" if native else "xe2emu"
    return target, "native"


def _case(m: int, n: int, k: int, g: int, symmetric: bool, *, bias: bool = False, activation=None, seed: int = 0,
          cpu_variant: str = "native", outliers: bool = False):
    def run(queue, target):
        import dpnp

        from .. import quantize_w4, targets
        from ..ops import gemm_w4a16 as op
        from ..ops import gemv_w4a16
        from ..reference import quant as ref_quant
        rng = np.random.default_rng(seed)
        w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
        qw = quantize_w4(w, group_size=g, symmetric=symmetric).to_device(queue)
        a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        if outliers:  # +-8 in the last 16 k of every 128-k chunk: the VNNI kernel's fixed-point exponent must see them
            a[:, [min(c + 120, k - 1) for c in range(0, k, 128)]] = 8 * np.array([(-1) ** j for j in range(
                -(-k // 128))], np.float16)
        b = rng.uniform(-1, 1, n).astype(np.float16) if bias else None
        chosen, variant = _variant(queue, target)
        if chosen == "cpu":
            variant = cpu_variant
        out, _ = op.run(dpnp.asarray(a, sycl_queue=queue), qw,
                        bias=None if b is None else dpnp.asarray(b, sycl_queue=queue), activation=activation,
                        target=chosen, variant=variant)
        got = dpnp.asnumpy(out).astype(np.float64)
        ref, pre, mag = ref_quant.gemm_w4(a, qw, bias=b, activation=activation)
        gemv = op.uses_gemv(m, b, activation)
        resolved = targets.resolve(queue.sycl_device, chosen)
        fp16_weights = not gemv and (resolved in XE2 or variant == "xe2emu")  # the Xe2 kernels' fp16 weights
        vnni = not gemv and op.resolve_family(variant, resolved, queue) in (op.FAMILIES["vnni"], op.FAMILIES["avx2"])
        bound = ref_quant.gemm_w4_bound(a, pre, mag, bias=b, activation=activation, fp16_weights=fp16_weights,
                                        x_error=ref_quant.gemm_w4_x_error(a, qw) if vnni else None)
        if gemv and m == 1:  # gemv_w4a16's own bound (its VNNI step rounds x too)
            bound = np.maximum(bound, ref_quant.w4_kernel_bound(
                a[0], qw, gemv_w4a16.program_variant(queue, chosen, None).constants)[None, :])
        if got.shape != ref.shape:
            return Result(float("inf"), 1.0, detail=f"shape {got.shape}, expected {ref.shape}")
        ratio = np.abs(got - ref) / bound
        ratio[~np.isfinite(got)] = np.inf
        worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else (0, 0)
        detail = (f"worst at {tuple(int(i) for i in worst)}: out {got[worst]:.6g}, ref {ref[worst]:.6g}, "
                  f"bound {bound[worst]:.3g}; path {'gemv_w4a16' if gemv else variant + ' GEMM'}") if ratio.size else ""
        rule = ("fp32 accumulation: (K+1) eps32 sum|a w| + epilogue + 0.5 ulp16"
                + (" + fp16 weights 2^-11 sum|a w| + 2^-25 sum|a|" if fp16_weights else "")
                + (" + fixed-point a: |a' - a| |w|" if vnni else ""))
        return Result(float(ratio.max()) if ratio.size else 0.0, 1.0, metric="max |out - ref| / bound",
                      bound_rule=rule, detail=detail)

    epi = ("" if not bias else " bias") + (f" {activation}" if activation else "")
    epi += " outliers at each 128-k chunk's end" if outliers else ""
    return f"M={m} N={n} K={k} g{g} {'sym' if symmetric else 'zp'}{epi}", run


def checks(quick: bool = False) -> list[Check]:
    # (M, N, K, G, symmetric, options, targets): M 17 / 33 / 128 and odd sizes; N tails (not multiples of 16 or 64),
    # K tails (K a multiple of G but not of the Xe2 kernels' 64-k step, or of the cpu kernel's 128-k chunk); every
    # group size with and without zero points; bias and each activation; M <= 16 through gemv_w4a16 (no epilogue) and
    # through the GEMM kernels (with one). K < 128 only on cpu (the Xe2 kernels refuse it: 2D block rules).
    cases = [
        (17, 70, 256, 32, True, {}, ALL),
        (33, 130, 384, 64, False, {}, ALL),
        (128, 256, 512, 128, True, {"bias": True}, ALL),
        (40, 96, 160, 32, False, {"bias": True, "activation": "relu"}, ALL),
        (65, 200, 640, 128, False, {"bias": True, "activation": "gelu"}, ALL),
        (19, 64, 192, 64, True, {"activation": "gelu_erf"}, ALL),
        (5, 48, 256, 32, False, {"bias": True, "activation": "relu"}, ALL),
        (3, 100, 256, 64, True, {}, ("cpu",)),  # gemv_w4a16's path (its bmg/lnl binaries: tests/test_gemv_w4a16.py)
        (129, 77, 96, 32, True, {"bias": True}, ("cpu",)),
        (33, 33, 64, 64, False, {}, ("cpu",)),
        (128, 1000, 1536, 128, True, {"bias": True, "activation": "gelu"}, ("cpu",)),
        (300, 130, 1024, 64, False, {}, ("cpu",)),
        (17, 64, 256, 32, True, {"outliers": True}, ("cpu",)),
    ]
    if quick:
        cases = [c for c in cases if c[0] in (17, 33, 128)][:3]
    out = []
    for i, (m, n, k, g, sym, options, targets) in enumerate(cases):
        name, run = _case(m, n, k, g, sym, seed=i, **options)
        out.append(Check(FAMILY, name, run, targets))
        if not quick and "cpu" in targets and m > 16:  # the cpu's integer-dot kernels, where the host runs them
            for variant, flag in INT_DOT_FLAGS.items():
                name, run = _case(m, n, k, g, sym, seed=i, cpu_variant=variant, **options)
                out.append(Check(FAMILY, f"{name} ({variant})", run, ("cpu",), cpu_flag=flag))
        if not quick and targets == ALL and m > 16:
            # the native Xe2 step itself (bmg / lnl's xe2emu builds run the emulation's own step), with the software
            # built-ins: the xe2emu build for the cpu target (NATIVE_STEP = 1)
            name, run = _case(m, n, k, g, sym, seed=i, cpu_variant="xe2emu", **options)
            out.append(Check(FAMILY, name + " (native Xe2 step, software built-ins)", run, ("cpu",)))
    # every variant at one shape each on the cpu kernels: g32/g64/g128 x sym/zp
    for g in (32, 64, 128):
        for sym in (True, False):
            if not quick:
                name, run = _case(48, 80, 4 * g, g, sym, bias=True, seed=100 + g + sym)
                out.append(Check(FAMILY, name + " (variant sweep)", run, ALL))
    return out
