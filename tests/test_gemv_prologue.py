"""gemv_w4a16 with the decoder ops around it folded in (norm= with or without residual=, silu_mul=): one VNNI kernel
where it runs, the ops in turn elsewhere; against the float64 reference of the ops (xe2rt.reference.decoder,
xe2rt.reference.quant) within the GEMV's derived bound plus the fp16 roundings between the ops, bit for bit against
calling the ops, and every bad input refused before anything is written."""
import dpctl
import numpy as np
import pytest

import dpnp
import xe2rt
from xe2rt.ops import gemv_w4a16 as op
from xe2rt.checks import gemv_w4a16 as checks_w4

from conftest import guarded, int_dot_variant, skip_unless_int_dot, to_device
from test_gemv_w4a16 import random_qw


FORMS = ["norm", "norm+res", "silu", "norm+res+silu"]
EPS = 1e-5


def _inputs(rng, k, rows=1):
    x = rng.standard_normal((rows, k)).astype(np.float16)
    res = rng.standard_normal((rows, k)).astype(np.float16)
    w = (1.0 + 0.2 * rng.standard_normal(k)).astype(np.float16)
    return x, res, w


def _kwargs(queue, form, res, w):
    kw = {"silu_mul": "silu" in form}
    if "norm" in form:
        kw["norm"] = (to_device(w, queue), EPS)
    if "res" in form:
        kw["residual"] = to_device(res, queue)
    return kw


def _ops(queue, x, qw, form, res, w, **kw):
    """The same work as separate xe2rt ops: (y, s or None)."""
    a, s = to_device(x, queue), None
    target = kw.get("target")
    if "res" in form:
        a, s = xe2rt.rms_norm(a.reshape(-1, x.shape[-1]), to_device(w, queue), eps=EPS,
                              residual=to_device(res, queue).reshape(-1, x.shape[-1]), target=target)
    elif "norm" in form:
        a = xe2rt.rms_norm(a.reshape(-1, x.shape[-1]), to_device(w, queue), eps=EPS, target=target)
    y = xe2rt.gemv_w4a16(a.reshape(x.shape), qw, **kw)
    if "silu" in form:
        y = xe2rt.silu_mul(y.reshape(-1, qw.shape[0]), target=kw.get("target")).reshape(*x.shape[:-1],
                                                                                         qw.shape[0] // 2)
    return y, s


def _split(result, form):
    return result if "res" in form else (result, None)


@pytest.mark.parametrize("dequant", ["vnni", "avx2"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n,k,group_size,symmetric", [(3072, 2048, 32, True), (1000, 1024, 128, False),
                                                      (20, 128, 64, True), (16384, 2048, 32, True)])
def test_one_kernel_matches_the_ops_bit_for_bit(queue, rng, form, n, k, group_size, symmetric, dequant):
    """On a VNNI (AVX2) host the call is one launch, and y (and s) are the separate ops' halves exactly: the norm's
    sum of squares is taken in rms_norm_f16's order, both from decoder_cpu.h, each rounded to fp16 where the ops
    store."""
    skip_unless_int_dot(queue, dequant)
    qw = random_qw(rng, n, k, group_size, symmetric, queue)
    assert op.fuses(queue, qw, norm="norm" in form, silu_mul="silu" in form, dequant=dequant)
    x, res, w = _inputs(rng, k)
    got, s_got = _split(xe2rt.gemv_w4a16(to_device(x, queue), qw, dequant=dequant, **_kwargs(queue, form, res, w)),
                        form)
    want, s_want = _ops(queue, x, qw, form, res, w, dequant=dequant)
    assert got.shape == want.shape
    assert np.array_equal(dpnp.asnumpy(got), dpnp.asnumpy(want))
    if s_want is not None:
        assert np.array_equal(dpnp.asnumpy(s_got), dpnp.asnumpy(s_want))
    plan = xe2rt.bind(op.gemv_w4a16, to_device(x, queue), qw, dequant=dequant, **_kwargs(queue, form, res, w))
    assert plan.launches == 1


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n,k,group_size,symmetric,dequant", [
    (3072, 2048, 32, True, "auto"), (4096, 1024, 128, False, "auto"), (18, 128, 32, False, "auto"),
    (300, 2560, 64, True, None), (40, 96, 32, True, "auto"), (6, 256, 32, True, "auto")])
