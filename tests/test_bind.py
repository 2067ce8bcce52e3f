"""xe2rt.bind (validate and pack once, launch many) and the warm-call replay of the public ops (xe2rt.fastcall):
both must give exactly what a fresh call gives, raise exactly the op's errors, and hold what they use."""
import gc
import os

import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt import fastcall, launch

from conftest import to_device


def make_args(queue, rng):
    """One valid call per public op: (op, args, kwargs)."""
    x = to_device(rng.standard_normal(256).astype(np.float16), queue)
    w = to_device(rng.standard_normal((40, 256)).astype(np.float16), queue)
    w_host = rng.standard_normal((40, 256)).astype(np.float16)
    a = to_device(rng.standard_normal((5, 256)).astype(np.float16), queue)
    logits = to_device(rng.standard_normal((7, 64)).astype(np.float16), queue)
    return [
        (xe2rt.gemv_fp16, (x, w), {}),
        (xe2rt.gemv_w4a16, (x, xe2rt.quantize_w4(w_host, group_size=32, symmetric=False).to_device(queue)), {}),
        (xe2rt.gemv_w8a16, (x, xe2rt.quantize_w8(w_host).to_device(queue)), {}),
        (xe2rt.gemm_fp16, (a, w), {"bias": to_device(np.ones(40, np.float16), queue), "activation": "gelu",
                                   "b_layout": "nk"}),
        (xe2rt.softmax_topk, (logits, 6), {}),
        (xe2rt.topk, (logits, 3), {}),
    ]


def as_numpy(result):
    return tuple(r.asnumpy() for r in result) if isinstance(result, tuple) else result.asnumpy()


def assert_same(a, b):
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("index", range(6), ids=["gemv_fp16", "gemv_w4a16", "gemv_w8a16", "gemm_fp16",
                                                 "softmax_topk", "topk"])
def test_every_public_op_binds(queue, index):
    rng = np.random.default_rng(index)
    op, args, kwargs = make_args(queue, rng)[index]
    plan = xe2rt.bind(op, *args, **kwargs)
    assert plan.launches >= 1
    first = as_numpy(plan())
    assert_same(first, as_numpy(op(*args, **kwargs)))
    # New contents in the same arrays: the plan computes on them.
    args[0][...] = to_device((rng.standard_normal(args[0].shape) * 2).astype(np.float16), queue)
    again = as_numpy(plan())
    assert_same(again, as_numpy(op(*args, **kwargs)))
    assert plan.launch() is not None
    assert "launch" in repr(plan)


def test_plan_returns_the_same_output_arrays(queue, rng):
    x = to_device(rng.standard_normal(64).astype(np.float16), queue)
    w = to_device(rng.standard_normal((8, 64)).astype(np.float16), queue)
    plan = xe2rt.bind(xe2rt.gemv_fp16, x, w)
    assert plan() is plan() is plan.result


def test_bind_raises_the_ops_errors_before_queuing(queue, rng):
    x = to_device(rng.standard_normal(64).astype(np.float16), queue)
    w32 = to_device(rng.standard_normal((8, 64)).astype(np.float32), queue)
    w_bad_k = to_device(rng.standard_normal((8, 65)).astype(np.float16), queue)
    cases = [
        (xe2rt.gemv_fp16, (x, w32), {}),
        (xe2rt.gemv_fp16, (x, w_bad_k), {}),
        (xe2rt.gemv_fp16, (x.asnumpy(), w_bad_k), {}),
        (xe2rt.softmax_topk, (to_device(np.ones((2, 8), np.float16), queue), 9), {}),
        (xe2rt.gemm_fp16, (x.reshape(1, 64), w_bad_k), {"b_layout": "nk"}),
        (xe2rt.gemv_w4a16, (x, "not weights"), {}),
    ]
    for op, args, kwargs in cases:
        with pytest.raises(xe2rt.Xe2rtError) as from_op:
            op(*args, **kwargs)
        with pytest.raises(type(from_op.value)) as from_bind:
            xe2rt.bind(op, *args, **kwargs)
        assert str(from_bind.value) == str(from_op.value)
    assert not launch.is_recording()  # a failed bind leaves no recording behind


