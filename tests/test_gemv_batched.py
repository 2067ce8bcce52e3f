"""Batched decode GEMVs (x [M, K], 1 <= M <= 16) of gemv_fp16, gemv_w8a16 and gemv_w4a16 on the CPU device, every
target's binary: each row m of the batched result meets the same per-row bound as the single-row call on x[m]
(reference.gemv / reference.quant bounds, float64 references), and lies within the sum of both bounds of that call's
result. The weights are read once per batch by construction (one launch); M > 16 and M = 0 are checked too."""
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt import launch
from xe2rt.ops import gemv_w4a16 as w4_op
from xe2rt.ops import gemv_w8a16 as w8_op
from xe2rt.quant import QuantizedW4, QuantizedW8
from xe2rt.reference import quant as ref_q
from xe2rt.reference.gemv import fp32_accumulation_bound, gemv

from conftest import TARGETS, to_device

BATCHES = [1, 2, 5, 16]


def assert_rows(y_batch, y_single, refs, bounds):
    """Row m of the batch within bound m of the reference, and within 2 x bound m of the single-row call."""
    for m, (ys, ref, bound) in enumerate(zip(y_single, refs, bounds)):
        err = np.abs(y_batch[m] - ref)
        bad = np.nonzero(err > bound)[0]
        assert bad.size == 0, f"x row {m}, rows {bad[:5]}: err {err[bad[:5]]} > bound {bound[bad[:5]]}"
        assert np.all(np.abs(ys - ref) <= bound)
        assert np.all(np.abs(y_batch[m] - ys) <= 2 * bound)


def run_batched(fn, x, queue):
    """(batched result [M, N] as float64, the M single-row results): one call on x [M, K], M calls on x[m]."""
    y = dpnp.asnumpy(fn(to_device(x, queue))).astype(np.float64)
    assert y.shape[0] == x.shape[0]
    singles = [dpnp.asnumpy(fn(to_device(x[m], queue))).astype(np.float64) for m in range(x.shape[0])]
    return y, singles


# --- fp16 ------------------------------------------------------------------------------------------------------------

# N tails of every ROWS, K tails of every vector width (K = 13, 1000, 4100: no whole VL chunk / unaligned rows on Xe2),
# and MiniLM's FFN shape.
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,k", [(5, 13), (37, 1000), (19, 4100), (1536, 384)])
@pytest.mark.parametrize("m", BATCHES)
def test_fp16_batch_equals_single_rows(queue, rng, target, n, k, m):
    w = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    w_dev = to_device(w, queue)
    y, singles = run_batched(lambda xd: xe2rt.gemv_fp16(xd, w_dev, target=target), x, queue)
    assert_rows(y, singles, [gemv(x[i], w) for i in range(m)], [fp32_accumulation_bound(x[i], w) for i in range(m)])


# --- W8A16 -----------------------------------------------------------------------------------------------------------

def random_w8(rng, n, k, queue):
    return QuantizedW8(rng.integers(-127, 128, size=(n, k), dtype=np.int8),
                       (rng.uniform(0.5, 1.5, size=n) * 1e-3).astype(np.float16)).to_device(queue)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,k", [(3, 13), (37, 1000), (19, 4224), (384, 1536)])
@pytest.mark.parametrize("m", BATCHES)
def test_w8_batch_equals_single_rows(queue, rng, target, n, k, m):
    qw = random_w8(rng, n, k, queue)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    y, singles = run_batched(lambda xd: xe2rt.gemv_w8a16(xd, qw, target=target), x, queue)
    k_split = w8_op.program_for(queue, w8_op.OP, target).constants["K_SPLIT"]
    assert_rows(y, singles, [ref_q.gemv_w8(x[i], qw) for i in range(m)],
                [ref_q.w8_fp32_bound(x[i], qw, k_split=k_split) for i in range(m)])


# --- W4A16 -----------------------------------------------------------------------------------------------------------