def test_against_float64_reference(queue, form, n, k, group_size, symmetric, dequant):
    """Against float64 (xe2rt.checks.gemv_w4a16.run_fused_case, which the selftest runs too; its FUSED_RULE derives
    the bound): every host, one kernel or the ops in turn."""
    result = checks_w4.run_fused_case(queue, None, form, n, k, group_size, symmetric, dequant)
    assert result.passed, result.describe()


@pytest.mark.parametrize("case", ["k96", "m3", "default_dequant", "odd_i"])
def test_the_ops_in_turn_where_one_kernel_cannot_run(queue, rng, case):
    """K not a multiple of 128 (norm), M > 1, the exact default kernels, or I odd (silu_mul): the call runs the ops
    in turn with the same result as calling them."""
    k = 96 if case == "k96" else 256
    n = 42 if case == "odd_i" else 40
    qw = random_qw(rng, n, k, 32, True, queue)
    dequant = None if case == "default_dequant" else "auto"
    form = "norm+res+silu"
    x, res, w = _inputs(rng, k, rows=3 if case == "m3" else 1)
    assert not op.fuses(queue, qw, silu_mul=True, dequant=dequant, m=x.shape[0])
    got, s_got = xe2rt.gemv_w4a16(to_device(x, queue), qw, dequant=dequant, **_kwargs(queue, form, res, w))
    want, s_want = _ops(queue, x, qw, form, res, w, dequant=dequant)
    assert np.array_equal(dpnp.asnumpy(got), dpnp.asnumpy(want))
    assert np.array_equal(dpnp.asnumpy(s_got), dpnp.asnumpy(s_want))
    plan = xe2rt.bind(op.gemv_w4a16, to_device(x, queue), qw, dequant=dequant, **_kwargs(queue, form, res, w))
    assert plan.launches == 3


def test_out_pair_and_nonfinite(queue, rng):
    """out=(y, s) is written in place; an inf in x makes y non-finite where the separate ops do."""
    k = 256
    qw = random_qw(rng, 64, k, 32, True, queue)
    x, res, w = _inputs(rng, k)
    y, s = dpnp.empty((1, 32), dtype=np.float16, sycl_queue=queue), dpnp.empty((1, k), dtype=np.float16,
                                                                                 sycl_queue=queue)
    form = "norm+res+silu"
    got = xe2rt.gemv_w4a16(to_device(x, queue), qw, out=(y, s), dequant="auto", **_kwargs(queue, form, res, w))
    assert got[0] is y and got[1] is s
    want, s_want = _ops(queue, x, qw, form, res, w, dequant="auto")
    assert np.array_equal(dpnp.asnumpy(y), dpnp.asnumpy(want))
    assert np.array_equal(dpnp.asnumpy(s), dpnp.asnumpy(s_want))
    x[0, 5] = np.inf
    got = dpnp.asnumpy(xe2rt.gemv_w4a16(to_device(x, queue), qw, dequant="auto", **_kwargs(queue, form, res, w))[0])
    want = dpnp.asnumpy(_ops(queue, x, qw, form, res, w, dequant="auto")[0])
    assert not np.isfinite(want).all() and np.array_equal(np.isnan(got), np.isnan(want))


