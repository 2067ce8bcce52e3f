"""softmax_topk and topk against the float64 references in xe2rt.reference.routing, on every target's binary.

Indices are compared exactly everywhere: the kernels rank the exact inputs by the same rule as the reference, so
there is no rounding that could reorder near-ties (a stronger check than the "where the k-th and (k+1)-th differ"
bar). Values: rtol/atol per dtype from reference.tolerances (fp32: 1e-3, fp16: 2e-3 plus one fp16 subnormal).
"""
import numpy as np
import pytest

import xe2rt
from xe2rt.ops import routing as ops
from xe2rt.reference import routing as ref

from conftest import TARGETS, to_device

DTYPES = [np.float32, np.float16]
# Every compile-time variant in softmax_topk.cl (n, k) plus runtime-(n, k) cases, odd n among them.
VARIANT_SHAPES = [(8, 2), (16, 2), (32, 4), (60, 4), (64, 6), (64, 8), (128, 1), (128, 8), (160, 6), (256, 8),
                  (512, 10)]
GENERIC_SHAPES = [(1, 1), (7, 3), (8, 8), (16, 16), (32, 1), (60, 16), (64, 2), (100, 5), (128, 16), (160, 8),
                  (256, 12), (512, 16), (511, 7)]


def host(a):
    return np.asarray(a.asnumpy())


def check_softmax_topk(queue, x, k, normalize, target):
    want_v, want_i = ref.softmax_topk(x, k, normalize)
    got_v, got_i = xe2rt.softmax_topk(to_device(x, queue), k, normalize=normalize, target=target)
    assert got_v.dtype == x.dtype and got_i.dtype == np.int32 and got_v.shape == got_i.shape == (x.shape[0], k)
    np.testing.assert_array_equal(host(got_i), want_i)
    rtol, atol = ref.tolerances(x.dtype)
    np.testing.assert_allclose(host(got_v).astype(np.float64), want_v, rtol=rtol, atol=atol, equal_nan=True)


def check_topk(queue, x, k, target):
    want_v, want_i = ref.topk(x, k)
    got_v, got_i = xe2rt.topk(to_device(x, queue), k, target=target)
    np.testing.assert_array_equal(host(got_i), want_i)
    # Exact values, bit for bit (the kernel returns the stored inputs), NaN included.
    np.testing.assert_array_equal(host(got_v).view(np.uint8), want_v.view(np.uint8))


