"""Every use of a dependency's private internals, in one place, checked against the pinned versions at import.

xe2rt's warm path costs a few microseconds per launch; four things it needs have no public API fast enough:

- usm_ndarray `_pointer` / `_element_offset` (dpctl.tensor, shipped inside dpnp 0.20): the first element's address
  and its offset in elements. Public equivalent: `__sycl_usm_array_interface__` (builds a dict, about 1 us).
- `dpnp.ndarray._create_from_usm_ndarray`: wraps a usm_ndarray without copying. Public equivalent: `dpnp.asarray`
  (about 100 us, it re-validates the queue and the dtype).
- dpctl's `SequentialOrderManager[q]._state`, a C++ `_OrderManager`: lets a launch leave the manager holding its own
  event only (see xe2rt.launch.ordered_submit), and lets back-to-back launches replace one pending event instead of
  querying and rebuilding the C++ lists (`_LaunchState`, a subclass). Public equivalent: `submitted_events` +
  `add_event_pair`, whose list grows with every un-completed launch.
- CPython's `os.environ._data` (bytes keys): reading an XE2RT_* variable per warm call at a tenth of `os.environ.get`.
- a workaround, not an internal: dpnp 0.20's functions that run on oneMKL VM on the CPU device (abs, exp, sqrt, add,
  subtract, multiply, divide, ... on contiguous float32/64) wait for their dependencies holding the GIL; on an in-order
  queue a dependency may be the host task by which an earlier dpnp call releases its arguments, which needs the GIL:
  a deadlock (seen in LLM sampling, MiniLM on an in-order queue, gemm_w4a16's first call on the Xe2 path).
  `before_vm(queue)` drains an in-order queue first; `vm_queue(queue)` gives an out-of-order queue for code that is all
  such dpnp work.
- libsycl's exported members `sycl::queue::getNative(int&)`, `sycl::kernel::getNative()`,
  `sycl::context::getNative()` and `sycl::device::getNative()` (called by name through ctypes; they are what the
  SYCL 2020 interop function `sycl::get_native<backend::opencl>` calls, which dpctl does not expose): the OpenCL
  objects behind dpctl's, for xe2rt.graph's command buffers and xe2rt.program_cache. Public equivalent: none;
  without them a graph replays its plans one launch at a time, and programs are built from SPIR-V every time.
- libsycl's `sycl::detail::make_kernel_bundle(ur_native_handle_t, const context&, bool, bundle_state, backend)`, what
  the SYCL 2020 interop function `sycl::make_kernel_bundle<backend::opencl, bundle_state::executable>` calls (and
  dpctl calls after building a program), returning the bundle as the std::shared_ptr a `sycl::kernel_bundle` holds;
  wrapped into a `dpctl.program.SyclProgram` by dpctl's Cython C API function `SyclProgram_Make`. It makes a program
  xe2rt.program_cache loaded from a binary into the dpctl object every launch takes. Public equivalent: building
  from SPIR-V (`dpctl.program.create_program_from_spirv`), which is what happens without it.

Each is used only when the installed version is the pinned one (pyproject.toml); otherwise the public equivalent is
the one code path. tests/test_compat.py checks every internal against its public equivalent, so a change in a pinned
dependency that keeps the version number is noticed too.
"""
from __future__ import annotations

import os
import sys

import dpctl
import dpctl.memory
import dpctl.utils
import dpnp

PINNED = {"dpctl": "0.22.1", "dpnp": "0.20.0"}
INSTALLED = {"dpctl": dpctl.__version__.split("+")[0], "dpnp": dpnp.__version__.split("+")[0]}
PINNED_VERSIONS = all(INSTALLED[name] == version for name, version in PINNED.items())
CPYTHON = sys.implementation.name == "cpython"


# ---- usm_ndarray addresses ----

if PINNED_VERSIONS:
    def first_element_address(u) -> int:
        """Address of usm_ndarray `u`'s first element (a view starts inside its allocation)."""
        return u._pointer

    def element_offset(u) -> int:
        """Offset of `u`'s first element from the start of its allocation, in elements."""
        return u._element_offset
