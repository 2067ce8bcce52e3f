"""Plans replayed as one submission: `xe2rt.graph(plans)`.

A bound plan (xe2rt.bind) costs one submission per kernel on every call; a decode step of an LLM is about a hundred of
them, and on the CPU device the thread that submits is also one of the two that run the kernels. A graph takes a
sequence of plans, in the order they are to run, and replays all of them with one call.

Where the queue is an in-order OpenCL queue whose device has `cl_khr_command_buffer` (Khronos' provisional
extension; Intel's OpenCL CPU runtime 2026.21 reports version 0.9.7), the graph records every kernel of its plans
once into one OpenCL command buffer: each kernel is a clone of the plan's own kernel (the program xe2rt.load built)
with the plan's packed arguments, each recorded after the one before it (a chain of sync points, the plans' order).
A call enqueues that buffer on the OpenCL queue behind the SYCL queue, so it runs after the work the queue was given
before and before the work it is given after, as a plan's launches would. Anywhere else (the Level Zero backend, an
out-of-order queue, a plan that replays host steps, XE2RT_NATIVE_GRAPH=0, a runtime without the extension) the
graph replays its plans one after another, which is what calling them does: `graph.native` says which path it took
and `graph.why` why not the native one.

A native graph has no SYCL event: `graph()` returns the last plan's outputs and `graph.wait()` waits for them. Before
it enqueues the buffer, a native graph waits for the queue's earlier work: SYCL holds back every command that follows
a host task on an in-order queue (dpnp queues one after many of its operations, to keep their arguments alive) until
the task has run, so such commands are not yet in the OpenCL queue and a buffer enqueued meanwhile would overtake
them (seen: a dpnp fill queued before a replay landing after it). Work queued after the call follows the buffer. On
the CPU device, `graph.wait()` (clFinish) lets the waiting thread run the graph's kernels; waiting for a later
command's event instead leaves them to the runtime's worker alone (measured 0.60-0.75x the rate).
"""
from __future__ import annotations

import ctypes
import threading

import dpctl

from . import _capi, _compat, config, launch
from ._opencl import OpenCL as _OpenCL, lock as _cl_lock, opencl as _opencl
from .errors import InputError, InputTypeError
from .plan import Plan

_VP = ctypes.c_void_p
CL_SUCCESS = 0
CL_QUEUE_DEVICE, CL_QUEUE_PROPERTIES = 0x1091, 0x1093
CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE = 1
CL_DEVICE_PLATFORM, CL_DEVICE_EXTENSIONS_WITH_VERSION = 0x1031, 0x1060
CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR = 0x12A9
CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR = 1 << 2
CL_COMMAND_BUFFER_FLAGS_KHR, CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR = 0x1293, 1 << 0
# the entry points below have the signatures of cl_khr_command_buffer 0.9.5 to 0.9.x (0.9.5 added the properties
# argument of the command functions); a device reporting another version replays its plans instead
EXTENSION, MIN_PATCH = "cl_khr_command_buffer", 5


class _NameVersion(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("name", ctypes.c_char * 64)]


class NativeError(RuntimeError):
    """An OpenCL call of a native graph failed (the code is OpenCL's)."""


def _check(code: int, what: str) -> None:
    if code != CL_SUCCESS:
        raise NativeError(f"{what} returned OpenCL error {code}")


