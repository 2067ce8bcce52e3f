"""gemm_fp16 on the CPU device: the CPU-shaped kernels on the issue's full shape grid, the Xe2-shaped kernels (software
DPAS and 2D block reads, every target's tile constants) on medium shapes and tails, both the 2D-block kernels and
their fallback, and every bad-input rule.

Error rule for every case (fp16 inputs, fp32 accumulation, fp16 output), stated with the shapes:
    |out - ref64| <= reference.gemm.error_bound_from(...)   elementwise (K eps32 sum|a b| + epilogue + 0.5 ulp16)
    max |out - ref64| <= 2e-2 max |ref64|                    the issue's bar
Xe2-shaped kernels (xe2emu), no activation or relu: equal to reference.gemm.fp32_ordered, the direct formula in the
kernels' fp32 summation order (K slices included), i.e. bit-identical up to the sign of zero.
"""
import numpy as np
import pytest

import dpctl
import dpnp

import xe2rt
from xe2rt import artifacts, targets
from xe2rt.ops import common
from xe2rt.ops import gemm_fp16 as G
from xe2rt.reference import gemm as R
from conftest import TARGETS, to_device

EPILOGUES = [(False, None), (True, None), (True, "relu"), (True, "gelu"), (True, "gelu_erf")]  # (bias?, activation)
BAR = 2e-2


def make(rng, m, n, k, b_layout):
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n) if b_layout == "kn" else (n, k)).astype(np.float16)
    bias = rng.uniform(-1, 1, n).astype(np.float16)
    return a, b, bias


def xe2_plan(queue, target, da, db, b_layout):
    """(uses 2D block kernels?, K step, K slices) the op picks for these device operands on the xe2emu variant."""
    m, k = da.shape
    n = db.shape[1] if b_layout == "kn" else db.shape[0]
    constants = artifacts.load(queue, target, G.FAMILIES["xe2emu"]).constants
    use_2d = not G.block2d_breaks(da, db, b_layout, m, n, k)
    geo = G.xe2_geometry(constants, targets.hw_threads(queue.sycl_device, target), m, n, k, use_2d)
    return use_2d, (G.K_STEP_2D if use_2d else G.DPAS_K), geo["slices"]


def check_all_epilogues(queue, a, b, bias, b_layout, **run_kw):
    pre, mag = R.products(a, b, b_layout)
    da, db, dbias = to_device(a, queue), to_device(b, queue), to_device(bias, queue)
    if run_kw.get("variant") == "xe2emu":
        _, k_step, slices = xe2_plan(queue, run_kw["target"], da, db, b_layout)
    for with_bias, act in EPILOGUES:
        out, _ = G.run(da, db, bias=dbias if with_bias else None, activation=act, b_layout=b_layout, **run_kw)
        got = dpnp.asnumpy(out).astype(np.float64)
        ref = R.epilogue(pre, bias if with_bias else None, act)
        bound = R.error_bound_from(pre, mag, a.shape[1], bias=bias if with_bias else None, activation=act)
        err = np.abs(got - ref)
        where = f"{b_layout} bias={with_bias} act={act} {run_kw}"
        assert np.all(np.isfinite(got)), where
        worst = np.unravel_index(np.argmax(err - bound), err.shape)
        assert np.all(err <= bound), f"{where}: err {err[worst]} > bound {bound[worst]} at {worst}"
        assert err.max() <= BAR * max(np.abs(ref).max(), 1e-3), where
        if run_kw.get("variant") == "xe2emu" and act in (None, "relu"):
            exact = R.fp32_ordered(a, b, b_layout, bias=bias if with_bias else None, relu=act == "relu",
                                   k_step=k_step, slices=slices)
            assert np.array_equal(dpnp.asnumpy(out), exact), f"{where}: not the fp32-ordered direct formula"


