"""The dependency internals xe2rt uses (all in xe2rt/_compat.py) agree with their public equivalents, so a change
inside a pinned dpctl/dpnp/CPython is noticed here rather than as wrong results; and no other module of the package
touches them."""
import ast
import copy
import os
from pathlib import Path

import dpctl
import dpctl.utils
import dpnp
import numpy as np

import xe2rt
from xe2rt import _compat

PACKAGE = Path(xe2rt.__file__).resolve().parent
PRIVATE_NAMES = {"_pointer", "_element_offset", "_Memory", "_create_from_usm_ndarray", "_state", "_OrderManager",
                 "_data", "_SequentialOrderManager", "getrefcount"}


def test_pinned_versions_are_the_installed_ones():
    # pyproject.toml pins these; the internals below are used only under them (else the public paths are).
    assert _compat.PINNED_VERSIONS, f"installed {_compat.INSTALLED}, pinned {_compat.PINNED}"


def test_addresses_match_the_usm_array_interface(queue):
    a = dpnp.arange(40, dtype=np.float32, sycl_queue=queue)
    for view in (a, a[3:], a.reshape(5, 8)[2]):
        u = view.get_array()
        iface = u.__sycl_usm_array_interface__
        assert _compat.element_offset(u) == iface["offset"]
        assert _compat.first_element_address(u) == iface["data"][0] + iface["offset"] * u.itemsize


def test_wrap_shares_memory_like_asarray(queue):
    u = dpnp.arange(8, dtype=np.int32, sycl_queue=queue).get_array()
    wrapped = _compat.wrap_usm_ndarray(u)
    assert type(wrapped) is dpnp.ndarray and wrapped.get_array().usm_data is u.usm_data
    assert wrapped.sycl_queue == u.sycl_queue and wrapped.shape == u.shape and wrapped.dtype == u.dtype


def test_order_manager_state_is_what_submit_ordered_assumes(queue):
    """The manager's public view (submitted_events) sees exactly the state _compat replaces."""
    ooo = dpctl.SyclQueue(queue.sycl_device)  # out of order
    x = dpnp.ones(1 << 16, dtype=np.float32, sycl_queue=ooo)
    _ = x + 1  # dpnp work the manager holds
    manager = dpctl.utils.SequentialOrderManager[ooo]
    if _compat._OrderState is not None:
        assert isinstance(manager._state, _compat._OrderState)
        assert len(manager._state.get_submitted_events()) == manager.num_submitted_events
    kernel = xe2rt.load(PACKAGE / "kernels", queue=ooo, target="cpu", module="stream_read")
    assert kernel is not None
    ooo.wait()


def _gemv_on_out_of_order_queue(queue, rng):
    """(order manager, w, x, y): 4096 x 4096 gemv_fp16 operands on a new out-of-order queue of the test device."""
    ooo = dpctl.SyclQueue(queue.sycl_device)
    w = dpnp.asarray((rng.standard_normal((4096, 4096)) / 64).astype(np.float16), sycl_queue=ooo)
    x = dpnp.asarray(rng.standard_normal(4096).astype(np.float16), sycl_queue=ooo)
    y = dpnp.empty(4096, dtype=np.float16, sycl_queue=ooo)
    return dpctl.utils.SequentialOrderManager[ooo], w, x, y


def test_launch_state_shows_the_latest_launch_to_every_reader(queue, rng):
    """Back-to-back launches keep their latest event outside dpctl's C++ list (_compat._LaunchState); every public
    way of reading the manager still sees it, and work queued through the manager in between makes the next launch
    depend on the whole list again."""
    if _compat._LaunchState is None:
        return  # not the pinned dpctl: submit_ordered takes the public path, which the other tests cover
    manager, w, x, y = _gemv_on_out_of_order_queue(queue, rng)
    xe2rt.gemv_fp16(x, w, out=y)
    state = manager._state
    assert type(state) is _compat._LaunchState and not state.foreign
    for _ in range(3):  # the same state object, its latest event replaced
        xe2rt.gemv_fp16(x, w, out=y)
    assert manager._state is state and not state.flushed
    held = _compat._OrderState.get_num_submitted_events(state)  # the C++ list alone, before any reader
    seen = manager.num_submitted_events  # a reader: the latest launch is added first (pruned once complete)
    assert state.flushed and seen <= held + 1
    z = y * 2  # dpnp: reads the list (latest included), adds its own event
    assert state.foreign
    xe2rt.gemv_fp16(z, w, out=y)  # depends on dpnp's event through the whole list; a fresh state follows
    assert manager._state is not state and type(manager._state) is _compat._LaunchState
    latest = manager._state.latest
    manager.wait()
    assert latest.execution_status == dpctl.event_status_type.complete
    expect = w.asnumpy().astype(np.float32) @ (2 * (w.asnumpy().astype(np.float32) @ x.asnumpy().astype(np.float32))
                                               .astype(np.float16)).astype(np.float32)
    np.testing.assert_allclose(y.asnumpy().astype(np.float32), expect, rtol=0.05, atol=0.05 * np.abs(expect).max())


