"""xe2rt.graph: plans replayed by one call, as one OpenCL command buffer on an in-order queue of a device with
cl_khr_command_buffer, else launch by launch. Either way a replay must give, bit for bit, what calling the plans in
order gives, stay ordered with the queue's other work, and refuse bad input before recording anything."""
from __future__ import annotations

import ctypes
import gc

import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt import _compat, graphs
from xe2rt.errors import ConfigError, InputError, InputTypeError
from xe2rt.models import llm
from xe2rt.models import random as rnd

from xe2rt.checks.graphs import decoder_plans, snapshot

from conftest import to_device


@pytest.fixture(scope="module")
def inq():
    try:
        return dpctl.SyclQueue("opencl:cpu", property="in_order")
    except dpctl.SyclQueueCreationError as exc:
        pytest.skip(f"this machine has no opencl:cpu SYCL device ({exc}); install intel-opencl-rt")


def require_native(g: xe2rt.Graph) -> None:
    """A graph on the CPU device's in-order queue must be native; only a driver without the extension may skip. Any
    other reason (libsycl's getNative symbols gone, an OpenCL call failing) is a failure: the internals changed."""
    if not g.native and g.why.startswith("the device's OpenCL driver has no"):
        pytest.skip(g.why)
    assert g.native, g.why


@pytest.mark.parametrize("target", ["cpu", "bmg", "lnl"])
def test_native_graph_replays_the_plans_bit_for_bit(inq, target):
    """The selftest's case (xe2rt/checks/graphs.py): a decoder layer's attention half, caches included, replayed as
    one command buffer equals calling its plans, bit for bit; also with the Xe2-shaped kernels (bmg / lnl binaries on
    this device, sub-group code included)."""
    from xe2rt.checks import graphs as graph_checks
    result = graph_checks.checks()[0].run(inq, target)
    if "the device's OpenCL driver has no" in result.detail:
        pytest.skip(result.detail)
    assert result.passed and "as one OpenCL command buffer" in result.detail, result.describe()


def test_graph_stays_ordered_with_dpnp_work_without_waits(inq, rng):
    """dpnp writes the input, the graph runs, dpnp reads the output, a second replay sees a new input: nothing
    waited for in between but the in-order queue."""
    w = to_device((rng.standard_normal((96, 96)) / 8).astype(np.float16), inq)
    x = dpnp.zeros(96, dtype=np.float16, sycl_queue=inq)
    y = dpnp.empty(96, dtype=np.float16, sycl_queue=inq)
    z = dpnp.empty(96, dtype=np.float16, sycl_queue=inq)
    g = xe2rt.graph([xe2rt.bind(xe2rt.gemv_fp16, x, w, out=y), xe2rt.bind(xe2rt.gemv_fp16, y, w, out=z)])
    require_native(g)
    wh = dpnp.asnumpy(w).astype(np.float32)
    for value in (1.0, -0.5, 0.25):
        x.fill(value)  # dpnp work queued before the replay
        g()
        total = dpnp.sum(z.astype(np.float32))  # dpnp work queued after it
        want = wh @ (wh @ np.full(96, value, np.float32)).astype(np.float16).astype(np.float32)
        np.testing.assert_allclose(float(total), want.sum(), rtol=2e-2, atol=1e-2)


def test_back_to_back_replays_run_in_order(inq, rng):
    """Replays queued without waiting (the command buffer pending several times) run one after another: x <- W x
    three times gives W^3 x as the plans give it."""
    n = 128
    w = to_device((np.eye(n) * 0.5 + rng.standard_normal((n, n)) / 64).astype(np.float16), inq)
    x0 = rng.standard_normal(n).astype(np.float16)
    x = to_device(x0, inq)
    y = dpnp.empty(n, dtype=np.float16, sycl_queue=inq)
    plans = [xe2rt.bind(xe2rt.gemv_fp16, x, w, out=y), xe2rt.bind(xe2rt.gemv_fp16, y, w, out=x)]
    for p in plans * 3:
        p()
    want = dpnp.asnumpy(x)
    x[...] = to_device(x0, inq)
    g = xe2rt.graph(plans)
    require_native(g)
    g(), g(), g()
    g.wait()
    assert np.array_equal(dpnp.asnumpy(x), want)