else:
    def first_element_address(u) -> int:
        iface = u.__sycl_usm_array_interface__
        return iface["data"][0] + iface["offset"] * u.itemsize

    def element_offset(u) -> int:
        return u.__sycl_usm_array_interface__["offset"]


# ---- dpnp arrays over existing USM memory ----

if PINNED_VERSIONS:
    wrap_usm_ndarray = dpnp.ndarray._create_from_usm_ndarray
else:
    wrap_usm_ndarray = dpnp.asarray


# ---- dpnp's per-queue order manager ----

def _order_state_classes():
    if not PINNED_VERSIONS:
        return None, None
    from dpctl.utils._order_manager import _SequentialOrderManager
    from dpctl.utils._seq_order_keeper import _OrderManager
    if not isinstance(getattr(_SequentialOrderManager(), "_state", None), _OrderManager):
        raise ImportError(f"dpctl {INSTALLED['dpctl']}: SequentialOrderManager no longer keeps an _OrderManager in "
                          f"_state; xe2rt/_compat.py must be updated for this dpctl")
    return _OrderManager, _SequentialOrderManager


_OrderState, _Manager = _order_state_classes()
_MANAGERS = dpctl.utils.SequentialOrderManager
MANAGER_PRUNE_THRESHOLD = 16  # dpctl's own default for a new manager


if _OrderState is not None:
    class _LaunchState(_OrderState):
        """A queue's order state (an `_OrderManager`, dpctl's C++ lists of events) while xe2rt's latest launch is
        the newest operation in it: that launch's event waits in `latest` instead of being added to the C++ list,
        since it depends on everything the list held and so stands for all of it. Every method dpctl's
        SequentialOrderManager calls first adds `latest` to the list (`_flush`), so whoever reads or extends the
        state sees exactly what a plain state would hold; one that adds a submitted event marks the state `foreign`,
        after which the next launch depends on the whole list again. dpctl and dpnp reach the state only through
        these methods (SequentialOrderManager's properties, add_event_pair, wait); the one exception is the
        manager's `__copy__`, whose C++ copy would miss an unflushed `latest`: a manager that holds a _LaunchState
        is made a _FlushingManager, whose copy flushes first."""
        __slots__ = ("latest", "flushed", "foreign")

        def _flush(self):
            if not self.flushed:
                self.flushed = True
                _OrderState.add_to_submitted_events(self, self.latest)

        def get_submitted_events(self):
            self._flush()
            return _OrderState.get_submitted_events(self)

        def get_num_submitted_events(self):
            self._flush()
            return _OrderState.get_num_submitted_events(self)

        def wait(self):
            self._flush()
            return _OrderState.wait(self)

        def add_to_submitted_events(self, event):
            self._flush()
            self.foreign = True
            return _OrderState.add_to_submitted_events(self, event)

        def add_to_both_events(self, host_task_event, event):
            self._flush()
            self.foreign = True
            return _OrderState.add_to_both_events(self, host_task_event, event)

        def add_vector_to_both_events(self, host_task_events, events):
            self._flush()
            self.foreign = True
            return _OrderState.add_vector_to_both_events(self, host_task_events, events)
    class _FlushingManager(_Manager):
        """dpctl's per-queue SequentialOrderManager, whose `__copy__` first adds a pending `latest` to the C++ lists
        it copies (dpctl's copy constructs a new _OrderManager from the C++ state directly)."""

        def __copy__(self):
            state = self._state
            if type(state) is _LaunchState:
                state._flush()
            return _Manager.__copy__(self)
else:
    _LaunchState = _FlushingManager = None


