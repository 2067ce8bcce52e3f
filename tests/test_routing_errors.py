"""Bad input to softmax_topk / topk fails before launch with a message that states the rule and the value, and
writes nothing into the given out arrays."""
import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt

from conftest import to_device

SENTINEL_V, SENTINEL_I = 7.0, -7


@pytest.fixture
def x(queue, rng):
    return to_device(rng.standard_normal((12, 64)).astype(np.float32), queue)


@pytest.fixture
def outs(queue):
    return (to_device(np.full((12, 4), SENTINEL_V, np.float32), queue),
            to_device(np.full((12, 4), SENTINEL_I, np.int32), queue))


def untouched(*arrays):
    for a in arrays:
        h = a.asnumpy()
        assert (h == (SENTINEL_I if h.dtype == np.int32 else SENTINEL_V)).all()


OPS = [pytest.param(lambda *a, **kw: xe2rt.softmax_topk(*a, **kw), id="softmax_topk"),
       pytest.param(lambda *a, **kw: xe2rt.topk(*a, **kw), id="topk")]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("k,match", [
    (0, r"1 <= k <= min\(n, 16\) = 16, got k = 0"),
    (-3, r"got k = -3"),
    (17, r"1 <= k <= min\(n, 16\) = 16, got k = 17"),
])
def test_k_out_of_range(op, x, outs, k, match):
    with pytest.raises(xe2rt.InputError, match=match):
        op(x, k, out=outs)
    untouched(*outs)


@pytest.mark.parametrize("op", OPS)
def test_k_above_n(op, queue, rng):
    small = to_device(rng.standard_normal((3, 5)).astype(np.float32), queue)
    with pytest.raises(xe2rt.InputError, match=r"min\(n, 16\) = 5, got k = 6 for n = 5"):
        op(small, 6)


@pytest.mark.parametrize("k", [2.0, True, "4", None])
def test_k_not_int(x, k):
    with pytest.raises(xe2rt.InputTypeError, match="k must be an int"):
        xe2rt.softmax_topk(x, k)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("target,n,limit", [("bmg", 513, 512), ("lnl", 600, 512), ("cpu", 16385, 16384)])
def test_n_above_maximum(op, queue, target, n, limit):
    wide = to_device(np.zeros((2, n), np.float32), queue)
    with pytest.raises(xe2rt.InputError, match=rf"n = {n} values exceed the supported maximum n <= {limit} "
                                               rf"\(target {target}\)"):
        op(wide, 4, target=target)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int8])
def test_dtype(op, queue, dtype):
    a = to_device(np.zeros((4, 16), dtype), queue)
    with pytest.raises(xe2rt.InputTypeError, match=rf"must be float16 or float32, got {np.dtype(dtype)}"):
        op(a, 2)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(64,), (2, 4, 16), ()])
def test_rank(op, queue, shape):
    a = to_device(np.zeros(shape, np.float32), queue)
    with pytest.raises(xe2rt.InputError, match=rf"must be 2-D, got {len(shape)}-D"):
        op(a, 2)


@pytest.mark.parametrize("op", OPS)
def test_non_contiguous(op, x, outs):
    with pytest.raises(xe2rt.InputError, match="must be C-contiguous"):
        op(x[:, ::2], 4, out=outs)
    with pytest.raises(xe2rt.InputError, match="must be C-contiguous"):
        op(x.T, 4)
    untouched(*outs)


def test_host_array(rng):
    with pytest.raises(xe2rt.InputTypeError, match="must be a dpnp array on a SYCL device, got ndarray"):
        xe2rt.softmax_topk(rng.standard_normal((4, 16)).astype(np.float32), 2)


def test_normalize_not_bool(x):
    with pytest.raises(xe2rt.InputTypeError, match="normalize must be True or False, got 'yes'"):
        xe2rt.softmax_topk(x, 2, normalize="yes")


@pytest.mark.parametrize("op", OPS)
def test_out_not_a_pair(op, x, outs):
    with pytest.raises(xe2rt.InputTypeError, match=r"out must be a \(values, indices\) tuple"):
        op(x, 4, out=outs[0])
    with pytest.raises(xe2rt.InputTypeError, match=r"out must be a \(values, indices\) tuple"):
        op(x, 4, out=(outs[0],))
    untouched(*outs)


@pytest.mark.parametrize("op", OPS)
def test_out_wrong_shape(op, queue, x, outs):
    bad_v = to_device(np.full((12, 5), SENTINEL_V, np.float32), queue)
    with pytest.raises(xe2rt.InputError, match=r"out must have shape \(12, 4\), got \(12, 5\)"):
        op(x, 4, out=(bad_v, outs[1]))
    bad_i = to_device(np.full((11, 4), SENTINEL_I, np.int32), queue)
    with pytest.raises(xe2rt.InputError, match=r"out must have shape \(12, 4\), got \(11, 4\)"):
        op(x, 4, out=(outs[0], bad_i))
    untouched(*outs, bad_v, bad_i)


@pytest.mark.parametrize("op", OPS)
def test_out_wrong_dtype(op, queue, x, outs):
    with pytest.raises(xe2rt.InputTypeError, match="out must be float32, got float16"):
        op(x, 4, out=(to_device(np.zeros((12, 4), np.float16), queue), outs[1]))
    with pytest.raises(xe2rt.InputTypeError, match="out must be int32, got int64"):
        op(x, 4, out=(outs[0], to_device(np.zeros((12, 4), np.int64), queue)))
    untouched(*outs)


@pytest.mark.parametrize("op", OPS)
def test_out_other_queue(op, x, outs):
    other = dpctl.SyclQueue("opencl:cpu")
    assert other != x.sycl_queue
    foreign = dpnp.full((12, 4), SENTINEL_I, dtype=np.int32, sycl_queue=other)
    with pytest.raises(xe2rt.InputError, match="out is on another queue than the inputs"):
        op(x, 4, out=(outs[0], foreign))
    untouched(*outs, foreign)


def test_out_overlaps(queue, x, outs):
    with pytest.raises(xe2rt.InputError, match="out values and out indices overlap"):
        xe2rt.topk(x, 4, out=(outs[0], outs[0].view(np.int32)))
    flat = to_device(np.zeros(12 * 4 + 12 * 64, np.float32), queue)
    xin = flat[: 12 * 64].reshape(12, 64)
    with pytest.raises(xe2rt.InputError, match="out overlaps input x"):
        xe2rt.softmax_topk(xin, 4, out=(flat[12 * 60:12 * 64].reshape(12, 4), outs[1]))
    untouched(*outs)
