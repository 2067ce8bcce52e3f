"""The launch helper refuses geometry and arguments the device or kernel cannot take, before submitting."""
import numpy as np
import pytest

import xe2rt
from xe2rt import artifacts, launch

from conftest import to_device


@pytest.fixture
def gemv_kernel(queue):
    return artifacts.load(queue, "cpu", "gemv_fp16").kernel()


def args(queue, slm=16):
    x = to_device(np.ones(64, np.float16), queue)
    w = to_device(np.ones((16, 64), np.float16), queue)
    y = to_device(np.zeros(16, np.float16), queue)
    return [x, w, y, 16, 64, xe2rt.LocalMemory(4 * slm)]


def cpu_geometry(queue):
    """(local size, SLM floats) of the cpu gemv_fp16 kernel's one work-group (its decomposition: ROWS rows per group,
    RPT per work-item, ROWS x K_SPLIT floats of SLM)."""
    c = artifacts.load(queue, "cpu", "gemv_fp16").constants
    return c["ROWS"] // c["RPT"] * c["K_SPLIT"], c["ROWS"] * c["K_SPLIT"]


def test_work_group_too_large(queue, gemv_kernel):
    too_many = queue.sycl_device.max_work_group_size * 2
    with pytest.raises(xe2rt.LaunchLimitError, match=rf"Required: {too_many}, limit: kernel \d+, device \d+"):
        launch.launch(gemv_kernel, args(queue), too_many, too_many, queue)


def test_slm_too_large(queue, gemv_kernel):
    floats = queue.sycl_device.local_mem_size // 4 + 1
    with pytest.raises(xe2rt.LaunchLimitError, match=rf"needs {floats * 4} bytes of local memory .*device limit "
                                                     rf"{queue.sycl_device.local_mem_size}"):
        launch.launch(gemv_kernel, args(queue, slm=floats), 4, 4, queue)


def test_global_not_multiple_of_local(queue, gemv_kernel):
    with pytest.raises(xe2rt.LaunchLimitError, match=r"global size \(6,\) is not a multiple of local size \(4,\)"):
        launch.launch(gemv_kernel, args(queue), 6, 4, queue)


def test_scalar_out_of_range(queue, gemv_kernel):
    a = args(queue)
    a[3] = 2**31
    with pytest.raises(xe2rt.InputError, match=r"argument 'N': 2147483648 does not fit the kernel's int"):
        launch.launch(gemv_kernel, a, 4, 4, queue)


def test_pointer_dtype_checked_against_signature(queue, gemv_kernel):
    a = args(queue)
    a[1] = to_device(np.ones((16, 64), np.float32), queue)
    with pytest.raises(xe2rt.InputTypeError, match=r"argument 'w': declared half\* needs float16, got float32"):
        launch.launch(gemv_kernel, a, 4, 4, queue)


def test_argument_count(queue, gemv_kernel):
    with pytest.raises(xe2rt.InputError, match=r"takes 6 arguments \(x, w, y, N, K, partial\), got 5"):
        launch.launch(gemv_kernel, args(queue)[:5], 4, 4, queue)


def test_valid_launch_returns_event(queue, gemv_kernel):
    local, slm = cpu_geometry(queue)
    a = args(queue, slm=slm)
    event = launch.launch(gemv_kernel, a, local, local, queue)
    event.wait()
    assert np.all(np.asarray(a[2].asnumpy()) == 64)


def test_a_queue_per_task_does_not_grow_the_caches(queue, gemv_kernel):
    """Launches on many short-lived queues (one per task) keep at most launch.MAX_QUEUES device-limit entries and
    module.MAX_QUEUES_OK accepted queues (both grew by one per queue, keeping every queue alive), and stay right."""
    import dpctl
    from xe2rt import module
    local, slm = cpu_geometry(queue)
    for i in range(launch.MAX_QUEUES + 20):
        q = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
        a = args(q, slm)
        gemv_kernel(*a, global_size=local, local_size=local, queue=q).wait()
        assert (a[2].asnumpy() == 64).all()
    assert len(launch._device_limits) <= launch.MAX_QUEUES
    assert len(gemv_kernel.module.queues_ok) <= module.MAX_QUEUES_OK
