"""Asynchronous launches: ops return before their kernels finish, order correctly against dpnp work on out-of-order
queues (dpctl.utils.SequentialOrderManager), keep their arguments alive, and stay correct from many threads.

The interleaving tests use integer data and permutation matrices so that every result is exact in fp16 and fp32:
the numpy sequence must be matched bit for bit, and any ordering mistake (a read before its write, a write before an
earlier read) changes the result."""
import threading

import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt import _compat, launch
from xe2rt.ops import gemv_fp16 as gemv_fp16_op

from conftest import to_device

K = 64


@pytest.fixture(scope="module")
def ooo_queue():
    try:
        q = dpctl.SyclQueue("opencl:cpu")
    except dpctl.SyclQueueCreationError as exc:
        pytest.skip(f"no opencl:cpu device: {exc}")
    assert not q.is_in_order
    return q


def permutation(rng, n, k):
    p = np.zeros((n, k), np.float16)
    p[np.arange(n), rng.permutation(k)[:n] if n <= k else rng.integers(0, k, n)] = 1
    return p


def test_op_returns_before_its_kernel_completes(ooo_queue, rng):
    """Large GEMVs (64 MB read each, about 1 ms at this machine's bandwidth) are still running when the calls return:
    nothing waited for them. Eight are queued back to back (each after the previous: dpnp's order), and the last one's
    status is read as soon as its call returns, so a host stalled for one kernel's time (it happened once, in CI) no
    longer fails the test: it would have to stall for all eight."""
    w = to_device(rng.standard_normal((8192, 4096)).astype(np.float16), ooo_queue)
    x = to_device(rng.standard_normal(4096).astype(np.float16), ooo_queue)
    gemv_fp16_op.run(x, w)[1].wait()  # built and warm
    for _ in range(8):
        y, event = gemv_fp16_op.run(x, w)
    status = event.execution_status
    event.wait()
    assert status != dpctl.event_status_type.complete
    ref = w.asnumpy().astype(np.float32) @ x.asnumpy().astype(np.float32)
    np.testing.assert_allclose(y.asnumpy().astype(np.float32), ref, rtol=2e-2, atol=0.5)


def test_arguments_kept_alive_until_the_kernel_completes(ooo_queue, rng):
    """Inputs that only the op references (temporaries) are not freed under the running kernel."""
    w_host = rng.standard_normal((4096, 4096)).astype(np.float16)
    x_host = rng.standard_normal(4096).astype(np.float16)
    ys = [xe2rt.gemv_fp16(to_device(x_host, ooo_queue), to_device(w_host, ooo_queue)) for _ in range(3)]
    ref = w_host.astype(np.float32) @ x_host.astype(np.float32)
    for y in ys:
        np.testing.assert_allclose(y.asnumpy().astype(np.float32), ref, rtol=2e-2, atol=0.5)


def test_dpnp_work_before_and_after_is_ordered(ooo_queue, rng):
    """dpnp writes x, xe2rt reads it and writes y, dpnp reads y: read-after-write both ways, with no waits between."""
    p = permutation(rng, K, K)
    w = to_device(p, ooo_queue)
    x = dpnp.zeros(K, dtype=np.float16, sycl_queue=ooo_queue)
    y = dpnp.empty(K, dtype=np.float16, sycl_queue=ooo_queue)
    expect_x = np.zeros(K, np.float16)
    for step in range(50):
        x += 1  # dpnp
        expect_x += 1
        xe2rt.gemv_fp16(x, w, out=y)  # reads x, writes y
        z = y * 2  # dpnp reads y
        expect = (p.astype(np.float32) @ expect_x.astype(np.float32)).astype(np.float16) * 2
    np.testing.assert_array_equal(z.asnumpy(), expect)


def _interleave(queue, rng, steps: int, use_plans: bool):
    """Random dpnp and xe2rt operations over shared arrays (views with offsets, out= reuse, topk with two outputs),
    mirrored in numpy; returns (device arrays as numpy, numpy arrays)."""
    n_vec = 4
    base = dpnp.zeros(n_vec * K + 16, dtype=np.float16, sycl_queue=queue)  # vectors are views at offsets 8 + iK
    vecs = [base[8 + i * K: 8 + (i + 1) * K] for i in range(n_vec)]
    host = [np.zeros(K, np.float16) for _ in range(n_vec)]
    perms = [permutation(rng, K, K) for _ in range(3)]
    ws = [to_device(p, queue) for p in perms]
    rows = K // 16
    top_vals = dpnp.zeros((rows, 4), dtype=np.float16, sycl_queue=queue)
    top_idx = dpnp.zeros((rows, 4), dtype=np.int32, sycl_queue=queue)
    host_top = (np.zeros((rows, 4), np.float16), np.zeros((rows, 4), np.int32))
    plans = {}
    for i in range(n_vec):
        init = rng.integers(-3, 4, K).astype(np.float16)
        vecs[i][...] = to_device(init, queue)
        host[i][...] = init
    for _ in range(steps):
        op = rng.integers(0, 6)
        i, j = rng.choice(n_vec, 2, replace=False)
        if op == 0:  # xe2rt gemv: vec_j = P vec_i (RAW on vec_i, WAW/WAR on vec_j)
            m = int(rng.integers(0, len(ws)))
            if use_plans and rng.integers(0, 2):
                plan = plans.get((i, j, m))
                if plan is None:
                    plan = plans[(i, j, m)] = xe2rt.bind(xe2rt.gemv_fp16, vecs[i], ws[m], out=vecs[j])
                plan()
            else:
                xe2rt.gemv_fp16(vecs[i], ws[m], out=vecs[j])
            host[j][...] = (perms[m].astype(np.float32) @ host[i].astype(np.float32)).astype(np.float16)
        elif op == 1:  # dpnp: vec_j = (vec_i + vec_j) mod 7, exact for small integers
            dpnp.remainder(vecs[i] + vecs[j], 7, out=vecs[j])
            host[j][...] = np.remainder(host[i] + host[j], np.float16(7))
        elif op == 2:  # dpnp in place on a view
            vecs[i] -= 3
            host[i] -= np.float16(3)
        elif op == 3:  # xe2rt topk over vec_i seen as [rows, 16], out= reused every time
            xe2rt.topk(vecs[i].reshape(rows, 16), 4, out=(top_vals, top_idx))
            order = np.argsort(-host[i].reshape(rows, 16).astype(np.float64), axis=1, kind="stable")[:, :4]
            host_top[0][...] = np.take_along_axis(host[i].reshape(rows, 16), order, axis=1)
            host_top[1][...] = order
        elif op == 4:  # dpnp reads topk's outputs into vec_j
            vecs[j][: rows * 4] = top_vals.reshape(-1) + top_idx.reshape(-1).astype(np.float16)
            host[j][: rows * 4] = host_top[0].reshape(-1) + host_top[1].reshape(-1).astype(np.float16)
        else:  # dpnp copy between views (write-after-read on vec_i's earlier readers)
            vecs[j][...] = vecs[i]
            host[j][...] = host[i]
    return [v.asnumpy() for v in vecs] + [top_vals.asnumpy(), top_idx.asnumpy()], host + list(host_top)


