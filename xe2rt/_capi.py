"""Kernel submission through dpctl's C API (libsyclinterface), the one way every xe2rt launch reaches SYCL.

`dpctl.SyclQueue.submit_async` converts its argument list on every call: per argument a chain of isinstance tests
against dpctl's memory classes and the ctypes scalar types (about 0.8 us each on the CPU device's host), then one
call of `DPCTLQueue_SubmitNDRange`. A launch xe2rt has checked and packed once (a bound plan, a warm call's replay)
has nothing left to convert: its arguments are already what that C function takes (a USM address per array, a
pointer to each scalar's bytes, a local-memory descriptor). `Launch` holds them in the C arrays the function reads,
and submits with one foreign call; a replay that passes other arrays writes their addresses into a copy of the array.

This is dpctl's public C interface (the headers ship in the wheel, dpctl/include/syclinterface), loaded from the
library beside the installed dpctl. What xe2rt relies on (the `DPCTLKernelArgType` codes, the `MDLocalAccessor`
layout, the submit, event and raw-argument functions) is checked against those headers by tests/test_capi.py, so a
dpctl that changes them is noticed. Events come back as `dpctl.SyclEvent` objects made from a "SyclEventRef" capsule
(SyclEvent's documented constructor), so dpnp's ordering and user code see ordinary events.
"""
from __future__ import annotations

import ctypes
import os
import sys

import dpctl
import numpy as np

# DPCTLKernelArgType (dpctl_sycl_enum_types.h)
INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64, UINT64, FLOAT32, FLOAT64 = range(10)
VOID_PTR, LOCAL_ACCESSOR, WORK_GROUP_MEMORY, RAW_KERNEL_ARG = 10, 11, 12, 13
# the ctypes scalar types the launcher packs (xe2rt.launch._CL_CTYPES), by their C type code
SCALAR_CODES = {ctypes.c_uint8: UINT8, ctypes.c_int8: INT8, ctypes.c_int16: INT16, ctypes.c_uint16: UINT16,
                ctypes.c_int32: INT32, ctypes.c_uint32: UINT32, ctypes.c_int64: INT64, ctypes.c_uint64: UINT64,
                ctypes.c_float: FLOAT32, ctypes.c_double: FLOAT64}
# local accessor element type strings (dpctl.LocalAccessor's) -> type code
LOCAL_CODES = {"i1": INT8, "u1": UINT8, "i2": INT16, "u2": UINT16, "i4": INT32, "u4": UINT32, "i8": INT64,
               "u8": UINT64, "f4": FLOAT32, "f8": FLOAT64}


class MDLocalAccessor(ctypes.Structure):
    """dpctl_sycl_queue_interface.h's MDLocalAccessor: a local accessor's rank, element type code and extents."""
    _fields_ = [("ndim", ctypes.c_size_t), ("dpctl_type_id", ctypes.c_int), ("dim0", ctypes.c_size_t),
                ("dim1", ctypes.c_size_t), ("dim2", ctypes.c_size_t)]


def _library() -> ctypes.CDLL:
    here = os.path.dirname(dpctl.__file__)
    names = ("DPCTLSyclInterface.dll",) if sys.platform == "win32" else ("libDPCTLSyclInterface.so",
                                                                          "libDPCTLSyclInterface.dylib")
    for name in names:
        path = os.path.join(here, name)
        if os.path.exists(path):
            return ctypes.CDLL(path)
    raise ImportError(f"xe2rt: dpctl {dpctl.__version__} at {here} has no {' or '.join(names)} (dpctl's C API "
                      f"library); reinstall dpctl from PyPI")


_lib = _library()
_submit = _lib.DPCTLQueue_SubmitNDRange
_submit.restype = ctypes.c_void_p
_submit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
_delete_event = _lib.DPCTLEvent_Delete
_delete_event.restype = None
_delete_event.argtypes = [ctypes.c_void_p]
# raw (by-value byte) arguments: newer than the rest of the interface, so optional (vectors by value are refused
# with a clear message where they are missing)
_raw_arg_create = getattr(_lib, "DPCTLRawKernelArg_Create", None)
_raw_arg_delete = getattr(_lib, "DPCTLRawKernelArg_Delete", None)
_raw_arg_available = getattr(_lib, "DPCTLRawKernelArg_Available", None)
if _raw_arg_create is not None and _raw_arg_delete is not None and _raw_arg_available is not None:
    _raw_arg_create.restype = ctypes.c_void_p
    _raw_arg_create.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _raw_arg_delete.restype = None
    _raw_arg_delete.argtypes = [ctypes.c_void_p]
    _raw_arg_available.restype = ctypes.c_bool
    _raw_arg_available.argtypes = []
else:
    _raw_arg_available = None

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_EVENT_CAPSULE = b"SyclEventRef"
_SyclEvent = dpctl.SyclEvent
_addressof = ctypes.addressof


class LocalArg:
    """A `__local` argument: `count` elements of type `code` (a dpctl.LocalAccessor type string) per work-group."""
    __slots__ = ("code", "count", "descriptor")

    def __init__(self, code: str, count: int):
        self.code, self.count = code, count
        self.descriptor = MDLocalAccessor(1, LOCAL_CODES[code], count, 1, 1)

    @property
    def nbytes(self) -> int:
        return self.count * np.dtype(self.code).itemsize

    def __repr__(self) -> str:
        return f"LocalArg({self.code!r}, {self.count})"


