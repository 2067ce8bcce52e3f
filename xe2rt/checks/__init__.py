"""Correctness checks shared by the tests and `python -m xe2rt selftest` (one source for both).

Each kernel family has a module `xe2rt/checks/<family>.py` with

    def checks(quick: bool = False) -> list[Check]

Each Check builds its inputs (seeded), runs the public op on the given queue and target, computes the float64 numpy
reference from `xe2rt.reference`, and returns a Result with the measured error and the bound it must meet (derived,
stated in `bound_rule`). Tests parametrize over `checks()`; the selftest runs `checks(quick)` of every module on the
user's device.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Result:
    error: float  # the measured error (metric named in `metric`)
    bound: float  # the bound it must meet
    metric: str = "max abs error"
    bound_rule: str = ""  # how the bound was derived, e.g. "fp32 accumulation over K: 2^-10 * sqrt(K) * max|y|"
    detail: str = ""  # where the worst error is (index, lane), or what differed

    @property
    def passed(self) -> bool:
        return math.isfinite(self.error) and self.error <= self.bound

    def describe(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        text = f"{verdict}: {self.metric} {self.error:.3g} (bound {self.bound:.3g}{'; ' + self.bound_rule if self.bound_rule else ''})"
        return text + (f"; {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Check:
    family: str
    name: str  # the case, e.g. "T=17 H=4096 residual"
    run: Callable = field(compare=False)  # run(queue, target: str | None) -> Result
    targets: tuple = ("cpu", "bmg", "lnl")  # kernel targets the case is meaningful for
    native_xe2: bool = False  # needs the real DPAS / 2D block built-ins, i.e. an Xe2 GPU (not the CPU device)
    # a host CPU flag the case's cpu binary needs (targets.HOST_ISA_CONSTANTS: "avx512_vnni" for the *_vnni
    # kernels, "avx2" for the *_avx2 ones; targets.cpu_has_flag), "" for none
    cpu_flag: str = ""

    def __str__(self) -> str:
        return f"{self.family}[{self.name}]"


def families() -> list[str]:
    """Every module of xe2rt.checks, i.e. every family that has checks."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def checks_of(family: str, quick: bool = False) -> list[Check]:
    return importlib.import_module(f"{__name__}.{family}").checks(quick)


def elementwise(got, ref, bound, *, rel_bar: float | None = None, rule: str = "", floor: float = 1e-30) -> Result:
    """Result of comparing `got` with the float64 `ref` under a per-element `bound` (and, with `rel_bar`, the plain
    bar max|got - ref| <= rel_bar * max|ref|). The error is the worst ratio of an element's error to its bound, so the
    Result passes when it is <= 1; `detail` names the worst element."""
    import numpy as np
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return Result(math.inf, 1.0, "shape", rule, f"got shape {got.shape}, reference {ref.shape}")
    if not got.size:
        return Result(0.0, 1.0, "max |got - ref| / bound", rule, "empty")
    if not np.isfinite(got).all():
        where = np.unravel_index(np.argmin(np.isfinite(got)), got.shape)
        return Result(math.inf, 1.0, "max |got - ref| / bound", rule, f"non-finite output at {tuple(map(int, where))}")
    err = np.abs(got - ref)
    ratio = err / np.maximum(np.broadcast_to(np.asarray(bound, dtype=np.float64), err.shape), floor)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    worst_ratio = float(ratio[worst])
    detail = (f"worst at {tuple(map(int, worst))}: |got - ref| {err[worst]:.3g}, bound "
              f"{np.broadcast_to(bound, err.shape)[worst]:.3g}")
    if rel_bar is not None:
        bar = rel_bar * max(float(np.abs(ref).max()), floor)
        worst_ratio = max(worst_ratio, float(err.max()) / bar)
        rule = (rule + "; " if rule else "") + f"and max|got - ref| <= {rel_bar:g} max|ref|"
    return Result(worst_ratio, 1.0, "max |got - ref| / bound", rule, detail)


def exact(got, want, *, what: str = "values") -> Result:
    """Bit-for-bit comparison (indices, cache bytes): the error is the number of differing elements."""
    import numpy as np
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return Result(math.inf, 0.0, f"{what} differing", "exact", f"got shape {got.shape}, want {want.shape}")
    diff = np.argwhere(got != want)
    detail = f"first at {tuple(map(int, diff[0]))}: got {got[tuple(diff[0])]}, want {want[tuple(diff[0])]}" \
        if len(diff) else ""
    return Result(float(len(diff)), 0.0, f"{what} differing", "exact", detail)


def combine(*results: Result) -> Result:
    """The failing (or else the worst) of several Results of one case."""
    failing = [r for r in results if not r.passed]
    if failing:
        return failing[0]
    return max(results, key=lambda r: r.error / r.bound if r.bound else r.error)
