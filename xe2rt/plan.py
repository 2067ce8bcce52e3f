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
from .errors import InputError, InputTypeError


class Plan:
    """What `xe2rt.bind` returns: the op's checked, packed launches on the arrays it was bound to. `plan()` queues
    them again and returns the op's outputs (the same arrays every call), `plan.launch()` returns the last event,
    `plan.result` holds the outputs, `plan.launches` counts the kernel launches. Only xe2rt launches (and the host
    steps xe2rt ops record) are replayed: dpnp or other device work inside the op is not."""

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
        raise InputTypeError(f"xe2rt.bind: op must be an xe2rt op (callable), got {type(op).__name__}")
    with launch.recording() as recorder:
        result = op(*args, **kwargs)
    if not recorder.steps and not getattr(op, "__module__", "").startswith("xe2rt"):
        # an xe2rt op may have nothing to launch (empty arrays); a function of the user's that queued no xe2rt
        # launch did its work some other way (dpnp), which a plan would not repeat: its calls would return stale
        # results
        raise InputError(f"xe2rt.bind: {getattr(op, '__name__', op)!r} queued no xe2rt launch, so a plan of it "
                         f"would replay nothing (bind replays xe2rt launches only, not dpnp work): call it directly")
    return Plan(op, recorder.steps, result, args, kwargs)
