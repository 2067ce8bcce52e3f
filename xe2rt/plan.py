"""Bind once, launch many: `xe2rt.bind(op, *args, **kwargs)` runs the op's checks, chooses its kernels and packs their
arguments once; the returned Plan re-launches the same work on the same arrays (whose contents may change) at the
cost of the submissions alone.

The op is called as usual inside launch.recording(), so a plan raises exactly the op's errors, at bind time, and
replays exactly the kernels (and host steps) the op would queue. The plan holds every array it uses, so none can be
freed while the plan exists. Outputs the op allocated are allocated once, at bind time: each call of the plan
overwrites them and returns the same arrays.
"""
from __future__ import annotations

from typing import Callable

import dpctl

from . import launch


class Plan:
    def __init__(self, op: Callable, steps: list, result, args: tuple, kwargs: dict):
        self.op = op
        self.result = result
        self._steps = tuple(steps)
        self._held = (args, kwargs)  # the plan owns its arrays; submissions hold them again while in flight
        single = steps[0] if len(steps) == 1 and isinstance(steps[0], launch.Submission) else None
        self._single = single.arguments() if single is not None else None

    def launch(self) -> dpctl.SyclEvent | None:
        """Queue the op's work again; returns the last kernel's event (None if the op had nothing to launch)."""
        if self._single is not None:
            return launch.ordered_submit(*self._single)
        return launch.run_steps(self._steps)

    def __call__(self):
        """Queue the op's work again and return its outputs (the same arrays every call) without waiting."""
        if self._single is not None:
            launch.ordered_submit(*self._single)
        else:
            self.launch()
        return self.result

    @property
    def launches(self) -> int:
        return sum(isinstance(step, launch.Submission) for step in self._steps)

    def __repr__(self) -> str:
        name = getattr(self.op, "__name__", repr(self.op))
        return f"<xe2rt.Plan {name}: {self.launches} kernel launch(es)>"


def bind(op: Callable, *args, **kwargs) -> Plan:
    """Check and pack `op(*args, **kwargs)` once; `plan()` launches it again and returns its outputs, `plan.launch()`
    returns the event. Raises the op's own errors here, before anything is queued."""
    if not callable(op):
        raise TypeError(f"xe2rt.bind: op must be an xe2rt op (callable), got {type(op).__name__}")
    with launch.recording() as recorder:
        result = op(*args, **kwargs)
    return Plan(op, recorder.steps, result, args, kwargs)
