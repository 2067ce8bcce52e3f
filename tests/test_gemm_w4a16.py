"""gemm_w4a16: the correctness cases of xe2rt/checks/gemm_w4a16.py (float64 reference of the exact dequantized
weights, elementwise derived bounds stated there) on every target's kernels (bmg/lnl through the software DPAS and 2D
block built-ins on the CPU device), the M <= 16 decision, and every bad-input rule (refused before launch, out
untouched)."""
import numpy as np
import pytest

import dpctl
import dpnp

import xe2rt
from xe2rt.checks import gemm_w4a16 as C
from xe2rt.ops import gemm_w4a16 as W
from xe2rt.ops.common import int_dot_variants
from conftest import skip_unless_host_runs, to_device

CASES = [(check, target) for check in C.checks() for target in check.targets]


@pytest.mark.parametrize("check, target", CASES, ids=[f"{c.name}-{t}" for c, t in CASES])
def test_check(queue, check, target):
    skip_unless_host_runs(queue, check)
    result = check.run(queue, target)
    assert result.passed, result.describe()


def test_quick_checks_are_a_subset():
    names = {c.name for c in C.checks()}
    quick = C.checks(quick=True)
    assert quick and {c.name for c in quick} <= names


@pytest.fixture
def setup(queue, rng):
    w = (rng.standard_normal((96, 256)) * 0.05).astype(np.float32)
    qw = xe2rt.quantize_w4(w, group_size=64, symmetric=False).to_device(queue)
    a = to_device(rng.uniform(-1, 1, (20, 256)).astype(np.float16), queue)
    return a, qw


def test_decision_m16_gemv_m17_gemm():
    assert W.uses_gemv(1, None, None) and W.uses_gemv(16, None, None)
    assert not W.uses_gemv(17, None, None)
    assert not W.uses_gemv(4, object(), None) and not W.uses_gemv(4, None, "relu")


def test_m16_gemv_path_matches_gemv_w4a16(queue, setup):
    a, qw = setup
    got = xe2rt.gemm_w4a16(a[:16], qw)
    expect = xe2rt.gemv_w4a16(a[:16], qw)
    assert np.array_equal(dpnp.asnumpy(got), dpnp.asnumpy(expect))


def test_m0_and_k0(queue, rng):
    qw = xe2rt.quantize_w4(rng.standard_normal((40, 128)).astype(np.float32), group_size=128).to_device(queue)
    empty = xe2rt.gemm_w4a16(to_device(np.zeros((0, 128), np.float16), queue), qw)
    assert empty.shape == (0, 40)
    packed = dpnp.zeros((40, 0), dtype=np.uint8, sycl_queue=queue)
    scales = dpnp.zeros((40, 0), dtype=np.float16, sycl_queue=queue)
    qw0 = xe2rt.QuantizedW4(packed, scales, None, 32)
    bias = rng.uniform(-1, 1, 40).astype(np.float16)
    out = xe2rt.gemm_w4a16(to_device(np.zeros((20, 0), np.float16), queue), qw0, bias=to_device(bias, queue),
                           activation="relu")
    assert np.array_equal(dpnp.asnumpy(out), np.broadcast_to(np.maximum(bias, 0), (20, 40)))


def expect_refused(exc, match, call, out=None):
    before = None if out is None else dpnp.asnumpy(out).copy()
    with pytest.raises(exc, match=match):
        call()
    if out is not None:
        assert np.array_equal(dpnp.asnumpy(out), before, equal_nan=True), "a refused call wrote out"


def test_wrong_dtypes(queue, setup):
    a, qw = setup
    expect_refused(xe2rt.InputTypeError, "a must be float16", lambda: xe2rt.gemm_w4a16(a.astype(np.float32), qw))
    expect_refused(xe2rt.InputTypeError, "qw must be a QuantizedW4", lambda: xe2rt.gemm_w4a16(a, qw.packed))
    bias = dpnp.zeros(96, dtype=np.float32, sycl_queue=queue)
    expect_refused(xe2rt.InputTypeError, "bias must be float16", lambda: xe2rt.gemm_w4a16(a, qw, bias=bias))
    out = dpnp.zeros((20, 96), dtype=np.float32, sycl_queue=queue)
    expect_refused(xe2rt.InputTypeError, "out must be float16", lambda: xe2rt.gemm_w4a16(a, qw, out=out))
    for rows in (20, 4):  # the GEMM and the GEMV path
        out = np.zeros((rows, 96), dtype=np.float16)
        expect_refused(xe2rt.InputTypeError, r"out must be a dpnp array .*dpnp.asarray\(out\)",
                       lambda: xe2rt.gemm_w4a16(a[:rows], qw, out=out))


