"""The one launch path every op takes: marshal arguments by the kernel's declared signature, check the geometry
against device and kernel limits, submit without waiting.

Ordering follows dpnp's own convention (dpctl.utils.SequentialOrderManager[queue]): a launch depends on the events
the manager holds for the queue (nothing on an in-order queue, which orders by itself) and records its own event
there, so dpnp work queued before and after an xe2rt op sees the right data on out-of-order queues. A launch is
packed once into the C arrays dpctl's DPCTLQueue_SubmitNDRange reads (xe2rt._capi: an array as its first element's
address, a scalar as its ctypes value, local memory as a size) and submitted by that function. Every array argument
stays referenced in `_in_flight` until the kernel's event completes, so an array dropped by the caller cannot be
freed under a running kernel.

Sizes are given in OpenCL order (element 0 is get_global_id(0)); dpctl takes them reversed for 2-D/3-D ranges
(TOOLCHAIN.md section 2), which is done here and nowhere else.

Recording (one mechanism for xe2rt.bind and the warm-call replay of xe2rt.fastcall): inside `recording()`, launches
are checked and packed as usual but stored instead of submitted. The recorder is told the call's arrays beforehand;
when an argument is packed, the Submission notes its slot: which of the call's arrays it is, which output the op
allocated through `new_output`, or a constant. An argument that is none of these (a temporary the op allocated)
marks the recording as not replayable with other arrays.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import functools
import itertools
import math
import numbers
import re
import struct
import threading
import weakref
from typing import Callable, Sequence

import dpctl
import dpctl.memory
import dpctl.utils
import dpnp
import dpnp.tensor
import numpy as np

from . import _capi, _compat, pool, validate
from .errors import InputError, InputTypeError, LaunchLimitError

_CL_DTYPES = {"half": np.float16, "float": np.float32, "double": np.float64, "char": np.int8, "uchar": np.uint8,
              "short": np.int16, "ushort": np.uint16, "int": np.int32, "uint": np.uint32, "long": np.int64,
              "ulong": np.uint64}
# A half scalar travels as its 16 bits: dpctl passes any 2-byte ctypes value by size (tests/test_module.py); a char
# as its 8 bits in a c_uint8 (dpctl refuses c_int8 as a kernel argument; c_uint8 wraps -1 to 255, the same byte).
_CL_CTYPES = {"half": ctypes.c_uint16, "float": ctypes.c_float, "double": ctypes.c_double, "char": ctypes.c_uint8,
              "uchar": ctypes.c_uint8, "short": ctypes.c_int16, "ushort": ctypes.c_uint16, "int": ctypes.c_int32,
              "uint": ctypes.c_uint32, "long": ctypes.c_int64, "ulong": ctypes.c_uint64}
_LOCAL_ACCESSOR_CODES = {"half": "u2", "float": "f4", "double": "f8", "char": "i1", "uchar": "u1", "short": "i2",
                         "ushort": "u2", "int": "i4", "uint": "u4", "long": "i8", "ulong": "u8"}
_COMPLETE = dpctl.event_status_type.complete
_addressof = ctypes.addressof
_DPNP_ARRAY = dpnp.ndarray
# Records (of RETIRE_EVERY launches each, see _record) held at once, i.e. 4096 launches; past this the oldest is
# waited for (a bound on memory, far above the depth any pipeline needs to keep a device busy).
MAX_IN_FLIGHT = 256


def as_tuple(size) -> tuple[int, ...]:
    if type(size) is int:
        return (size,)
    items = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    if all(type(s) is int for s in items):
        return items
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) for s in items):
        raise InputTypeError(f"launch sizes must be ints or tuples of ints, got {size!r}")
    return tuple(int(s) for s in items)


# ---- per-array facts ----

ALIGNMENT = 64  # base-address residue kept in a warm call's key: the strictest alignment any kernel choice depends on
# Per usm_ndarray alive: (weak reference, shape, its facts (dtype, shape, C-contiguous, queue id, address residue),
# first-byte address (what a launch passes for it), the facts' id (_fact_ids: what a warm call's key holds, xe2rt.fastcall)). A usm_ndarray's dtype, queue, data pointer and
# offset never change; its shape (and with it its strides) can, in place (the shape setter), so an entry is used only
# while the shape is the one it was made with. Entries leave with their array (the weak reference's callback). marshal
# reads them too: a launch on arrays whose facts pass the signature's checks skips re-reading them.
array_facts: dict = {}
# facts tuple -> an int naming it in warm-call keys (hashed and compared per call at the cost of an int, not of a
# dtype and a shape); ids come from a counter and are never reused
_fact_ids: dict = {}
_fact_counter = itertools.count()
MAX_FACT_IDS = 1 << 16


def _forget(key: int, ref) -> None:
    hit = array_facts.get(key)
    if hit is not None and hit[0] is ref:
        del array_facts[key]


def facts_of(u) -> tuple:
    """usm_ndarray `u`'s entry in `array_facts`, made now if it has none or its shape changed."""
    hit = array_facts.get(id(u))
    shape = u.shape
    if hit is not None and hit[1] == shape and hit[0]() is u:
        return hit
    address = _compat.first_element_address(u)
    facts = (u.dtype, shape, u.flags.c_contiguous, id(u.sycl_queue), address % ALIGNMENT, u.flags.writable)
    fact_id = _fact_ids.get(facts)
    if fact_id is None:
        if len(_fact_ids) >= MAX_FACT_IDS:
            _fact_ids.clear()  # ids are never reused: new ids for old facts miss cache entries, never hit wrong ones
        fact_id = _fact_ids.setdefault(facts, next(_fact_counter))
    hit = (weakref.ref(u, functools.partial(_forget, id(u))), shape, facts, address, fact_id)
    array_facts[id(u)] = hit
    return hit


