"""Quantizers, dequantize(), GPTQ / AWQ importers (against reference packers written here from the formats'
documentation), and the exhaustive magic-number dequant identity behind the bias-correction path (seed 004)."""
import numpy as np
import pytest

import dpnp
import xe2rt
from xe2rt.quant import AWQ_ORDER, QuantizedW4

from conftest import to_device

GROUPS = [32, 64, 128]


# --- reference packers, from the formats' documentation ------------------------------------------------------------

def pack_gptq(qw: QuantizedW4, v1: bool = True):
    """AutoGPTQ 4-bit: qweight int32 [K/8, N], word [i, n] holds k = 8i + j in bits 4j; qzeros int32 [K/G, N/8],
    word [g, m] holds column 8m + j in bits 4j, storing zero - 1 in v1 ("gptq") and zero in "gptq_v2";
    scales float16 [K/G, N]."""
    q = qw.codes().astype(np.uint32)  # [N, K]
    n, k = q.shape
    qweight = np.zeros((k // 8, n), dtype=np.uint32)
    for j in range(8):
        qweight |= q[:, j::8].T << np.uint32(4 * j)
    z = qw.zero_points().astype(np.int64).T - (1 if v1 else 0)  # [K/G, N]
    z = (z & 15).astype(np.uint32)
    qzeros = np.zeros((z.shape[0], n // 8), dtype=np.uint32)
    for j in range(8):
        qzeros |= z[:, j::8] << np.uint32(4 * j)
    return qweight.view(np.int32), qzeros.view(np.int32), np.ascontiguousarray(np.asarray(qw.scales).T)


def pack_awq(qw: QuantizedW4):
    """AutoAWQ GEMM: qweight int32 [K, N/8], nibble slot j of word [k, m] holds column 8m + order[j] with
    order = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros int32 [K/G, N/8] the same, zeros as-is; scales float16 [K/G, N]."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    q = qw.codes().astype(np.uint32).T  # [K, N]
    z = qw.zero_points().astype(np.uint32).T  # [K/G, N]
    qweight = np.zeros((q.shape[0], q.shape[1] // 8), dtype=np.uint32)
    qzeros = np.zeros((z.shape[0], z.shape[1] // 8), dtype=np.uint32)
    for j in range(8):
        qweight |= q[:, order[j]::8] << np.uint32(4 * j)
        qzeros |= z[:, order[j]::8] << np.uint32(4 * j)
    return qweight.view(np.int32), qzeros.view(np.int32), np.ascontiguousarray(np.asarray(qw.scales).T)


def test_awq_order_constant_matches_documentation():
    assert AWQ_ORDER == (0, 2, 4, 6, 1, 3, 5, 7)


# --- quantizers ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_size", GROUPS)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_quantize_w4_layout_and_error(rng, group_size, symmetric, dtype):
    n, k = 7, 4 * group_size
    w = rng.standard_normal((n, k)).astype(dtype)
    qw = xe2rt.quantize_w4(w, group_size=group_size, symmetric=symmetric)
    assert qw.packed.dtype == np.uint8 and qw.packed.shape == (n, k // 2)
    assert qw.scales.dtype == np.float16 and qw.scales.shape == (n, k // group_size)
    assert (qw.zeros is None) == symmetric
    if not symmetric:
        assert qw.zeros.dtype == np.uint8 and qw.zeros.shape == (n, k // group_size) and qw.zeros.max() <= 15
    q = qw.codes()
    assert np.array_equal(qw.packed, q[:, 0::2] | (q[:, 1::2] << 4))  # low nibble = even k
    deq = qw.dequantize(np.float64)
    # round to nearest on the grid: error at most half a step (plus the clip at the grid's ends for symmetric -8)
    step = np.repeat(qw.scales.astype(np.float64), group_size, axis=1)
    err = np.abs(deq - w.astype(np.float64))
    assert (err <= 0.5 * step * (1 + 1e-6) + 1e-12).all(), err.max()


def test_quantize_w4_dequantize_is_exact_formula(rng):
    w = rng.standard_normal((5, 128)).astype(np.float32)
    qw = xe2rt.quantize_w4(w, group_size=32, symmetric=False)
    q = qw.codes().astype(np.float64)
    z = np.repeat(qw.zeros.astype(np.float64), 32, axis=1)
    s = np.repeat(qw.scales.astype(np.float64), 32, axis=1)
    assert np.array_equal(qw.dequantize(np.float64), (q - z) * s)
    assert qw.dequantize().dtype == np.float32 and np.array_equal(qw.dequantize(), ((q - z) * s).astype(np.float32))


def test_quantize_w4_zero_group_and_constant_group():
    w = np.zeros((2, 64), dtype=np.float32)
    w[1, 32:] = 3.0
    for sym in (True, False):
        qw = xe2rt.quantize_w4(w, group_size=32, symmetric=sym)
        deq = qw.dequantize(np.float64)
        assert qw.scales[0, 0] == 0 and np.array_equal(deq[0], np.zeros(64))  # all-zero group: scale 0, exact
        assert np.abs(deq[1] - w[1]).max() <= 0.5 * float(qw.scales[1, 1])


def test_quantize_w8(rng):
    w = rng.standard_normal((9, 300)).astype(np.float32)
    qw = xe2rt.quantize_w8(w)
    assert qw.qweight.dtype == np.int8 and qw.qweight.shape == (9, 300)
    assert qw.scales.dtype == np.float16 and qw.scales.shape == (9,)
    s = qw.scales.astype(np.float64)[:, None]
    assert np.array_equal(qw.dequantize(np.float64), qw.qweight.astype(np.float64) * s)
    assert (np.abs(qw.dequantize(np.float64) - w) <= 0.5 * s * (1 + 1e-6)).all()


def test_quantizers_take_any_memory_order(rng):
    """A Fortran-ordered or transposed weight (a transposed torch weight) quantizes exactly as its C-ordered copy (it was
    refused, the error naming packed / qweight, parts the quantizer itself made)."""
    w = rng.standard_normal((256, 128)).astype(np.float32)
    for view in (np.asfortranarray(w), w.T.copy().T):
        for quantize in (lambda a: xe2rt.quantize_w4(a, group_size=32), lambda a: xe2rt.quantize_w4(a, symmetric=False),
                         xe2rt.quantize_w8):
            a, b = quantize(view), quantize(w)
            assert np.array_equal(a.dequantize(np.float64), b.dequantize(np.float64))


def test_quantizers_on_dpnp_keep_the_queue(queue, rng):
    w = to_device(rng.standard_normal((4, 128)).astype(np.float16), queue)
    qw = xe2rt.quantize_w4(w, group_size=64, symmetric=False)
    assert all(isinstance(p, dpnp.ndarray) and p.sycl_queue == queue for p in (qw.packed, qw.scales, qw.zeros))
    assert qw.sycl_queue == queue
    host = xe2rt.quantize_w4(dpnp.asnumpy(w), group_size=64, symmetric=False)
    assert np.array_equal(dpnp.asnumpy(qw.packed), host.packed)
    assert np.array_equal(dpnp.asnumpy(qw.dequantize()), host.dequantize())
    q8 = xe2rt.quantize_w8(w)
    assert q8.sycl_queue == queue and np.array_equal(dpnp.asnumpy(q8.qweight), xe2rt.quantize_w8(dpnp.asnumpy(w)).qweight)
    assert host.to_device(queue).to_host().packed.tobytes() == host.packed.tobytes()


# --- importers -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_size", GROUPS)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_gptq_round_trip(rng, group_size, symmetric, fmt):
    w = rng.standard_normal((24, 2 * group_size)).astype(np.float32)
    qw = xe2rt.quantize_w4(w, group_size=group_size, symmetric=symmetric)
    if not symmetric and fmt == "gptq":
        zeros = qw.zeros.copy()
        zeros[zeros == 0] = 1  # v1 cannot store a zero point of 0 (it stores zero - 1)
        qw = QuantizedW4(qw.packed, qw.scales, zeros, group_size)
    qweight, qzeros, scales = pack_gptq(qw, v1=(fmt == "gptq"))
    g_idx = np.arange(w.shape[1], dtype=np.int32) // group_size
    back = xe2rt.from_gptq(qweight, qzeros, scales, g_idx=g_idx, checkpoint_format=fmt)
    assert back.group_size == group_size and back.symmetric == symmetric
    assert np.array_equal(back.packed, qw.packed) and np.array_equal(back.scales, qw.scales)
    assert np.array_equal(back.zero_points(), qw.zero_points())
    assert np.array_equal(back.dequantize(), qw.dequantize())


def test_gptq_v1_zero_convention_is_plus_one(rng):
    qw = xe2rt.quantize_w4(rng.standard_normal((8, 64)).astype(np.float32), group_size=32)
    qweight, qzeros, scales = pack_gptq(qw, v1=True)
    assert (np.asarray(qzeros).view(np.uint32) == 0x77777777).all()  # symmetric zero 8 is stored as 7 in v1
    assert xe2rt.from_gptq(qweight, qzeros, scales).symmetric
    as_v2 = xe2rt.from_gptq(qweight, qzeros, scales, checkpoint_format="gptq_v2")
    assert (as_v2.zero_points() == 7).all()


@pytest.mark.parametrize("group_size", GROUPS)
@pytest.mark.parametrize("symmetric", [True, False])
def test_awq_round_trip(rng, group_size, symmetric):
    w = rng.standard_normal((16, 3 * group_size)).astype(np.float32)
    qw = xe2rt.quantize_w4(w, group_size=group_size, symmetric=symmetric)
    back = xe2rt.from_awq(*pack_awq(qw))
    assert back.group_size == group_size and back.symmetric == symmetric
    assert np.array_equal(back.packed, qw.packed) and np.array_equal(back.scales, qw.scales)
    assert np.array_equal(back.zero_points(), qw.zero_points())


def test_importer_to_queue(queue, rng):
    qw = xe2rt.quantize_w4(rng.standard_normal((8, 128)).astype(np.float32), group_size=128, symmetric=False)
    back = xe2rt.from_awq(*pack_awq(qw), queue=queue)
    assert back.sycl_queue == queue and np.array_equal(dpnp.asnumpy(back.packed), qw.packed)


def test_awq_order_matters(rng):
    """A checkpoint packed in plain column order must not import as the same weights (the test can fail)."""
    qw = xe2rt.quantize_w4(rng.standard_normal((8, 64)).astype(np.float32), group_size=32, symmetric=False)
    q = qw.codes().astype(np.uint32).T
    plain = np.zeros((64, 1), dtype=np.uint32)
    for j in range(8):
        plain |= q[:, j::8] << np.uint32(4 * j)
    _, qzeros, scales = pack_awq(qw)
    assert not np.array_equal(xe2rt.from_awq(plain.view(np.int32), qzeros, scales).packed, qw.packed)


# --- exhaustive dequant identity (seed 004) ------------------------------------------------------------------------

def test_magic_dequant_identity_exhaustive():
    """For every nibble q and zero point z: (q | 0x6400) read as half is 1024 + q exactly; subtracting 1024 + z gives
    q - z exactly in half and in float; and for every finite fp16 x the fp32 products (1024 + q) x and
    (1024 + z) x are exact, so sum_k (1024 + q_k) x_k - (1024 + z) sum_k x_k = sum_k (q_k - z) x_k holds up to
    the rounding of the sums alone."""
    q = np.arange(16, dtype=np.uint16)
    magic = (q | np.uint16(0x6400)).view(np.float16)
    assert np.array_equal(magic.astype(np.float64), 1024.0 + q)
    xs = np.arange(2**16, dtype=np.uint16).view(np.float16)
    xs = xs[np.isfinite(xs)].astype(np.float64)
    for z in range(16):
        bias16 = np.float16(1024 + z)
        assert float(bias16) == 1024 + z
        assert np.array_equal((magic - bias16).astype(np.float64), q.astype(np.float64) - z)
        assert np.array_equal(magic.astype(np.float32) - np.float32(1024 + z), (q.astype(np.float32) - z))
        # products exact in fp32: 11-bit x 11-bit significands
        prod32 = np.float32(1024 + z) * xs.astype(np.float32)
        assert np.array_equal(prod32.astype(np.float64), (1024 + z) * xs)
    for qq in range(16):
        prod32 = np.float32(magic[qq]) * xs.astype(np.float32)
        assert np.array_equal(prod32.astype(np.float64), (1024.0 + qq) * xs)


# --- bad input -----------------------------------------------------------------------------------------------------

def test_quantizer_bad_input(rng):
    w = rng.standard_normal((4, 96)).astype(np.float32)
    with pytest.raises(xe2rt.InputError, match=r"K = 96 must be a multiple of group_size 64"):
        xe2rt.quantize_w4(w, group_size=64)
    with pytest.raises(xe2rt.InputError, match=r"group_size must be one of \(32, 64, 128\), got 16"):
        xe2rt.quantize_w4(w, group_size=16)
    with pytest.raises(xe2rt.InputTypeError, match=r"float16 or float32, got float64"):
        xe2rt.quantize_w4(w.astype(np.float64), group_size=32)
    with pytest.raises(xe2rt.InputError, match=r"2-D"):
        xe2rt.quantize_w4(w[0], group_size=32)
    for bad in (np.nan, np.inf, -np.inf):
        wb = w.copy()
        wb[2, 5] = bad
        with pytest.raises(xe2rt.InputError, match=r"non-finite values \(first: w\[2, 5\]"):
            xe2rt.quantize_w4(wb, group_size=32)
        with pytest.raises(xe2rt.InputError, match=r"non-finite"):
            xe2rt.quantize_w8(wb)
    with pytest.raises(xe2rt.InputError, match=r"overflows float16"):
        xe2rt.quantize_w8(np.full((1, 4), 3e38, dtype=np.float32))


def test_container_bad_parts(queue, rng):
    qw = xe2rt.quantize_w4(rng.standard_normal((4, 128)).astype(np.float32), group_size=32, symmetric=False)
    with pytest.raises(xe2rt.InputError, match=r"scales must have shape \(4, 4\)"):
        QuantizedW4(qw.packed, qw.scales[:, :2].copy(), qw.zeros, 32)
    with pytest.raises(xe2rt.InputTypeError, match=r"scales must be float16, got float32"):
        QuantizedW4(qw.packed, qw.scales.astype(np.float32), qw.zeros, 32)
    with pytest.raises(xe2rt.InputTypeError, match=r"zeros must be uint8, got int32"):
        QuantizedW4(qw.packed, qw.scales, qw.zeros.astype(np.int32), 32)
    with pytest.raises(xe2rt.InputError, match=r"K = 128 .* must be a multiple of group_size 128|group_size"):
        QuantizedW4(qw.packed[:, :32].copy(), qw.scales, qw.zeros, 128)
    with pytest.raises(xe2rt.InputError, match=r"packed must be C-contiguous"):
        QuantizedW4(np.asfortranarray(qw.packed), qw.scales, qw.zeros, 32)
    with pytest.raises(xe2rt.InputError, match=r"must all be numpy or all dpnp"):
        QuantizedW4(to_device(qw.packed, queue), qw.scales, qw.zeros, 32)
    import dpctl
    other = dpctl.SyclQueue(queue.sycl_device)
    with pytest.raises(xe2rt.InputError, match=r"different queues"):
        QuantizedW4(to_device(qw.packed, queue), to_device(qw.scales, other), to_device(qw.zeros, queue), 32)


def test_importer_bad_input(rng):
    qw = xe2rt.quantize_w4(rng.standard_normal((8, 128)).astype(np.float32), group_size=32, symmetric=False)
    qweight, qzeros, scales = pack_gptq(qw, v1=False)
    with pytest.raises(xe2rt.InputError, match=r"g_idx is not the trivial"):
        xe2rt.from_gptq(qweight, qzeros, scales, g_idx=np.random.default_rng(0).permutation(128) // 32,
                        checkpoint_format="gptq_v2")
    with pytest.raises(xe2rt.InputTypeError, match=r"g_idx must hold integers .* got float32"):
        # trivial groups in float, and a float g_idx that truncates to them: neither is a GPTQ g_idx
        xe2rt.from_gptq(qweight, qzeros, scales, g_idx=(np.arange(128) // 32 + 0.7).astype(np.float32),
                        checkpoint_format="gptq_v2")
    with pytest.raises(xe2rt.InputError, match=r"checkpoint_format must be"):
        xe2rt.from_gptq(qweight, qzeros, scales, checkpoint_format="exl2")
    with pytest.raises(xe2rt.InputTypeError, match=r"qweight must be int32"):
        xe2rt.from_gptq(qweight.astype(np.int64), qzeros, scales)
    with pytest.raises(xe2rt.InputError, match=r"group_size must be one of \(32, 64, 128\), got 16"):
        xe2rt.from_gptq(qweight, np.repeat(qzeros, 2, axis=0), np.repeat(scales, 2, axis=0),
                        checkpoint_format="gptq_v2")  # 8 groups over K = 128: group size 16
    zeros16 = np.full_like(np.asarray(qzeros).view(np.uint32), 0xFFFFFFFF).view(np.int32)
    with pytest.raises(xe2rt.InputError, match=r"zero point 16"):
        xe2rt.from_gptq(qweight, zeros16, scales, checkpoint_format="gptq")
    with pytest.raises(xe2rt.InputTypeError, match=r"scales must be float16"):
        xe2rt.from_awq(*pack_awq(qw)[:2], pack_awq(qw)[2].astype(np.float32))


def test_option_types_and_importer_checks():
    """group_size must be an int (128.0 slipped past the membership test and failed in a reshape), symmetric a bool
    (any truthy value meant symmetric); from_gptq names N not a multiple of 8, and NaN / inf scales are refused."""
    w = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    with pytest.raises(xe2rt.InputError, match="group_size must be one of .* got 128.0"):
        xe2rt.quantize_w4(w, group_size=128.0)
    with pytest.raises(xe2rt.InputTypeError, match="symmetric must be True or False, got str 'no'"):
        xe2rt.quantize_w4(w, symmetric="no")
    assert xe2rt.quantize_w4(w, group_size=np.int64(64), symmetric=np.bool_(False)).group_size == 64
    from xe2rt.quant import from_awq, from_gptq
    with pytest.raises(xe2rt.InputError, match=r"N \(qweight's columns\) must be a multiple of 8"):
        from_gptq(np.zeros((8, 12), np.int32), np.zeros((2, 1), np.int32), np.ones((2, 12), np.float16))
    scales = np.ones((2, 16), np.float16)
    scales[1, 3] = np.nan
    with pytest.raises(xe2rt.InputError, match=r"scales\[1, 3\] = nan: scales must be finite"):
        from_gptq(np.zeros((8, 16), np.int32), np.full((2, 2), 0x77777777, np.int32), scales)
    with pytest.raises(xe2rt.InputError, match=r"scales\[1, 3\] = nan: scales must be finite"):
        from_awq(np.zeros((64, 2), np.int32), np.zeros((2, 2), np.int32), scales)


def test_queue_arguments_must_be_queues():
    """to_device and the importers' queue= take a dpctl.SyclQueue: a filter string or anything else is an
    InputTypeError saying so (it was dpctl's TypeError)."""
    w = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float16)
    qw = xe2rt.quantize_w4(w, group_size=32)
    for call in (lambda: qw.to_device("opencl:cpu"), lambda: xe2rt.quantize_w8(w).to_device(0),
                 lambda: xe2rt.from_awq(*pack_awq(qw), queue="opencl:cpu")):
        with pytest.raises(xe2rt.InputTypeError, match="queue must be a dpctl.SyclQueue"):
            call()


def test_scales_that_underflow_float16_give_zero_groups():
    """The documented result (docs/ops.md, as llama.cpp's Q4_0 / Q8_0): a group or row whose float16 scale rounds to
    0 gets scale 0 and dequantizes to zeros; just above the threshold the scale is a nonzero subnormal."""
    tiny8 = np.linspace(-3e-6, 3e-6, 64).astype(np.float32)[None]
    q8 = xe2rt.quantize_w8(tiny8)
    assert q8.scales[0] == 0 and not np.any(q8.qweight)
    w4 = np.linspace(-2e-7, 2e-7, 32, dtype=np.float32)[None]
    for symmetric in (True, False):
        q4 = xe2rt.quantize_w4(w4, group_size=32, symmetric=symmetric)
        assert q4.scales[0, 0] == 0 and not np.any(q4.dequantize())
    above = xe2rt.quantize_w4(w4 * 4, group_size=32)  # absmax 8e-7: scale about 1.1e-7, a float16 subnormal
    assert 0 < above.scales[0, 0] < np.finfo(np.float16).tiny
    assert np.abs(above.dequantize() - w4 * 4).max() <= float(above.scales[0, 0])
