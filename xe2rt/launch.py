"""The one launch path every op takes: marshal arguments by the kernel's declared signature, check the geometry
against device and kernel limits, submit without waiting.

Ordering follows dpnp's own convention (dpctl.utils.SequentialOrderManager[queue]): a launch depends on the events
the manager holds for the queue (nothing on an in-order queue, which orders by itself) and records its own event
there, so dpnp work queued before and after an xe2rt op sees the right data on out-of-order queues. Every argument
(arrays, USM memory objects, local accessors) stays referenced in `_in_flight` until the kernel's event completes,
so an array dropped by the caller cannot be freed under a running kernel.

Sizes are given in OpenCL order (element 0 is get_global_id(0)); dpctl takes them reversed for 2-D/3-D ranges
(TOOLCHAIN.md section 2), which is done here and nowhere else.

Recording (xe2rt.bind): inside `recording()`, launches are checked and packed as usual but stored instead of
submitted; `Submission.submit()` replays one later with fresh ordering.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import math
import threading
from typing import Callable, Sequence

import dpctl
import dpctl.memory
import dpctl.utils
import numpy as np

from . import validate
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
_COMPLETE = dpctl.event_status_type.complete
# Records (of RETIRE_EVERY launches each, see _record) held at once, i.e. 4096 launches; past this the oldest is
# waited for (a bound on memory, far above the depth any pipeline needs to keep a device busy).
MAX_IN_FLIGHT = 256


def _as_tuple(size) -> tuple[int, ...]:
    return tuple(int(s) for s in size) if isinstance(size, (tuple, list)) else (int(size),)


# ---- marshalling ----

def _param_specs(kernel: Kernel) -> list[tuple]:
    """Per parameter, what marshal needs, computed once per kernel."""
    specs = []
    for param in kernel.params:
        where = f"{kernel.describe()} argument {param.name!r}"
        if param.space in ("global", "constant"):
            specs.append(("g", where, param.type, np.dtype(_CL_DTYPES[param.type])))
        elif param.space == "local":
            specs.append(("l", where, _LOCAL_ACCESSOR_CODES[param.type], np.dtype(_CL_DTYPES[param.type]).itemsize))
        else:
            dtype = _CL_DTYPES[param.type]
            limits = (np.iinfo(dtype).min, np.iinfo(dtype).max) if np.issubdtype(dtype, np.integer) else None
            specs.append(("s", where, param.type, _CL_CTYPES[param.type], limits))
    return specs


_specs_cache: dict[int, tuple[Kernel, list]] = {}


def _specs(kernel: Kernel) -> list[tuple]:
    cached = _specs_cache.get(id(kernel))
    if cached is None or cached[0] is not kernel:
        cached = _specs_cache[id(kernel)] = (kernel, _param_specs(kernel))
    return cached[1]


def _usm_memory(value, where: str, cl_type: str, expected: np.dtype, queue: dpctl.SyclQueue):
    """The USM memory object to pass for a device array, after the checks the signature implies."""
    array = validate.usm_view(value)
    if array is None:
        raise InputTypeError(f"{where}: needs a device array of {expected}, got {type(value).__name__}")
    if array.dtype != expected:
        raise InputTypeError(f"{where}: declared {cl_type}* needs {expected}, got {np.dtype(array.dtype)}")
    if not array.flags.c_contiguous:
        raise InputError(f"{where}: must be C-contiguous, got strides {tuple(array.strides)}")
    if array.sycl_queue is not queue and array.sycl_queue != queue:
        raise InputError(f"{where}: lives on another queue than the launch queue")
    return usm_memory(array)


def usm_memory(u):
    """What a kernel argument of usm_ndarray `u` is passed as: the allocation's own memory object when `u` starts at
    it (no per-call object), a memory object at its first element for a view that starts inside it."""
    return u.usm_data if u._element_offset == 0 else dpctl.memory.as_usm_memory(u)


def marshal(kernel: Kernel, args: Sequence, queue: dpctl.SyclQueue) -> tuple[list, int]:
    """Kernel arguments for dpctl, and the SLM bytes they request. `__local T*` parameters take an element count."""
    specs = _specs(kernel)
    if len(args) != len(specs):
        raise InputError(f"{kernel.describe()}: takes {len(kernel.params)} arguments "
                         f"({', '.join(p.name for p in kernel.params)}), got {len(args)}")
    out, slm_bytes = [], 0
    for spec, value in zip(specs, args):
        kind = spec[0]
        if kind == "g":
            out.append(_usm_memory(value, spec[1], spec[2], spec[3], queue))
        elif kind == "l":
            count = int(value)
            if count < 1:
                raise LaunchLimitError(f"{spec[1]}: local buffer needs at least 1 element, got {count}")
            out.append(dpctl.LocalAccessor(spec[2], (count,)))
            slm_bytes += count * spec[3]
        else:
            _, where, cl_type, ctype, limits = spec
            if limits is None:
                out.append(ctype(float(value)))
            else:
                number = int(value)
                if not limits[0] <= number <= limits[1]:
                    raise InputError(f"{where}: {value} does not fit the kernel's {cl_type} "
                                     f"[{limits[0]}, {limits[1]}]")
                out.append(ctype(number))
    return out, slm_bytes


# ---- geometry ----

_device_limits: dict = {}


def _limits(queue: dpctl.SyclQueue) -> tuple:
    limits = _device_limits.get(queue)
    if limits is None:
        device = queue.sycl_device
        limits = _device_limits[queue] = (device, device.max_work_group_size, device.local_mem_size,
                                          tuple(device.sub_group_sizes), queue.is_in_order)
    return limits


_geometry_ok: set = set()


def check_geometry(kernel: Kernel, queue: dpctl.SyclQueue, global_size: tuple, local_size: tuple,
                   slm_bytes: int) -> None:
    key = (kernel.sycl_kernel, queue, global_size, local_size, slm_bytes)
    if key in _geometry_ok:  # the same kernel, device and sizes passed before: the verdict cannot differ
        return
    device, max_wg, local_mem, sub_group_sizes, _ = _limits(queue)
    name = kernel.describe()
    if len(global_size) != len(local_size):
        raise LaunchLimitError(f"{name}: global {global_size} and local {local_size} differ in rank")
    for g, l in zip(global_size, local_size):
        if l < 1 or g % l:
            raise LaunchLimitError(f"{name}: global size {global_size} is not a multiple of local size {local_size}")
    wg = math.prod(local_size)
    kernel_limit = kernel.sycl_kernel.work_group_size
    if wg > min(kernel_limit, max_wg):
        raise LaunchLimitError(f"{name}: work-group of {wg} work-items; Required: {wg}, limit: kernel "
                               f"{kernel_limit}, device {max_wg}. Reduce ROWS or K_SPLIT.")
    if slm_bytes > local_mem:
        raise LaunchLimitError(f"{name}: needs {slm_bytes} bytes of local memory (SLM); device limit "
                               f"{local_mem}. Reduce ROWS x K_SPLIT or the tile.")
    sg = kernel.sycl_kernel.compile_sub_group_size
    if sg and sg not in sub_group_sizes:
        raise LaunchLimitError(f"{name}: compiled for sub-group size {sg}; device {device.name!r} supports "
                               f"{list(sub_group_sizes)}. Use a target built for this device.")
    if math.prod(global_size) >= 2**63:
        raise LaunchLimitError(f"{name}: global size {global_size} is out of range")
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

RETIRE_EVERY = 16  # launches per record, and between looks at the oldest records (a status query costs about as much
#                    as a launch)


def _record(queue, event, keep) -> None:
    """Hold `keep` until `event` (or a later event of the queue) completes. Called with _lock held."""
    pending = _pending.get(id(queue))
    if pending is None:
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


def _order_state_class():
    """dpctl 0.22's order manager keeps its event lists in a C++ `_OrderManager` at `manager._state`; with it, a launch
    can leave the manager holding only its own event (see ordered_submit). Other dpctl versions take the public path."""
    try:
        from dpctl.utils._order_manager import _SequentialOrderManager
        from dpctl.utils._seq_order_keeper import _OrderManager
    except ImportError:
        return None
    return _OrderManager if isinstance(getattr(_SequentialOrderManager(), "_state", None), _OrderManager) else None


_OrderState = _order_state_class()
_SequentialOrderManager = dpctl.utils.SequentialOrderManager
MANAGER_PRUNE_THRESHOLD = 16  # dpctl's own default for a new manager


def ordered_submit(queue: dpctl.SyclQueue, sycl_kernel, packed: list, global_size: list, local_size: list,
                   keep: tuple, in_order: bool) -> dpctl.SyclEvent:
    """Submit after the queue's outstanding dpnp/xe2rt work and register the event with dpnp's order manager.

    dpnp's manager keeps every submitted event until it has completed, and each new operation depends on all of
    them and checks all of their states: with the host ahead of the device (the point of asynchronous launches) the
    list grows and every launch pays for its length. This launch depends on all of them, so they are all its
    ancestors: the manager is left holding this launch's event alone (and every host-task event it had, which only
    `wait` uses), and the next operation, ours or dpnp's, depends on one event that implies the rest. On an
    in-order queue the queue itself orders, so the launch takes no dependencies."""
    with _lock:
        manager = _SequentialOrderManager[queue]
        state = manager._state if _OrderState is not None else None
        if state is None:
            event = queue.submit_async(sycl_kernel, packed, global_size, local_size,
                                       [] if in_order else manager.submitted_events)
            manager.add_event_pair(event, event)
        else:
            deps = state.get_submitted_events()  # completed events pruned
            event = queue.submit_async(sycl_kernel, packed, global_size, local_size, [] if in_order else deps)
            if not deps:  # the manager's list is empty: this event alone is what it will hold
                state.add_to_submitted_events(event)
            else:
                fresh = _OrderState(MANAGER_PRUNE_THRESHOLD)
                host_tasks = state.get_host_task_events()
                if host_tasks:
                    fresh.add_vector_to_both_events(host_tasks, [event])
                else:
                    fresh.add_to_submitted_events(event)
                manager._state = fresh
        _record(queue, event, keep)
    return event


def wait_all() -> None:
    """Wait for every launch still holding its arguments, then let the arguments go."""
    with _lock:
        events = [event for event, _ in _in_flight] + [pending[0] for pending in _pending.values()]
        _in_flight.clear()
        _pending.clear()
    dpctl.SyclEvent.wait_for(events)


atexit.register(wait_all)


class Submission:
    """One checked and packed launch, ready to submit any number of times (xe2rt.bind)."""
    __slots__ = ("queue", "sycl_kernel", "packed", "global_size", "local_size", "keep", "in_order")

    def __init__(self, queue, sycl_kernel, packed, global_size, local_size, keep):
        self.queue, self.sycl_kernel, self.packed = queue, sycl_kernel, packed
        self.global_size, self.local_size, self.keep = global_size, local_size, keep
        self.in_order = _limits(queue)[4]

    def submit(self) -> dpctl.SyclEvent:
        return ordered_submit(*self.arguments())

    def arguments(self) -> tuple:
        """ordered_submit's arguments, for callers that submit the same launch many times (plans)."""
        return (self.queue, self.sycl_kernel, self.packed, self.global_size, self.local_size, self.keep,
                self.in_order)


