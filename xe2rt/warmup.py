"""Build kernels ahead of their first call. A first call builds only the kernel it launches (xe2rt.artifacts); for
those who would rather pay everything up front, warmup builds whole families, each in one module build."""
from __future__ import annotations

import time

import dpctl

from . import artifacts, module, targets
from .errors import InputError


def warmup(queue: dpctl.SyclQueue | None = None, families=None, *, target: str | None = None) -> dict[str, float]:
    """Build every kernel of `families` (default: all families shipped for the queue's target) for `queue` (default:
    dpctl's default queue). Returns the seconds each family took."""
    queue = queue if queue is not None else dpctl.SyclQueue()
    chosen = targets.resolve(queue.sycl_device, target)
    entries = [entry for entry in artifacts.manifest()["artifacts"].values() if entry["target"] == chosen]
    shipped = sorted(entry["family"] for entry in entries)
    if families is None:  # every family this device can run (not the AVX512-VNNI ones on other CPUs)
        runs = targets.cpu_has_avx512_vnni(queue.sycl_device)
        families = [entry["family"] for entry in sorted(entries, key=lambda e: e["family"])
                    if runs or not entry.get("constants", {}).get(module.VNNI_CONSTANT)]
    elif isinstance(families, str):
        families = [families]
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
