"""softmax_stats beyond its shape cases (tests/test_checks.py runs xe2rt.checks.softmax_stats on every target): rows
that are not 16-byte aligned, out=, empty input, how rows combine into the whole vocabulary's softmax, and bad input
refused before launch with the rule and the value."""
import fractions

import numpy as np
import pytest

import xe2rt
from xe2rt.checks.softmax_stats import bound
from xe2rt.reference import routing as ref

from conftest import TARGETS, to_device


def _check(got, x, t):
    want = ref.softmax_stats(x, t)
    got = np.asarray(got, np.float64)
    np.testing.assert_array_equal(got[:, 0], want[:, 0])
    assert (np.abs(got[:, 1] - want[:, 1]) <= bound(x.shape[1], want[:, 1])).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_misaligned_view(queue, rng, target, dtype):
    """A contiguous view one element into a buffer: the Xe2 shape must take its element path, not block reads."""
    for n in (128, 512, 77):
        x = (rng.standard_normal((9, n)) * 3).astype(dtype)
        flat = to_device(np.concatenate([np.zeros(1, dtype), x.ravel()]), queue)
        _check(xe2rt.softmax_stats(flat[1:].reshape(9, n), temperature=0.8, target=target).asnumpy(), x, 0.8)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_combine_into_the_vocabulary_softmax(queue, rng, target):
    """A 2500-token vocabulary padded with -inf to 5 rows of 512: the masses s_r exp((m_r - M) / t) sum to the
    normalizer of the whole row, and a token's probability follows from its row's statistics (fp32 bound: 1e-5)."""
    v, t = 2500, 0.7
    logits = (rng.standard_normal(v) * 5).astype(np.float16)
    buf = np.full(5 * 512, -np.inf, np.float16)
    buf[:v] = logits
    st = xe2rt.softmax_stats(to_device(buf.reshape(5, 512), queue), temperature=t, target=target).asnumpy()
    m, s = st[:, 0].astype(np.float64), st[:, 1].astype(np.float64)
    big = m.max()
    z = np.sum(s * np.exp((m - big) / t))
    x = logits.astype(np.float64)
    want = np.exp((x - x.max()) / t)
    assert abs(z - want.sum()) <= 1e-5 * want.sum()


def test_temperature_range_ends(queue):
    """Both ends of the range work: at 2^120 a float32 row spanning more than float32's range (x - m overflows) still
    gives the right sum, since the lost terms are below float32's smallest value anyway."""
    x = np.array([[3e38, -3e38, 1.0], [1e-38, 0.0, -1e-38]], np.float32)
    for t in (2.0 ** 120, float(np.finfo(np.float32).tiny), fractions.Fraction(3, 4)):
        _check(xe2rt.softmax_stats(to_device(x, queue), temperature=t).asnumpy(), x, float(np.float32(t)))


def test_out_and_empty(queue, rng):
    x = rng.standard_normal((6, 40)).astype(np.float32)
    out = to_device(np.zeros((6, 2), np.float32), queue)
    assert xe2rt.softmax_stats(to_device(x, queue), out=out) is out
    _check(out.asnumpy(), x, 1.0)
    assert xe2rt.softmax_stats(to_device(np.zeros((0, 8), np.float16), queue)).shape == (0, 2)


RANGE = r"temperature must be in \[1.1754944e-38, 2\^120 = 1.329e\+36\] \(float32's smallest normal number up to 2\^120\)"


@pytest.mark.parametrize("temperature, err, match", [
    (0.0, xe2rt.InputError, RANGE + ", got 0.0"),
    (-1.0, xe2rt.InputError, RANGE + ", got -1.0"),
    (1e-39, xe2rt.InputError, RANGE + ", got 1e-39"),  # subnormal in float32: log2(e) / t would overflow
    (2.0 ** 121, xe2rt.InputError, RANGE + r", got 2.658455991569832e\+36"),
    (float("inf"), xe2rt.InputError, RANGE + ", got inf"),
    (float("nan"), xe2rt.InputError, RANGE + ", got nan"),
    (10**400, xe2rt.InputError, RANGE + ", got 1000000000"),
    ("1", xe2rt.InputTypeError, r"temperature must be a real number, got str '1'"),
    (True, xe2rt.InputTypeError, r"temperature must be a real number, got bool True"),
])
def test_bad_temperature(queue, temperature, err, match):
    x = to_device(np.zeros((2, 8), np.float16), queue)
    with pytest.raises(err, match=match):
        xe2rt.softmax_stats(x, temperature=temperature)


def test_bad_arrays(queue):
    with pytest.raises(xe2rt.InputTypeError, match="x must be a dpnp"):
        xe2rt.softmax_stats(np.zeros((2, 8), np.float32))
    with pytest.raises(xe2rt.InputTypeError, match="float16 or float32, got float64"):
        xe2rt.softmax_stats(to_device(np.zeros((2, 8), np.float64), queue))
    with pytest.raises(xe2rt.InputError, match=r"x must be 2-D, got 1-D with shape \(8,\)"):
        xe2rt.softmax_stats(to_device(np.zeros(8, np.float32), queue))
    with pytest.raises(xe2rt.InputError, match=r"n >= 1\), got x of shape \(3, 0\)"):
        xe2rt.softmax_stats(to_device(np.zeros((3, 0), np.float32), queue))
    with pytest.raises(xe2rt.InputError, match="x must be C-contiguous"):
        xe2rt.softmax_stats(to_device(np.zeros((4, 8), np.float32), queue)[:, ::2])
    x = to_device(np.zeros((3, 8), np.float32), queue)
    with pytest.raises(xe2rt.InputError, match=r"out must have shape \(3, 2\)"):
        xe2rt.softmax_stats(x, out=to_device(np.zeros((3, 3), np.float32), queue))
    with pytest.raises(xe2rt.InputTypeError, match="out must be float32, got float16"):
        xe2rt.softmax_stats(x, out=to_device(np.zeros((3, 2), np.float16), queue))
    # a rejected call leaves the op usable
    _check(xe2rt.softmax_stats(x).asnumpy(), np.zeros((3, 8), np.float32), 1.0)
