"""gemm_fp16 cases: the CPU-shaped kernels (cpu target) and the Xe2-shaped kernels (variant "xe2emu": software DPAS
and 2D block reads, every target's tile constants; on an Xe2 GPU also the native variant), every epilogue.

Bound per element (reference.gemm.error_bound_from): K eps32 sum|a b| for fp32 accumulation, the epilogue's own
error, then 0.5 ulp16 for the fp16 output; and max error <= 2e-2 max|ref|."""
from __future__ import annotations

import numpy as np

from . import Check, combine, elementwise
from ._util import dev, host, rng

RULE = "per element: K eps32 sum|a b| + epilogue + 0.5 ulp16 |ref| (fp32 accumulation, fp16 output)"
EPILOGUES = [(False, None), (True, None), (True, "relu"), (True, "gelu"), (True, "gelu_erf")]
CPU_SHAPES = [(m, n, k, lay) for m in (1, 3, 17, 128) for n, k in ((1, 16), (100, 100), (4096, 100), (16, 4096))
              for lay in ("kn", "nk")]
XE2_SHAPES = [(1, 1, 16, "kn"), (3, 100, 100, "nk"), (8, 64, 32, "kn"), (17, 16, 4096, "nk"), (33, 70, 37, "kn"),
              (40, 130, 48, "nk"), (128, 256, 512, "nk")]
QUICK_CPU = [(17, 100, 100, "kn")]
QUICK_XE2 = [(40, 130, 48, "nk")]


def run_case(queue, target, m, n, k, b_layout, variant):
    from ..ops import gemm_fp16 as G
    from ..reference import gemm as R
    g = rng("gemm_fp16", m, n, k, b_layout)
    a = g.uniform(-1, 1, (m, k)).astype(np.float16)
    b = g.uniform(-1, 1, (k, n) if b_layout == "kn" else (n, k)).astype(np.float16)
    bias = g.uniform(-1, 1, n).astype(np.float16)
    pre, mag = R.products(a, b, b_layout)
    da, db, dbias = dev(a, queue), dev(b, queue), dev(bias, queue)
    results = []
    for with_bias, act in EPILOGUES:
        out, _ = G.run(da, db, bias=dbias if with_bias else None, activation=act, b_layout=b_layout, target=target,
                       variant=variant)
        ref = R.epilogue(pre, bias if with_bias else None, act)
        bound = R.error_bound_from(pre, mag, k, bias=bias if with_bias else None, activation=act)
        r = elementwise(host(out), ref, bound, rel_bar=2e-2, rule=RULE)
        r.detail = f"bias={with_bias} act={act}: {r.detail}"
        results.append(r)
    return combine(*results)


def _case(m, n, k, lay, variant, targets, native_xe2=False):
    return Check("gemm_fp16", f"{variant} M={m} N={n} K={k} {lay}",
                 lambda q, t: run_case(q, t, m, n, k, lay, variant), targets, native_xe2)


def checks(quick: bool = False) -> list[Check]:
    cpu, xe2 = (QUICK_CPU, QUICK_XE2) if quick else (CPU_SHAPES, XE2_SHAPES)
    # variant "native" is DPAS on bmg/lnl: it runs only on a device with the matrix-multiply extension (an Xe2 GPU)
    return [_case(*s, "native", ("cpu",)) for s in cpu] + [_case(*s, "xe2emu", ("cpu", "bmg", "lnl")) for s in xe2] \
        + [_case(*s, "native", ("bmg", "lnl"), native_xe2=True) for s in xe2]