# The grid on the fast (CPU-shaped) kernels: every M x N x K, both layouts, each epilogue.
@pytest.mark.parametrize("b_layout", ["kn", "nk"])
@pytest.mark.parametrize("k", [16, 100, 4096])
@pytest.mark.parametrize("n", [1, 16, 100, 4096])
@pytest.mark.parametrize("m", [1, 3, 17, 128, 1000])
def test_grid_cpu_kernels(queue, rng, m, n, k, b_layout):
    a, b, bias = make(rng, m, n, k, b_layout)
    check_all_epilogues(queue, a, b, bias, b_layout, target="cpu")


@pytest.mark.parametrize("m, n, k", [(9, 77, 1100), (130, 200, 1537), (5, 300, 2049)])
def test_cpu_kn_k_chunks(queue, rng, m, n, k):
    """The CPU kn kernel stages A in K chunks (KN_KC): several chunks plus a ragged last one, with M and N edges."""
    a, b, bias = make(rng, m, n, k, "kn")
    check_all_epilogues(queue, a, b, bias, "kn", target="cpu")


@pytest.mark.parametrize("m, n, k", [(2, 300, 1000), (4, 77, 130), (3, 1000, 64), (2, 5, 7)])
def test_cpu_kn_few_rows(queue, rng, m, n, k):
    """M <= 4 takes the 1-, 2- or 4-row packet kernels (rows past M clamped): full and edge column strips."""
    a, b, bias = make(rng, m, n, k, "kn")
    check_all_epilogues(queue, a, b, bias, "kn", target="cpu")


# The Xe2-shaped kernels (tiles m8/m16/m32, block-read and bounds-checked steps, K slices, both layouts) with software
# DPAS, through each target's binary and tile constants. Shapes: tails in M, N, K; unaligned rows (K or N odd);
# M = 1 and a wide N (K slices engage); one real-model shape per target.
XE2_SHAPES = [(1, 1, 16), (3, 100, 100), (8, 64, 32), (17, 16, 4096), (33, 70, 37), (40, 130, 48), (1, 4096, 512),
              (128, 256, 512)]


