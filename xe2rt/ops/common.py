"""What every op does between validating its inputs and launching: pick the target and load its program."""
from __future__ import annotations

import os

import dpctl

from .. import artifacts, module, targets
from ..config import XE2_TARGETS


_programs: dict = {}


def program_for(queue: dpctl.SyclQueue, family: str, target: str | None):
    """The program of `family` for the queue's device (target from the call, XE2RT_TARGET, or the device). Cached by
    everything the choice depends on: the queue, the family, the per-call target and both XE2RT_* variables."""
    key = (queue, family, target, os.environ.get("XE2RT_TARGET"), os.environ.get("XE2RT_KERNEL_DIR"),
           module.generation)
    program = _programs.get(key)
    if program is None:
        chosen = targets.resolve(queue.sycl_device, target)
        program = artifacts.load(queue, chosen, family)
        if len(_programs) > 4096:
            _programs.clear()
        _programs[key] = program
    return program


def is_xe2(target: str) -> bool:
    return target in XE2_TARGETS


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
