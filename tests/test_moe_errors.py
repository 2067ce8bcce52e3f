"""moe_ffn_w4a16 / moe_layer bad input: a clear xe2rt error before anything is launched, nothing written."""
import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt.ops import moe as op
from xe2rt.quant import QuantizedW4
from xe2rt.quant_experts import QuantizedW4Experts

from conftest import to_device
from test_moe import random_experts, routing

E, H, I, T, K = 6, 256, 128, 4, 2


@pytest.fixture
def setup(queue, rng):
    experts = random_experts(rng, E, H, I, queue=queue)
    x = to_device(rng.standard_normal((T, H)).astype(np.float16), queue)
    ids, w = routing(rng, T, K, E)
    out = dpnp.full((T, H), 3.0, dtype=np.float16, sycl_queue=queue)
    return experts, x, to_device(ids, queue), to_device(w, queue), out


def call_fails(error, match, x, experts, ids, w, out, **kw):
    """The call raises `error` matching `match`, and out keeps its fill (3.0) after the queue drains."""
    with pytest.raises(error, match=match):
        xe2rt.moe_ffn_w4a16(x, experts, ids, w, out=out, **kw)
    out.sycl_queue.wait()
    assert np.all(dpnp.asnumpy(out) == 3.0)


def test_ids_dtype_and_shape(setup):
    experts, x, ids, w, out = setup
    call_fails(xe2rt.InputTypeError, "topk_ids must be int32, got int64", x, experts, ids.astype(np.int64), w, out)
    call_fails(xe2rt.InputError, r"topk_ids must be \[T, k\] with T = 4", x, experts, ids[:3], w[:3], out)
    call_fails(xe2rt.InputError, "topk_ids must be 2-D", x, experts, ids.reshape(-1), w, out)
    wide = dpnp.zeros((T, E + 1), dtype=np.int32, sycl_queue=ids.sycl_queue)
    call_fails(xe2rt.InputError, r"1 <= k <= E = 6", x, experts, wide, dpnp.zeros((T, E + 1), dtype=np.float16,
                                                                                 sycl_queue=ids.sycl_queue), out)
    strided = dpnp.zeros((T, 2 * K), dtype=np.int32, sycl_queue=ids.sycl_queue)[:, ::2]
    call_fails(xe2rt.InputError, "topk_ids must be C-contiguous", x, experts, strided, w, out)


def test_weights_must_match(setup):
    experts, x, ids, w, out = setup
    call_fails(xe2rt.InputTypeError, "topk_weights must be float16 or float32, got float64", x, experts, ids,
               w.astype(np.float64), out)
    call_fails(xe2rt.InputError, r"topk_weights must have topk_ids' shape \(4, 2\), got \(4, 1\)", x, experts, ids,
               dpnp.ascontiguousarray(w[:, :1]), out)


def test_ids_out_of_range_with_check_ids(setup):
    experts, x, ids, w, out = setup
    bad = dpnp.asarray(dpnp.asnumpy(ids), sycl_queue=ids.sycl_queue)
    bad[2, 1] = E
    call_fails(xe2rt.InputError, r"\[0, E = 6\); 1 do not \(first: topk_ids\[2, 1\] = 6\)", x, experts, bad, w, out,
               check_ids=True)
    call_fails(xe2rt.InputTypeError, "check_ids must be True or False", x, experts, ids, w, out, check_ids=1)


def test_h_or_i_mismatch(queue, rng, setup):
    experts, x, ids, w, out = setup
    x2 = to_device(rng.standard_normal((T, H + 128)).astype(np.float16), queue)
    call_fails(xe2rt.InputError, r"x is \[T, H\] = \(4, 384\) but the experts have H = 256", x2, experts, ids, w, out)
    gu = experts.gate_up.to_host()
    dn = random_experts(rng, E, H, 2 * I).down  # down [E*H, 2I] against gate_up's I
    with pytest.raises(xe2rt.InputError, match="they disagree"):
        QuantizedW4Experts(gu, dn, E)
    with pytest.raises(xe2rt.InputError, match="must be E x 2I"):
        QuantizedW4Experts(gu, experts.down.to_host(), E + 1)
    small = random_experts(rng, 2, 128, 128)
    odd = QuantizedW4(np.zeros((2 * 2 * 96, 64), np.uint8), np.ones((384, 1), np.float16), None, 128)
    with pytest.raises(xe2rt.InputError):
        QuantizedW4Experts(odd, small.down, 2)
    with pytest.raises(xe2rt.InputTypeError, match="experts must be a QuantizedW4Experts"):
        xe2rt.moe_ffn_w4a16(x, experts.gate_up, ids, w)


def test_t0_is_empty_and_launches_nothing(queue, setup):
    experts, _, _, _, _ = setup
    x = dpnp.empty((0, H), dtype=np.float16, sycl_queue=queue)
    ids = dpnp.empty((0, K), dtype=np.int32, sycl_queue=queue)
    w = dpnp.empty((0, K), dtype=np.float16, sycl_queue=queue)
    (y, invalid), event = op.run(x, experts, ids, w)
    assert event is None and y.shape == (0, H) and y.dtype == np.float16
    assert int(dpnp.asnumpy(invalid)[0]) == 0
    y, _, _ = op.run_layer(x, dpnp.zeros((E, H), dtype=np.float16, sycl_queue=queue), experts, K)[0]
    assert y.shape == (0, H)


def test_too_many_tokens(queue, rng, setup):
    experts, _, _, _, _ = setup
    x = to_device(rng.standard_normal((65, H)).astype(np.float16), queue)
    ids, w = routing(rng, 65, K, E)
    out = dpnp.full((65, H), 3.0, dtype=np.float16, sycl_queue=queue)
    call_fails(xe2rt.InputError, "T = 65 tokens exceeds the decode limit of 64", x, experts, to_device(ids, queue),
               to_device(w, queue), out)


