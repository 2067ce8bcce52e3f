"""The dependency internals xe2rt uses (all in xe2rt/_compat.py) agree with their public equivalents, so a change
inside a pinned dpctl/dpnp/CPython is noticed here rather than as wrong results; and no other module of the package
touches them."""
import ast
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
    assert not offenders, offenders


def test_environ_key_types_match():
    assert type(_compat.environ_key("X")) is (bytes if _compat._environ_bytes is not None else str)
    assert os.environ.get("XE2RT_NOT_SET_ANYWHERE") is None