def test_a_copied_manager_holds_the_latest_launch(queue, rng):
    """copy.copy of a queue's order manager (dpctl copies the C++ lists directly) includes an xe2rt launch whose event
    the state had not yet added to them: waiting on the copy waits for that launch."""
    if _compat._LaunchState is None:
        return  # not the pinned dpctl: the state is dpctl's own, which copies whole
    manager, w, x, y = _gemv_on_out_of_order_queue(queue, rng)
    xe2rt.gemv_fp16(x, w, out=y)
    state = manager._state
    assert type(state) is _compat._LaunchState and not state.flushed
    latest = state.latest
    copied = copy.copy(manager)
    assert state.flushed  # the pending event went into the lists before dpctl copied them
    copied.wait()
    assert latest.execution_status == dpctl.event_status_type.complete
    expect = w.asnumpy().astype(np.float32) @ x.asnumpy().astype(np.float32)
    np.testing.assert_allclose(y.asnumpy().astype(np.float32), expect, rtol=0.02, atol=0.02)


def test_environ_reads_follow_os_environ(monkeypatch):
    key = _compat.environ_key("XE2RT_COMPAT_PROBE")
    monkeypatch.setenv("XE2RT_COMPAT_PROBE", "bmg")
    value = _compat.environ_get(key)
    assert value in ("bmg", b"bmg")
    monkeypatch.delenv("XE2RT_COMPAT_PROBE")
    assert _compat.environ_get(key) is None


def test_no_other_module_touches_private_internals():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_compat.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else None
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                if any(n in PRIVATE_NAMES for n in names) or (node.module or "").startswith(("dpctl.utils._",
                                                                                               "dpctl.memory._")):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {names}")
            if name in PRIVATE_NAMES:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{name}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_ZN"):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} C++ symbol {node.value}")
    assert not offenders, offenders


def test_environ_key_types_match():
    assert type(_compat.environ_key("X")) is (bytes if _compat._environ_bytes is not None else str)
    assert os.environ.get("XE2RT_NOT_SET_ANYWHERE") is None


def test_native_opencl_handles_are_the_sycl_objects(queue):
    """libsycl's sycl::queue::getNative / sycl::kernel::getNative, called by name for xe2rt.graph, still give the
    OpenCL queue (in order exactly when the SYCL queue is) and the kernel of the same name."""
    import ctypes
    from xe2rt import graphs
    if not _compat.PINNED_VERSIONS:
        assert _compat.native_opencl_queue(queue) is None
        return
    cl = graphs._opencl()
    for q in (queue, dpctl.SyclQueue(queue.sycl_context, queue.sycl_device, property="in_order")):
        handle = _compat.native_opencl_queue(q)
        assert handle, "sycl::queue::getNative gave no OpenCL queue"
        props = ctypes.c_uint64()
        assert cl.queue_info(handle, graphs.CL_QUEUE_PROPERTIES, 8, ctypes.byref(props), None) == 0
        assert bool(props.value & graphs.CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == (not q.is_in_order)
        cl.release_queue(handle)
    kernel = xe2rt.load(PACKAGE / "kernels", queue=queue, target="cpu", module="stream_read").kernel()
    handle = _compat.native_opencl_kernel(kernel.sycl_kernel)
    assert handle, "sycl::kernel::getNative gave no OpenCL kernel"
    get_info = ctypes.CDLL("libOpenCL.so.1").clGetKernelInfo
    get_info.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
    name = ctypes.create_string_buffer(256)
    assert get_info(handle, 0x1190, 256, name, None) == 0  # CL_KERNEL_FUNCTION_NAME
    assert name.value.decode() == kernel.sycl_kernel.get_function_name()
    cl.release_kernel(handle)