def test_x_layout_and_dtype(queue, rng, setup):
    experts, x, ids, w, out = setup
    wide = to_device(rng.standard_normal((T, 2 * H)).astype(np.float16), queue)
    call_fails(xe2rt.InputError, "x must be C-contiguous", wide[:, ::2], experts, ids, w, out)
    call_fails(xe2rt.InputTypeError, "x must be float16, got float32", x.astype(np.float32), experts, ids, w, out)
    call_fails(xe2rt.InputError, "x must be 2-D", x[0], experts, ids, w, out)


def test_queues(queue, rng, setup):
    experts, x, ids, w, out = setup
    other = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
    call_fails(xe2rt.InputError, r"experts and x are on different queues.*experts = experts\.to_device\(x\.sycl_q",
               x, experts.to_device(other), ids, w, out)
    call_fails(xe2rt.InputError, "topk_ids and x are on different queues", x, experts,
               dpnp.asarray(ids, sycl_queue=other), w, out)
    with pytest.raises(xe2rt.InputError, match="numpy \\(host\\) arrays"):
        xe2rt.moe_ffn_w4a16(x, experts.to_host(), ids, w)


def test_out_checks(queue, setup):
    experts, x, ids, w, out = setup
    with pytest.raises(xe2rt.InputError, match=r"out must have shape \(4, 256\)"):
        xe2rt.moe_ffn_w4a16(x, experts, ids, w, out=dpnp.empty((T, H + 1), dtype=np.float16, sycl_queue=queue))
    with pytest.raises(xe2rt.InputError, match="out overlaps input x"):
        xe2rt.moe_ffn_w4a16(x, experts, ids, w, out=x)
    # out over the experts' scales or zero points: refused (it ran and overwrote the weights' scales)
    asym = xe2rt.quantize_w4_experts(experts.gate_up.dequantize(np.float16).reshape(E, 2 * I, H),
                                     experts.down.dequantize(np.float16).reshape(E, H, I), symmetric=False)
    for stack in ("gate_up", "down"):
        for kind in ("scales", "zeros"):
            name, part = f"experts.{stack}.{kind}", getattr(getattr(asym, stack), kind)
            before = dpnp.asnumpy(part).copy()
            over = part.reshape(-1).view(np.uint8)[:H * 2].view(np.float16).reshape(1, H)  # one token: fits in each
            with pytest.raises(xe2rt.InputError, match=f"out overlaps input {name}"):
                xe2rt.moe_ffn_w4a16(x[:1], asym, ids[:1], w[:1], out=over)
            queue.wait()
            assert np.array_equal(dpnp.asnumpy(part), before)


def test_layer_checks_out_before_the_router_launches(queue, rng, setup, monkeypatch):
    """moe_layer refuses an out over the experts before it queues the router GEMM (it checked out against x and
    router_w only, and the rest inside moe_ffn_w4a16, after two launches)."""
    experts, x, ids, w, out = setup
    router = to_device((rng.standard_normal((E, H)) * 0.1).astype(np.float16), queue)
    over = experts.gate_up.packed.reshape(-1)[:T * H * 2].view(np.float16)
    monkeypatch.setattr(op.gemm_op, "run", lambda *a, **k: pytest.fail("the router GEMM was launched"))
    with pytest.raises(xe2rt.InputError, match="moe_layer: out overlaps input experts.gate_up.packed"):
        xe2rt.moe_layer(x, router, experts, K, out=over.reshape(T, H))


def test_layer_bad_input(queue, rng, setup):
    experts, x, ids, w, out = setup
    router = to_device((rng.standard_normal((E, H)) * 0.1).astype(np.float16), queue)

    def layer_fails(error, match, *args, **kw):
        with pytest.raises(error, match=match):
            xe2rt.moe_layer(*args, out=out, **kw)
        queue.wait()
        assert np.all(dpnp.asnumpy(out) == 3.0)

    layer_fails(xe2rt.InputError, r"router_w must be \[E, H\] = \(6, 256\)", x, router[:5], experts, K)
    layer_fails(xe2rt.InputError, r"1 <= k <= min\(E, 16\) = 6", x, router, experts, 7)
    layer_fails(xe2rt.InputTypeError, "k must be an int", x, router, experts, 2.0)
    layer_fails(xe2rt.InputTypeError, "router_w must be float16", x, router.astype(np.float32), experts, K)
    big = to_device(rng.standard_normal((65, H)).astype(np.float16), queue)
    with pytest.raises(xe2rt.InputError, match="T = 65"):
        xe2rt.moe_layer(big, router, experts, K)
    layer_fails(xe2rt.InputError, "experts and x are on different queues", x, router,
                experts.to_device(dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)), K)


def test_xe2_alignment(queue, rng, setup):
    """The Xe2 kernels read weights with sub-group block reads and x by dwords: misaligned views are refused there
    (before the Xe2 program is even built) and accepted on the cpu target."""
    experts, x, ids, w, out = setup
    flat = dpnp.empty(T * H + 1, dtype=np.float16, sycl_queue=queue)
    flat[1:] = x.reshape(-1)
    odd = flat[1:].reshape(T, H)
    assert odd.flags.c_contiguous
    call_fails(xe2rt.InputError, "x must start 4-byte aligned on Xe2 targets", odd, experts, ids, w, out,
               target="bmg")
    y = dpnp.asnumpy(xe2rt.moe_ffn_w4a16(odd, experts, ids, w, target="cpu"))
    assert np.array_equal(y.view(np.uint16), dpnp.asnumpy(xe2rt.moe_ffn_w4a16(x, experts, ids, w)).view(np.uint16))
