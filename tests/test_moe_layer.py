"""moe_layer: router GEMM + softmax_topk + moe_ffn_w4a16 queued together. It must equal the composition of the single
ops bit for bit, and its MoE output must sit within the reference bound for the routing it chose."""
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt.ops import moe as op
from xe2rt.reference import moe as ref
from xe2rt.reference import routing as ref_routing

from conftest import to_device
from test_moe import random_experts

# Real router shapes (E, k, H, I) with every expert and the real H and I.
REAL = {"mixtral_8x7b": (8, 2, 4096, 14336), "qwen3_30b_a3b": (128, 8, 2048, 768), "olmoe": (64, 8, 2048, 1024),
        "deepseek_v2_lite": (64, 6, 2048, 1408)}


def composition(x, router_w, experts, k):
    logits = xe2rt.gemm_fp16(x, router_w, b_layout="nk")
    w, ids = xe2rt.softmax_topk(logits, k)
    return xe2rt.moe_ffn_w4a16(x, experts, ids, w), w, ids, logits


def check_layer(queue, rng, e, k, h, i, t, with_reference):
    experts = random_experts(rng, e, h, i, queue=queue)
    x = to_device(rng.standard_normal((t, h)).astype(np.float16), queue)
    router_w = to_device((rng.standard_normal((e, h)) / np.sqrt(h) * 4).astype(np.float16), queue)
    (y, w, ids), _ = op.run_layer(x, router_w, experts, k)
    y2, w2, ids2, logits = composition(x, router_w, experts, k)
    assert np.array_equal(dpnp.asnumpy(ids), dpnp.asnumpy(ids2))
    assert np.array_equal(dpnp.asnumpy(w).view(np.uint16), dpnp.asnumpy(w2).view(np.uint16))
    assert np.array_equal(dpnp.asnumpy(y).view(np.uint16), dpnp.asnumpy(y2).view(np.uint16))
    # routing: the layer's choice is the reference top-k of the logits it computed
    want_v, want_i = ref_routing.softmax_topk(dpnp.asnumpy(logits), k)
    assert np.array_equal(dpnp.asnumpy(ids), want_i)
    if with_reference:
        hx, hids, hw = dpnp.asnumpy(x), dpnp.asnumpy(ids), dpnp.asnumpy(w)
        want, bound = ref.reference(hx, experts.to_host(), hids, hw, magic=ref.magic_for("cpu"))
        diff = np.abs(dpnp.asnumpy(y).astype(np.float64) - want)
        assert (diff <= bound).all()


@pytest.mark.parametrize("name", REAL)
def test_layer_real_shapes(queue, rng, name):
    e, k, h, i = REAL[name]
    check_layer(queue, rng, e, k, h, i, t=1 if name == "mixtral_8x7b" else 4, with_reference=name != "mixtral_8x7b")


@pytest.mark.parametrize("t", [1, 3, 16, 64])
def test_layer_small(queue, rng, t):
    check_layer(queue, rng, 16, 4, 256, 256, t, with_reference=True)


def test_layer_reads_nothing_back(queue, rng, monkeypatch):
    """No host readback inside the layer (it would stall the queue): dpnp.asnumpy is poisoned during the call."""
    experts = random_experts(rng, 8, 256, 128, queue=queue)
    x = to_device(rng.standard_normal((3, 256)).astype(np.float16), queue)
    router_w = to_device(rng.standard_normal((8, 256)).astype(np.float16), queue)

    def no_readback(*args, **kwargs):
        raise AssertionError("host readback inside moe_layer")

    with monkeypatch.context() as m:
        m.setattr(dpnp, "asnumpy", no_readback)
        y = xe2rt.moe_layer(x, router_w, experts, 2)
    assert np.isfinite(dpnp.asnumpy(y)).all()
