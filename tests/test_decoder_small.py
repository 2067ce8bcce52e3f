"""rms_norm, rope_kv and silu_mul on every target's binary against the float64 references, through the cases of
xe2rt.checks.decoder_small (the same cases the selftest runs; bounds derived there), plus the op-level behaviour the
cases do not cover (out=, warm replays, empty inputs, asynchrony of in-place updates)."""
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt.checks import decoder_small as cases
from xe2rt.reference import decoder as ref

from conftest import TARGETS, guarded, to_device

CHECKS = cases.checks(quick=False)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("check", CHECKS, ids=str)
def test_case(queue, check, target):
    if target not in check.targets:
        pytest.skip(f"{check} is not meaningful for target {target}")
    result = check.run(queue, target)
    assert result.passed, f"{check} on {target}: {result.describe()}"


def test_cases_cover_the_bar():
    names = " ".join(c.name for c in CHECKS)
    for needle in ("T=1 ", "T=3", "T=17", "residual", "llama3", "qk_norm", "plain theta", "Llama-3.2-1B",
                   "Llama-3.1-8B", "Qwen3-4B", "Qwen3-30B-A3B", "silu_mul"):
        assert needle in names, needle


@pytest.mark.parametrize("target", TARGETS)
def test_rms_norm_out_and_replay(queue, rng, target):
    """out= receives the results; a second (warm, replayed) call with new data gives the new results."""
    w = to_device((1 + 0.1 * rng.standard_normal(256)).astype(np.float16), queue)
    y = to_device(np.zeros((4, 256), np.float16), queue)
    s = to_device(np.zeros((4, 256), np.float16), queue)
    for _ in range(3):
        x = rng.standard_normal((4, 256)).astype(np.float16)
        r = rng.standard_normal((4, 256)).astype(np.float16)
        got = xe2rt.rms_norm(to_device(x, queue), w, eps=1e-5, residual=to_device(r, queue), out=(y, s),
                             target=target)
        assert got[0] is y and got[1] is s
        want_y, want_s = ref.rms_norm_ref(x, w.asnumpy(), 1e-5, r)
        np.testing.assert_array_equal(s.asnumpy(), want_s.astype(np.float16))
        np.testing.assert_allclose(y.asnumpy(), want_y, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_silu_mul_out(queue, rng, target):
    gu = rng.standard_normal((2, 512)).astype(np.float16)
    out = to_device(np.zeros((2, 256), np.float16), queue)
    assert xe2rt.silu_mul(to_device(gu, queue), out=out, target=target) is out
    np.testing.assert_allclose(out.asnumpy(), ref.silu_mul_ref(gu), rtol=2e-3, atol=1e-4)


def test_empty_inputs(queue):
    w = to_device(np.ones(64, np.float16), queue)
    assert xe2rt.rms_norm(to_device(np.zeros((0, 64), np.float16), queue), w, eps=1e-5).shape == (0, 64)
    assert xe2rt.silu_mul(to_device(np.zeros((0, 8), np.float16), queue)).shape == (0, 4)
    q = to_device(np.zeros((0, 4, 64), np.float16), queue)
    k = to_device(np.zeros((0, 2, 64), np.float16), queue)
    cache = to_device(np.full((2, 8, 64), 3, np.float16), queue)
    pos = to_device(np.zeros(0, np.int32), queue)
    assert xe2rt.rope_kv(q, k, k, pos, cache, cache.copy(), theta=10000.0) == (q, k)
    assert (cache.asnumpy() == 3).all()


@pytest.mark.parametrize("target", TARGETS)
def test_rope_unchecked_positions_never_write_outside(queue, rng, target):
    """check_positions=False reads nothing back; a position past the cache, or negative, then rotates q and k but
    writes nothing."""
    size = 2 * 8 * 64
    for bad in (8, -1):
        q = to_device(rng.standard_normal((2, 4, 64)).astype(np.float16), queue)
        k = to_device(rng.standard_normal((2, 2, 64)).astype(np.float16), queue)
        v = to_device(rng.standard_normal((2, 2, 64)).astype(np.float16), queue)
        # one allocation: a guard, k_cache, v_cache, a guard; a write before or past a cache lands in a neighbour
        big = to_device(np.full(4 * size, 5, np.float16), queue)
        kc, vc = big[size:2 * size].reshape(2, 8, 64), big[2 * size:3 * size].reshape(2, 8, 64)
        xe2rt.rope_kv(q, k, v, to_device(np.array([bad, 3], np.int32), queue), kc, vc, theta=10000.0,
                      check_positions=False, target=target)
        kh, vh = kc.asnumpy(), vc.asnumpy()
        assert (np.delete(kh, 3, axis=1) == 5).all() and (np.delete(vh, 3, axis=1) == 5).all(), bad
        np.testing.assert_array_equal(kh[:, 3], k.asnumpy()[1])
        np.testing.assert_array_equal(vh[:, 3], v.asnumpy()[1])
        h = big.asnumpy()
        assert (h[:size] == 5).all() and (h[3 * size:] == 5).all(), bad


@pytest.mark.parametrize("target", TARGETS)
def test_silu_mul_writes_nothing_past_out(queue, rng, target):
    for inter in (77, 1000):  # not multiples of 128 or 64: every kernel's last chunk is partial
        gu = (2 * rng.standard_normal((3, 2 * inter))).astype(np.float16)
        out, before, after = guarded(queue, (3, inter))
        xe2rt.silu_mul(to_device(gu, queue), out=out, target=target)
        assert (before.asnumpy() == 7).all() and (after.asnumpy() == 7).all(), inter
        np.testing.assert_allclose(out.asnumpy(), ref.silu_mul_ref(gu), rtol=2e-3, atol=1e-4)


def _differ_from_fp16(got, want) -> float:
    """The fraction of got's float16 values that are not want rounded to float16, bit for bit."""
    return float(np.mean(np.asarray(got, np.float16).view(np.uint16) != want.astype(np.float16).view(np.uint16)))


@pytest.mark.parametrize("target", TARGETS)
def test_rms_norm_rounds_where_hf_rounds(queue, rng, target):
    """y = fp16(w * fp16(s r)): the rounding of s r to float16 before the weight is HF's (hidden_states.to(input_dtype)
    then weight * that). The derived bound allows an ulp of that inner value, so a kernel that skipped the rounding
    would pass the checks; here y must equal the float64 reference's fp16 chain bit for bit, but for the rare element
    whose inner product lies within r's fp32 error of a rounding boundary (under 2%; 0 in practice). x in [1, 2) and
    a constant residual of 3/4 ulp(1): every s = fp16(x + residual) rounds up by a quarter of its ulp, so a sum of
    squares over the unrounded x + residual shows too."""
    n = 2048
    x = rng.uniform(1, 2, (4, n)).astype(np.float16)
    res = np.full((4, n), 0.75 * 2.0**-10, np.float16)
    w = (1 + 0.3 * rng.standard_normal(n)).astype(np.float16)
    for r in (None, res):
        out = xe2rt.rms_norm(to_device(x, queue), to_device(w, queue), eps=1e-5,
                             residual=None if r is None else to_device(r, queue), target=target)
        y = out if r is None else out[0]
        want, _ = ref.rms_norm_ref(x, w, 1e-5, r)
        assert _differ_from_fp16(y.asnumpy(), want) < 0.02, f"residual={r is not None}"


@pytest.mark.parametrize("target", TARGETS)
def test_rope_kv_qk_norm_rounds_where_hf_rounds(queue, rng, target):
    """At position 0 the rotation is the identity, so q and k after rope_kv with qk_norm are Qwen3's q_norm / k_norm
    outputs: fp16(w * fp16(x r)) bit for bit (as test_rms_norm_rounds_where_hf_rounds), and with heads whose mean
    square is near eps (x ~ 1e-3) within float16 rounding of the float64 norm, eps included."""
    hq, hkv, d = 32, 8, 128
    qw = (1 + 0.3 * rng.standard_normal(d)).astype(np.float16)
    kw = (1 + 0.3 * rng.standard_normal(d)).astype(np.float16)
    for scale in (2.0, 1e-3):
        q = (scale * rng.standard_normal((1, hq, d))).astype(np.float16)
        k = (scale * rng.standard_normal((1, hkv, d))).astype(np.float16)
        dq, dk = to_device(q, queue), to_device(k, queue)
        kc = to_device(np.zeros((hkv, 4, d), np.float16), queue)
        vc = to_device(np.zeros((hkv, 4, d), np.float16), queue)
        xe2rt.rope_kv(dq, dk, to_device(k, queue), to_device(np.zeros(1, np.int32), queue), kc, vc, theta=1e6,
                      qk_norm=(to_device(qw, queue), to_device(kw, queue), 1e-6), target=target)
        for got, x, w in ((dq, q, qw), (dk, k, kw)):
            want = ref.rms_norm_ref(x, w, 1e-6)[0]
            if scale > 1:
                assert _differ_from_fp16(got.asnumpy(), want) < 0.02
            else:
                np.testing.assert_allclose(got.asnumpy().astype(np.float64), want, rtol=4e-3, atol=1e-4)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("theta", [10000.0, 500000.0, 1000000.0, 10000.5])
def test_inv_freq_power_is_correctly_rounded(d, theta):
    """The table's power theta ** (2i / D) is the correctly rounded float32 (checked against 50-digit decimal
    arithmetic), so it does not depend on the host's vectorized float32 pow; inv_freq is float32(1) / that power."""
    from decimal import Decimal, getcontext
    getcontext().prec = 50
    base = Decimal(float(np.float32(theta)))
    exact = [base ** (Decimal(2 * i) / Decimal(d)) for i in range(d // 2)]
    want = np.array([float(e) for e in exact], np.float64).astype(np.float32)
    for e, w in zip(exact, want):  # the float64 step cannot have moved a float32 rounding: not near a midpoint
        lo, hi = np.nextafter(w, np.float32(0)), np.nextafter(w, np.float32(np.inf))
        assert abs(Decimal(float(w)) - e) < min(abs(Decimal(float(lo)) - e), abs(Decimal(float(hi)) - e))
    np.testing.assert_array_equal(ref.inv_freq(d, theta), np.float32(1) / want)


@pytest.mark.parametrize("d,theta,factor", [(128, 500000.0, 8.0), (64, 500000.0, 32.0)])
def test_llama3_inv_freq(d, theta, factor):
    """reference.decoder.inv_freq (float32, HF's order of operations) against the same rule in float64: the three
    regimes of _compute_llama3_parameters (high frequencies kept, low ones divided by factor, a smooth blend between)
    each occur, and every value is within a few float32 ulps of the float64 rule."""
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    got = ref.inv_freq(d, theta, scaling)
    assert got.dtype == np.float32 and got.shape == (d // 2,)
    base = 1.0 / theta ** (np.arange(0, d, 2) / d)
    wavelen = 2 * np.pi / base
    smooth = (8192 / wavelen - 1.0) / 3.0
    want = np.where(wavelen < 8192 / 4.0, base,
                    np.where(wavelen > 8192 / 1.0, base / factor, (1 - smooth) * base / factor + smooth * base))
    np.testing.assert_allclose(got, want, rtol=8 * 2.0**-24, atol=0)
    assert (wavelen < 2048).any() and (wavelen > 8192).any() and ((wavelen >= 2048) & (wavelen <= 8192)).any()
    np.testing.assert_array_equal(ref.inv_freq(d, theta)[wavelen < 2048], got[wavelen < 2048])


def test_warm_replays_give_fresh_outputs(queue, rng):
    """Repeated calls with one signature are replayed by xe2rt.fastcall: each returns its own (y, s) / y, and results
    held from earlier calls are not overwritten by later ones."""
    w = to_device((1 + 0.1 * rng.standard_normal(512)).astype(np.float16), queue)
    held = []
    for _ in range(4):
        x = rng.standard_normal((3, 512)).astype(np.float16)
        r = rng.standard_normal((3, 512)).astype(np.float16)
        gu = rng.standard_normal((3, 1024)).astype(np.float16)
        y, s = xe2rt.rms_norm(to_device(x, queue), w, eps=1e-6, residual=to_device(r, queue))
        held.append((x, r, gu, y, s, xe2rt.silu_mul(to_device(gu, queue))))
    for x, r, gu, y, s, m in held:
        want_y, want_s = ref.rms_norm_ref(x, w.asnumpy(), 1e-6, r)
        np.testing.assert_array_equal(s.asnumpy(), want_s.astype(np.float16))
        np.testing.assert_allclose(y.asnumpy(), want_y, rtol=2e-3, atol=1e-3)
        np.testing.assert_allclose(m.asnumpy(), ref.silu_mul_ref(gu), rtol=2e-3, atol=1e-4)


def test_silu_written_out_exp_matches_libm(queue, rng):
    """The CPU kernel's polynomial exp against the Xe2 kernel's libm exp (target bmg, run on this CPU device) over
    every finite fp16 gate value: within one fp16 ulp everywhere, identical almost everywhere (the derived relative
    error of either is far below half an ulp except near rounding ties)."""
    gate = cases.every_finite_half()
    gu = np.concatenate([gate, rng.uniform(0.25, 1.0, gate.size).astype(np.float16)])[None, :]
    d = to_device(gu, queue)
    ours = xe2rt.silu_mul(d, target="cpu").asnumpy().astype(np.float64)[0]
    libm = xe2rt.silu_mul(d, target="bmg").asnumpy().astype(np.float64)[0]
    diff = np.abs(ours - libm)
    assert (diff <= ref.ulp16(np.maximum(np.abs(ours), np.abs(libm)))).all()
    assert np.mean(diff == 0) > 0.999, np.mean(diff == 0)  # measured: 1 of 63488 differs


# ---- found by mutation testing (session 32) ----

def test_llama3_inv_freq_with_low_freq_factor_2():
    """R20: the llama3 rule with low_freq_factor != 1 (every existing case uses 1.0, where old / low == old * low):
    transformers' _compute_llama3_parameters written out in float64."""
    from xe2rt.reference.decoder import inv_freq
    from xe2rt.reference.llm import rope_inv_freq
    d, theta = 128, 500000.0
    sc = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    base = 1.0 / theta ** (np.arange(0, d, 2) / d)
    wl = 2 * np.pi / base
    low_wl, high_wl = 8192 / 2.0, 8192 / 4.0
    smooth = (8192 / wl - 2.0) / (4.0 - 2.0)
    want = np.where(wl < high_wl, base, np.where(wl > low_wl, base / 8, (1 - smooth) * base / 8 + smooth * base))
    assert ((wl > low_wl) & (wl <= 8192)).any()  # where old / low and old * low disagree
    np.testing.assert_allclose(rope_inv_freq(d, theta, sc), want, rtol=1e-12)
    np.testing.assert_allclose(inv_freq(d, theta, sc), want, rtol=8 * 2.0**-24)


def test_rope_kv_theta_1_is_refused(queue):
    """D38: theta = 1 exactly (the rule is > 1)."""
    q = dpnp.zeros((1, 2, 64), dtype=np.float16, sycl_queue=queue)
    k = dpnp.zeros((1, 2, 64), dtype=np.float16, sycl_queue=queue)
    v = dpnp.zeros((1, 2, 64), dtype=np.float16, sycl_queue=queue)
    pos = dpnp.asarray(np.array([0], np.int32), sycl_queue=queue)
    kc = dpnp.zeros((2, 4, 64), dtype=np.float16, sycl_queue=queue)
    vc = dpnp.zeros((2, 4, 64), dtype=np.float16, sycl_queue=queue)
    with pytest.raises(xe2rt.InputError, match=r"theta \(rope_theta\) must be a finite number > 1, got 1"):
        xe2rt.rope_kv(q, k, v, pos, kc, vc, theta=1.0)


def test_rope_kv_rejection_writes_nothing_unwrapped(queue):
    """D37: the op itself (not only its fastcall wrapper, whose cold call defers launches until the op returns)
    checks positions before it launches."""
    from xe2rt.ops import decoder_small
    full = lambda shape: dpnp.full(shape, 7.0, dtype=np.float16, sycl_queue=queue)
    q, k, v, kc, vc = full((2, 4, 64)), full((2, 2, 64)), full((2, 2, 64)), full((2, 8, 64)), full((2, 8, 64))
    pos = dpnp.asarray(np.array([5, 5], np.int32), sycl_queue=queue)
    with pytest.raises(xe2rt.InputError, match="positions must be distinct"):
        decoder_small.run_rope_kv(q, k, v, pos, kc, vc, theta=10000.0)
    queue.wait()
    for a in (q, k, kc, vc):
        assert (a.asnumpy() == 7.0).all()