# ---- marshalling ----

class LocalMemory:
    """A `__local T*` kernel argument of `nbytes` bytes, allocated per work-group at launch (as in PyOpenCL)."""
    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
            raise InputError(f"LocalMemory: nbytes must be a positive int, got {nbytes!r}")
        self.nbytes = int(nbytes)

    def __repr__(self) -> str:
        return f"LocalMemory({self.nbytes})"


_VECTOR_TYPE = re.compile(r"^([a-z]+?)(2|3|4|8|16)$")


def _element_type(cl_type: str) -> tuple[str, int]:
    """(scalar C type, lanes) of an OpenCL C scalar or vector type name; ("", 0) for anything else."""
    if cl_type in _CL_DTYPES:
        return cl_type, 1
    match = _VECTOR_TYPE.match(cl_type)
    if match and match.group(1) in _CL_DTYPES:
        return match.group(1), int(match.group(2))
    return "", 0


def _param_specs(kernel) -> list[tuple]:
    """Per parameter, what marshal needs, computed once per kernel. Vector types (float4, half8, uint2, ...): a
    pointer to them takes an array of their element type whose first element is aligned to the vector's size (a
    3-lane vector occupies 4 lanes, as in OpenCL C); a vector by value takes its lanes as a sequence of numbers."""
    specs = []
    for param in kernel.params:
        where = f"{kernel.describe()} argument {param.name!r}"
        scalar, lanes = _element_type(param.type)
        if not lanes:
            raise InputTypeError(f"{where}: parameter type {param.type!r} is not supported by the launcher "
                                 f"(supported: {', '.join(_CL_DTYPES)}, their vectors (2, 3, 4, 8, 16 lanes), "
                                 f"pointers to them)")
        dtype = np.dtype(_CL_DTYPES[scalar])
        vector_bytes = dtype.itemsize * (4 if lanes == 3 else lanes)
        # an integer whose sign the binary does not record (prebuilt SPIR-V without kernel-arg type strings): SPIR-V
        # integers have no sign, so either sign is accepted, as the same bits
        unsigned = np.dtype(_CL_DTYPES["u" + scalar]) if param.signed is None and \
            scalar in ("char", "short", "int", "long") else None
        if param.space in ("global", "constant"):
            writes = param.space == "global" and not param.const  # the kernel may write it: no read-only array
            if lanes == 1:
                specs.append(("g", where, param.type, dtype, unsigned, writes))
            else:
                specs.append(("v", where, param.type, dtype, unsigned, vector_bytes, writes))
        elif param.space == "local":
            specs.append(("l", where, _LOCAL_ACCESSOR_CODES[scalar], vector_bytes, param.type, dtype.itemsize))
        else:  # by value: a scalar, or a vector whose lanes are converted as that scalar
            is_float = scalar in ("half", "float", "double")
            limits = None if is_float else (int(np.iinfo(dtype).min), int(np.iinfo(unsigned or dtype).max))
            scalar_spec = ("s", where, scalar, _CL_CTYPES[scalar], limits, dtype)
            specs.append(scalar_spec if lanes == 1 else
                         ("sv", where, param.type, lanes, 4 if lanes == 3 else lanes, scalar_spec))
    return specs


