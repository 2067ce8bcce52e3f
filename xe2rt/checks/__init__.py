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

    def __str__(self) -> str:
        return f"{self.family}[{self.name}]"


def families() -> list[str]:
    """Every module of xe2rt.checks, i.e. every family that has checks."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def checks_of(family: str, quick: bool = False) -> list[Check]:
    return importlib.import_module(f"{__name__}.{family}").checks(quick)