def test_plan_holds_its_arrays(queue, rng):
    w_host = rng.standard_normal((8, 64)).astype(np.float16)
    x_host = rng.standard_normal(64).astype(np.float16)
    x, w = to_device(x_host, queue), to_device(w_host, queue)
    plan = xe2rt.bind(xe2rt.gemv_fp16, x, w)
    del x, w
    gc.collect()
    # Were the plan's arrays freed, these would likely take their memory and change the result.
    decoys = [to_device(np.full((8, 64), 7, np.float16), queue) for _ in range(8)]
    y = plan().asnumpy()
    assert len(decoys) == 8
    np.testing.assert_allclose(y.astype(np.float32), w_host.astype(np.float32) @ x_host.astype(np.float32),
                               rtol=1e-2, atol=1e-2)


def test_bind_rejects_non_callables():
    with pytest.raises(TypeError, match="op must be an xe2rt op"):
        xe2rt.bind("gemv_fp16")


def test_bind_refuses_work_it_cannot_replay(queue):
    """A function of the user's that queued no xe2rt launch (dpnp work) would give a plan that replays nothing and
    returns its bind-time result forever: refused. An xe2rt op with nothing to launch (empty arrays) still binds."""
    x = dpnp.arange(4, dtype=np.float32, sycl_queue=queue)
    with pytest.raises(xe2rt.InputError, match="'<lambda>' queued no xe2rt launch, so a plan of it would replay "
                                               "nothing"):
        xe2rt.bind(lambda a: a * 2, x)
    empty = xe2rt.bind(xe2rt.silu_mul, dpnp.empty((0, 128), dtype=np.float16, sycl_queue=queue))
    assert empty.launches == 0 and empty().shape == (0, 64)
    assert xe2rt.Plan.__doc__ and "replayed" in xe2rt.Plan.__doc__


# ---- warm-call replay (xe2rt.fastcall) ----

def test_warm_calls_on_new_arrays_match_fresh_calls(queue, rng):
    """Same facts, different arrays and contents (and views at offsets): the replay reads the new arrays."""
    fastcall.clear()
    w = to_device(rng.standard_normal((24, 128)).astype(np.float16), queue)
    buffer = dpnp.zeros(8 + 3 * 128, dtype=np.float16, sycl_queue=queue)
    for step in range(6):
        x_host = rng.standard_normal(128).astype(np.float16)
        x = buffer[8 + (step % 3) * 128: 8 + (step % 3 + 1) * 128] if step % 2 else to_device(x_host, queue)
        if step % 2:
            x[...] = to_device(x_host, queue)
        y = xe2rt.gemv_fp16(x, w)
        expect = xe2rt.ops.gemv_fp16.gemv_fp16(x, w)  # the op itself, no replay
        np.testing.assert_array_equal(y.asnumpy(), expect.asnumpy())


def test_warm_call_still_refuses_overlapping_out(queue, rng):
    fastcall.clear()
    buffer = to_device(rng.standard_normal(256).astype(np.float16), queue)
    w = to_device(rng.standard_normal((64, 64)).astype(np.float16), queue)
    xe2rt.gemv_fp16(buffer[:64], w, out=buffer[128:192])  # cached with a disjoint out
    with pytest.raises(xe2rt.InputError, match="out overlaps input x"):
        xe2rt.gemv_fp16(buffer[:64], w, out=buffer[32:96])