def test_bad_input_writes_nothing(queue, rng):
    k, n = 256, 64
    qw = random_qw(rng, n, k, 32, True, queue)
    x = to_device(rng.standard_normal((1, k)).astype(np.float16), queue)
    res = to_device(rng.standard_normal((1, k)).astype(np.float16), queue)
    w = to_device(np.ones(k, np.float16), queue)
    y = dpnp.full((1, n), 7.0, dtype=np.float16, sycl_queue=queue)
    s = dpnp.full((1, k), 7.0, dtype=np.float16, sycl_queue=queue)
    other = dpctl.SyclQueue("opencl:cpu")
    cases = [
        (dict(norm=w), xe2rt.InputTypeError, r"norm must be a \(weight, eps\) pair"),
        (dict(norm=(w, -1.0)), xe2rt.InputError, r"norm's eps must be a real number in \[0, .*got -1.0"),
        (dict(norm=(w, 1e39)), xe2rt.InputError, r"norm's eps must be a real number in \[0, .*got 1e\+39"),
        (dict(norm=(w[:128], EPS)), xe2rt.InputError, r"the norm weight must have shape \(256,\) \(K\), got \(128,\)"),
        (dict(norm=(w.astype(np.float32), EPS)), xe2rt.InputTypeError, r"norm weight"),
        (dict(residual=res), xe2rt.InputError, r"residual= is the residual of the norm .* it needs norm="),
        (dict(silu_mul=1), xe2rt.InputTypeError, r"silu_mul must be True or False, got 1"),
        (dict(norm=(w, EPS), residual=res[:, :128]), xe2rt.InputError, r"residual must have x's shape \(1, 256\)"),
        (dict(norm=(w, EPS), residual=res, out=y), xe2rt.InputTypeError,
         r"with residual, out must be a \(y, s\) tuple"),
        (dict(norm=(w, EPS), residual=res, out=(y, res)), xe2rt.InputError, r"out s overlaps residual"),
        (dict(norm=(w, EPS), residual=res, out=(y, x)), xe2rt.InputError, r"out s overlaps input x"),
        (dict(norm=(w, EPS), residual=res, out=(y, s[:, :128])), xe2rt.InputError, r"out s must have shape \(1, 256\)"),
        (dict(norm=(to_device(np.ones(k, np.float16), other), EPS)), xe2rt.InputError, r"queue"),
        (dict(norm=(w, EPS), out=y[:, :32]), xe2rt.InputError, r"out must have shape \(1, 64\)"),
        (dict(silu_mul=True, out=y), xe2rt.InputError, r"out must have shape \(1, 32\)"),
    ]
    before = dpnp.asnumpy(res).copy()
    for kwargs, err, match in cases:
        with pytest.raises(err, match=match):
            xe2rt.gemv_w4a16(x, qw, dequant="auto", **kwargs)
        assert (dpnp.asnumpy(y) == 7).all() and (dpnp.asnumpy(s) == 7).all(), kwargs
        assert np.array_equal(dpnp.asnumpy(res), before)
    with pytest.raises(xe2rt.InputError, match=r"silu_mul=True needs qw's rows as \[gate; up\], N = 2 I, got N = 63"):
        xe2rt.gemv_w4a16(x, random_qw(rng, 63, k, 32, True, queue), silu_mul=True)
    with pytest.raises(xe2rt.InputError, match=r"x has K = 256 but qw is \[N, K\] = \(64, 128\)"):
        xe2rt.gemv_w4a16(x, random_qw(rng, 64, 128, 32, True, queue), norm=(w, EPS))
    got, s_got = xe2rt.gemv_w4a16(x, qw, norm=(w, EPS), residual=res, out=(y, s), dequant="auto")  # still usable
    assert np.isfinite(dpnp.asnumpy(got)).all() and not (dpnp.asnumpy(s_got) == 7).all()