def _device_support(cl: _OpenCL, device: int) -> tuple[str | None, bool]:
    """(why the device cannot record command buffers, or None; whether one buffer may be pending twice)."""
    size = ctypes.c_size_t()
    _check(cl.device_info(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, 0, None, ctypes.byref(size)),
           "clGetDeviceInfo(CL_DEVICE_EXTENSIONS_WITH_VERSION)")
    items = (_NameVersion * (size.value // ctypes.sizeof(_NameVersion)))()
    _check(cl.device_info(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, size.value, items, None),
           "clGetDeviceInfo(CL_DEVICE_EXTENSIONS_WITH_VERSION)")
    versions = {item.name.decode(errors="replace"): item.version for item in items}
    if EXTENSION not in versions:
        return f"the device's OpenCL driver has no {EXTENSION}", False
    v = versions[EXTENSION]
    major, minor, patch = v >> 22, (v >> 12) & 0x3FF, v & 0xFFF
    if (major, minor) != (0, 9) or patch < MIN_PATCH:
        return (f"the device reports {EXTENSION} {major}.{minor}.{patch}; xe2rt binds the 0.9.{MIN_PATCH}+ entry "
                f"points"), False
    caps = ctypes.c_uint64()
    _check(cl.device_info(device, CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, 8, ctypes.byref(caps), None),
           "clGetDeviceInfo(CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR)")
    return None, bool(caps.value & CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR)


class _CommandBuffer:
    """One finalized OpenCL command buffer holding a sequence of Submissions, on a queue's native in-order queue."""

    def __init__(self, cl: _OpenCL, native_queue: int, steps: list, simultaneous: bool):
        """Record `steps`; takes over the caller's reference to `native_queue` only when it returns."""
        self.cl, self.queue, self.kernels, self.buffer, self.last = None, native_queue, [], None, None
        self.simultaneous, self.lock = simultaneous, threading.Lock()
        try:
            self._record(cl, native_queue, steps, simultaneous)
        except BaseException:
            for kernel in self.kernels:
                cl.release_kernel(kernel)
            if self.buffer:
                cl.release_buffer(self.buffer)
            raise
        self.cl = cl  # from here on release() lets go of everything, the queue's reference included

    def _record(self, cl: _OpenCL, native_queue: int, steps: list, simultaneous: bool) -> None:
        err = ctypes.c_int(0)
        queues = (_VP * 1)(native_queue)
        props = (ctypes.c_uint64 * 3)(CL_COMMAND_BUFFER_FLAGS_KHR, CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR, 0)
        self.buffer = cl.create_buffer(1, queues, props if simultaneous else None, ctypes.byref(err))
        _check(err.value, "clCreateCommandBufferKHR")
        previous = None
        for step in steps:
            kernel = self._kernel(cl, step)
            nd = len(step.global_size)
            # a Submission keeps SYCL's order (the last dimension varies fastest); OpenCL's is the reverse
            global_size = (ctypes.c_size_t * nd)(*reversed(step.global_size))
            local_size = (ctypes.c_size_t * nd)(*reversed(step.local_size))
            point = ctypes.c_uint(0)
            wait = (ctypes.c_uint * 1)(previous) if previous is not None else None
            _check(cl.command_kernel(self.buffer, None, None, kernel, nd, None, global_size, local_size,
                                     0 if wait is None else 1, wait, ctypes.byref(point), None),
                   f"clCommandNDRangeKernelKHR({step.sycl_kernel.get_function_name()})")
            previous = point.value
        _check(cl.finalize(self.buffer), "clFinalizeCommandBufferKHR")

    def _kernel(self, cl: _OpenCL, step) -> int:
        """A clone of the submission's kernel with its packed arguments (the clone's arguments are its own: SYCL
        setting the shared kernel's for its launches does not touch them)."""
        shared = _compat.native_opencl_kernel(step.sycl_kernel)
        if not shared:
            raise NativeError(f"no OpenCL kernel behind {step.sycl_kernel.get_function_name()}")
        err = ctypes.c_int(0)
        try:
            kernel = cl.clone_kernel(shared, ctypes.byref(err))
        finally:
            cl.release_kernel(shared)
        _check(err.value, "clCloneKernel")
        self.kernels.append(kernel)
        for i, item in enumerate(step.packed):
            kind = type(item)
            if kind is int:
                code = cl.set_arg_pointer(kernel, i, item)
            elif kind in _capi.SCALAR_CODES:
                code = cl.set_arg(kernel, i, ctypes.sizeof(item), ctypes.addressof(item))
            elif kind is _capi.LocalArg:
                code = cl.set_arg(kernel, i, item.nbytes, None)
            elif kind is _capi.RawArg:
                code = cl.set_arg(kernel, i, len(item.data.raw), ctypes.addressof(item.data))
            else:
                raise NativeError(f"argument {i} of {step.sycl_kernel.get_function_name()} is a {kind.__name__}")
            _check(code, f"setting argument {i} of {step.sycl_kernel.get_function_name()}")
        return kernel

    def enqueue(self) -> None:
        cl = self.cl
        with self.lock:
            if self.last is not None and not self.simultaneous:  # the buffer may not be pending twice
                _check(cl.wait_events(1, ctypes.byref(self.last)), "clWaitForEvents")
            event = _VP()
            _check(cl.enqueue_buffer(0, None, self.buffer, 0, None, ctypes.byref(event)),
                   "clEnqueueCommandBufferKHR")
            if self.last is not None:
                cl.release_event(self.last)
            self.last = event

    def wait(self) -> None:
        _check(self.cl.finish(self.queue), "clFinish")

    def release(self) -> None:
        cl, self.cl = self.cl, None
        if cl is None:
            return
        cl.finish(self.queue)  # nothing of this buffer may still run when its kernels go
        if self.last is not None:
            cl.release_event(self.last)
        if self.buffer:
            cl.release_buffer(self.buffer)
        for kernel in self.kernels:
            cl.release_kernel(kernel)
        cl.release_queue(self.queue)

    def __del__(self):
        try:
            self.release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class Graph:
    """What `xe2rt.graph` returns: plans replayed in order by one call. `graph()` queues them and returns the last
    plan's outputs without waiting; `graph.wait()` waits for them. `native` says whether one OpenCL command buffer
    replays them (else they are replayed one launch at a time, as calling the plans does) and `why` why not;
    `launches` counts the kernels of one replay."""

    def __init__(self, plans: tuple, queue, off: str | None):
        self.plans, self.queue = plans, queue
        self._steps = tuple(step for plan in plans for step in plan._steps)
        self.result = plans[-1].result
        self._buffer, self.why = None, None
        if off is not None:
            self.why = off
        elif queue is None:
            self.why = "the plans have no kernel launch"
        else:
            try:
                self._buffer = self._record()
            except (OSError, NativeError) as exc:
                self.why = f"recording the command buffer failed: {exc}"
        self.native = self._buffer is not None

    def _record(self):
        queue = self.queue
        if queue.backend != dpctl.backend_type.opencl:
            return self._refuse(f"the queue's backend is {queue.backend.name}, and native graphs are OpenCL command "
                                f"buffers")
        if not queue.is_in_order:
            return self._refuse("the queue is out of order (a native graph is ordered by the in-order queue)")
        host = [step for step in self._steps if not isinstance(step, launch.Submission)]
        if host:
            return self._refuse(f"{len(host)} of the plans' steps are host steps, which a command buffer cannot hold")
        cl = _opencl()
        native_queue = _compat.native_opencl_queue(queue)
        if not native_queue:
            return self._refuse("this SYCL runtime does not give the OpenCL queue behind a dpctl queue "
                                "(xe2rt/_compat.py)")
        try:
            props, device, platform = ctypes.c_uint64(), _VP(), _VP()
            _check(cl.queue_info(native_queue, CL_QUEUE_PROPERTIES, 8, ctypes.byref(props), None),
                   "clGetCommandQueueInfo")
            if props.value & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE:
                return self._refuse("the OpenCL queue behind the SYCL queue is out of order")
            _check(cl.queue_info(native_queue, CL_QUEUE_DEVICE, 8, ctypes.byref(device), None),
                   "clGetCommandQueueInfo")
            _check(cl.device_info(device, CL_DEVICE_PLATFORM, 8, ctypes.byref(platform), None), "clGetDeviceInfo")
            why, simultaneous = _device_support(cl, device.value)
            if why is not None:
                return self._refuse(why)
            with _cl_lock:
                if not cl.extension(platform.value):
                    return self._refuse("native graphs are bound to another OpenCL platform in this process")
            buffer = _CommandBuffer(cl, native_queue, list(self._steps), simultaneous)
            native_queue = None  # the buffer releases it
            return buffer
        finally:
            if native_queue:
                cl.release_queue(native_queue)

    def _refuse(self, why: str):
        self.why = why
        return None

    def __call__(self):
        """Queue the plans' work again (one command buffer, or each launch) and return the last plan's outputs."""
        if self._buffer is not None:
            # SYCL holds back commands that follow a host task (dpnp queues one after many of its operations, to
            # keep their arguments alive) until the task ends; a buffer enqueued now would overtake them
            self.queue.wait()
            self._buffer.enqueue()
        else:
            launch.run_steps(self._steps)
        return self.result

    def wait(self) -> None:
        """Wait until the last call's work is done (on the CPU device the waiting thread helps run it)."""
        if self._buffer is not None:
            self._buffer.wait()
        elif self.queue is not None:
            self.queue.wait()  # the plans' kernels and host steps, whichever came last

    @property
    def launches(self) -> int:
        return sum(isinstance(step, launch.Submission) for step in self._steps)

    def __repr__(self) -> str:
        how = "one OpenCL command buffer" if self.native else f"launch by launch ({self.why})"
        return f"<xe2rt.Graph of {len(self.plans)} plan(s), {self.launches} kernel launch(es), {how}>"


def graph(plans, *, native: bool | None = None) -> Graph:
    """Replay `plans` (xe2rt.bind plans, or graphs, on one queue, in the order they are to run) with one call each
    time: `g = xe2rt.graph([p1, p2, ...])`, then `g()`. `native`: None records one OpenCL command buffer where the
    queue allows it unless XE2RT_NATIVE_GRAPH=0, True where the queue allows it whatever the variable says, False
    never (the plans are replayed one launch at a time)."""
    if isinstance(plans, (Plan, Graph)) or not hasattr(plans, "__iter__") or isinstance(plans, (str, bytes)):
        raise InputTypeError(f"xe2rt.graph: plans must be a list of xe2rt plans (xe2rt.bind) or graphs, got "
                             f"{type(plans).__name__}")
    items = list(plans)
    if not items:
        raise InputError("xe2rt.graph: plans is empty; give at least one xe2rt plan (xe2rt.bind)")
    flat = []
    for i, item in enumerate(items):
        if isinstance(item, Graph):
            flat.extend(item.plans)
        elif isinstance(item, Plan):
            flat.append(item)
        else:
            raise InputTypeError(f"xe2rt.graph: plans[{i}] is of type {type(item).__name__}; every item must be an xe2rt "
                                 f"plan (xe2rt.bind) or graph")
    if native is not None and not isinstance(native, bool):
        raise InputTypeError(f"xe2rt.graph: native must be None, True or False, got {native!r}")
    queues = []
    for plan in flat:
        for step in plan._steps:
            if isinstance(step, launch.Submission) and not any(step.queue == q for q in queues):
                queues.append(step.queue)
    if len(queues) > 1:
        raise InputError(f"xe2rt.graph: the plans launch on {len(queues)} different queues ({queues[0]} and "
                         f"{queues[1]}); a graph replays the work of one queue (make one graph per queue)")
    if native is False:
        off = "native=False"
    elif native is None and not config.native_graph_enabled():
        off = "XE2RT_NATIVE_GRAPH=0"
    else:
        off = None
    return Graph(tuple(flat), queues[0] if queues else None, off)
