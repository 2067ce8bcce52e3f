"""Input checks every op runs before it launches anything. Messages name the op, the argument, the rule and the
offending value."""
from __future__ import annotations

import math
import numbers
from typing import Iterable

import dpctl
import dpctl.memory
import dpnp
import numpy as np

from . import _compat
from .errors import InputError, InputTypeError, TargetError


def usm_view(a):
    """The dpnp.tensor.usm_ndarray behind a device array (its attributes are cheap to read), or None for anything
    that is not a SYCL USM array."""
    if isinstance(a, dpnp.ndarray):
        return a.get_array()
    if hasattr(a, "usm_data"):
        return a
    if hasattr(a, "__sycl_usm_array_interface__"):
        return dpnp.asarray(a).get_array()  # another USM producer: a zero-copy view
    return None


def real_number(value) -> float | None:
    """A real-number argument as a Python float, or None when it is not one (bool and numpy bool included). An int past
    float's range (10**400) becomes +-inf, so a finiteness check that follows refuses it with the value in its
    message instead of an OverflowError escaping."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def shown(value, limit: int = 40) -> str:
    """repr(value) for an error message, cut to `limit` characters (an int of 400 digits is named by its start)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def _not_a_device_array(op: str, name: str, a) -> InputTypeError:
    return InputTypeError(f"{op}: {name} must be a dpnp array on a SYCL device, got {type(a).__name__}; "
                          f"use dpnp.asarray({name})")


def device_array(op: str, name: str, a, *, dtypes: Iterable, ndims: Iterable[int]) -> None:
    """a is a dpnp array with one of `dtypes`, one of `ndims` dimensions, and C-contiguous."""
    u = usm_view(a)
    if u is None:
        raise _not_a_device_array(op, name, a)
    if u.dtype not in dtypes:
        allowed = " or ".join(str(np.dtype(d)) for d in dtypes)
        raise InputTypeError(f"{op}: {name} must be {allowed}, got {np.dtype(u.dtype)}")
    if u.ndim not in ndims:
        allowed = " or ".join(f"{n}-D" for n in ndims)
        raise InputError(f"{op}: {name} must be {allowed}, got {u.ndim}-D with shape {tuple(u.shape)}")
    if not u.flags.c_contiguous:
        raise InputError(f"{op}: {name} must be C-contiguous (row-major, unit stride), got strides "
                         f"{tuple(u.strides)} for shape {tuple(u.shape)}; pass dpnp.ascontiguousarray({name})")


def describe_device(device: dpctl.SyclDevice) -> str:
    """A device as a user can tell it apart from another of the same name: its filter string, or for a sub-device
    (which has none) its handle and compute units under its root device's filter string."""
    try:
        return f"{device.filter_string} ({device.name!r})"
    except ValueError:
        return (f"sub-device 0x{device.addressof_ref():x} ({device.max_compute_units} compute units) of "
                f"{describe_device(device.parent_device)}")


def describe_queue(queue: dpctl.SyclQueue) -> str:
    return f"queue 0x{queue.addressof_ref():x} on {describe_device(queue.sycl_device)}"


def _queue_fix(name: str, value, first_name: str) -> str:
    """How to move `value` to the first argument's queue: a quantized weight moves as a whole (to_device), an array
    with dpnp.asarray."""
    if hasattr(value, "to_device") and not hasattr(value, "usm_type"):
        return f"{name} = {name}.to_device({first_name}.sycl_queue)"
    return f"{name} = dpnp.asarray({name}, sycl_queue={first_name}.sycl_queue)"


def same_queue(op: str, **arrays) -> dpctl.SyclQueue:
    """The one queue all given arrays live on (compute follows data); None entries are skipped. An entry may be a
    quantized weight (anything with sycl_queue and to_device), which the fix then moves as a whole."""
    queue = first_name = None
    for name, a in arrays.items():
        if a is None:
            continue
        if not hasattr(a, "sycl_queue"):  # checked here too: ops may compare queues before checking each array
            raise _not_a_device_array(op, name, a)
        if queue is None:
            first_name, queue = name, a.sycl_queue
            continue
        other = a.sycl_queue
        if other is not queue and other != queue:
            if other.sycl_device == queue.sycl_device:
                where = (f"different queues of one device, {describe_device(queue.sycl_device)} ({name} on "
                         f"queue 0x{other.addressof_ref():x}, {first_name} on queue 0x{queue.addressof_ref():x})")
            else:
                ctx = "one SYCL context" if other.sycl_context == queue.sycl_context else "different SYCL contexts"
                where = (f"different devices ({ctx}): {name} on {describe_device(other.sycl_device)}, {first_name} "
                         f"on {describe_device(queue.sycl_device)}")
            raise InputError(f"{op}: {name} and {first_name} are on {where}; all arrays of one call must share a "
                             f"queue: {_queue_fix(name, a, first_name)}")
    return queue


_fp16_by_queue: dict = {}


def require_fp16(op: str, queue: dpctl.SyclQueue) -> None:
    fp16 = _fp16_by_queue.get(queue)
    if fp16 is None:
        fp16 = _fp16_by_queue[queue] = queue.sycl_device.has_aspect_fp16
    if not fp16:
        raise TargetError(f"{op}: device {queue.sycl_device.name!r} has no fp16 support (aspect fp16), "
                          f"which this kernel needs")


def out_array(op: str, out, *, shape: tuple, dtype, queue: dpctl.SyclQueue, inputs: dict, name: str = "out") -> None:
    """`out` (called `name` in the messages) is a device array of this shape, dtype and queue, sharing no byte with
    the inputs."""
    device_array(op, name, out, dtypes=[dtype], ndims=[len(shape)])
    if tuple(out.shape) != tuple(shape):
        raise InputError(f"{op}: {name} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if not usm_view(out).flags.writable:
        raise InputError(f"{op}: {name} is read-only (flags.writable is False); the op writes it")
    if out.sycl_queue != queue:
        raise InputError(f"{op}: {name} is on another queue than the inputs ({name} on {describe_queue(out.sycl_queue)}, "
                         f"the inputs on {describe_queue(queue)}); "
                         f"all arrays of one call must share a queue: allocate {name} with sycl_queue=x.sycl_queue")
    for input_name, a in inputs.items():
        if a is not None and a.size and out.size and overlaps(out, a):
            raise InputError(f"{op}: {name} overlaps input {input_name}; the kernel reads {input_name} while writing "
                             f"{name}")


def address(a) -> int:
    """Address of device array `a`'s first element (dpnp or usm_ndarray; a view starts inside its allocation): what
    the alignment rules of block reads are checked against."""
    return _compat.first_element_address(usm_view(a))


def usm_byte_range(u) -> tuple[int, int]:
    """[first, end) byte addresses of usm_ndarray `u` (a view starts inside its allocation)."""
    start = _compat.first_element_address(u)
    return start, start + u.size * u.itemsize


def _byte_range(a) -> tuple[int, int]:
    return usm_byte_range(usm_view(a))


def overlaps(a, b) -> bool:
    a0, a1 = _byte_range(a)
    b0, b1 = _byte_range(b)
    return a0 < b1 and b0 < a1


def fits_int32(op: str, **sizes) -> None:
    for name, value in sizes.items():
        if not 0 <= value < 2**31:
            raise InputError(f"{op}: {name} = {value} exceeds the kernel's 32-bit index range (max {2**31 - 1})")