@pytest.mark.parametrize("how", ["native=False", "env", "out-of-order queue", "host step"])
def test_other_paths_replay_launch_by_launch(how, inq, rng, monkeypatch):
    q = inq if how != "out-of-order queue" else dpctl.SyclQueue(inq.sycl_context, inq.sycl_device)
    if how == "env":
        monkeypatch.setenv("XE2RT_NATIVE_GRAPH", "0")
    plans, outs = decoder_plans(q, rng)
    if how == "host step":  # a GEMV with K = 0 zero-fills its output through dpnp, replayed as a host step
        empty_x = dpnp.empty(0, dtype=np.float16, sycl_queue=q)
        plans.append(xe2rt.bind(xe2rt.gemv_fp16, empty_x, dpnp.empty((5, 0), dtype=np.float16, sycl_queue=q)))
    kc0, vc0 = snapshot(outs[3:5])
    for p in plans:
        p()
    q.wait()
    want = snapshot(outs)
    outs[3][...] = to_device(kc0, q)
    outs[4][...] = to_device(vc0, q)
    g = xe2rt.graph(plans, native=False if how == "native=False" else None)
    assert not g.native
    assert {"native=False": "native=False", "env": "XE2RT_NATIVE_GRAPH=0", "out-of-order queue": "out of order",
            "host step": "host step"}[how] in g.why
    assert "launch by launch" in repr(g) and g.launches == sum(p.launches for p in plans)
    g()
    g.wait()
    q.wait()
    for a, b in zip(snapshot(outs), want):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_native_true_records_whatever_the_variable_says(inq, rng, monkeypatch):
    monkeypatch.setenv("XE2RT_NATIVE_GRAPH", "0")
    plans, _ = decoder_plans(inq, rng)
    assert not xe2rt.graph(plans).native
    require_native(xe2rt.graph(plans, native=True))


def test_graph_of_graphs_is_the_plans_in_order(inq, rng):
    plans, outs = decoder_plans(inq, rng)
    g = xe2rt.graph([xe2rt.graph(plans[:2]), *plans[2:4], xe2rt.graph(plans[4:])])
    assert g.plans == tuple(plans)
    require_native(g)
    assert g.launches == sum(p.launches for p in plans) and g.result is plans[-1].result
    assert g() is plans[-1].result
    g.wait()


def test_bad_input_is_refused_before_recording(inq, rng):
    plans, _ = decoder_plans(inq, rng)
    other = dpctl.SyclQueue(inq.sycl_context, inq.sycl_device, property="in_order")
    x = to_device(np.ones(64, np.float16), other)
    foreign = xe2rt.bind(xe2rt.gemv_fp16, x, to_device(np.ones((8, 64), np.float16), other))
    cases = [
        ([], InputError, "plans is empty"),
        (plans[0], InputTypeError, "must be a list of xe2rt plans"),
        ("plans", InputTypeError, "must be a list of xe2rt plans"),
        ([plans[0], len], InputTypeError, "plans[1] is of type builtin_function_or_method"),
        ([plans[0], foreign], InputError, "2 different queues"),
    ]
    for arg, exc, text in cases:
        with pytest.raises(exc, match=None) as info:
            xe2rt.graph(arg)
        assert text in str(info.value), str(info.value)
    with pytest.raises(InputTypeError, match="native must be None, True or False"):
        xe2rt.graph(plans, native="yes")
    for value in ("2", "off"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("XE2RT_NATIVE_GRAPH", value)
            with pytest.raises(ConfigError, match="XE2RT_NATIVE_GRAPH"):
                xe2rt.graph(plans)
    g = xe2rt.graph(plans)  # the plans are still usable
    g()
    g.wait()


def test_native_handles_are_released_with_the_graph(inq, rng):
    """The command buffer holds one reference to the OpenCL queue and one clone per kernel; dropping the graph
    releases them (waiting for the buffer first)."""
    plans, _ = decoder_plans(inq, rng)
    cl = graphs._opencl()
    handle = _compat.native_opencl_queue(inq)
    assert handle, "libsycl's sycl::queue::getNative no longer gives the OpenCL queue (xe2rt/_compat.py)"

    def refs():
        count = ctypes.c_uint()
        assert cl.queue_info(handle, 0x1092, 4, ctypes.byref(count), None) == 0  # CL_QUEUE_REFERENCE_COUNT
        return count.value
    gc.collect()  # graphs of earlier tests let go of the queue now, not in the middle of the count
    gc.disable()
    try:
        before = refs()
        g = xe2rt.graph(plans)
        require_native(g)
        assert refs() == before + 1
        g()
        del g  # released by reference counting, with the collector off
        assert refs() == before
    finally:
        gc.enable()
        cl.release_queue(handle)


def test_llm_decode_is_the_same_with_and_without_graphs(inq, tmp_path):
    """Greedy tokens, their logits and sampled tokens of a W4 model are identical with the step as one command
    buffer per bucket of lengths and as its bound plans, across two attention buckets (64, then max_tokens = 96)."""
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="gptq", group=32, seed=12)
    model = llm.load(folder, queue=inq, max_tokens=96, progress=False)
    ids = np.random.default_rng(5).integers(0, model.cfg.vocab, 58).astype(np.int32)
    runs = {}
    for native in (False, True):
        model.native_graphs = native
        runs[native] = (model.generate(ids, 12, return_logits=True),
                        model.generate(ids, 12, temperature=0.9, top_k=20, seed=4))
    (t0, l0), s0 = runs[False]
    (t1, l1), s1 = runs[True]
    assert np.array_equal(t0, t1) and np.array_equal(l0, l1) and np.array_equal(s0, s1)
    built = {key: g for key, g in model._graphs.items() if g is not None}
    assert {key for key in built} == {(64, True), (96, True), (64, False), (96, False)}, model._graphs
    assert all(g.native for g in built.values())