def test_warm_call_follows_target_variable(queue, rng, monkeypatch):
    """XE2RT_TARGET is part of the key: changing it between calls changes the kernels (here: a bad value raises)."""
    fastcall.clear()
    x = to_device(rng.standard_normal(64).astype(np.float16), queue)
    w = to_device(rng.standard_normal((8, 64)).astype(np.float16), queue)
    xe2rt.gemv_fp16(x, w)
    monkeypatch.setenv("XE2RT_TARGET", "nonsense")
    with pytest.raises(xe2rt.ConfigError, match="XE2RT_TARGET='nonsense'"):
        xe2rt.gemv_fp16(x, w)


def test_shape_changed_in_place_is_a_new_key(queue, rng):
    """A warm call keeps each array's facts while the array lives (launch.facts_of); an array whose shape is set in
    place is seen as the new shape: the op runs and raises its own error instead of replaying the old launch."""
    fastcall.clear()
    x = to_device(rng.standard_normal(256).astype(np.float16), queue)
    w = to_device(rng.standard_normal((16, 256)).astype(np.float16), queue)
    xe2rt.gemv_fp16(x, w)
    xe2rt.gemv_fp16(x, w)  # replayed
    w.shape = (32, 128)
    with pytest.raises(xe2rt.InputError, match="128"):
        xe2rt.gemv_fp16(x, w)
    w.shape = (16, 256)
    np.testing.assert_array_equal(xe2rt.gemv_fp16(x, w).asnumpy(), xe2rt.ops.gemv_fp16.gemv_fp16(x, w).asnumpy())


def test_array_facts_leave_with_their_arrays(queue, rng):
    """The per-array facts of warm calls are dropped when their array is collected: a loop over fresh arrays does not
    grow the table."""
    w = to_device(rng.standard_normal((8, 64)).astype(np.float16), queue)
    xe2rt.gemv_fp16(to_device(np.ones(64, np.float16), queue), w)
    gc.collect()
    launch.wait_all()
    before = len(launch.array_facts)
    for _ in range(50):
        y = xe2rt.gemv_fp16(to_device(rng.standard_normal(64).astype(np.float16), queue), w)
        xe2rt.gemv_fp16(to_device(np.ones(64, np.float16), queue), w, out=y)
    del y
    launch.wait_all()
    gc.collect()
    assert len(launch.array_facts) <= before + 1


def test_calls_the_cache_cannot_express_still_run(queue, rng):
    """K = 0 zero-fills through dpnp (a host step): never replayed, always right."""
    fastcall.clear()
    for _ in range(3):
        w = to_device(np.ones((5, 0), np.float16), queue)
        x = to_device(np.ones(0, np.float16), queue)
        y = xe2rt.gemv_fp16(x, w)
        np.testing.assert_array_equal(y.asnumpy(), np.zeros(5, np.float16))


def test_dtype_change_is_a_new_key(queue, rng):
    fastcall.clear()
    logits16 = to_device(rng.standard_normal((4, 32)).astype(np.float16), queue)
    logits32 = to_device(rng.standard_normal((4, 32)).astype(np.float32), queue)
    v16, _ = xe2rt.softmax_topk(logits16, 4)
    v32, _ = xe2rt.softmax_topk(logits32, 4)
    assert v16.dtype == np.float16 and v32.dtype == np.float32


def test_env_reads_see_changes():
    os.environ["XE2RT_TARGET"] = "cpu"
    try:
        assert fastcall._env("XE2RT_TARGET") in ("cpu", b"cpu")
    finally:
        del os.environ["XE2RT_TARGET"]
    assert fastcall._env("XE2RT_TARGET") is None


def test_reused_output_buffers_never_alias_live_results(queue, rng):
    """Warm calls take their outputs from a pool of buffers nobody references any more: results that are kept, or
    still being read by queued dpnp work, are never handed out again."""
    fastcall.clear()
    w_host = rng.standard_normal((32, 64)).astype(np.float16)
    w = to_device(w_host, queue)
    kept, readers = [], []
    for step in range(200):
        x_host = (rng.standard_normal(64) * (step % 7 + 1)).astype(np.float16)
        y = xe2rt.gemv_fp16(to_device(x_host, queue), w)
        if step % 10 == 0:
            kept.append((x_host, y))
        if step % 10 == 5:
            readers.append((x_host, y * 1))  # a dpnp op reading y, queued; y itself is dropped
    for x_host, y in kept + readers:
        expect = xe2rt.ops.gemv_fp16.gemv_fp16(to_device(x_host, queue), w).asnumpy()
        np.testing.assert_array_equal(y.asnumpy(), expect)