def submit_ordered(launch, args, in_order: bool) -> dpctl.SyclEvent:
    """Submit `launch` (an xe2rt._capi.Launch; `args`: its argument array, or None for the one it holds) after
    everything dpnp's order manager holds for its queue and register the event with it.

    The launch depends on all events the manager holds, so they are all its ancestors: with the pinned dpctl the
    manager is left holding this event alone (plus its host-task events, which only `wait` uses), and the next
    operation, ours or dpnp's, depends on one event that implies the rest. On an in-order queue the queue itself
    orders, so the launch takes no dependencies. While xe2rt's launches follow one another with nothing else
    submitted in between, the state stays one `_LaunchState` whose `latest` each launch depends on and replaces:
    no status queries, no C++ list updates, no new state per launch."""
    manager = _MANAGERS[launch.queue]
    if _OrderState is None:
        event = launch.submit(() if in_order else manager.submitted_events, args)
        manager.add_event_pair(event, event)
        return event
    state = manager._state
    if type(state) is _LaunchState and not state.foreign:
        event = launch.submit(() if in_order else (state.latest,), args)
        state.latest = event
        state.flushed = False
        return event
    deps = state.get_submitted_events()  # completed events pruned (a _LaunchState adds its latest first)
    event = launch.submit(() if in_order else deps, args)
    fresh = _LaunchState(MANAGER_PRUNE_THRESHOLD)
    host_tasks = state.get_host_task_events()
    if host_tasks:
        _OrderState.add_vector_to_both_events(fresh, host_tasks, [])
    fresh.latest, fresh.flushed, fresh.foreign = event, False, False
    manager._state = fresh
    if type(manager) is _Manager:
        manager.__class__ = _FlushingManager
    return event


# ---- dpnp's oneMKL VM calls on in-order queues ----

def before_vm(queue: dpctl.SyclQueue) -> None:
    """Call before a dpnp function that may run on oneMKL VM with arrays on `queue` (see the module docstring): an
    in-order queue is drained, so no host task the call could depend on is pending; an out-of-order one needs
    nothing (dpnp's dependencies there are kernels' events, never a host task)."""
    if queue.is_in_order:
        queue.wait()


_vm_queues: dict = {}


def vm_queue(queue: dpctl.SyclQueue) -> dpctl.SyclQueue:
    """`queue` if it is out of order, else an out-of-order queue on its context and device (one per queue, kept), for
    work that is all dpnp calls which may run on oneMKL VM (see the module docstring)."""
    if not queue.is_in_order:
        return queue
    sibling = _vm_queues.get(queue)
    if sibling is None:
        sibling = _vm_queues[queue] = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
    return sibling


# ---- native OpenCL handles behind SYCL objects (xe2rt.graph, xe2rt.program_cache) ----

def _libsycl(symbol: str, restype, *argtypes):
    """A libsycl function, bound by its mangled name through dpctl's C API library (libsycl is its dependency)."""
    from . import _capi
    function = _capi._lib[symbol]  # AttributeError when missing
    function.restype, function.argtypes = restype, list(argtypes)
    return function


def _sycl_native_getters():
    """(queue getter, kernel getter); None when this is not the pinned dpctl's runtime or a symbol is missing."""
    if not PINNED_VERSIONS:
        return None
    import ctypes
    vp = ctypes.c_void_p
    try:
        return (_libsycl("_ZNK4sycl3_V15queue9getNativeERi", vp, vp, ctypes.POINTER(ctypes.c_int)),
                _libsycl("_ZNK4sycl3_V16kernel9getNativeEv", vp, vp))
    except AttributeError:
        return None


def _sycl_program_makers():
    """(context getter, device getter, make_kernel_bundle, SyclProgram_Make, malloc) for program_from_native_opencl;
    None when this is not the pinned dpctl's runtime or a symbol is missing, and off Linux (the bundle is allocated
    with the C library's malloc for libstdc++'s operator delete to free)."""
    if not PINNED_VERSIONS or not sys.platform.startswith("linux"):
        return None
    import ctypes
    import dpctl.program
    vp = ctypes.c_void_p
    try:
        context_get = _libsycl("_ZNK4sycl3_V17context9getNativeEv", vp, vp)
        device_get = _libsycl("_ZNK4sycl3_V16device9getNativeEv", vp, vp)
        # returns std::shared_ptr<kernel_bundle_impl> through the hidden first argument (Itanium C++ ABI)
        make_bundle = _libsycl("_ZN4sycl3_V16detail18make_kernel_bundleEmRKNS0_7contextEbNS0_12bundle_stateENS0_7"
                               "backendE", vp, vp, ctypes.c_uint64, vp, ctypes.c_bool, ctypes.c_int, ctypes.c_int)
        capsule = dpctl.program._program.__pyx_capi__["SyclProgram_Make"]
    except (AttributeError, KeyError, OSError):
        return None
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype, pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    if name(capsule) != b"struct PySyclProgramObject *(DPCTLSyclKernelBundleRef)":
        return None
    program_make = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p)(pointer(capsule, name(capsule)))
    libc = ctypes.CDLL(None)
    malloc = libc.malloc
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    return context_get, device_get, make_bundle, program_make, malloc