def _vector_value(spec: tuple, value):
    """A vector by value, passed as its bytes (_capi.RawArg): each lane converted exactly as a scalar parameter of the element type
    converts its value (_scalar: integers in range, reals rounded as a C cast, finite values staying finite), a 3-lane
    vector padded to 4."""
    _, where, cl_type, lanes, stored, scalar_spec = spec
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray)) or \
            validate.usm_view(value) is not None:
        raise InputTypeError(f"{where}: declared {cl_type} (a vector by value) takes a list, tuple or numpy array of "
                             f"{lanes} numbers, got {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.shape != (lanes,) or len(value) != lanes:
        shape = value.shape if isinstance(value, np.ndarray) else (len(value),)
        raise InputError(f"{where}: declared {cl_type} takes {lanes} numbers, got shape {shape}")
    packed = bytearray()
    for i, item in enumerate(value):  # numpy arrays yield numpy scalars (a longdouble stays one)
        if isinstance(item, (list, tuple, np.ndarray)) and not np.isscalar(item):
            raise InputError(f"{where}: declared {cl_type} takes {lanes} numbers, got a nested sequence")
        lane = (scalar_spec[0], f"{where} lane {i}", *scalar_spec[2:])
        packed += bytes(_scalar(lane, item))
    packed += bytes(len(packed) // lanes * (stored - lanes))
    if not _capi.raw_args_available():
        raise InputTypeError(f"{where}: a vector by value needs the DPC++ raw_kernel_arg extension, which this dpctl "
                             f"{dpctl.__version__} build lacks; pass the vector through a __global pointer instead")
    return _capi.RawArg(bytes(packed))


_specs_cache: dict = {}


def _specs(kernel) -> list[tuple]:
    cached = _specs_cache.get(kernel)
    if cached is None:
        cached = _specs_cache[kernel] = _param_specs(kernel)
    return cached


def _usm_address(value, where: str, cl_type: str, expected: np.dtype, queue: dpctl.SyclQueue, unsigned=None,
                 writes: bool = False):
    """The address to pass for a device array (its first element's), after the checks the signature implies."""
    array = validate.usm_view(value)
    if array is None:
        raise InputTypeError(f"{where}: declared {cl_type}* needs a device array (dpnp) of {expected}, got "
                             f"{type(value).__name__}")
    if writes and not array.flags.writable:
        raise InputError(f"{where}: declared {cl_type}* without const (the kernel may write it), but the array is "
                         f"read-only (flags.writable is False)")
    if array.dtype != expected and (unsigned is None or array.dtype != unsigned):  # (np.dtype("f8") == None is True)
        either = f"{expected} or {unsigned} (the binary does not record the sign)" if unsigned else f"{expected}"
        raise InputTypeError(f"{where}: declared {cl_type}* needs {either}, got {np.dtype(array.dtype)}")
    if not array.flags.c_contiguous:
        raise InputError(f"{where}: must be C-contiguous, got strides {tuple(array.strides)}")
    if array.sycl_queue is not queue and array.sycl_queue != queue:
        raise InputError(f"{where}: lives on another queue than the launch queue ({array.sycl_device.name!r}); "
                         f"all arrays of a launch share its queue: dpnp.asarray(a, sycl_queue=queue)")
    return facts_of(array)[3]


def memory_at(u, address: int | None = None):
    """A dpctl memory object at usm_ndarray `u`'s first element (`address`, if known), for dpctl calls that take one
    (queue.memcpy_async): the allocation's own when `u` starts at it, else view_memory's."""
    offset = _compat.element_offset(u)
    if offset == 0:
        return u.usm_data
    return view_memory(u, _compat.first_element_address(u) if address is None else address, offset)


def view_memory(u, address: int, offset: int):
    """A dpctl memory object at usm_ndarray `u`'s first element (`address`, `offset` elements into its allocation),
    of the allocation's USM kind, spanning to the allocation's end, referring to the allocation's memory object (not
    to `u`, so it keeps the allocation, and nothing else, alive). dpctl.memory.as_usm_memory(u) does the same at
    about 2.5x the cost, and holds `u`."""
    allocation, start = u.usm_data, offset * u.itemsize
    buffer = _ViewBuffer()
    buffer.allocation = allocation
    buffer.__sycl_usm_array_interface__ = {
        "data": (address, False), "shape": (max(1, allocation.nbytes - start),),
        "strides": None, "typestr": "|u1", "version": 1, "syclobj": u.sycl_queue}
    for kind in _MEMORY_KINDS:  # the pool's handles subclass MemoryUSMDevice
        if isinstance(allocation, kind):
            return kind(buffer)
    return dpctl.memory.as_usm_memory(buffer)


class _ViewBuffer:
    """A USM buffer (`__sycl_usm_array_interface__`) inside an allocation, referring to the allocation's memory
    object: memory objects made from it keep that object alive, not whatever the address was read from."""
    __slots__ = ("__sycl_usm_array_interface__", "allocation")


_MEMORY_KINDS = (dpctl.memory.MemoryUSMDevice, dpctl.memory.MemoryUSMShared, dpctl.memory.MemoryUSMHost)


def _scalar(spec: tuple, value):
    _, where, cl_type, ctype, limits, dtype = spec
    kind = type(value)
    if limits is not None:  # an integer parameter
        if kind is not int and not isinstance(value, (numbers.Integral, np.integer)) or kind is bool:
            raise InputTypeError(f"{where}: declared {cl_type} takes an integer, got {kind.__name__} {value!r}")
        number = int(value)
        if not limits[0] <= number <= limits[1]:
            raise InputError(f"{where}: {value} does not fit the kernel's {cl_type} [{limits[0]}, {limits[1]}]")
        return ctype(number)
    if kind is not float and kind is not int and not isinstance(value, (numbers.Real, np.floating, np.integer)) \
            or kind is bool:
        raise InputTypeError(f"{where}: declared {cl_type} takes a real number, got {kind.__name__}")
    number = validate.real_number(value)  # an int past double's range: +-inf
    if math.isinf(number) and (isinstance(value, (int, np.integer)) or np.isfinite(value)):  # 10**400, a longdouble
        raise InputError(f"{where}: {validate.shown(value)} overflows the kernel's {cl_type} (max "
                         f"{float(np.finfo(_CL_DTYPES[cl_type]).max)})")
    return _real(where, cl_type, ctype, number)


_REAL_FORMATS = {"half": "<e", "float": "<f", "double": "<d"}
_half_bits = struct.Struct("<H").unpack


def _real(where: str, cl_type: str, ctype, number: float):
    """A real scalar as the kernel's type: IEEE round-to-nearest-even (struct's 'e'/'f' conversions, as a C cast);
    a finite value the type cannot hold is refused rather than passed as inf."""
    try:
        packed = struct.pack(_REAL_FORMATS[cl_type], number)
    except OverflowError:
        raise InputError(f"{where}: {number!r} overflows the kernel's {cl_type} (max "
                         f"{float(np.finfo(_CL_DTYPES[cl_type]).max)})") from None
    return ctype(_half_bits(packed)[0]) if cl_type == "half" else ctype(number)


def marshal(kernel, args: Sequence, queue: dpctl.SyclQueue) -> tuple[list, int]:
    """Kernel arguments for dpctl, and the SLM bytes they request. A `__local T*` parameter takes LocalMemory(nbytes)
    (from the shipped ops as from a user's kernel)."""
    specs = _specs(kernel)
    if len(args) != len(specs):
        raise InputError(f"{kernel.describe()}: takes {len(kernel.params)} arguments "
                         f"({', '.join(p.name for p in kernel.params)}), got {len(args)}")
    out, slm_bytes = [], 0
    for spec, value in zip(specs, args):
        kind = spec[0]
        if kind == "g":
            if type(value) is _DPNP_ARRAY:  # the common case, from the facts the array's last launch read
                hit = facts_of(value.get_array())
                facts = hit[2]
                if facts[2] and facts[3] == id(queue) and facts[0] == spec[3] and (facts[5] or not spec[5]):
                    out.append(hit[3])
                    continue
            out.append(_usm_address(value, spec[1], spec[2], spec[3], queue, spec[4], spec[5]))
        elif kind == "l":
            if type(value) is not LocalMemory:
                raise InputTypeError(f"{spec[1]}: declared __local {spec[4]}* takes xe2rt.LocalMemory(nbytes), got "
                                     f"{type(value).__name__} {value!r}")
            nbytes = value.nbytes
            if nbytes % spec[3]:
                raise InputError(f"{spec[1]}: LocalMemory({nbytes}) is not a whole number of {spec[4]} "
                                 f"({spec[3]} bytes each)")
            out.append(_capi.LocalArg(spec[2], nbytes // spec[5]))
            slm_bytes += nbytes
        elif kind == "v":
            address = _usm_address(value, spec[1], spec[2], spec[3], queue, spec[4], spec[6])
            if address % spec[5]:
                raise InputError(f"{spec[1]}: declared {spec[2]}* needs its first element aligned to {spec[5]} "
                                 f"bytes (the vector's size); this array starts at {address % spec[5]} bytes past "
                                 f"such a boundary (a view at an offset that is not a whole number of {spec[2]})")
            out.append(address)
        elif kind == "sv":
            out.append(_vector_value(spec, value))
        elif type(value) is int and spec[4] is not None and spec[4][0] <= value <= spec[4][1]:
            out.append(spec[3](value))  # the shipped ops' common case
        elif type(value) is float and spec[4] is None:
            out.append(_real(spec[1], spec[2], spec[3], value))
        else:
            if validate.usm_view(value) is not None or isinstance(value, np.ndarray) and value.ndim:
                raise InputTypeError(f"{spec[1]}: declared {spec[2]} (a scalar) got an array")
            out.append(_scalar(spec, value))
    return out, slm_bytes


# ---- geometry ----

_device_limits: dict = {}
MAX_QUEUES = 64  # queues remembered by _limits; past this (a queue per task) the table and the verdicts keyed by its
                 # ids start over, so queues are not kept alive without bound


def _limits(queue: dpctl.SyclQueue) -> tuple:
    """(device, max work-group, local memory bytes, sub-group sizes, in order, queue). Keyed by id: the entry holds
    its queue, so the id cannot be reused while the entry exists (SyclQueue's own hash costs a C++ call)."""
    limits = _device_limits.get(id(queue))
    if limits is None or limits[5] is not queue:
        if len(_device_limits) >= MAX_QUEUES:
            _geometry_ok.clear()  # its keys hold ids of the queues about to be released
            _device_limits.clear()
        device = queue.sycl_device
        limits = _device_limits[id(queue)] = (device, device.max_work_group_size, device.local_mem_size,
                                              tuple(device.sub_group_sizes), queue.is_in_order, queue)
    return limits


_geometry_ok: set = set()


def check_sub_group_size(name: str, sg, device, sub_group_sizes) -> None:
    """A kernel's required sub-group size `sg` (None or 0: none) must be one the device has: checked at launch, and
    before the device compile when a module builds the kernel (that compile fails, often without a message)."""
    if sg and sg not in sub_group_sizes:
        raise LaunchLimitError(f"{name}: requires sub-group size {sg}; device {device.name!r} supports "
                               f"{list(sub_group_sizes)}. Use a target built for this device.")


def check_geometry(kernel, queue: dpctl.SyclQueue, global_size: tuple, local_size: tuple, slm_bytes: int) -> None:
    limits = _limits(queue)  # holds the queue: its id below cannot be reused while a verdict can be found
    key = (kernel.sycl_kernel, id(queue), global_size, local_size, slm_bytes)
    if key in _geometry_ok:  # the same kernel, device and sizes passed before: the verdict cannot differ
        return
    device, max_wg, local_mem, sub_group_sizes, _, _ = limits
    name = kernel.describe()
    if not 1 <= len(global_size) <= 3 or len(global_size) != len(local_size):
        raise LaunchLimitError(f"{name}: global {global_size} and local {local_size} must both have 1 to 3 "
                               f"dimensions, the same number")
    for d, (g, l) in enumerate(zip(global_size, local_size)):
        if g < 0:
            raise LaunchLimitError(f"{name}: global size {global_size} must be >= 0 in every dimension (dimension "
                                   f"{d}: {g})")
        if l < 1:
            raise LaunchLimitError(f"{name}: local size {local_size} must be >= 1 in every dimension (dimension "
                                   f"{d}: {l})")
        if g % l:
            raise LaunchLimitError(f"{name}: global size {global_size} is not a multiple of local size "
                                   f"{local_size} (dimension {d}: {g} vs {l})")
    wg = math.prod(local_size)
    kernel_limit = kernel.sycl_kernel.work_group_size
    if wg > min(kernel_limit, max_wg):
        raise LaunchLimitError(f"{name}: work-group of {wg} work-items; Required: {wg}, limit: kernel "
                               f"{kernel_limit}, device {max_wg}. Use a smaller local size.")
    reqd = getattr(kernel, "reqd_work_group_size", None)
    if reqd is not None and tuple(local_size) + (1,) * (3 - len(local_size)) != tuple(reqd):
        raise LaunchLimitError(f"{name}: declares reqd_work_group_size{tuple(reqd)}; the launch asks for local "
                               f"size {local_size}")
    if slm_bytes > local_mem:
        raise LaunchLimitError(f"{name}: needs {slm_bytes} bytes of local memory (SLM); device limit "
                               f"{local_mem}. Use smaller LocalMemory arguments or work-groups.")
    check_sub_group_size(name, getattr(kernel, "reqd_sub_group_size", None) or
                         kernel.sycl_kernel.compile_sub_group_size, device, sub_group_sizes)
    if math.prod(global_size) >= 2**63 or max(global_size, default=0) >= 2**63:  # (0, 2**70): no work, but not
        raise LaunchLimitError(f"{name}: global size {global_size} is out of range")  # a size_t
    if len(_geometry_ok) > 65536:
        _geometry_ok.clear()
    _geometry_ok.add(key)


# ---- submission: ordering and argument lifetime ----

_lock = threading.Lock()
# (event, references): every launch whose references are listed has completed once `event` has. A queue's launches
# form one chain (each depends on everything the order manager held, which includes the queue's previous xe2rt
# launch), so one event per RETIRE_EVERY launches of a queue covers them all; the launches since a queue's last
# record wait in _pending (keyed by the queue's id; their arrays keep the queue alive).
_in_flight: collections.deque = collections.deque()
_pending: dict = {}

MAX_PENDING_QUEUES = 8  # queues with launches not yet in a record; past this, all of them are recorded
RETIRE_EVERY = 16  # launches per record, and between looks at the oldest records (a status query costs about as much
#                    as a launch)


def _record(queue, event, keep) -> None:
    """Hold `keep` until `event` (or a later event of the queue) completes. Called with _lock held."""
    pending = _pending.get(id(queue))
    if pending is None:
        if len(_pending) >= MAX_PENDING_QUEUES:  # many queues (one per task): their pending launches become records
            for held in _pending.values():
                _in_flight.append((held[0], held[1]))
            _pending.clear()
            _retire_completed()
        pending = _pending[id(queue)] = [event, []]
    pending[0] = event  # the queue's latest launch, which completes after all of the pending ones
    pending[1].append(keep)
    if len(pending[1]) >= RETIRE_EVERY:
        _in_flight.append((event, pending[1]))
        pending[1] = []
        _retire_completed()


def _retire_completed() -> None:
    """Drop references of finished launches, oldest records first. Called with _lock held."""
    while _in_flight and _in_flight[0][0].execution_status == _COMPLETE:
        _in_flight.popleft()
    while len(_in_flight) > MAX_IN_FLIGHT:
        _in_flight.popleft()[0].wait()


def ordered_submit(raw: _capi.Launch, keep: tuple, in_order: bool, args=None) -> dpctl.SyclEvent:
    """Submit a packed launch (`args`: a copy of its argument array with this call's arrays, or None) after the
    queue's outstanding dpnp/xe2rt work, register the event with dpnp's order manager (_compat.submit_ordered) and
    hold `keep` until the kernel completes."""
    with _lock:
        try:
            event = _compat.submit_ordered(raw, args, in_order)
        except _capi.SubmitError as exc:  # e.g. a range the runtime cannot index, past every check here
            ranges = list(raw.ranges)
            local = sum(a.nbytes for a in raw.held if type(a) is _capi.LocalArg)
            raise LaunchLimitError(f"kernel {raw.sycl_kernel.get_function_name()}: the SYCL runtime refused the "
                                   f"launch (global {tuple(reversed(ranges[:raw.nd]))}, local "
                                   f"{tuple(reversed(ranges[3:3 + raw.nd]))}); nothing was queued. A cause the "
                                   f"checks here cannot see: local memory past the device's "
                                   f"{raw.queue.sycl_device.local_mem_size} bytes, counting the kernel's own __local "
                                   f"arrays beside the {local} bytes of its LocalMemory arguments") from exc
        _record(raw.queue, event, keep)
    return event


def wait_all() -> None:
    """Wait for every launch still holding its arguments, then let the arguments go."""
    with _lock:
        events = [event for event, _ in _in_flight] + [pending[0] for pending in _pending.values()]
        _in_flight.clear()
        _pending.clear()
    dpctl.SyclEvent.wait_for(events)


atexit.register(wait_all)


def read_back(pairs, queue: dpctl.SyclQueue) -> None:
    """Copy each (device source, host numpy array) pair into its host array after the queue's outstanding dpnp and
    xe2rt work, all in one wait. A source is a dpctl memory object (memory_at) or a C-contiguous usm_ndarray holding
    at least the host array's bytes. queue.memcpy_async costs about 4 us for a few bytes, dpnp.asnumpy about 17."""
    deps = [] if queue.is_in_order else dpctl.utils.SequentialOrderManager[queue].submitted_events
    events = []
    for source, host in pairs:
        if isinstance(source, dpnp.tensor.usm_ndarray):
            source = memory_at(source)
        events.append(queue.memcpy_async(host, source, host.nbytes, deps))
    dpctl.SyclEvent.wait_for(events)


def to_host(a) -> np.ndarray:
    """A C-contiguous device array's values as a new numpy array (read_back: one memcpy, one wait); other layouts
    through dpnp.asnumpy."""
    u = validate.usm_view(a)
    if u is None or not u.flags.c_contiguous:
        return dpnp.asnumpy(a)
    host = np.empty(u.shape, u.dtype)
    if host.nbytes:
        read_back([(u, host)], u.sycl_queue)
    return host


class Submission:
    """One checked and packed launch, ready to submit any number of times (xe2rt.bind). While recording, `slots`
    says per packed argument where it came from: ("in", i) the recorder's input i, ("new", j) the op's output j,
    ("const", packed) a scalar or local buffer, None a temporary of the op."""
    __slots__ = ("queue", "sycl_kernel", "packed", "global_size", "local_size", "keep", "in_order", "slots", "raw")

    def __init__(self, queue, sycl_kernel, packed, global_size, local_size, keep, slots=None):
        self.queue, self.sycl_kernel, self.packed = queue, sycl_kernel, packed
        self.global_size, self.local_size, self.keep, self.slots = global_size, local_size, keep, slots
        self.in_order = _limits(queue)[4]
        self.raw = _capi.Launch(queue, sycl_kernel, packed, global_size, local_size)

    def submit(self) -> dpctl.SyclEvent:
        return ordered_submit(self.raw, self.keep, self.in_order)

    def arguments(self) -> tuple:
        """ordered_submit's arguments, for callers that submit the same launch many times (plans)."""
        return (self.raw, self.keep, self.in_order)


_resident: dict = {}  # id -> array: device constants ops keep for good (held here, so the ids stay theirs)


def resident(array):
    """Register `array` as a device constant that an op made once (from facts a replay's key holds: rope_kv's inv_freq
    table per queue, D, theta and scaling) and keeps for the life of the process: recorded launches that pass it note
    it as a constant, so bind and warm-call replay pass the same array again. Returns the array."""
    _resident[id(array)] = array
    return array


class Recorder:
    """What a recording collects: the steps, and the arrays slots refer to. `inputs` are (object passed, its
    usm_ndarray) pairs the caller registers; `outputs` are (array, pool spec, part) the op made with new_output (part
    None) or new_outputs (part: the array's index in its group, whose members follow one another); `replayable` is
    False once a launch used an array that is neither."""
    __slots__ = ("steps", "inputs", "outputs", "replayable")

    def __init__(self, inputs=()):
        self.steps: list = []
        self.inputs = list(inputs)
        self.outputs: list = []
        self.replayable = True

    def slots(self, specs: list, args: Sequence, packed: list) -> list:
        slots = []
        for spec, value, arg in zip(specs, args, packed):
            if spec[0] not in ("g", "v"):  # arrays (scalar or vector pointees); the rest are constants
                slots.append(("const", arg))
                continue
            slot = next((("in", i) for i, (obj, u) in enumerate(self.inputs) if value is obj or value is u), None)
            if slot is None:
                slot = next((("new", j) for j, (array, _, _) in enumerate(self.outputs) if value is array), None)
            if slot is None and _resident.get(id(value)) is value:
                slot = ("const", arg)  # the slot holds the packed memory; _resident holds the array
            if slot is None:
                self.replayable = False
            slots.append(slot)
        return slots


class _Recording(threading.local):
    current: Recorder | None = None


_recording = _Recording()


class recording:
    """Context manager: launches inside are checked and packed but stored (as Submission objects, and host steps as
    callables) in the Recorder it returns instead of run. `inputs`: the call's (object, usm_ndarray) pairs."""

    def __init__(self, inputs=()):
        self._inputs = inputs

    def __enter__(self) -> Recorder:
        if _recording.current is not None:
            raise RuntimeError("xe2rt.bind cannot be nested")
        recorder = _recording.current = Recorder(self._inputs)
        return recorder

    def __exit__(self, *exc) -> None:
        _recording.current = None


def is_recording() -> bool:
    return _recording.current is not None


def new_output(shape: tuple, dtype, queue: dpctl.SyclQueue):
    """An op's output array (from the output pool, xe2rt.pool); while recording, a slot later calls refill."""
    spec = pool.pool.spec(tuple(shape), dtype, queue)
    array = pool.pool.take(spec)
    recorder = _recording.current
    if recorder is not None:
        recorder.outputs.append((array, spec, None))
    return array


def new_outputs(parts, queue: dpctl.SyclQueue) -> tuple:
    """An op's output arrays, one per (shape, dtype) of `parts`, in one pooled allocation (pool.take_group: one
    handle and one return to the pool for all of them); recorded as new_output's are."""
    spec = pool.pool.group_spec(parts, queue)
    arrays = pool.pool.take_group(spec)
    recorder = _recording.current
    if recorder is not None:
        for part, array in enumerate(arrays):
            recorder.outputs.append((array, spec, part))
    return arrays


def launch(kernel, args: Sequence, global_size, local_size, queue: dpctl.SyclQueue):
    """Check everything, then submit once without waiting. Returns the event (profiling info if the queue enables
    it), or None while recording."""
    return enqueue(prepare(kernel, args, global_size, local_size, queue))


def prepare(kernel, args: Sequence, global_size, local_size, queue: dpctl.SyclQueue) -> Submission:
    """Check and pack one launch without queuing it. Ops with dependent launches prepare them all, then enqueue them
    back to back: packing takes tens of microseconds, longer than a short kernel (moe's route) runs, and the next
    kernel would otherwise wait for the host."""
    global_size, local_size = as_tuple(global_size), as_tuple(local_size)
    packed, slm_bytes = marshal(kernel, args, queue)
    check_geometry(kernel, queue, global_size, local_size, slm_bytes)
    recorder = _recording.current
    slots = recorder.slots(_specs(kernel), args, packed) if recorder is not None else None
    return Submission(queue, kernel.sycl_kernel, packed, list(reversed(global_size)), list(reversed(local_size)),
                      tuple(args), slots)


def enqueue(submission: Submission) -> dpctl.SyclEvent | None:
    """Submit a prepared launch (or record it inside xe2rt.bind). Returns its event, or None while recording."""
    recorder = _recording.current
    if recorder is not None:
        recorder.steps.append(submission)
        return None
    return submission.submit()


def run_steps(steps) -> dpctl.SyclEvent | None:
    """Queue recorded steps (Submissions and host steps) in order; the last kernel's event, or None."""
    event = None
    for step in steps:
        if isinstance(step, Submission):
            event = step.submit()
        else:
            step()
    return event


def host_step(step: Callable[[], object]) -> None:
    """Device work an op queues through dpnp rather than a kernel (e.g. zero-filling an output when K = 0): run now,
    or stored for replay while recording."""
    recorder = _recording.current
    if recorder is not None:
        recorder.steps.append(step)
    else:
        step()


# ---- warm Kernel calls ----
# A Kernel call whose arguments are dpnp arrays, Python ints and floats and LocalMemory, with plain int sizes, is
# keyed by the kernel, the queue argument, the sizes, each array's facts (launch.facts_of: dtype, shape, contiguity,
# queue, alignment) and each scalar's type. Everything the checks verified for a key holds for every call with it
# except the scalars' values: a warm call checks those (and otherwise takes the full path, whose errors are the ones
# raised) and packs the rest from the entry (each array's first-element address from its facts).
# The key's array facts name their queues by id; the entry holds all of them, so no such id is reused meanwhile.
_warm_calls: dict = {}
MAX_WARM_CALLS = 4096


def _plain_size(size) -> bool:
    if type(size) is int:
        return True
    if type(size) is not tuple:
        return False
    for item in size:
        if type(item) is not int:
            return False
    return True


def distinct_queues(queues) -> tuple:
    """Each SyclQueue object of `queues` once (by identity): what a cache entry holds so that no queue id its key
    names can be reused while the entry exists."""
    return tuple({id(q): q for q in queues}.values())


def warm_key(kernel, args: tuple, global_size, local_size, queue):
    """(key, per-argument facts) of a Kernel call the warm path can take, else (None, None)."""
    if _recording.current is not None or not _plain_size(global_size) or \
            local_size is not None and not _plain_size(local_size) or \
            queue is not None and type(queue) is not dpctl.SyclQueue:
        return None, None
    facts, hits = [kernel, queue, global_size, local_size], []
    for value in args:
        kind = type(value)
        if kind is _DPNP_ARRAY:
            hit = facts_of(value.get_array())
            facts.append(hit[4])
            hits.append(hit)
        elif kind is int or kind is float:
            facts.append(kind)
            hits.append(None)
        elif kind is LocalMemory:
            facts.append(("local", value.nbytes))
            hits.append(None)
        else:
            return None, None
    return tuple(facts), hits


def warm_launch(key, args: tuple, hits: list) -> dpctl.SyclEvent | None:
    """Queue a call whose key a checked call stored (remember_warm); None when there is no entry or a scalar is out of
    its type's range (the full path raises)."""
    entry = _warm_calls.get(key)
    if entry is None:
        return None
    raw, in_order, arrays, ints, reals, others, _ = entry
    scalars = []  # (position, this call's ctypes value), alive until submitted (the argument array points at them)
    for pos, ctype, low, high in ints:
        value = args[pos]
        if not low <= value <= high:
            return None
        scalars.append((pos, ctype(value)))
    for pos, spec in reals:
        scalars.append((pos, _real(spec[1], spec[2], spec[3], args[pos])))
    for pos, spec in others:  # e.g. an int for a float parameter
        scalars.append((pos, _scalar(spec, args[pos])))
    packed = raw.copy_args()
    for pos in arrays:
        packed[pos] = hits[pos][3]
    for pos, scalar in scalars:
        packed[pos] = _addressof(scalar)
    return ordered_submit(raw, args, in_order, packed)


def remember_warm(key, kernel, args: tuple, submission: Submission) -> None:
    """Store what warm_launch needs for `key`, from the checked submission of a call with it."""
    specs = _specs(kernel)
    if any(spec[0] == "v" and ALIGNMENT % spec[5] for spec in specs):
        return  # the key's address residue (mod ALIGNMENT) does not decide this vector's alignment
    arrays, ints, reals, others = [], [], [], []
    for pos, (spec, value) in enumerate(zip(specs, args)):
        kind = type(value)
        if kind is _DPNP_ARRAY:
            arrays.append(pos)
        elif kind is int and spec[4] is not None:
            ints.append((pos, spec[3], spec[4][0], spec[4][1]))
        elif kind is float and spec[4] is None:
            reals.append((pos, spec))
        elif kind is int or kind is float:
            others.append((pos, spec))
        # else LocalMemory: its packed descriptor is reused
    if len(_warm_calls) >= MAX_WARM_CALLS:
        _warm_calls.clear()
    # the entry holds every array's queue, not only the launch queue: the key names them by id (an array may live on
    # another SyclQueue object equal to the launch queue), and no id may be reused while the entry exists
    queues = distinct_queues(args[pos].get_array().sycl_queue for pos in arrays)
    _warm_calls[key] = (submission.raw, submission.in_order, tuple(arrays), tuple(ints), tuple(reals), tuple(others),
                        queues)


def clear() -> None:
    """Forget per-kernel and per-queue verdicts (with xe2rt.module.clear)."""
    _warm_calls.clear()
    _specs_cache.clear()
    _geometry_ok.clear()  # before the queues its ids refer to
    _device_limits.clear()