def test_views_passed_to_kernels_keep_nothing_alive(queue):
    """A view at an offset gets one memory object at its first element, kept with the view's facts
    (launch.view_memory) and referring to the allocation, not to the view: results are right on cold and warm calls,
    and once the view, its array and the launches are gone, the view is collected and a pooled allocation under it
    returns to the pool."""
    import gc
    import weakref
    from xe2rt import _compat, launch

    rng = np.random.default_rng(3)
    dt = np.dtype(np.float16)
    w_host = rng.standard_normal((4, 8)).astype(np.float16)
    w = to_device(w_host, queue)
    base = launch.new_output((16,), dt, queue)
    base[:] = to_device(rng.standard_normal(16).astype(np.float16), queue)
    first_address = _compat.first_element_address(base.get_array())
    view = base[8:]
    ref = weakref.ref(view.get_array())
    expect = w_host.astype(np.float64) @ base.asnumpy()[8:].astype(np.float64)
    for _ in range(3):  # cold, then warm replays
        np.testing.assert_allclose(xe2rt.gemv_fp16(view, w).asnumpy(), expect, rtol=2e-3, atol=2e-3)
    del view, base
    queue.wait()
    launch.wait_all()
    gc.collect()
    assert ref() is None
    again = launch.new_output((16,), dt, queue)
    assert _compat.first_element_address(again.get_array()) == first_address


def test_output_pool_recycles_only_unreachable_allocations(queue):
    """The pool's rule (xe2rt.pool): an allocation is handed out again once nothing can reach it; one still
    reachable through the array, a view, its usm_ndarray or its USM memory is not."""
    from xe2rt import _compat, launch

    def address(a):
        return _compat.first_element_address(a.get_array())

    dt = np.dtype(np.float16)
    first = launch.new_output((16,), dt, queue)
    first_address = address(first)
    del first
    again = launch.new_output((16,), dt, queue)
    assert address(again) == first_address
    for hold in (lambda a: a, lambda a: a[2:], lambda a: a.get_array(), lambda a: a.get_array().usm_data):
        held, held_address = hold(again), address(again)
        del again
        again = launch.new_output((16,), dt, queue)
        assert address(again) != held_address, held
        del held


