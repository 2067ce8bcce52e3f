"""Input checks every op runs before it launches anything. Messages name the op, the argument, the rule and the
offending value."""
from __future__ import annotations

from typing import Iterable

import dpctl
import dpctl.memory
import dpnp
import numpy as np

from .errors import InputError, InputTypeError, TargetError


def _is_device_array(a) -> bool:
    return isinstance(a, dpnp.ndarray) or hasattr(a, "__sycl_usm_array_interface__")


def device_array(op: str, name: str, a, *, dtypes: Iterable, ndims: Iterable[int]) -> None:
    """a is a dpnp array with one of `dtypes`, one of `ndims` dimensions, and C-contiguous."""
    if not _is_device_array(a):
        raise InputTypeError(f"{op}: {name} must be a dpnp array on a SYCL device, got {type(a).__name__}; "
                             f"use dpnp.asarray({name})")
    dtypes = [np.dtype(d) for d in dtypes]
    if np.dtype(a.dtype) not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise InputTypeError(f"{op}: {name} must be {allowed}, got {np.dtype(a.dtype)}")
    ndims = tuple(ndims)
    if a.ndim not in ndims:
        allowed = " or ".join(f"{n}-D" for n in ndims)
        raise InputError(f"{op}: {name} must be {allowed}, got {a.ndim}-D with shape {tuple(a.shape)}")
    if not a.flags.c_contiguous:
        raise InputError(f"{op}: {name} must be C-contiguous (row-major, unit stride), got strides "
                         f"{tuple(a.strides)} for shape {tuple(a.shape)}; pass dpnp.ascontiguousarray({name})")


def same_queue(op: str, **arrays) -> dpctl.SyclQueue:
    """The one queue all given arrays live on (compute follows data); None entries are skipped."""
    named = [(n, a) for n, a in arrays.items() if a is not None]
    first_name, first = named[0]
    queue = first.sycl_queue
    for name, a in named[1:]:
        if a.sycl_queue != queue:
            same_ctx = a.sycl_queue.sycl_context == queue.sycl_context
            what = "different queues of one context" if same_ctx else "different SYCL contexts"
            raise InputError(f"{op}: {name} and {first_name} are on {what} ({a.sycl_device.name!r} vs "
                             f"{first.sycl_device.name!r}); all arrays of one call must share a queue: "
                             f"dpnp.asarray({name}, sycl_queue={first_name}.sycl_queue)")
    return queue


def require_fp16(op: str, queue: dpctl.SyclQueue) -> None:
    if not queue.sycl_device.has_aspect_fp16:
        raise TargetError(f"{op}: device {queue.sycl_device.name!r} has no fp16 support (aspect fp16), "
                          f"which this kernel needs")


def out_array(op: str, out, *, shape: tuple, dtype, queue: dpctl.SyclQueue, inputs: dict) -> None:
    device_array(op, "out", out, dtypes=[dtype], ndims=[len(shape)])
    if tuple(out.shape) != tuple(shape):
        raise InputError(f"{op}: out must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.sycl_queue != queue:
        raise InputError(f"{op}: out is on another queue than the inputs; all arrays of one call must share a queue")
    for name, a in inputs.items():
        if a is not None and a.size and out.size and overlaps(out, a):
            raise InputError(f"{op}: out overlaps input {name}; the kernel reads {name} while writing out")


def _byte_range(a) -> tuple[int, int]:
    interface = a.__sycl_usm_array_interface__  # base pointer + element offset (a view starts `offset` in)
    start = interface["data"][0] + interface.get("offset", 0) * a.itemsize
    return start, start + a.size * a.itemsize


def overlaps(a, b) -> bool:
    a0, a1 = _byte_range(a)
    b0, b1 = _byte_range(b)
    return a0 < b1 and b0 < a1


def fits_int32(op: str, **sizes) -> None:
    for name, value in sizes.items():
        if not 0 <= value < 2**31:
            raise InputError(f"{op}: {name} = {value} exceeds the kernel's 32-bit index range (max {2**31 - 1})")