class _Recording(threading.local):
    steps: list | None = None


_recording = _Recording()


class recording:
    """Context manager: launches inside are checked and packed but stored (as Submission objects, and host steps as
    callables) instead of run."""

    def __enter__(self) -> list:
        if _recording.steps is not None:
            raise RuntimeError("xe2rt.bind cannot be nested")
        _recording.steps = []
        return _recording.steps

    def __exit__(self, *exc) -> None:
        _recording.steps = None


def is_recording() -> bool:
    return _recording.steps is not None


def launch(kernel: Kernel, args: Sequence, global_size, local_size, queue: dpctl.SyclQueue):
    """Check everything, then submit once without waiting. Returns the event (profiling info if the queue enables
    it), or None while recording."""
    return enqueue(prepare(kernel, args, global_size, local_size, queue))


def prepare(kernel: Kernel, args: Sequence, global_size, local_size, queue: dpctl.SyclQueue) -> Submission:
    """Check and pack one launch without queuing it. Ops with dependent launches prepare them all, then enqueue them
    back to back: packing takes tens of microseconds, longer than a short kernel (moe's route) runs, and the next
    kernel would otherwise wait for the host."""
    global_size, local_size = _as_tuple(global_size), _as_tuple(local_size)
    packed, slm_bytes = marshal(kernel, args, queue)
    check_geometry(kernel, queue, global_size, local_size, slm_bytes)
    return Submission(queue, kernel.sycl_kernel, packed, list(reversed(global_size)), list(reversed(local_size)),
                      tuple(args))


def enqueue(submission: Submission) -> dpctl.SyclEvent | None:
    """Submit a prepared launch (or record it inside xe2rt.bind). Returns its event, or None while recording."""
    if _recording.steps is not None:
        _recording.steps.append(submission)
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
    if _recording.steps is not None:
        _recording.steps.append(step)
    else:
        step()