def test_a_failed_recording_replays_launch_by_launch_and_leaks_nothing(inq, rng, monkeypatch):
    """An OpenCL error while recording (here the third kernel refused) leaves a graph that replays the plans in turn,
    says why, and holds no reference to the OpenCL queue."""
    plans, outs = decoder_plans(inq, rng)
    require_native(xe2rt.graph(plans))  # binds the extension's entry points
    gc.collect()  # graphs of earlier tests let go of the queue now, not in the middle of the count
    cl = graphs._opencl()
    handle = _compat.native_opencl_queue(inq)
    count = ctypes.c_uint()
    cl.queue_info(handle, 0x1092, 4, ctypes.byref(count), None)
    before, calls, real = count.value, [], cl.command_kernel

    def refusing(*args):
        calls.append(1)
        return -30 if len(calls) == 3 else real(*args)  # CL_INVALID_VALUE
    monkeypatch.setattr(cl, "command_kernel", refusing)
    gc.disable()
    try:
        g = xe2rt.graph(plans)
        monkeypatch.setattr(cl, "command_kernel", real)
        assert not g.native and "OpenCL error -30" in g.why and "clCommandNDRangeKernelKHR" in g.why
        cl.queue_info(handle, 0x1092, 4, ctypes.byref(count), None)
        assert count.value == before
    finally:
        gc.enable()
    cl.release_queue(handle)
    for p in plans:
        p()
    inq.wait()
    want = snapshot(outs)
    g()
    g.wait()
    inq.wait()
    got = snapshot(outs)
    for name in (0, 1, 5, 6):  # y, s, attn, out: the same inputs again (the caches now hold the same row again)
        assert np.array_equal(got[name].view(np.uint16), want[name].view(np.uint16))


def test_a_step_left_unread_does_not_choose_the_next_prompts_token(inq, tmp_path):
    """A greedy step run as a graph (its argmax inside) whose token is never read, as the decode bench's host timing
    does, must not make the next prompt's choice skip its own argmax: the next generate equals a fresh model's."""
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", seed=13)
    model = llm.load(folder, queue=inq, max_tokens=64, progress=False)
    ids = np.random.default_rng(6).integers(0, model.cfg.vocab, 20).astype(np.int32)
    model.generate(ids, 3)
    model._decode(int(ids[-1]), ids.size, greedy=True, wait=False)
    inq.wait()
    other = np.random.default_rng(7).integers(0, model.cfg.vocab, 11).astype(np.int32)
    fresh = llm.load(folder, queue=inq, max_tokens=64, progress=False)
    assert np.array_equal(model.generate(other, 6), fresh.generate(other, 6))
