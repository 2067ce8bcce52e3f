"""gemv_w8a16 on opencl:cpu, every target's binary, against the float64 reference of dequantize()."""
import numpy as np
import pytest

import dpnp
import xe2rt
from xe2rt.ops import gemv_w8a16 as op
from xe2rt.quant import QuantizedW8
from xe2rt.reference import quant as ref_q

from conftest import TARGETS, to_device


def random_qw(rng, n, k, queue):
    qweight = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    scales = (rng.uniform(0.5, 1.5, size=n) * 0.001).astype(np.float16)
    return QuantizedW8(qweight, scales).to_device(queue)


def check(queue, x, qw, target):
    y = dpnp.asnumpy(xe2rt.gemv_w8a16(to_device(x, queue), qw, target=target)).astype(np.float64).reshape(-1)
    ref = ref_q.gemv_w8(x, qw)
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max() + 1e-6
    k_split = op.program_for(queue, op.OP, target).constants["K_SPLIT"]
    bound = ref_q.w8_fp32_bound(x, qw, k_split=k_split)
    bad = np.nonzero(np.abs(y - ref) > bound)[0]
    assert bad.size == 0, f"rows {bad[:5]}: |y - ref| {np.abs(y - ref)[bad[:5]]} > bound {bound[bad[:5]]}"


@pytest.mark.parametrize("target,n,k", [("bmg", 4096, 14336), ("lnl", 9728, 2560)])
def test_w8_llm_shapes_xe2(queue, rng, target, n, k):
    check(queue, rng.standard_normal(k).astype(np.float16), random_qw(rng, n, k, queue), target)


@pytest.mark.parametrize("target", TARGETS)
def test_w8_seed000_rule_against_unquantized(queue, rng, target):
    n, k = 1000, 4224
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal(k).astype(np.float16)
    qw = xe2rt.quantize_w8(w).to_device(queue)
    y = dpnp.asnumpy(xe2rt.gemv_w8a16(to_device(x, queue), qw, target=target)).astype(np.float64)
    assert ref_q.seed000_failures(y, w.astype(np.float64) @ x.astype(np.float64)).size == 0


@pytest.mark.parametrize("target", TARGETS)
def test_w8_out_and_2d(queue, rng, target):
    n, k = 19, 768
    qw = random_qw(rng, n, k, queue)
    x = rng.standard_normal((1, k)).astype(np.float16)
    out = dpnp.empty((1, n), dtype=np.float16, sycl_queue=queue)
    assert xe2rt.gemv_w8a16(to_device(x, queue), qw, out=out, target=target) is out
    ref = ref_q.gemv_w8(x, qw)
    assert np.abs(dpnp.asnumpy(out)[0].astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()


def test_w8_bad_input(queue, rng):
    import dpctl
    n, k = 8, 256
    qw = random_qw(rng, n, k, queue)
    x = to_device(rng.standard_normal(k).astype(np.float16), queue)
    out = dpnp.full(n, 5.0, dtype=np.float16, sycl_queue=queue)
    other = dpctl.SyclQueue(queue.sycl_device)

    def unchecked(qweight, scales):
        q = object.__new__(QuantizedW8)
        object.__setattr__(q, "qweight", qweight)
        object.__setattr__(q, "scales", scales)
        return q

    cases = [
        (dict(x=to_device(np.zeros(k, np.float32), queue)), xe2rt.InputTypeError, r"gemv_w8a16: x must be float16"),
        (dict(x=to_device(np.zeros(k - 1, np.float16), queue)), xe2rt.InputError, r"x has K = 255 .* K must match"),
        (dict(x=to_device(np.zeros(2 * k, np.float16), queue)[::2]), xe2rt.InputError, r"x must be C-contiguous"),
        (dict(qw=qw.to_host()), xe2rt.InputError, r"numpy \(host\) arrays.*to_device"),
        (dict(qw=xe2rt.quantize_w4(np.zeros((n, k), np.float32)).to_device(queue)), xe2rt.InputTypeError,
         r"qw must be a QuantizedW8"),
        (dict(qw=unchecked(qw.qweight, qw.scales[:4])), xe2rt.InputError, r"gemv_w8a16: scales must have shape \(8,\)"),
        (dict(qw=unchecked(qw.qweight.astype(np.uint8), qw.scales)), xe2rt.InputTypeError,
         r"gemv_w8a16: qweight must be int8, got uint8"),
        (dict(qw=unchecked(qw.qweight, dpnp.asarray(qw.scales, sycl_queue=other))), xe2rt.InputError,
         r"gemv_w8a16: scales and qweight are on different queues"),
        (dict(x=to_device(np.zeros(k, np.float16), other)), xe2rt.InputError,
         r"gemv_w8a16: qw and x are on different queues.*qw = qw\.to_device\(x\.sycl_queue\)"),
        (dict(out=dpnp.zeros((1, n), dtype=np.float16, sycl_queue=queue)), xe2rt.InputError, r"out must be 1-D"),
    ]
    for kwargs, exc, pattern in cases:
        args = {"x": x, "qw": qw, "out": out}
        args.update(kwargs)
        with pytest.raises(exc, match=pattern):
            xe2rt.gemv_w8a16(args.pop("x"), args.pop("qw"), **args)
        assert (dpnp.asnumpy(out) == 5.0).all(), f"out written by a call that failed: {pattern}"