def raw_args_available() -> bool:
    """Whether this dpctl's SYCL runtime passes arguments as raw bytes (vectors by value)."""
    return _raw_arg_available is not None and bool(_raw_arg_available())


class RawArg:
    """An argument passed as its bytes (a vector by value), through DPC++'s raw_kernel_arg extension."""
    __slots__ = ("data", "ref")

    def __init__(self, data: bytes):
        self.data = ctypes.create_string_buffer(bytes(data), len(data))
        self.ref = _raw_arg_create(_addressof(self.data), len(data))
        if not self.ref:
            raise MemoryError("dpctl could not make a raw kernel argument")

    def __del__(self):
        ref, self.ref = getattr(self, "ref", None), None
        if ref:
            _raw_arg_delete(ref)

    def __bytes__(self) -> bytes:
        return self.data.raw


class SubmitError(RuntimeError):
    """The SYCL runtime refused a launch (DPCTLQueue_SubmitNDRange returned no event)."""


class Launch:
    """One kernel launch in the form DPCTLQueue_SubmitNDRange reads: `packed` holds per argument an int (a USM
    address), a ctypes scalar, a LocalArg or a RawArg; sizes are in SYCL's order (dpctl's: the last dimension varies
    fastest). The C arrays are made here, once; `submit` costs one foreign call and the event's wrapping."""
    __slots__ = ("queue", "sycl_kernel", "n", "args", "types", "ranges", "nd", "held", "_args_type", "_refs", "_dep",
                 "_pdep")

    def __init__(self, queue: dpctl.SyclQueue, sycl_kernel, packed, global_size, local_size):
        n = len(packed)
        args_type = ctypes.c_void_p * max(n, 1)
        args, types, held = args_type(), (ctypes.c_int * max(n, 1))(), []
        for i, item in enumerate(packed):
            kind = type(item)
            if kind is int:
                args[i], types[i] = item, VOID_PTR
            elif kind in SCALAR_CODES:
                held.append(item)
                args[i], types[i] = _addressof(item), SCALAR_CODES[kind]
            elif kind is LocalArg:
                held.append(item)
                args[i], types[i] = _addressof(item.descriptor), LOCAL_ACCESSOR
            elif kind is RawArg:
                held.append(item)
                args[i], types[i] = item.ref, RAW_KERNEL_ARG
            else:
                raise TypeError(f"xe2rt._capi.Launch: argument {i} is a {kind.__name__}; expected an int address, a "
                                f"ctypes scalar, a LocalArg or a RawArg")
        nd = len(global_size)
        ranges = (ctypes.c_size_t * 6)(*global_size, *([1] * (3 - nd)), *local_size, *([1] * (3 - nd)))
        self.queue, self.sycl_kernel, self.n, self.nd = queue, sycl_kernel, n, nd
        self.args, self.types, self.ranges, self.held, self._args_type = args, types, ranges, tuple(held), args_type
        # one dependency's slot (the common case: the queue's latest launch), filled per submission
        self._dep = (ctypes.c_void_p * 1)()
        self._pdep = _addressof(self._dep)
        # the addresses the foreign call takes, read once (the objects live as long as this Launch)
        self._refs = (sycl_kernel.addressof_ref(), queue.addressof_ref(), _addressof(args), _addressof(types), n,
                      _addressof(ranges), _addressof(ranges) + 3 * ctypes.sizeof(ctypes.c_size_t), nd)

    def copy_args(self):
        """A copy of the argument array, for a submission that substitutes some arguments (`submit(..., args)`)."""
        return self._args_type.from_buffer_copy(self.args)

    def submit(self, deps=(), args=None) -> dpctl.SyclEvent:
        """Queue the kernel after the events `deps`; `args`: an argument array from copy_args (its scalars and
        local descriptors must stay alive until this returns, which they do while the caller holds them)."""
        kref, qref, pargs, ptypes, n, pglobal, plocal, nd = self._refs
        if args is not None:
            pargs = _addressof(args)
        if len(deps) == 1:  # (launch.ordered_submit calls this under its lock, so the slot is not shared meanwhile)
            self._dep[0] = deps[0].addressof_ref()
            ref = _submit(kref, qref, pargs, ptypes, n, pglobal, plocal, nd, self._pdep, 1)
        elif deps:
            count = len(deps)
            refs = (ctypes.c_void_p * count)(*[event.addressof_ref() for event in deps])
            ref = _submit(kref, qref, pargs, ptypes, n, pglobal, plocal, nd, _addressof(refs), count)
        else:
            ref = _submit(kref, qref, pargs, ptypes, n, pglobal, plocal, nd, None, 0)
        if not ref:
            raise SubmitError("DPCTLQueue_SubmitNDRange returned no event")
        event = _SyclEvent(_capsule_new(ref, _EVENT_CAPSULE, None))  # SyclEvent keeps its own copy of the event
        _delete_event(ref)
        return event