def test_review_cases(queue, rng):
    """Found by review: silu_mul=np.False_ is the plain call; usm_ndarray inputs and outputs on the ops-in-turn path;
    N = 0 with silu_mul gives an empty y and still s; the ops-in-turn path returns the caller's s; messages name s."""
    import dpnp.tensor as dpt
    k = 256
    qw = random_qw(rng, 40, k, 32, True, queue)
    x, res, w = _inputs(rng, k, rows=2)
    xd, rd, wd = (to_device(a, queue) for a in (x, res, w))
    plain = dpnp.asnumpy(xe2rt.gemv_w4a16(xd[:1], qw, dequant="auto"))
    assert np.array_equal(dpnp.asnumpy(xe2rt.gemv_w4a16(xd[:1], qw, silu_mul=np.False_, dequant="auto")), plain)
    # usm_ndarray everywhere, M = 2 (the ops in turn) and M = 1 (one kernel)
    for rows in (2, 1):
        xu, ru, wu = xd[:rows].get_array(), rd[:rows].get_array(), wd.get_array()
        yu = dpt.empty((rows, 20), dtype=np.float16, sycl_queue=queue)
        su = dpt.empty((rows, k), dtype=np.float16, sycl_queue=queue)
        got = xe2rt.gemv_w4a16(xu, qw, norm=(wu, EPS), residual=ru, silu_mul=True, out=(yu, su), dequant="auto")
        assert got[0] is yu and got[1] is su
        want, s_want = _ops(queue, x[:rows], qw, "norm+res+silu", res[:rows], w, dequant="auto")
        assert np.array_equal(dpt.asnumpy(yu), dpnp.asnumpy(want))
        assert np.array_equal(dpt.asnumpy(su), dpnp.asnumpy(s_want))
    # N = 0 with silu_mul: empty y, s = x + residual
    qw0 = xe2rt.quantize_w4(np.zeros((0, k), np.float16), group_size=32).to_device(queue)
    y0, s0 = xe2rt.gemv_w4a16(xd[:1], qw0, norm=(wd, EPS), residual=rd[:1], silu_mul=True, dequant="auto")
    assert y0.shape == (1, 0)
    assert np.array_equal(dpnp.asnumpy(s0), (x[:1].astype(np.float32) + res[:1]).astype(np.float16))
    s = dpnp.empty((2, k), dtype=np.float16, sycl_queue=queue)
    got = xe2rt.gemv_w4a16(xd, qw, norm=(wd, EPS), residual=rd, out=(dpnp.empty((2, 40), dtype=np.float16,
                                                                              sycl_queue=queue), s))
    assert got[1] is s
    y1 = dpnp.empty((1, 40), dtype=np.float16, sycl_queue=queue)
    for kwargs, err, match in [
            (dict(residual=rd[:1], out=(y1, dpnp.empty((1, k), dtype=np.float32, sycl_queue=queue))),
             xe2rt.InputTypeError, r"out s must be float16, got float32"),
            (dict(residual=rd[:1], out=(y1, qw.scales)), xe2rt.InputError, r"out s"),
            (dict(out=(y1, dpnp.empty((1, k), dtype=np.float16, sycl_queue=queue))), xe2rt.InputTypeError,
             r"out is a \(y, s\) pair only with residual="),
            (dict(norm=(wd,)), xe2rt.InputTypeError, r"norm must be a \(weight, eps\) pair .*got a tuple of 1")]:
        kwargs.setdefault("norm", (wd, EPS))
        with pytest.raises(err, match=match):
            xe2rt.gemv_w4a16(xd[:1], qw, **kwargs)


def test_workspaces_kept_per_thread_are_bounded():
    """ops.common.workspace keeps the MAX_WORKSPACES most recently used (owner, queue) arrays per thread: a loop over
    fresh queues (prefill_attention's K/V scratch, gemm_w4a16's x) does not pile them up."""
    from xe2rt.ops import common
    for _ in range(common.MAX_WORKSPACES + 5):
        common.workspace("test", dpctl.SyclQueue("opencl:cpu"), 1024, np.float32)
    assert len(common._per_thread.workspaces) <= common.MAX_WORKSPACES
    q = dpctl.SyclQueue("opencl:cpu")
    a = common.workspace("test", q, 100, np.float32)
    assert common.workspace("test", q, 50, np.float32) is a  # reused, the largest size kept
    assert common.workspace("test", q, 200, np.float32).size >= 200


@pytest.mark.parametrize("target", ["bmg", "lnl"])
@pytest.mark.parametrize("form", FORMS)
def test_xe2_one_kernel(queue, rng, target, form):
    """The Xe2 kernels (run here through the CPU device) fold the same ops into one launch where K is a multiple of
    their 512-k block read and the arrays are 16-byte aligned. silu_mul alone gives the separate ops' halves bit for
    bit; the norm is applied as r (W (nw s)) there, within the float64 bound of checks.gemv_w4a16 (test_checks runs
    those cases on both targets), and within 2e-3 of the separate ops here; s exactly."""
    k = 1024
    qw = random_qw(rng, 3000, k, 32, False, queue)
    assert op.fuses(queue, qw, norm="norm" in form, silu_mul="silu" in form, target=target)
    x, res, w = _inputs(rng, k)
    kwargs = _kwargs(queue, form, res, w)
    got, s_got = _split(xe2rt.gemv_w4a16(to_device(x, queue), qw, target=target, **kwargs), form)
    want, s_want = _ops(queue, x, qw, form, res, w, target=target)
    got, want = dpnp.asnumpy(got), dpnp.asnumpy(want)
    if form == "silu":
        assert np.array_equal(got, want)
    else:
        assert np.abs(got.astype(np.float64) - want).max() <= 2e-3 * np.abs(want).max()
    if s_want is not None:
        assert np.array_equal(dpnp.asnumpy(s_got), dpnp.asnumpy(s_want))
    assert xe2rt.bind(op.gemv_w4a16, to_device(x, queue), qw, target=target, **_kwargs(queue, form, res, w)) \
        .launches == 1