@pytest.mark.parametrize("b_layout", ["kn", "nk"])
@pytest.mark.parametrize("shape", XE2_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("target", TARGETS)
def test_xe2_path_emulated_dpas(queue, rng, target, shape, b_layout):
    a, b, bias = make(rng, *shape, b_layout)
    check_all_epilogues(queue, a, b, bias, b_layout, target=target, variant="xe2emu")


@pytest.mark.parametrize("target", TARGETS)
def test_xe2_path_model_shape(queue, rng, target):
    """A decode-sized projection of a 4096-wide model, weights [N, K]."""
    a, b, bias = make(rng, 4, 4096, 4096, "nk")
    check_all_epilogues(queue, a, b, bias, "nk", target=target, variant="xe2emu")


# Which loads each XE2_SHAPES case takes (bmg constants; the rules depend on the operands only): 2D needs K and, for kn,
# N multiples of 8 and >= 32 (rows of >= 64 bytes, pitch a multiple of 16) and 64-byte aligned bases.
@pytest.mark.parametrize("shape, b_layout, use_2d", [
    ((1, 1, 16), "kn", False), ((3, 100, 100), "nk", False), ((8, 64, 32), "kn", True), ((8, 64, 32), "nk", True),
    ((17, 16, 4096), "kn", False), ((17, 16, 4096), "nk", True), ((40, 130, 48), "nk", True),
    ((40, 130, 48), "kn", False), ((1, 4096, 512), "kn", True), ((128, 256, 512), "nk", True),
])
def test_xe2_kernel_choice(queue, rng, shape, b_layout, use_2d):
    a, b, _ = make(rng, *shape, b_layout)
    da, db = to_device(a, queue), to_device(b, queue)
    assert xe2_plan(queue, "bmg", da, db, b_layout)[0] == use_2d, G.block2d_breaks(da, db, b_layout, *shape)


def test_fallback_for_operands_that_break_the_2d_rules(queue, rng):
    """Views that start one element (2 bytes) into their buffers break the 64-byte base rule, take the fallback
    kernels, and give exactly what the 2D kernels give on aligned copies: both sum k in order (one K slice here), the
    fallback 16 and the 2D kernels 32 at a time."""
    m, n, k = 40, 96, 64
    a, b, bias = make(rng, m, n, k, "nk")

    def shifted(x):
        flat = to_device(np.concatenate([np.zeros(1, np.float16), x.reshape(-1)]), queue)
        return flat[1:].reshape(x.shape)

    da, db = shifted(a), shifted(b)
    breaks = G.block2d_breaks(da, db, "nk", m, n, k)
    assert any("a starts at" in x for x in breaks) and any("b starts at" in x for x in breaks), breaks
    aligned = G.block2d_breaks(to_device(a, queue), to_device(b, queue), "nk", m, n, k)
    assert aligned == []
    for target in ("bmg", "lnl"):
        got, _ = G.run(da, db, bias=to_device(bias, queue), b_layout="nk", target=target, variant="xe2emu")
        ref, _ = G.run(to_device(a, queue), to_device(b, queue), bias=to_device(bias, queue), b_layout="nk",
                       target=target, variant="xe2emu")
        assert np.array_equal(dpnp.asnumpy(got), dpnp.asnumpy(ref))
        assert np.array_equal(dpnp.asnumpy(got), R.fp32_ordered(a, b, "nk", bias=bias))


def test_xe2_geometry_uses_k_slices_and_slm_only_when_the_grid_is_small():
    constants = {"SG_N": 64, "SGS_M": 8, "SGS_N": 4, "MAX_KSLICES": 16}
    small = G.xe2_geometry(constants, 2048, 1, 4096, 4096)
    assert small["tile_m"] == 8 and small["slices"] > 1 and small["slm_floats"] > 0
    assert small["slm_floats"] * 4 <= common.MAX_SLM_BYTES
    local = small["local"]
    assert local[0] // 16 * local[1] * local[2] <= common.MAX_SUBGROUPS_PER_GROUP
    big = G.xe2_geometry(constants, 2048, 4096, 4096, 4096)
    assert big["tile_m"] == 32 and big["slices"] == 1 and big["slm_floats"] == 0 and big["kernel"] == "m32_2d"
    assert big["local"] == (64, 8, 1)  # 4 x 8 sub-groups: a 256 x 256 block of C (seed 002)
    assert big["global"] == (4096 // 64 * 16, 4096 // 32, 1)
    fallback = G.xe2_geometry(constants, 2048, 4096, 4096, 4096, use_2d=False)
    assert fallback["tile_m"] == 16 and fallback["kernel"] == "m16"  # the fallback tiles stop at 16 rows


def test_out_argument_and_views(queue, rng):
    a, b, bias = make(rng, 5, 24, 40, "nk")
    out = dpnp.full((5, 24), 7, dtype=np.float16, sycl_queue=queue)
    res = xe2rt.gemm_fp16(to_device(a, queue), to_device(b, queue), bias=to_device(bias, queue), b_layout="nk",
                          out=out)
    assert res is out
    ref = R.gemm(a, b, bias=bias, b_layout="nk")
    assert np.all(np.abs(dpnp.asnumpy(out) - ref) <= R.error_bound(a, b, bias=bias, b_layout="nk"))
    # A row-offset view (pointer not 16-byte aligned) must take the bounds-checked path and stay exact.
    big = to_device(np.concatenate([np.zeros((1, 40), np.float16), a]), queue)
    for variant in ("native", "xe2emu"):
        got, _ = G.run(big[1:], to_device(b, queue), b_layout="nk", variant=variant, target="cpu")
        assert np.all(np.abs(dpnp.asnumpy(got) - R.gemm(a, b, b_layout="nk")) <= R.error_bound(a, b, b_layout="nk"))


@pytest.mark.parametrize("variant", ["native", "xe2emu"])
def test_empty_and_k_zero(queue, variant):
    bias = np.array([1, -2, 3], np.float16)
    a = dpnp.zeros((2, 0), dtype=np.float16, sycl_queue=queue)
    b = dpnp.zeros((0, 3), dtype=np.float16, sycl_queue=queue)
    got, _ = G.run(a, b, bias=to_device(bias, queue), activation="relu", variant=variant, target="cpu")
    assert np.array_equal(dpnp.asnumpy(got), np.tile(np.maximum(bias, 0), (2, 1)))
    empty, event = G.run(dpnp.zeros((0, 4), dtype=np.float16, sycl_queue=queue),
                         dpnp.zeros((4, 3), dtype=np.float16, sycl_queue=queue), variant=variant, target="cpu")
    assert empty.shape == (0, 3) and event is None


# ---- bad input: a clear error before launch, nothing written ----

@pytest.fixture
def operands(queue, rng):
    a, b, bias = make(rng, 4, 8, 16, "kn")
    out = dpnp.full((4, 8), 5, dtype=np.float16, sycl_queue=queue)
    return to_device(a, queue), to_device(b, queue), to_device(bias, queue), out


def _untouched(out):
    assert np.all(dpnp.asnumpy(out) == 5), "out was written despite the error"


@pytest.mark.parametrize("which", ["a", "b", "bias"])
def test_rejects_non_fp16(operands, which):
    a, b, bias, out = operands
    args = {"a": a, "b": b, "bias": bias}
    args[which] = args[which].astype(np.float32)
    with pytest.raises(xe2rt.InputTypeError, match=rf"gemm_fp16: {which} must be float16, got float32"):
        xe2rt.gemm_fp16(args["a"], args["b"], bias=args["bias"], out=out)
    _untouched(out)


def test_rejects_inner_dimension_mismatch(operands):
    a, b, bias, out = operands
    with pytest.raises(xe2rt.InputError, match=r"inner dimensions differ: a is \[M, K\] = \(4, 16\).*K = 8"):
        xe2rt.gemm_fp16(a, b, b_layout="nk", out=out)  # b [16, 8] read as [N, K] has K = 8
    _untouched(out)


def test_rejects_bias_of_wrong_length(operands, queue):
    a, b, _, out = operands
    with pytest.raises(xe2rt.InputError, match=r"bias must have length N = 8.*got 7"):
        xe2rt.gemm_fp16(a, b, bias=dpnp.zeros(7, dtype=np.float16, sycl_queue=queue), out=out)
    _untouched(out)


def test_rejects_unknown_activation_and_layout(operands):
    a, b, bias, out = operands
    with pytest.raises(xe2rt.InputError, match=r"activation must be None, 'relu', 'gelu' \(tanh form\) or 'gelu_erf'.*'silu'"):
        xe2rt.gemm_fp16(a, b, activation="silu", out=out)
    with pytest.raises(xe2rt.InputError, match=r"b_layout must be 'kn'.*or 'nk'.*got 'mn'"):
        xe2rt.gemm_fp16(a, b, b_layout="mn", out=out)
    _untouched(out)


@pytest.mark.parametrize("which", ["a", "b"])
def test_rejects_non_contiguous(operands, queue, which):
    a, b, bias, out = operands
    wide = dpnp.zeros((16, 16), dtype=np.float16, sycl_queue=queue)
    strided = wide[:4, ::2] if which == "a" else wide[:, ::2]  # [4, 8] and [16, 8] column-strided views
    args = {"a": a, "b": b, which: strided}
    if which == "a":
        args["b"] = dpnp.zeros((8, 8), dtype=np.float16, sycl_queue=queue)
    with pytest.raises(xe2rt.InputError, match=rf"{which} must be C-contiguous"):
        xe2rt.gemm_fp16(args["a"], args["b"], out=out)
    _untouched(out)


def test_rejects_operands_on_different_queues(operands):
    a, b, bias, out = operands
    other = dpnp.asarray(dpnp.asnumpy(b), sycl_queue=dpctl.SyclQueue("opencl:cpu"))
    with pytest.raises(xe2rt.InputError, match=r"b and a are on different"):
        xe2rt.gemm_fp16(a, other, bias=bias, out=out)
    _untouched(out)


def test_rejects_dimensions_beyond_32_bit_indices(queue):
    """Element offsets are 64-bit (M*N*K is not limited); a single dimension past 2^31 - 257 is refused."""
    a = dpnp.empty((2**31, 0), dtype=np.float16, sycl_queue=queue)
    b = dpnp.empty((0, 3), dtype=np.float16, sycl_queue=queue)
    with pytest.raises(xe2rt.InputError, match=r"M = 2147483648 exceeds 2147483391.*32-bit ints"):
        xe2rt.gemm_fp16(a, b)


def test_forcing_an_xe2_target_on_the_cpu_device_fails_clearly(operands):
    """The bmg/lnl binaries call the DPAS built-in; Intel's CPU runtime fails to build them with an empty message."""
    a, b, bias, out = operands
    for target in ("bmg", "lnl"):
        with pytest.raises(xe2rt.TargetError, match=rf"target '{target}' needs an Intel Xe2 GPU.*"
                                                    r"intel_sub_group_f16_f16_matrix_mad_k16.*"
                                                    r"cl_intel_subgroup_2d_block_io.*xe2rt\.ops\.gemm_fp16\.run\(\.\.\., variant='xe2emu'\)"):
            xe2rt.gemm_fp16(a, b, bias=bias, out=out, target=target)
    _untouched(out)


def test_cpu_kn_static_local_memory_checked(queue, monkeypatch):
    """The blocked kn kernel declares its SLM statically (the launch helper cannot see it), so the op checks it
    against the device: here against a requirement the device cannot meet."""
    from xe2rt.ops import gemm_fp16 as gemm_op

    constants = xe2rt.artifacts.load(queue, "cpu", "gemm_fp16").constants
    assert 64 * 1024 < gemm_op.kn_static_slm_bytes(constants) <= queue.sycl_device.local_mem_size
    need = queue.sycl_device.local_mem_size + 4
    monkeypatch.setattr(gemm_op, "kn_static_slm_bytes", lambda c: need)
    a = dpnp.asarray(np.ones((16, 32), np.float16), sycl_queue=queue)
    b = dpnp.asarray(np.ones((32, 64), np.float16), sycl_queue=queue)
    out = dpnp.full((16, 64), 5, dtype=np.float16, sycl_queue=queue)
    with pytest.raises(xe2rt.LaunchLimitError, match=rf"needs {need} bytes of local memory; device .* has "
                                                     rf"{queue.sycl_device.local_mem_size}"):
        xe2rt.gemm_fp16(a, b, out=out, target="cpu")
    assert np.all(dpnp.asnumpy(out) == 5)


@pytest.mark.parametrize("target", TARGETS)
def test_relu_keeps_nan(queue, rng, target):
    """relu(NaN) is NaN, as in the float64 reference (numpy's maximum) and torch.relu; the shared epilogue used
    fmax(v, 0), which makes it 0: a NaN input row came out as zeros. Also gemm_w4a16's epilogue (the same code)."""
    m, n, k = 33, 64, 128
    a = rng.standard_normal((m, k)).astype(np.float16)
    a[1, 1] = np.nan
    b = (rng.standard_normal((k, n)) * 0.1).astype(np.float16)
    variant = "native" if target == "cpu" else "xe2emu"
    y = G.run(to_device(a, queue), to_device(b, queue), activation="relu", target=target, variant=variant)[0]
    got = y.asnumpy()
    assert np.isnan(got[1]).all() and not np.isnan(np.delete(got, 1, axis=0)).any()
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    ok = np.delete(np.arange(m), 1)
    np.testing.assert_allclose(got[ok].astype(np.float64), ref[ok], rtol=2e-2, atol=2e-2)
    from xe2rt.ops import gemm_w4a16 as W
    qw = xe2rt.quantize_w4(b.T.copy(), group_size=32).to_device(queue)
    got = W.run(to_device(a, queue), qw, activation="relu", target=target, variant=variant)[0].asnumpy()
    assert np.isnan(got[1]).all() and not np.isnan(np.delete(got, 1, axis=0)).any()