def random_w4(rng, n, k, group_size, symmetric, queue):
    packed = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    scales = (rng.uniform(0.5, 1.5, size=(n, k // group_size)) * 0.01).astype(np.float16)
    zeros = None if symmetric else rng.integers(0, 16, size=(n, k // group_size), dtype=np.uint8)
    return QuantizedW4(packed, scales, zeros, group_size).to_device(queue)


def w4_bound(queue, x, qw, target, dequant):
    """The single-row call's bound (the variant's summation); the batched kernels dequantize exactly first, whose
    summation is no deeper than the plain variant's, and the plain bound is the smaller one."""
    c = w4_op.program_variant(queue, target, dequant).constants
    single = ref_q.w4_kernel_bound(x, qw, c)
    plain = ref_q.w4_fp32_bound(x, qw, bias_corrected=False, magic_value=0.0, k_split=c["K_SPLIT"])
    return single, plain


# K = 4224: 8 whole 512-k chunks and a tail (Xe2); K = 96 has no whole chunk; (384, 1536) is MiniLM's FFN down.
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,k,group_size,symmetric,dequant", [
    (37, 4224, 32, False, None), (13, 4224, 128, True, "plain"), (9, 96, 32, False, "magic"),
    (384, 1536, 32, False, None)])
@pytest.mark.parametrize("m", BATCHES)
def test_w4_batch_equals_single_rows(queue, rng, target, n, k, group_size, symmetric, dequant, m):
    qw = random_w4(rng, n, k, group_size, symmetric, queue)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    y, singles = run_batched(lambda xd: xe2rt.gemv_w4a16(xd, qw, target=target, dequant=dequant), x, queue)
    refs = [ref_q.gemv_w4(x[i], qw) for i in range(m)]
    bounds = [w4_bound(queue, x[i], qw, target, dequant) for i in range(m)]
    assert_rows(y, singles, refs, [b[0] for b in bounds])
    if m > 1:  # the batched kernels' own (tighter) bound
        assert_rows(y, y, refs, [b[1] for b in bounds])


@pytest.mark.parametrize("target", TARGETS)
def test_w4_batch_unaligned_x(queue, rng, target):
    """x rows starting 2 bytes past 16-byte alignment: the Xe2 kernels take their per-byte path."""
    m, n, k = 5, 21, 1024
    qw = random_w4(rng, n, k, 64, False, queue)
    flat = rng.standard_normal(m * k + 1, dtype=np.float32).astype(np.float16)
    x_view = to_device(flat, queue)[1:].reshape(m, k)
    y = dpnp.asnumpy(xe2rt.gemv_w4a16(x_view, qw, target=target)).astype(np.float64)
    x = flat[1:].reshape(m, k)
    for i in range(m):
        single, plain = w4_bound(queue, x[i], qw, target, None)
        assert np.all(np.abs(y[i] - ref_q.gemv_w4(x[i], qw)) <= plain)


@pytest.mark.parametrize("target", TARGETS)
def test_batch_out_and_nan(queue, rng, target):
    """out= [M, N] is written in place; a NaN in x row 1 poisons row 1 only (as numpy's x @ w.T does)."""
    m, n, k = 3, 10, 256
    w = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    x[1, 7] = np.nan
    out = dpnp.full((m, n), 3.0, dtype=np.float16, sycl_queue=queue)
    assert xe2rt.gemv_fp16(to_device(x, queue), to_device(w, queue), out=out, target=target) is out
    y = dpnp.asnumpy(out).astype(np.float64)
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()
    assert np.allclose(y[[0, 2]], expected[[0, 2]], rtol=1e-2, atol=0.05)


# --- validation and empty batches ------------------------------------------------------------------------------------

def _calls(queue, rng, k=64, n=8):
    w = to_device(rng.standard_normal((n, k), dtype=np.float32).astype(np.float16), queue)
    q8 = random_w8(rng, n, k, queue)
    q4 = random_w4(rng, n, k, 32, True, queue)
    return {"gemv_fp16": lambda x, **kw: xe2rt.gemv_fp16(x, w, **kw),
            "gemv_w8a16": lambda x, **kw: xe2rt.gemv_w8a16(x, q8, **kw),
            "gemv_w4a16": lambda x, **kw: xe2rt.gemv_w4a16(x, q4, **kw)}


def test_batch_bad_input(queue, rng):
    n, k = 8, 64
    for op, call in _calls(queue, rng, k, n).items():
        with pytest.raises(xe2rt.InputError, match=rf"{op}: x must be \[K\] or \[M, K\] with M <= 16 .*"
                                                   r"got shape \(17, 64\)"):
            call(to_device(np.zeros((17, k), np.float16), queue))
        with pytest.raises(xe2rt.InputError, match=rf"{op}: x has K = 32 but .* K must match"):
            call(to_device(np.zeros((4, 32), np.float16), queue))
        out = dpnp.full((4, n), 5.0, dtype=np.float16, sycl_queue=queue)
        with pytest.raises(xe2rt.InputError, match=r"out must have shape \(3, 8\)"):
            call(to_device(np.zeros((3, k), np.float16), queue), out=out)
        with pytest.raises(xe2rt.InputError, match=r"out must be 2-D, got 1-D"):
            call(to_device(np.zeros((4, k), np.float16), queue),
                 out=dpnp.zeros(4 * n, dtype=np.float16, sycl_queue=queue))
        assert (dpnp.asnumpy(out) == 5.0).all()


def test_empty_batch_launches_nothing(queue, rng, monkeypatch):
    """M = 0 gives an empty [0, N] result without a launch (numpy: zeros((0, K)) @ w.T has shape (0, N))."""
    calls = _calls(queue, rng)

    def no_launch(*args, **kwargs):
        raise AssertionError("launched for M = 0")

    monkeypatch.setattr(launch, "launch", no_launch)
    for target in TARGETS:
        for op, call in calls.items():
            y = call(to_device(np.zeros((0, 64), np.float16), queue), target=target)
            assert y.shape == (0, 8) and y.dtype == np.float16, op