_native_getters = _sycl_native_getters()


def native_opencl_queue(queue: dpctl.SyclQueue) -> int | None:
    """The cl_command_queue behind an OpenCL-backend dpctl queue (a reference the caller releases), or None when the
    queue is not OpenCL's or this runtime is not the pinned one. For an in-order SYCL queue it is the one in-order
    OpenCL queue every command of that SYCL queue is enqueued to."""
    if _native_getters is None or queue.backend != dpctl.backend_type.opencl:
        return None
    import ctypes
    descriptor = ctypes.c_int(0)
    return _native_getters[0](queue.addressof_ref(), ctypes.byref(descriptor)) or None


def native_opencl_kernel(sycl_kernel) -> int | None:
    """The cl_kernel behind a dpctl SyclKernel of an OpenCL-backend program (a reference the caller releases)."""
    if _native_getters is None:
        return None
    return _native_getters[1](sycl_kernel.addressof_ref()) or None


_program_makers = _sycl_program_makers()
# sycl::bundle_state::executable, sycl::backend::opencl (sycl/kernel_bundle_enums.hpp, sycl/backend_types.hpp)
_EXECUTABLE, _OPENCL = 2, 1
_SHARED_PTR_BYTES = 16  # sycl::kernel_bundle<executable>: its one member, a std::shared_ptr (two pointers)


def native_programs_available() -> bool:
    return _program_makers is not None and _native_getters is not None


def native_opencl_context_devices(queue: dpctl.SyclQueue) -> tuple[int, list[int]] | None:
    """(cl_context, its cl_device_ids) behind an OpenCL-backend queue's context; the context is a reference the caller
    releases. The devices are not released: a root device has no count, and a sub-device lives as long as the SYCL
    device behind it (xe2rt.parallel keeps them). None when not available."""
    if _program_makers is None or queue.backend != dpctl.backend_type.opencl:
        return None
    devices = [_program_makers[1](d.addressof_ref()) for d in queue.sycl_context.get_devices()]
    if not devices or not all(devices):
        return None
    context = _program_makers[0](queue.sycl_context.addressof_ref())
    return (context, devices) if context else None


def native_opencl_device(queue: dpctl.SyclQueue) -> int | None:
    """The cl_device_id behind an OpenCL-backend queue's device, or None."""
    if _program_makers is None or queue.backend != dpctl.backend_type.opencl:
        return None
    return _program_makers[1](queue.sycl_device.addressof_ref()) or None


def program_from_native_opencl(program: int, queue: dpctl.SyclQueue):
    """A dpctl.program.SyclProgram over a built cl_program of the queue's context, as dpctl makes one after building
    from SPIR-V (the bundle keeps the program; the caller's reference is left to it, as dpctl leaves its own)."""
    context_get, device_get, make_bundle, program_make, malloc = _program_makers
    bundle = malloc(_SHARED_PTR_BYTES)  # freed by the SyclProgram (DPCTLKernelBundle_Delete: delete of the bundle)
    if not bundle:
        raise MemoryError("malloc of a kernel bundle failed")
    make_bundle(bundle, program, queue.sycl_context.addressof_ref(), False, _EXECUTABLE, _OPENCL)
    return program_make(bundle)


# ---- environment ----

_environ_bytes = getattr(os.environ, "_data", None) if CPYTHON else None
if _environ_bytes is not None and os.environ.encodekey("X") != b"X":  # pragma: no cover - not POSIX
    _environ_bytes = None


if _environ_bytes is not None:
    environ_get = _environ_bytes.get  # environ_get(environ_key(name)): the variable as it is now, or None

    def environ_key(name: str):
        return name.encode()
else:
    environ_get = os.environ.get

    def environ_key(name: str):
        return name
