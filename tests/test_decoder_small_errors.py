"""Bad input to rms_norm, rope_kv and silu_mul fails before launch with a message that states the rule and the value;
nothing is written (rope_kv's caches, q and k, and given out arrays keep their sentinel bytes)."""
import re

import dpctl
import numpy as np
import pytest

import xe2rt

from conftest import to_device

SENTINEL = 7.0


def full(queue, shape, value=SENTINEL, dtype=np.float16):
    return to_device(np.full(shape, value, dtype), queue)


def untouched(*arrays):
    for a in arrays:
        assert (a.asnumpy() == SENTINEL).all()


# ---- rope_kv ----

@pytest.fixture
def rope(queue):
    """Llama-3.1-8B-shaped T = 2 decode inputs and caches of 16 tokens, every array filled with the sentinel."""
    return dict(q=full(queue, (2, 32, 128)), k=full(queue, (2, 8, 128)), v=full(queue, (2, 8, 128)),
                positions=to_device(np.array([3, 4], np.int32), queue),
                k_cache=full(queue, (8, 16, 128)), v_cache=full(queue, (8, 16, 128)))


def call_rope(args, **kw):
    kw.setdefault("theta", 500000.0)
    return xe2rt.rope_kv(args["q"], args["k"], args["v"], args["positions"], args["k_cache"], args["v_cache"], **kw)


def rope_untouched(args):
    untouched(args["q"], args["k"], args["k_cache"], args["v_cache"])


@pytest.mark.parametrize("positions,match", [
    ([3, 16], r"positions must lie in \[0, max_tokens = 16\).*positions\[1\] = 16"),
    ([-1, 2], r"positions\[0\] = -1"),
    ([5, 5], r"positions must be distinct"),
])
def test_positions_past_the_cache(queue, rope, positions, match):
    rope["positions"] = to_device(np.array(positions, np.int32), queue)
    with pytest.raises(xe2rt.InputError, match=match):
        call_rope(rope)
    rope_untouched(rope)


@pytest.mark.parametrize("name,shape,match", [
    ("k", (2, 5, 128), r"multiple of the kv heads.*Hq = 32, Hkv = 5"),
    ("q", (2, 32, 96), r"head_dim .* must be 64 or 128, got 96"),
    ("k", (3, 8, 128), r"k must have shape \(2, 8, 128\)"),
    ("v", (2, 8, 64), r"v must have shape \(2, 8, 128\)"),
    ("k_cache", (4, 16, 128), r"k_cache must have shape \(8, 16, 128\)"),
    ("v_cache", (8, 17, 128), r"v_cache must have shape \(8, 16, 128\)"),
])
def test_shapes_that_disagree(queue, rope, name, shape, match):
    rope[name] = full(queue, shape)
    with pytest.raises(xe2rt.InputError, match=match):
        call_rope(rope)
    rope_untouched(rope)


@pytest.mark.parametrize("name,dtype,match", [
    ("q", np.float32, "q must be float16, got float32"),
    ("v", np.float32, "v must be float16"),
    ("k_cache", np.float32, "k_cache must be float16"),
    ("positions", np.int64, "positions must be int32, got int64"),
])
def test_wrong_dtypes(queue, rope, name, dtype, match):
    shape = rope[name].shape
    rope[name] = to_device(np.array([3, 4], dtype) if name == "positions" else np.full(shape, SENTINEL, dtype),
                           queue)
    with pytest.raises(xe2rt.InputTypeError, match=match):
        call_rope(rope)
    rope_untouched(rope)


def test_non_contiguous_cache(queue, rope):
    rope["k_cache"] = full(queue, (8, 32, 128))[:, ::2]
    with pytest.raises(xe2rt.InputError, match="k_cache must be C-contiguous"):
        call_rope(rope)
    rope_untouched(rope)


def test_cache_overlaps_k(queue, rope):
    rope["v_cache"] = rope["k_cache"]
    with pytest.raises(xe2rt.InputError, match="k_cache overlaps v_cache"):
        call_rope(rope)
    rope_untouched(rope)


