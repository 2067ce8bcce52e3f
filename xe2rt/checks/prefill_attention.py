"""prefill_attention against the float64 reference, within the derived elementwise bound
(xe2rt.reference.attention.BOUND_RULE): odd token counts (1, 3, 17: one partial tile; 128, 300: full tiles and a tail;
4096: the limit), GQA ratios 1, 4, 8, 16, D 64 and 128, causal and not, the shapes of Llama-3.2-1B, Llama-3.1-8B /
Qwen3-4B and Qwen3-30B-A3B, a peaked softmax (scale 1: the running max moves by tens), and out=.

On a CPU device the bmg / lnl cases run the Xe2-shaped kernels with software DPAS and 2D block reads (variant xe2emu,
slow on a CPU: those cases are small); on an Xe2 GPU they run the native kernels."""
from __future__ import annotations

import dpnp
import numpy as np

from . import Check, Result
from .. import targets as _targets
from ..errors import TargetError
from ..ops import prefill_attention as op
from ..ops.common import is_xe2
from ..reference.attention import BOUND_RULE, prefill_attention_bound, prefill_attention_ref

FAMILY = "prefill_attention"
ALL = ("cpu", "bmg", "lnl")
CPU_ONLY = ("cpu",)


def variant_for(queue, target: str | None) -> str:
    """native, unless an Xe2 target is asked of a device that is not that Xe2 GPU (then its software version)."""
    if target is None or not is_xe2(target):
        return "native"
    try:
        detected = _targets.detect(queue.sycl_device).target
    except TargetError:
        detected = None
    return "native" if detected == target else "xe2emu"


def _case(t, hq, hkv, d, causal, *, scale=None, use_out=False, label="", variant=None):
    def run(queue, target):
        rng = np.random.default_rng([t, hq, hkv, d, int(causal), int(use_out)])
        q = rng.standard_normal((t, hq, d)).astype(np.float16)
        k = rng.standard_normal((t, hkv, d)).astype(np.float16)
        v = rng.standard_normal((t, hkv, d)).astype(np.float16)
        dq, dk, dv = (dpnp.asarray(a, sycl_queue=queue) for a in (q, k, v))
        out = dpnp.full((t, hq, d), np.nan, dtype=np.float16, sycl_queue=queue) if use_out else None
        got, _ = op.run(dq, dk, dv, causal=causal, scale=scale, out=out, target=target,
                        variant=variant or variant_for(queue, target))
        if use_out and got is not out:
            return Result(float("inf"), 0.0, detail="out= was given but another array was returned")
        got = dpnp.asnumpy(got).astype(np.float64)
        ref = prefill_attention_ref(q, k, v, causal=causal, scale=scale)
        bound = prefill_attention_bound(q, k, v, ref, causal=causal, scale=scale)
        err = np.abs(got - ref)
        excess = np.where(np.isfinite(err), err / bound, np.inf)
        worst = np.unravel_index(np.argmax(excess), err.shape)
        # metric: the error in units of its own elementwise bound (<= 1 passes)
        return Result(float(excess[worst]), 1.0, metric="max |out - ref| / elementwise bound", bound_rule=BOUND_RULE,
                      detail=f"worst at [t, h, d] = {tuple(int(i) for i in worst)}: |err| {err[worst]:.3g}, bound "
                             f"{bound[worst]:.3g}; max |err| {np.nanmax(err):.3g}")

    name = f"T={t} Hq={hq} Hkv={hkv} D={d} {'causal' if causal else 'full'}"
    name += f" scale={scale}" if scale is not None else ""
    name += " out=" if use_out else ""
    name += f" {label}" if label else ""
    name += " (native Xe2 tile loops, software built-ins)" if variant == "xe2emu" else ""
    return run, name


def checks(quick: bool = False) -> list[Check]:
    # (T, Hq, Hkv, D, causal, targets, extra)
    cases = [
        (1, 4, 1, 64, True, ALL, {}),
        (3, 8, 2, 128, True, ALL, {}),
        (17, 4, 1, 64, False, ALL, {}),
        (17, 16, 1, 128, True, ALL, {"label": "GQA 16"}),
        (40, 8, 1, 128, False, ALL, {"label": "GQA 8, 2 tiles + tail"}),
        (70, 2, 2, 64, True, ALL, {"label": "MHA, prefetched tiles"}),
        (33, 4, 4, 64, True, ALL, {"scale": 1.0, "label": "peaked softmax"}),
        (20, 4, 1, 128, True, ALL, {"use_out": True}),
        (17, 32, 8, 64, True, ALL, {"label": "Llama-3.2-1B"}),
        (17, 32, 8, 128, True, ALL, {"label": "Llama-3.1-8B / Qwen3-4B"}),
        (17, 32, 4, 128, True, ALL, {"label": "Qwen3-30B-A3B"}),
        (128, 16, 4, 64, True, CPU_ONLY, {}),
        (128, 16, 16, 128, False, CPU_ONLY, {"label": "MHA"}),
        (300, 8, 1, 128, True, CPU_ONLY, {"label": "GQA 8"}),
        (300, 16, 1, 64, False, CPU_ONLY, {"label": "GQA 16"}),
        (128, 32, 8, 64, True, CPU_ONLY, {"label": "Llama-3.2-1B"}),
        (128, 32, 8, 128, True, CPU_ONLY, {"label": "Llama-3.1-8B / Qwen3-4B"}),
        (128, 32, 4, 128, True, CPU_ONLY, {"label": "Qwen3-30B-A3B"}),
        (4096, 2, 1, 64, True, CPU_ONLY, {"label": "longest prompt"}),
    ]
    if quick:
        cases = [c for c in cases if c[0] <= 17 and c[1] <= 8] + [cases[-3]]
    out = []
    for t, hq, hkv, d, causal, tgts, extra in cases:
        run, name = _case(t, hq, hkv, d, causal, **extra)
        out.append(Check(FAMILY, name, run, tgts))
    # The native Xe2 kernel's own tile loops (Q^T in registers, full tiles unmasked, then the diagonal or tail tile)
    # with the software built-ins: the xe2emu build for cpu (NATIVE_STEP = 1); bmg / lnl's xe2emu builds run the
    # emulation's one loop with the mask chosen at run time.
    for t, hq, hkv, d, causal, extra in ((17, 4, 1, 64, True, {}), (40, 8, 1, 128, False, {}),
                                         (33, 4, 4, 64, True, {"scale": 1.0})):
        if not quick or t == 17:
            run, name = _case(t, hq, hkv, d, causal, variant="xe2emu", **extra)
            out.append(Check(FAMILY, name, run, ("cpu",)))
    return out