def test_k_mismatch_and_shapes(queue, setup):
    a, qw = setup
    short = dpnp.ascontiguousarray(a[:, :128])
    expect_refused(xe2rt.InputError, "K must match", lambda: xe2rt.gemm_w4a16(short, qw))
    expect_refused(xe2rt.InputError, "must be 2-D", lambda: xe2rt.gemm_w4a16(a[0], qw))
    bias = dpnp.zeros(95, dtype=np.float16, sycl_queue=queue)
    expect_refused(xe2rt.InputError, "bias must have length N = 96", lambda: xe2rt.gemm_w4a16(a, qw, bias=bias))
    out = dpnp.full((20, 95), 7, dtype=np.float16, sycl_queue=queue)
    expect_refused(xe2rt.InputError, r"out must have shape \(20, 96\)", lambda: xe2rt.gemm_w4a16(a, qw, out=out), out)
    expect_refused(xe2rt.InputError, "activation must be", lambda: xe2rt.gemm_w4a16(a, qw, activation="silu"))


def test_qw_on_another_queue(queue, setup):
    a, qw = setup
    other = dpctl.SyclQueue(queue.sycl_device)
    expect_refused(xe2rt.InputError, r"qw = qw.to_device\(a.sycl_queue\)",
                   lambda: xe2rt.gemm_w4a16(a, qw.to_device(other)))
    expect_refused(xe2rt.InputError, r"to_device\(a.sycl_queue\)", lambda: xe2rt.gemm_w4a16(a, qw.to_host()))


def test_non_contiguous_a(queue, setup):
    a, qw = setup
    wide = dpnp.zeros((20, 512), dtype=np.float16, sycl_queue=queue)
    expect_refused(xe2rt.InputError, "a must be C-contiguous", lambda: xe2rt.gemm_w4a16(wide[:, ::2], qw))
    f_order = dpnp.zeros((256, 20), dtype=np.float16, sycl_queue=queue).T  # [20, 256], column-major
    expect_refused(xe2rt.InputError, "a must be C-contiguous", lambda: xe2rt.gemm_w4a16(f_order, qw))