@pytest.mark.parametrize("kw,err,match", [
    (dict(theta=0.5), xe2rt.InputError, r"theta \(rope_theta\) must be a finite number > 1, got 0.5"),
    (dict(scaling={"rope_type": "yarn", "factor": 4.0}), xe2rt.InputError, "rope_type 'llama3' only.*'yarn'"),
    (dict(scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}),
     xe2rt.InputError, r"scaling\['original_max_position_embeddings'\] must be a finite number > 0 .*, got None"),
    (dict(scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192}), xe2rt.InputError, "high_freq_factor > low_freq_factor"),
    # the frequencies are computed in float32: a field it rounds to 0, a subnormal or past its range would make them
    # inf or NaN (1e-50 gave NaN in q, k and the caches), and high - low divides
    *[(dict(scaling={"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}), xe2rt.InputError,
       rf"scaling\['factor'\] must be a finite number > 0 within float32's normal range "
       rf".*got {re.escape(repr(factor))}")
      for factor in (1e-50, 1e-40, 1e39)],
    (dict(scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0 + 1e-9,
                   "original_max_position_embeddings": 8192}), xe2rt.InputError,
     "high_freq_factor > low_freq_factor in float32"),
    (dict(scaling=[8.0]), xe2rt.InputTypeError, "scaling must be None, a rope_scaling dict"),
    (dict(qk_norm=(1, 2)), xe2rt.InputTypeError, r"qk_norm must be None or a \(q_weight, k_weight, eps\)"),
    (dict(check_positions=1), xe2rt.InputTypeError, "check_positions must be True or False"),
])
def test_bad_options(rope, kw, err, match):
    with pytest.raises(err, match=match):
        call_rope(rope, **kw)
    rope_untouched(rope)


def test_qk_norm_weights(queue, rope):
    with pytest.raises(xe2rt.InputError, match=r"qk_norm q_weight must have shape \(128,\)"):
        call_rope(rope, qk_norm=(full(queue, (64,)), full(queue, (128,)), 1e-6))
    with pytest.raises(xe2rt.InputError, match=r"qk_norm eps must be a real number in \[0, 3.4028235e\+38\] .*got -1"):
        call_rope(rope, qk_norm=(full(queue, (128,)), full(queue, (128,)), -1))
    # past float32's range: refused by the op's rule (it was refused only while packing the kernel's arguments,
    # naming the kernel)
    with pytest.raises(xe2rt.InputError, match=r"qk_norm eps must be a real number in .*got 1e\+39"):
        call_rope(rope, qk_norm=(full(queue, (128,)), full(queue, (128,)), 1e39))
    rope_untouched(rope)


def test_different_queues(queue, rope):
    other = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
    rope["v_cache"] = to_device(np.full((8, 16, 128), SENTINEL, np.float16), other)
    with pytest.raises(xe2rt.InputError, match="v_cache and q are on different queues"):
        call_rope(rope)
    rope_untouched(rope)


def test_usable_after_rejection(queue, rope):
    """A rejected call leaves everything usable: the same arrays then go through."""
    with pytest.raises(xe2rt.InputError):
        call_rope(rope, theta=-1.0)
    call_rope(rope)
    assert (rope["v_cache"].asnumpy()[:, 3:5] == SENTINEL).all()  # v copied (it holds the sentinel too)
    assert not (rope["k_cache"].asnumpy()[:, 3:5] == SENTINEL).all()  # rotated k written


# ---- rms_norm ----

@pytest.mark.parametrize("make,err,match", [
    (lambda q: dict(x=full(q, (2, 64), dtype=np.float32)), xe2rt.InputTypeError, "x must be float16, got float32"),
    (lambda q: dict(x=full(q, (64,))), xe2rt.InputError, "x must be 2-D or 3-D, got 1-D"),
    (lambda q: dict(weight=full(q, (32,))), xe2rt.InputError, r"weight must have shape \(64,\)"),
    (lambda q: dict(residual=full(q, (3, 64))), xe2rt.InputError, r"residual must have shape \(2, 64\)"),
    (lambda q: dict(eps=-1e-5), xe2rt.InputError, r"eps must be a real number in \[0, 3.4028235e\+38\] \(a "
                                                 r"float32: the kernels add it in float32\), got -1e-05"),
    (lambda q: dict(eps=float("nan")), xe2rt.InputError, "eps must be a real number in"),
    (lambda q: dict(eps=1e39), xe2rt.InputError, r"eps must be a real number in .*got 1e\+39"),
])
def test_rms_norm_bad_input(queue, make, err, match):
    args = dict(x=full(queue, (2, 64)), weight=full(queue, (64,)), eps=1e-5, residual=full(queue, (2, 64)))
    args.update(make(queue))
    out = (full(queue, (2, 64)), full(queue, (2, 64)))
    with pytest.raises(err, match=match):
        xe2rt.rms_norm(args.pop("x"), args.pop("weight"), out=out, **args)
    untouched(*out)