def test_xe2_ops_in_turn_where_the_kernel_cannot_run(queue, rng):
    """K not a multiple of 512, or an array off a 16-byte boundary: the Xe2 target runs the ops in turn, same values
    as calling them."""
    qw = random_qw(rng, 40, 256, 32, True, queue)
    assert not op.fuses(queue, qw, target="bmg")
    x, res, w = _inputs(rng, 256)
    got, s_got = xe2rt.gemv_w4a16(to_device(x, queue), qw, target="bmg", **_kwargs(queue, "norm+res+silu", res, w))
    want, s_want = _ops(queue, x, qw, "norm+res+silu", res, w, target="bmg")
    assert np.array_equal(dpnp.asnumpy(got), dpnp.asnumpy(want))
    qw = random_qw(rng, 40, 512, 32, True, queue)
    buf = to_device(rng.standard_normal(520).astype(np.float16), queue)
    x_off = buf[2:514]  # 4 bytes past a 16-byte boundary
    plan = xe2rt.bind(op.gemv_w4a16, x_off, qw, target="bmg", silu_mul=True)
    assert plan.launches == 2
    want = xe2rt.silu_mul(xe2rt.gemv_w4a16(x_off, qw, target="bmg").reshape(1, 40), target="bmg").reshape(20)
    assert np.array_equal(dpnp.asnumpy(plan()), dpnp.asnumpy(want))


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_xe2_silu_mul_writes_nothing_past_out(queue, rng, target):
    """The fused silu_mul's last work-group covers outputs past I: nothing may be written there (I = 3, 5, 501)."""
    for inter in (3, 5, 501):
        qw = xe2rt.quantize_w4((rng.standard_normal((2 * inter, 512)) * 0.05).astype(np.float32), group_size=64,
                               symmetric=True).to_device(queue)
        x = rng.standard_normal(512).astype(np.float16)
        out, before, after = guarded(queue, (inter,))
        op.run_fused(to_device(x, queue), qw, silu_mul=True, out=out, target=target)
        assert (before.asnumpy() == 7).all() and (after.asnumpy() == 7).all(), inter


@pytest.mark.parametrize("target", ["cpu", "bmg", "lnl"])
def test_norm_with_a_mean_square_near_eps(queue, rng, target):
    """norm= on x ~ 2e-3 (mean square 4e-6, near eps 1e-5): eps changes the result by about 60%, so a kernel that
    dropped it would be far outside this tolerance; against rms_norm then gemv_w4a16 on the same target."""
    dequant = int_dot_variant(queue) if target == "cpu" else None  # the one fused cpu kernel is an integer-dot one
    k, n = 1024, 64
    qw = xe2rt.quantize_w4((rng.standard_normal((n, k)) * 0.05).astype(np.float32), group_size=64,
                           symmetric=True).to_device(queue)
    x = (2e-3 * rng.standard_normal(k)).astype(np.float16)
    w = (1 + 0.2 * rng.standard_normal(k)).astype(np.float16)
    got, _ = op.run_fused(to_device(x, queue), qw, norm=(to_device(w, queue), EPS), target=target,
                          dequant=dequant)
    a = xe2rt.rms_norm(to_device(x[None], queue), to_device(w, queue), eps=EPS, target=target)
    want = xe2rt.gemv_w4a16(a.reshape(k), qw, target=target)
    np.testing.assert_allclose(got.asnumpy().astype(np.float64), want.asnumpy().astype(np.float64), rtol=2e-2,
                               atol=2e-3)