def test_out_overlap(queue, setup):
    a, qw = setup
    buf = dpnp.zeros(20 * 256 + 20 * 96, dtype=np.float16, sycl_queue=queue)
    a_view = buf[:20 * 256].reshape(20, 256)
    a_view[...] = a
    out = buf[20 * 256 - 96:20 * 256 - 96 + 20 * 96].reshape(20, 96)
    expect_refused(xe2rt.InputError, "out overlaps input a", lambda: xe2rt.gemm_w4a16(a_view, qw, out=out), out)
    bias = dpnp.zeros(20 * 96 + 96, dtype=np.float16, sycl_queue=queue)
    expect_refused(xe2rt.InputError, "out overlaps input bias",
                   lambda: xe2rt.gemm_w4a16(a, qw, bias=bias[:96], out=bias[:20 * 96].reshape(20, 96)))


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_xe2_refuses_short_k_and_unaligned(queue, rng, target):
    """The Xe2 kernels read A and the codes with 2D block loads: K < 128 (code rows under 64 bytes) and a base not
    64-byte aligned are refused by name before launch."""
    qw = xe2rt.quantize_w4(rng.standard_normal((64, 64)).astype(np.float32), group_size=32).to_device(queue)
    a = to_device(rng.uniform(-1, 1, (20, 64)).astype(np.float16), queue)
    expect_refused(xe2rt.InputError, "qw.packed rows are 32 bytes",
                   lambda: W.run(a, qw, target=target, variant="xe2emu"))
    qw = xe2rt.quantize_w4(rng.standard_normal((64, 256)).astype(np.float32), group_size=32).to_device(queue)
    flat = dpnp.zeros(20 * 256 + 8, dtype=np.float16, sycl_queue=queue)
    shifted = flat[8:].reshape(20, 256)  # 16 bytes past a 64-byte aligned base
    expect_refused(xe2rt.InputError, "a starts at 0x[0-9a-f]+, not 64-byte aligned",
                   lambda: W.run(shifted, qw, target=target, variant="xe2emu"))


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_xe2_refuses_weights_past_fp16(queue, rng, target):
    """The Xe2 kernels round each dequantized weight (q - z) s to fp16 for DPAS: scales that allow a weight past 65504
    are refused before launch (every output was NaN, where the cpu kernel and the reference are finite); at exactly
    65504 (symmetric scale 8188, code 0) the call runs, finite and within the bound."""
    from xe2rt.reference import quant as RQ
    m, n, k = 20, 64, 256
    a = to_device((rng.uniform(-1, 1, (m, k)) * 1e-3).astype(np.float16), queue)
    out = dpnp.full((m, n), 7.0, dtype=np.float16, sycl_queue=queue)
    big = xe2rt.quantize_w4((rng.uniform(-1, 1, (n, k)) * 1e5).astype(np.float32), group_size=64,
                            symmetric=False).to_device(queue)
    expect_refused(xe2rt.InputError, r"round each dequantized weight \(q - z\) \* s to float16 .* up to [0-9.e+]+, "
                   r"past float16's largest finite value 65504", lambda: W.run(a, big, out=out, target=target,
                                                                               variant="xe2emu"), out=out)
    # fp16 weights at fp16's largest value: the zero-point scale rounds up (65504 / 15 -> 4368), 15 x 4368 = 65520
    w16 = np.zeros((n, k), np.float16)
    w16[:, ::7] = 65504.0
    edge = xe2rt.quantize_w4(w16, group_size=64, symmetric=False).to_device(queue)
    expect_refused(xe2rt.InputError, "up to 65520", lambda: W.run(a, edge, out=out, target=target, variant="xe2emu"),
                   out=out)
    codes = rng.integers(0, 16, (n, k), dtype=np.uint8)
    codes[:, 0] = 0  # weight -8 x 8188 = -65504 in every row
    ok = xe2rt.QuantizedW4(packed=codes[:, 0::2] | (codes[:, 1::2] << 4), scales=np.full((n, k // 64), 8188.0,
                           np.float16), zeros=None, group_size=64).to_device(queue)
    got = dpnp.asnumpy(W.run(a, ok, target=target, variant="xe2emu")[0]).astype(np.float64)
    ref, pre, mag = RQ.gemm_w4(dpnp.asnumpy(a), ok)
    assert np.isfinite(got).all()
    assert (np.abs(got - ref) <= RQ.gemm_w4_bound(dpnp.asnumpy(a), pre, mag, fp16_weights=True)).all()
    # the cpu kernels dequantize in fp32: the same weights run there
    assert np.isfinite(dpnp.asnumpy(W.run(a, big, target="cpu")[0])).all()
    # a non-finite scale is not refused: it gives non-finite outputs on every kernel, as in the reference
    nan_scales = np.full((n, k // 64), 1.0, np.float16)
    nan_scales[3, 1] = np.nan
    nan_qw = xe2rt.QuantizedW4(packed=ok.packed, scales=dpnp.asarray(nan_scales, sycl_queue=queue), zeros=None,
                               group_size=64)
    got = dpnp.asnumpy(W.run(a, nan_qw, target=target, variant="xe2emu")[0])
    assert np.isnan(got[:, 3]).all() and np.isfinite(np.delete(got, 3, axis=1)).all()


def test_native_xe2_target_refused_on_cpu_device(queue, setup):
    a, qw = setup
    expect_refused(xe2rt.TargetError, "needs an Intel Xe2 GPU", lambda: W.run(a, qw, target="bmg"))
    expect_refused(xe2rt.TargetError, "needs an Intel Xe2 GPU", lambda: W.run(a, qw, target="bmg", variant="auto"))
    expect_refused(xe2rt.InputError, "variant must be one of", lambda: W.run(a, qw, variant=["vnni"]))


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_xe2_hot_loop_meets_the_bar(target):
    """The AOT report (build_scripts/aot.py, ocloc's ISA) of both Xe2 kernels: no spills, no private-memory sends,
    2D block loads in the hot loop, 64 DPAS per 64-k step and at least 2 DPAS per send."""
    from xe2rt import artifacts
    kernels = artifacts.manifest()["artifacts"][f"{target}/gemm_w4a16.spv"]["aot"]["kernels"]
    assert set(kernels) == {"gemm_w4a16_sym", "gemm_w4a16_zp"}
    for name, k in kernels.items():
        hot = k["hot_loop"]
        assert k["spill_size"] == 0 and k["private_sends"] == 0 and k["simd_size"] == 16, (name, k)
        assert hot["block2d_loads"] >= 8 and hot["private_sends"] == 0, (name, hot)
        assert hot["dpas"] == 64 and hot["dpas"] / hot["sends"] >= 2, (name, hot)


def test_warm_calls_use_their_own_arrays(queue, rng, setup):
    """xe2rt.gemm_w4a16 replays a warm call's launches (xe2rt.fastcall) with the new call's arrays."""
    a, qw = setup
    bias = to_device(rng.uniform(-1, 1, 96).astype(np.float16), queue)
    for _ in range(3):
        a2 = to_device(rng.uniform(-1, 1, a.shape).astype(np.float16), queue)
        got = xe2rt.gemm_w4a16(a2, qw, bias=bias, activation="relu")
        expect, _ = W.run(a2, qw, bias=bias, activation="relu")
        assert np.array_equal(dpnp.asnumpy(got), dpnp.asnumpy(expect))


def _w4_paths(queue):
    """(name, call) for every kernel path a W4 product of x [M, K] can take on this device: gemv_w4a16 at M = 1 with
    each dequant variant, its batched kernels (M = 2), gemm_w4a16's GEMM at M = 20 (fp32 kernels, and the
    integer-dot kernels where the host has AVX512-VNNI or AVX2)."""
    from xe2rt.ops import gemv_w4a16 as V
    int_dot = int_dot_variants(xe2rt.target_for(queue.sycl_device), queue)
    paths = [(f"gemv M=1 {d}", 1, lambda x, qw, d=d: V.gemv_w4a16(x[0], qw, dequant=d)[None])
             for d in ("magic", "plain") + int_dot]
    paths.append(("gemv M=2", 2, lambda x, qw: xe2rt.gemm_w4a16(x, qw)))
    paths += [(f"gemm M=20 {v}", 20, lambda x, qw, v=v: W.run(x, qw, variant=v)[0]) for v in ("native",) + int_dot]
    return paths


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_non_finite_activations_never_give_finite_outputs(queue, rng, special):
    """A NaN or an infinity in a row of x: every output of that row is non-finite on every path (the exact product is
    +-inf or NaN there), NaN for a NaN; the other rows are as without it. The VNNI kernels' fixed point cannot hold
    either (an absmax by fmax drops a NaN, an infinity becomes an arbitrary integer); their scale for that 128-k chunk
    is made NaN instead (w4_cpu.h nonfinite_nan). The offset-sum ("magic") and fixed-point paths give NaN where the
    product is +-inf; the others follow IEEE."""
    n, k = 24, 256
    qw = xe2rt.quantize_w4(rng.standard_normal((n, k)).astype(np.float16), group_size=32).to_device(queue)
    for name, m, call in _w4_paths(queue):
        x = rng.standard_normal((m, k)).astype(np.float16)
        x[0, 133] = special
        exact = x[1:].astype(np.float64) @ qw.to_host().dequantize(np.float64).T
        y = dpnp.asnumpy(call(to_device(x, queue), qw)).astype(np.float64)
        assert not np.isfinite(y[0]).any(), (name, y[0])
        if np.isnan(special):
            assert np.isnan(y[0]).all(), (name, y[0])
        if m > 1:
            assert np.abs(y[1:] - exact).max() <= 1e-2 * np.abs(exact).max(), name


@pytest.mark.parametrize("m,n,k,group_size,symmetric,bias,activation", [
    (128, 200, 640, 128, False, True, "gelu"), (33, 77, 96, 32, True, False, None), (300, 130, 1024, 64, False, True,
                                                                                    "relu")])
def test_cpu256_tile_equals_the_default_cpu_kernel_bit_for_bit(queue, rng, monkeypatch, m, n, k, group_size, symmetric,
                                                                 bias, activation):
    """gemm_w4a16_cpu256 (what "native" runs on the cpu target of a host without AVX-512) is the fp32 kernel with a
    smaller register tile: the same products summed in the same order, so every output equals the default cpu
    kernel's bit for bit, edge tiles (M, N not multiples of the tile) and epilogues included. Both run on any host."""
    from xe2rt.reference import quant as ref_quant
    qw = xe2rt.quantize_w4((rng.standard_normal((n, k)) * 0.05).astype(np.float32), group_size=group_size,
                           symmetric=symmetric).to_device(queue)
    a_host = rng.standard_normal((m, k)).astype(np.float16)
    b_host = rng.standard_normal(n).astype(np.float16) if bias else None
    a = to_device(a_host, queue)
    b = to_device(b_host, queue) if bias else None
    got = {}
    for family in ("gemm_w4a16", "gemm_w4a16_cpu256"):  # variant "fp32_256" pointed at each family in turn
        monkeypatch.setitem(W.FAMILIES, "fp32_256", family)
        got[family] = dpnp.asnumpy(W.run(a, qw, bias=b, activation=activation, target="cpu", variant="fp32_256")[0])
    assert np.array_equal(got["gemm_w4a16"], got["gemm_w4a16_cpu256"])
    ref, pre, mag = ref_quant.gemm_w4(a_host, qw, bias=b_host, activation=activation)  # and both are right
    bound = ref_quant.gemm_w4_bound(a_host, pre, mag, bias=b_host, activation=activation, fp16_weights=False)
    assert (np.abs(got["gemm_w4a16_cpu256"].astype(np.float64) - ref) <= bound).all()
