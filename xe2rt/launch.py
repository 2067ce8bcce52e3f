"""The one launch path every op takes: marshal arguments by the kernel's declared signature, check the geometry
against device and kernel limits, submit.

Sizes are given in OpenCL order (element 0 is get_global_id(0)); dpctl takes them reversed for 2-D/3-D ranges
(TOOLCHAIN.md section 2), which is done here and nowhere else.
"""
from __future__ import annotations

import ctypes
import math
from typing import Sequence

import dpctl
import dpctl.memory
import numpy as np

from .artifacts import Kernel
from .errors import InputError, InputTypeError, LaunchLimitError

_CL_DTYPES = {"half": np.float16, "float": np.float32, "double": np.float64, "char": np.int8, "uchar": np.uint8,
              "short": np.int16, "ushort": np.uint16, "int": np.int32, "uint": np.uint32, "long": np.int64,
              "ulong": np.uint64}
_CL_CTYPES = {"float": ctypes.c_float, "double": ctypes.c_double, "char": ctypes.c_int8, "uchar": ctypes.c_uint8,
              "short": ctypes.c_int16, "ushort": ctypes.c_uint16, "int": ctypes.c_int32, "uint": ctypes.c_uint32,
              "long": ctypes.c_int64, "ulong": ctypes.c_uint64}
_LOCAL_ACCESSOR_CODES = {"float": "f4", "double": "f8", "char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2",
                         "int": "i4", "uint": "u4", "long": "i8", "ulong": "u8"}


def _as_tuple(size) -> tuple[int, ...]:
    return tuple(int(s) for s in size) if isinstance(size, (tuple, list)) else (int(size),)


def marshal(kernel: Kernel, args: Sequence, queue: dpctl.SyclQueue) -> tuple[list, int]:
    """Kernel arguments for dpctl, and the SLM bytes they request. `__local T*` parameters take an element count."""
    if len(args) != len(kernel.params):
        raise InputError(f"{kernel.describe()}: takes {len(kernel.params)} arguments "
                         f"({', '.join(p.name for p in kernel.params)}), got {len(args)}")
    out, slm_bytes = [], 0
    for param, value in zip(kernel.params, args):
        where = f"{kernel.describe()} argument {param.name!r}"
        if param.space in ("global", "constant"):
            expected = np.dtype(_CL_DTYPES[param.type])
            if not hasattr(value, "sycl_queue"):
                raise InputTypeError(f"{where}: needs a device array of {expected}, got {type(value).__name__}")
            if np.dtype(value.dtype) != expected:
                raise InputTypeError(f"{where}: declared {param.type}* needs {expected}, got {np.dtype(value.dtype)}")
            if not value.flags.c_contiguous:
                raise InputError(f"{where}: must be C-contiguous, got strides {tuple(value.strides)}")
            if value.sycl_queue != queue:
                raise InputError(f"{where}: lives on another queue than the launch queue")
            out.append(dpctl.memory.as_usm_memory(value))
        elif param.space == "local":
            count = int(value)
            if count < 1:
                raise LaunchLimitError(f"{where}: local buffer needs at least 1 element, got {count}")
            out.append(dpctl.LocalAccessor(_LOCAL_ACCESSOR_CODES[param.type], (count,)))
            slm_bytes += count * np.dtype(_CL_DTYPES[param.type]).itemsize
        else:
            ctype = _CL_CTYPES[param.type]
            if np.issubdtype(_CL_DTYPES[param.type], np.integer):
                info = np.iinfo(_CL_DTYPES[param.type])
                if not info.min <= int(value) <= info.max:
                    raise InputError(f"{where}: {value} does not fit the kernel's {param.type} "
                                     f"[{info.min}, {info.max}]")
                out.append(ctype(int(value)))
            else:
                out.append(ctype(float(value)))
    return out, slm_bytes


def check_geometry(kernel: Kernel, queue: dpctl.SyclQueue, global_size: tuple, local_size: tuple,
                   slm_bytes: int) -> None:
    device = queue.sycl_device
    name = kernel.describe()
    if len(global_size) != len(local_size):
        raise LaunchLimitError(f"{name}: global {global_size} and local {local_size} differ in rank")
    for g, l in zip(global_size, local_size):
        if l < 1 or g % l:
            raise LaunchLimitError(f"{name}: global size {global_size} is not a multiple of local size {local_size}")
    wg = math.prod(local_size)
    kernel_limit = kernel.sycl_kernel.work_group_size
    if wg > min(kernel_limit, device.max_work_group_size):
        raise LaunchLimitError(f"{name}: work-group of {wg} work-items; Required: {wg}, limit: kernel "
                               f"{kernel_limit}, device {device.max_work_group_size}. Reduce ROWS or K_SPLIT.")
    if slm_bytes > device.local_mem_size:
        raise LaunchLimitError(f"{name}: needs {slm_bytes} bytes of local memory (SLM); device limit "
                               f"{device.local_mem_size}. Reduce ROWS x K_SPLIT or the tile.")
    sg = kernel.sycl_kernel.compile_sub_group_size
    if sg and sg not in device.sub_group_sizes:
        raise LaunchLimitError(f"{name}: compiled for sub-group size {sg}; device {device.name!r} supports "
                               f"{list(device.sub_group_sizes)}. Use a target built for this device.")
    if math.prod(global_size) >= 2**63:
        raise LaunchLimitError(f"{name}: global size {global_size} is out of range")


def launch(kernel: Kernel, args: Sequence, global_size, local_size, queue: dpctl.SyclQueue) -> dpctl.SyclEvent:
    """Check everything, then submit once. Returns the event (profiling info if the queue enables it)."""
    global_size, local_size = _as_tuple(global_size), _as_tuple(local_size)
    kernel_args, slm_bytes = marshal(kernel, args, queue)
    check_geometry(kernel, queue, global_size, local_size, slm_bytes)
    return queue.submit(kernel.sycl_kernel, kernel_args, list(reversed(global_size)), list(reversed(local_size)))