def test_output_groups_share_one_allocation_and_return_together(queue):
    """A multi-output op's outputs come from one pooled allocation (pool.take_group): the later ones start at an
    aligned offset and are passed to kernels through the memory object the pool made for that offset; the
    allocation returns to the pool only once no output, view or usm_ndarray of any of them can reach it; a group
    too large for the pool is allocated as usual."""
    import gc
    from xe2rt import _compat, launch, pool

    to_float = xe2rt.Module.from_source(
        "__kernel void to_float(__global float* y, __global const int* x, int n) {"
        " int i = get_global_id(0); if (i < n) y[i] = (float)x[i]; }", queue=queue).kernel("to_float")
    rng = np.random.default_rng(5)
    logits_host = rng.standard_normal((3, 160)).astype(np.float32)
    logits = to_device(logits_host, queue)
    order = np.argsort(-logits_host.astype(np.float64), axis=1, kind="stable")[:, :6]
    for _ in range(3):  # cold, then warm replays
        values, indices = xe2rt.softmax_topk(logits, 6)
        assert indices.get_array().usm_data is values.get_array().usm_data
        offset = _compat.first_element_address(indices.get_array()) - _compat.first_element_address(
            values.get_array())
        assert offset > 0 and offset % pool.GROUP_ALIGNMENT == 0, offset
        np.testing.assert_array_equal(indices.asnumpy(), order)
        # the later output as an xe2rt kernel's input (its memory object from the pool), and as dpnp sees it
        as_float = dpnp.empty(indices.shape, dtype=np.float32, sycl_queue=queue)
        to_float(as_float, indices, indices.size, global_size=indices.size, local_size=1)
        np.testing.assert_array_equal(as_float.asnumpy(), order.astype(np.float32))
        np.testing.assert_array_equal(dpnp.astype(indices, np.float32).asnumpy(), order.astype(np.float32))
        u = indices.get_array()  # memory_at (for dpctl calls that take memory objects) starts at the first element
        assert launch.memory_at(u).__sycl_usm_array_interface__["data"][0] == _compat.first_element_address(u)
        del values, indices, as_float
    queue.wait()
    launch.wait_all()
    gc.collect()
    spec = pool.pool.group_spec([((3, 6), np.float32), ((3, 6), np.int32)], queue)

    def address(arrays):
        return _compat.first_element_address(arrays[0].get_array())

    first = pool.pool.take_group(spec)
    first_address = address(first)
    del first
    again = pool.pool.take_group(spec)
    assert address(again) == first_address
    for hold in (lambda g: g[1], lambda g: g[1][1:], lambda g: g[0].get_array(), lambda g: g[1].get_array().usm_data):
        held, held_address = hold(again), address(again)
        del again
        again = pool.pool.take_group(spec)
        assert address(again) != held_address, held
        del held
    big = pool.pool.group_spec([((pool.OutputPool.MAX_BYTES_EACH,), np.uint8), ((5,), np.int32)], queue)
    a, b = pool.pool.take_group(big)
    b[...] = dpnp.arange(5, dtype=np.int32, sycl_queue=queue)
    np.testing.assert_array_equal(b.asnumpy(), np.arange(5))
    assert _compat.first_element_address(b.get_array()) - _compat.first_element_address(a.get_array()) == \
        pool.pool.group_spec([((pool.OutputPool.MAX_BYTES_EACH,), np.uint8)], queue).nbytes


def test_first_call_passing_one_array_twice_is_not_replayed_for_distinct_arrays(queue, rng):
    """rms_norm(x, w, residual=x) first, then the same shapes with a distinct residual: the warm call must add its own
    residual (the recording of the first call cannot tell which of its two identical arguments a launch used, so it
    is not stored); the same for decode_attention(q, k, k) then (q, k, v)."""
    fastcall.clear()
    h = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    x, r, w = (to_device(a, queue) for a in (h(2, 64), h(2, 64), h(64)))
    xe2rt.rms_norm(x, w, eps=1e-5, residual=x)
    y, s = xe2rt.rms_norm(x, w, eps=1e-5, residual=r)
    np.testing.assert_array_equal(s.asnumpy(), (x.asnumpy().astype(np.float32) + r.asnumpy()).astype(np.float16))
    y_fresh, _ = xe2rt.ops.decoder_small.run_rms_norm(x, w, eps=1e-5, residual=r)[0]
    np.testing.assert_array_equal(y.asnumpy(), y_fresh.asnumpy())
    q, k, v = (to_device(a, queue) for a in (h(4, 64), h(2, 16, 64), h(2, 16, 64)))
    xe2rt.decode_attention(q, k, k, 16)
    got = xe2rt.decode_attention(q, k, v, 16).asnumpy()
    np.testing.assert_array_equal(got, xe2rt.ops.decode_attention.run(q, k, v, 16)[0].asnumpy())
    # the other order was always right: distinct first, then one array twice
    np.testing.assert_array_equal(xe2rt.decode_attention(q, k, k, 16).asnumpy(),
                                  xe2rt.ops.decode_attention.run(q, k, k, 16)[0].asnumpy())