@pytest.mark.parametrize("use_plans", [False, True], ids=["ops", "ops+plans"])
def test_random_interleavings_match_numpy(ooo_queue, use_plans):
    rng = np.random.default_rng(2024 + use_plans)
    got, expect = _interleave(ooo_queue, rng, 1000, use_plans)
    for g, e in zip(got, expect):
        np.testing.assert_array_equal(g, e)


def test_eight_threads_one_queue(ooo_queue, rng):
    """8 threads x 1000 launches on one queue: each thread runs its own chain x <- P x, exact, checked at the end."""
    p = permutation(rng, K, K)
    w = to_device(p, ooo_queue)
    n_threads, launches = 8, 1000
    starts = [rng.integers(-50, 50, K).astype(np.float16) for _ in range(n_threads)]
    results, errors = [None] * n_threads, []

    def chain(t):
        try:
            a = to_device(starts[t], ooo_queue)
            b = dpnp.empty(K, dtype=np.float16, sycl_queue=ooo_queue)
            plan_ab = xe2rt.bind(xe2rt.gemv_fp16, a, w, out=b) if t % 2 else None
            for step in range(launches // 2):
                if plan_ab is not None:
                    plan_ab()
                else:
                    xe2rt.gemv_fp16(a, w, out=b)
                xe2rt.gemv_fp16(b, w, out=a)
            results[t] = a.asnumpy()
        except Exception as exc:  # reported below with the thread number
            errors.append((t, exc))

    threads = [threading.Thread(target=chain, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    pf = p.astype(np.float64)
    for t in range(n_threads):
        expect = starts[t].astype(np.float64)
        for _ in range(launches):
            expect = pf @ expect
        np.testing.assert_array_equal(results[t], expect.astype(np.float16))


def test_in_order_queue(rng):
    q = dpctl.SyclQueue("opencl:cpu", property="in_order")
    p = permutation(rng, K, K)
    w = to_device(p, q)
    x = to_device(np.arange(K, dtype=np.float16), q)
    y = dpnp.empty(K, dtype=np.float16, sycl_queue=q)
    for _ in range(10):
        xe2rt.gemv_fp16(x, w, out=y)
        x[...] = y + 1
    expect = np.arange(K, dtype=np.float64)
    for _ in range(10):
        expect = p.astype(np.float64) @ expect + 1
    np.testing.assert_array_equal(x.asnumpy(), expect.astype(np.float16))


def test_order_manager_holds_only_the_latest_event(ooo_queue, rng):
    """Each launch depends on everything the manager held, so it leaves only its own event there: the manager's
    list does not grow with the number of launches in flight."""
    w = to_device(permutation(rng, K, K), ooo_queue)
    x = to_device(np.ones(K, np.float16), ooo_queue)
    manager = dpctl.utils.SequentialOrderManager[ooo_queue]
    for _ in range(200):
        xe2rt.gemv_fp16(x, w)
    if _compat._OrderState is not None:
        assert manager.num_submitted_events <= 1
    ooo_queue.wait()


def test_recording_cannot_nest(ooo_queue):
    with launch.recording():
        with pytest.raises(RuntimeError, match="cannot be nested"):
            with launch.recording():
                pass


def test_completed_launches_on_many_queues_are_released(ooo_queue, rng):
    """Launch records hold a queue's arguments until a later event covers them (RETIRE_EVERY launches per record);
    with one short-lived queue per task, at most MAX_PENDING_QUEUES queues' arguments stay held after their kernels
    complete, not every queue's."""
    import gc
    import weakref
    ctx, dev = ooo_queue.sycl_context, ooo_queue.sycl_device
    w_host = rng.standard_normal((8, 64)).astype(np.float16)
    refs = []
    for _ in range(3 * launch.MAX_PENDING_QUEUES):
        q = dpctl.SyclQueue(ctx, dev)
        x = to_device(np.ones(64, np.float16), q)
        y = xe2rt.gemv_fp16(x, to_device(w_host, q))
        q.wait()
        refs.append(weakref.ref(x.get_array()))
        del q, x, y
    gc.collect()
    assert sum(r() is not None for r in refs) <= launch.MAX_PENDING_QUEUES
    launch.wait_all()
    gc.collect()
    assert all(r() is None for r in refs)
