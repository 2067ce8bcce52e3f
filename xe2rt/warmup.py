"""Build kernels ahead of their first call. A first call builds only the kernel it launches (xe2rt.artifacts); for
those who would rather pay everything up front, warmup builds whole families, each in one module build."""
from __future__ import annotations

import time

import dpctl

from . import artifacts, targets
from .errors import InputError, InputTypeError


def warmup(queue: dpctl.SyclQueue | None = None, families=None, *, target: str | None = None) -> dict[str, float]:
    """Build every kernel of `families` (default: all families shipped for the queue's target) for `queue` (default:
    dpctl's default queue; a SyclDevice or a filter string such as "opencl:cpu" names the device of a new queue).
    Returns the seconds each family took."""
    if queue is None or isinstance(queue, (str, dpctl.SyclDevice)):  # as target_for and info take a device
        queue = dpctl.get_device_cached_queue(targets.select_device(queue))
    elif not isinstance(queue, dpctl.SyclQueue):
        raise InputTypeError(f"warmup: queue must be a dpctl.SyclQueue, a SyclDevice or a filter string, got "
                             f"{type(queue).__name__}")
    chosen = targets.resolve(queue.sycl_device, target)
    shipped = sorted(entry["family"] for entry in artifacts.manifest()["artifacts"].values()
                     if entry["target"] == chosen)
    if families is None:
        families = runnable_families(queue, chosen)
    elif isinstance(families, str):
        families = [families]
    else:
        try:
            families = list(families)
        except TypeError:
            raise InputTypeError(f"warmup: families must be a family name or an iterable of them, got "
                                 f"{type(families).__name__} {families!r:.40}") from None
        if not all(isinstance(f, str) for f in families):
            raise InputTypeError(f"warmup: family names are str, got {families!r:.60}")
    unknown = sorted(set(families) - set(shipped))
    if unknown:
        raise InputError(f"warmup: no family {', '.join(map(repr, unknown))} for target {chosen!r}; shipped: "
                         f"{', '.join(shipped)}")
    seconds = {}
    for family in families:
        start = time.perf_counter()
        artifacts.load(queue, chosen, family).build_all()
        seconds[family] = time.perf_counter() - start
    return seconds


def runnable_families(queue: dpctl.SyclQueue, target: str) -> list[str]:
    """The shipped families of `target` that the queue's device can run: all of them but the cpu binaries that
    call host instructions the CPU lacks (the *_vnni ones without AVX512-VNNI, *_avx2 without AVX2:
    targets.missing_host_isa)."""
    return sorted(entry["family"] for entry in artifacts.manifest()["artifacts"].values()
                  if entry["target"] == target
                  and not targets.missing_host_isa(queue.sycl_device, entry.get("constants", {})))