def test_rms_norm_out_rules(queue):
    x, w, r = full(queue, (2, 64)), full(queue, (64,)), full(queue, (2, 64))
    with pytest.raises(xe2rt.InputTypeError, match=r"with residual, out must be a \(y, s\) tuple"):
        xe2rt.rms_norm(x, w, eps=1e-5, residual=r, out=full(queue, (2, 64)))
    with pytest.raises(xe2rt.InputError, match="out overlaps input residual"):
        xe2rt.rms_norm(x, w, eps=1e-5, residual=r, out=(full(queue, (2, 64)), r))
    with pytest.raises(xe2rt.InputError, match="out overlaps input x"):
        xe2rt.rms_norm(x, w, eps=1e-5, out=x)
    untouched(x, r)


# ---- silu_mul ----

@pytest.mark.parametrize("shape,dtype,err,match", [
    ((2, 7), np.float16, xe2rt.InputError, "last axis must be 2 I with I >= 1.*got 7"),
    ((2, 8), np.float32, xe2rt.InputTypeError, "gate_up must be float16, got float32"),
    ((2, 2, 8), np.float16, xe2rt.InputError, "gate_up must be 2-D, got 3-D"),
])
def test_silu_mul_bad_input(queue, shape, dtype, err, match):
    out = full(queue, (2, 3))
    with pytest.raises(err, match=match):
        xe2rt.silu_mul(full(queue, shape, dtype=dtype), out=out)
    untouched(out)


def test_silu_mul_out_shape(queue):
    out = full(queue, (2, 3))
    with pytest.raises(xe2rt.InputError, match=r"out must have shape \(2, 4\), got \(2, 3\)"):
        xe2rt.silu_mul(full(queue, (2, 8)), out=out)
    untouched(out)


# ---- real-number arguments past float's range ----

HUGE = 10 ** 400  # a Python int float() cannot convert: it must be an InputError naming the value, not an OverflowError


@pytest.mark.parametrize("case", ["rms_norm eps", "rope_kv theta", "rope_kv scaling", "decode_attention scale",
                                  "prefill_attention scale", "softmax_stats temperature", "gemm_w4a16 activation"])
def test_huge_ints_and_unhashable_options_are_input_errors(queue, rope, case):
    x = full(queue, (2, 64))
    q, k = full(queue, (3, 4, 64)), full(queue, (3, 1, 64))
    scaling = {"rope_type": "llama3", "factor": HUGE, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    calls = {
        "rms_norm eps": (lambda: xe2rt.rms_norm(x, full(queue, (64,)), eps=HUGE), "eps must be a real number in"),
        "rope_kv theta": (lambda: xe2rt.rope_kv(**rope, theta=HUGE), r"theta \(rope_theta\) must be a finite number"),
        "rope_kv scaling": (lambda: xe2rt.rope_kv(**rope, theta=1e4, scaling=scaling),
                            r"scaling\['factor'\] must be a finite number > 0"),
        "decode_attention scale": (lambda: xe2rt.decode_attention(full(queue, (4, 64)), full(queue, (1, 8, 64)),
                                                                  full(queue, (1, 8, 64)), 3, scale=HUGE),
                                   "scale must be finite"),
        "prefill_attention scale": (lambda: xe2rt.prefill_attention(q, k, k, scale=-HUGE), "scale must be finite"),
        "softmax_stats temperature": (lambda: xe2rt.softmax_stats(x, temperature=HUGE), "temperature must be in"),
        "gemm_w4a16 activation": (lambda: xe2rt.gemm_w4a16(full(queue, (20, 64)), xe2rt.quantize_w4(
            np.ones((8, 64), np.float16), group_size=32).to_device(queue), activation=["relu"]),
            r"activation must be None, 'relu'.*got \['relu'\]"),
    }
    call, message = calls[case]
    with pytest.raises(xe2rt.InputError, match=message) as info:
        call()
    if case != "gemm_w4a16 activation":
        assert "10000000000" in str(info.value) and len(str(info.value)) < 300  # the value, named by its start
    untouched(*(a for name, a in rope.items() if name != "positions"), x)
