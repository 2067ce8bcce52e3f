"""QuantizedW4Experts: quantize_w4_experts follows quantize_w4 per expert, dequantize() gives the stacked float32
weights, and the stacked GPTQ / AWQ importers round-trip exactly (packers from tests/test_quant.py)."""
import numpy as np
import pytest

import xe2rt
from xe2rt.quant import QuantizedW4, quantize_w4

from conftest import to_device
from test_quant import pack_awq, pack_gptq


@pytest.mark.parametrize("group_size,symmetric", [(128, True), (32, False)])
def test_quantize_experts_is_quantize_w4_per_expert(rng, group_size, symmetric):
    e, h, i = 3, 256, 128
    gate_up = rng.standard_normal((e, 2 * i, h)).astype(np.float32)
    down = rng.standard_normal((e, h, i)).astype(np.float16)
    ex = xe2rt.quantize_w4_experts(gate_up, down, group_size=group_size, symmetric=symmetric)
    assert ex.shape == (e, h, i) and ex.gate_up.shape == (e * 2 * i, h) and ex.down.shape == (e * h, i)
    gu, dn = ex.dequantize()
    for x in range(e):
        assert np.array_equal(gu[x], quantize_w4(gate_up[x], group_size=group_size, symmetric=symmetric).dequantize())
        assert np.array_equal(dn[x], quantize_w4(down[x], group_size=group_size, symmetric=symmetric).dequantize())
    assert np.abs(gu - gate_up).max() < 0.5 and ex.nbytes == ex.gate_up.nbytes + ex.down.nbytes


def test_quantize_experts_on_device_keeps_queue(queue, rng):
    gate_up = to_device(rng.standard_normal((2, 256, 128)).astype(np.float16), queue)
    down = to_device(rng.standard_normal((2, 128, 128)).astype(np.float16), queue)
    ex = xe2rt.quantize_w4_experts(gate_up, down)
    assert ex.sycl_queue == queue and ex.to_host().sycl_queue is None
    assert ex.to_device(queue).gate_up.packed is ex.gate_up.packed


def _per_expert(ex, which):
    """The per-expert QuantizedW4 layers of a host stack."""
    qw = getattr(ex, which)
    n = qw.shape[0] // ex.num_experts
    return [QuantizedW4(np.asarray(qw.packed)[x * n:(x + 1) * n], np.asarray(qw.scales)[x * n:(x + 1) * n],
                        None if qw.zeros is None else np.asarray(qw.zeros)[x * n:(x + 1) * n], qw.group_size)
            for x in range(ex.num_experts)]


@pytest.mark.parametrize("fmt", ["gptq", "awq"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_stacked_importers_round_trip(queue, rng, fmt, symmetric):
    from test_moe import random_experts
    ex = random_experts(rng, 3, 256, 128, 64, symmetric)
    parts = []
    for which in ("gate_up", "down"):
        # random zero points include 0, which v1 ("gptq", stores zero - 1) cannot hold: v2 for those
        layers = [pack_gptq(q, v1=symmetric) if fmt == "gptq" else pack_awq(q) for q in _per_expert(ex, which)]
        parts += [np.stack([layer[j] for layer in layers]) for j in range(3)]
    if fmt == "gptq":
        got = xe2rt.experts_from_gptq(*parts, checkpoint_format="gptq" if symmetric else "gptq_v2", queue=queue)
    else:
        got = xe2rt.experts_from_awq(*parts, queue=queue)
    assert got.sycl_queue == queue and got.shape == ex.shape and got.gate_up.symmetric == symmetric
    for a, b in zip(got.dequantize(), ex.dequantize()):
        assert np.array_equal(a, b)


def test_stacked_importer_bad_input(rng):
    qweight = np.zeros((2, 32, 256), np.int32)
    with pytest.raises(xe2rt.InputError, match="w2_qweight must be 3-D with E = 2"):
        xe2rt.experts_from_gptq(qweight, np.zeros((2, 2, 32), np.int32), np.ones((2, 2, 256), np.float16),
                                qweight[0], np.zeros((2, 1, 32), np.int32), np.ones((2, 1, 256), np.float16))
    with pytest.raises(xe2rt.InputError, match=r"needs down \[E, H, I\]"):
        xe2rt.quantize_w4_experts(np.zeros((2, 256, 128), np.float32), np.zeros((2, 128, 64), np.float32))
    with pytest.raises(xe2rt.InputError, match="multiple of 128"):
        xe2rt.quantize_w4_experts(np.zeros((2, 192, 128), np.float32), np.zeros((2, 128, 96), np.float32),
                                  group_size=32)