def logits(rng, rows, n, dtype, scale=3.0):
    return (rng.standard_normal((rows, n)) * scale).astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_compile_time_variants(queue, rng, target, dtype):
    program = ops.program_for(queue, ops.FAMILY, target)
    tag = "f16" if dtype == np.float16 else "f32"
    assert {(n, k) for (t, n, k) in ops.variants(program) if t == tag} == set(VARIANT_SHAPES)
    for n, k in VARIANT_SHAPES:
        assert ops.choose_kernel(program, dtype, n, k)[0] != f"softmax_topk_{tag}_any"
        x = logits(rng, 67, n, dtype)  # 67 rows: a partial work-group for every lanes-per-row choice
        for normalize in (True, False):
            check_softmax_topk(queue, x, k, normalize, target)
        check_topk(queue, x, k, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_runtime_k_kernel(queue, rng, target, dtype):
    program = ops.program_for(queue, ops.FAMILY, target)
    for n, k in GENERIC_SHAPES:
        assert ops.choose_kernel(program, dtype, n, k)[1] == 16
        x = logits(rng, 33, n, dtype)
        for normalize in (True, False):
            check_softmax_topk(queue, x, k, normalize, target)
        check_topk(queue, x, k, target)


@pytest.mark.parametrize("target", TARGETS)
def test_every_k_for_router_widths(queue, rng, target):
    """k = 1..16 for every router width in use (compile-time and runtime-k paths both)."""
    for n in (8, 16, 32, 60, 64, 128, 160, 256, 512):
        x = logits(rng, 5, n, np.float32)
        for k in range(1, min(n, 16) + 1):
            check_softmax_topk(queue, x, k, True, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,scale", [(np.float32, 1e4), (np.float16, 1e4), (np.float32, 1e-3)])
def test_extreme_scales(queue, rng, target, dtype, scale):
    """Max subtraction: huge logits must not overflow exp; tiny spreads must not collapse to equal probabilities."""
    x = logits(rng, 19, 128, dtype, scale)
    check_softmax_topk(queue, x, 8, False, target)
    check_softmax_topk(queue, x, 8, True, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_lower_index_first(queue, rng, target, dtype):
    rows = []
    rows.append(np.zeros(64))  # all equal: indices 0..k-1, uniform probabilities
    r = np.arange(64.0) % 4  # values 0..3 repeated: the four 3s at 3, 7, 11, 15 first, then the 2s
    rows.append(r)
    r = np.full(64, -1.0)
    r[[50, 5, 20, 63]] = 2.0  # equal maxima in scrambled positions
    r[[40, 10]] = 1.5
    rows.append(r)
    r = rng.integers(-3, 4, size=64).astype(np.float64)  # many small-integer ties across the k boundary
    rows.append(r)
    r = np.zeros(64)
    r[::2] = -0.0  # -0.0 == +0.0: plain index order
    r[33] = 1.0
    rows.append(r)
    x = np.array(rows).astype(dtype)
    for k in (1, 3, 6, 8):  # k = 6, 8 hit the (64, 6) and (64, 8) variants, 1 and 3 the runtime-k kernel
        check_softmax_topk(queue, x, k, True, target)
        check_softmax_topk(queue, x, k, False, target)
        check_topk(queue, x, k, target)
    v, i = xe2rt.topk(to_device(x, queue), 8, target=target)
    np.testing.assert_array_equal(host(i)[0], np.arange(8))
    np.testing.assert_array_equal(host(i)[1], [3, 7, 11, 15, 19, 23, 27, 31])
    np.testing.assert_array_equal(host(i)[2][:6], [5, 20, 50, 63, 10, 40])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,k", [(128, 8), (100, 5), (512, 10)])
def test_f32_neighbouring_floats(queue, rng, target, n, k):
    """fp32 logits one ulp apart, in scrambled positions: inside the kept set (order decided by the low mantissa bits)
    and across the k boundary (the set itself decided by them), next to exact ties."""
    ulp_steps = lambda base, m: base + np.arange(m, dtype=np.float32) * np.spacing(np.float32(base))
    rows = []
    r = rng.uniform(-4, 0, n).astype(np.float32)
    r[rng.permutation(n)[:k]] = rng.permutation(ulp_steps(np.float32(3.0), k))  # clear boundary, order by low bits
    rows.append(r)
    r = rng.uniform(-4, 0, n).astype(np.float32)
    r[rng.permutation(n)[:k + 4]] = rng.permutation(ulp_steps(np.float32(1.5), k + 4))  # boundary inside the run
    rows.append(r)
    r = rng.uniform(-4, 0, n).astype(np.float32)
    pos = rng.permutation(n)[:k + 2]
    r[pos] = np.float32(-0.75)  # exact ties across the boundary ...
    r[pos[-1]] = np.nextafter(np.float32(-0.75), np.float32(1))  # ... and one ulp above them at a late index
    r[pos[0]] = np.nextafter(np.float32(-0.75), np.float32(-1))  # ... and one below
    rows.append(r)
    r = np.full(n, np.float32(2.0))
    r[rng.permutation(n)[:3]] = np.nextafter(np.float32(2.0), np.float32(3))
    rows.append(r)
    x = np.array(rows, dtype=np.float32)
    for normalize in (True, False):
        check_softmax_topk(queue, x, k, normalize, target)
    check_topk(queue, x, k, target)


def special_rows(n):
    inf, nan = np.inf, np.nan
    base = np.linspace(-2.0, 2.0, n)
    rows = {}
    r = base.copy(); r[3] = nan; rows["one NaN"] = r
    r = base.copy(); r[[1, 6]] = nan; r[4] = inf; rows["NaN and +Inf"] = r
    r = base.copy(); r[5] = inf; rows["one +Inf"] = r
    r = base.copy(); r[[2, 7]] = inf; rows["two +Inf"] = r
    r = base.copy(); r[[0, 1, 2]] = -inf; rows["some -Inf"] = r
    rows["all -Inf"] = np.full(n, -inf)
    r = np.full(n, -inf); r[6] = 0.5; rows["one finite among -Inf"] = r
    rows["all +Inf"] = np.full(n, inf)
    rows["all NaN"] = np.full(n, nan)
    r = np.full(n, -inf); r[4] = inf; rows["+Inf among -Inf"] = r
    return rows


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(8, 2), (64, 8), (100, 5)])
def test_nan_and_inf_rules(queue, target, dtype, n, k):
    """The stated rules (xe2rt.reference.routing), both for the variant and the runtime-k kernels."""
    rows = special_rows(n)
    x = np.array(list(rows.values())).astype(dtype)
    with np.errstate(invalid="ignore"):
        for normalize in (True, False):
            check_softmax_topk(queue, x, k, normalize, target)
        check_topk(queue, x, k, target)
    v, i = (host(a) for a in xe2rt.softmax_topk(to_device(x, queue), k, normalize=False, target=target))
    names = list(rows)
    at = {name: r for r, name in enumerate(names)}
    assert np.isnan(v[at["one NaN"]]).all() and i[at["one NaN"]][0] == 3  # NaN ranks first, all values NaN
    assert list(i[at["NaN and +Inf"]][:3]) == [1, 6, 4][:k]
    assert v[at["one +Inf"]][0] == 1 and (v[at["one +Inf"]][1:] == 0).all() and i[at["one +Inf"]][0] == 5
    np.testing.assert_array_equal(v[at["two +Inf"]][:2], [0.5, 0.5])
    np.testing.assert_allclose(v[at["all -Inf"]], 1.0 / n, rtol=ref.tolerances(dtype)[0])  # uniform
    np.testing.assert_array_equal(i[at["all -Inf"]], np.arange(k))
    assert v[at["one finite among -Inf"]][0] == 1 and i[at["one finite among -Inf"]][0] == 6
    assert not np.isnan(v[[at[r] for r in names if "NaN" not in r]]).any()


def test_million_rows(queue, rng):
    """rows >= 1M on the cpu target (the global size is one work-item per row there)."""
    x = logits(rng, 1 << 20, 8, np.float16)
    check_softmax_topk(queue, x, 2, True, "cpu")
    x = logits(rng, (1 << 20) + 3, 8, np.float32)
    check_topk(queue, x, 3, "cpu")


@pytest.mark.parametrize("target", ["cpu", "bmg"])
def test_out_tuple(queue, rng, target):
    x = logits(rng, 40, 128, np.float16)
    xd = to_device(x, queue)
    values = to_device(np.zeros((40, 8), np.float16), queue)
    indices = to_device(np.zeros((40, 8), np.int32), queue)
    got = xe2rt.softmax_topk(xd, 8, out=(values, indices), target=target)
    assert got[0] is values and got[1] is indices
    want_v, want_i = ref.softmax_topk(x, 8)
    np.testing.assert_array_equal(host(indices), want_i)
    np.testing.assert_allclose(host(values), want_v, rtol=2e-3)
    got = xe2rt.topk(xd, 8, out=[values, indices], target=target)
    np.testing.assert_array_equal(host(values), ref.topk(x, 8)[0])


def test_empty_rows(queue):
    v, i = xe2rt.softmax_topk(to_device(np.zeros((0, 64), np.float32), queue), 4)
    assert v.shape == i.shape == (0, 4)


def test_geometry_covers_rows():
    """Every row gets its lanes, at most one partial work-group, and the global size stays in 32 bits for 3M rows."""
    for target, constants in (("cpu", {"LOCAL": 64}), ("bmg", {"SGS": 8}), ("lnl", {"SGS": 4})):
        for w in (4, 8, 16):
            for rows in (1, 63, 64, 65, 1 << 20, 3 * (1 << 20) + 1):
                global_size, local = ops.geometry(constants, target, rows, w)
                rows_per_group = local if target == "cpu" else local // w
                assert global_size % local == 0
                assert rows <= global_size // local * rows_per_group < rows + rows_per_group
                assert global_size < 2**32


def test_numpy_pipeline_baseline_agrees(rng):
    """The benchmark's numpy baseline computes the same routing on ordinary (tie-free) logits."""
    x = logits(rng, 300, 128, np.float32)
    v, i = ref.numpy_pipeline(x, 8)
    want_v, want_i = ref.softmax_topk(x, 8)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_allclose(v, want_v, rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_view(queue, rng, target, dtype):
    """A contiguous view one element into a buffer: rows are not 16-byte aligned, so the Xe2 kernels must take their
    gather path instead of sub-group block reads."""
    for n, k in ((128, 8), (512, 10), (256, 12)):
        x = logits(rng, 9, n, dtype)
        flat = to_device(np.concatenate([np.zeros(1, dtype), x.ravel()]), queue)
        view = flat[1:].reshape(9, n)
        want_v, want_i = ref.softmax_topk(x, k)
        got_v, got_i = xe2rt.softmax_topk(view, k, target=target)
        np.testing.assert_array_equal(host(got_i), want_i)
        rtol, atol = ref.tolerances(dtype)
        np.testing.assert_allclose(host(got_v), want_v, rtol=rtol, atol=atol)
