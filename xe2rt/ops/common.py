"""What every op does between validating its inputs and launching: pick the target and load its program."""
from __future__ import annotations

import dpctl

from .. import artifacts, targets
from ..config import XE2_TARGETS


def program_for(queue: dpctl.SyclQueue, family: str, target: str | None):
    """The built program of `family` for the queue's device (target from the call, XE2RT_TARGET, or the device)."""
    chosen = targets.resolve(queue.sycl_device, target)
    return artifacts.load(queue, chosen, family)


def is_xe2(target: str) -> bool:
    return target in XE2_TARGETS


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
