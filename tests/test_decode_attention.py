"""decode_attention on the CPU device, every target's binary (the Xe2 ones through the same loader), against the
float64 reference with the derived elementwise bound (xe2rt.checks.decode_attention); then bad input, out=, warm
calls and bind."""
import math

import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt.checks import decode_attention as cases
from xe2rt.ops import decode_attention as op
from xe2rt.reference.attention import decode_attention_bound, decode_attention_ref

from conftest import TARGETS, to_device

# The Xe2-shaped kernels run slowly on the CPU device (sub-groups emulated): all paths, fewer long cases.
XE2_SKIP = {"L=4095 Llama-3.1-8B (Hq 32, Hkv 8, D 128)", "L=2048 Qwen3-4B (Hq 32, Hkv 8, D 128)",
            "L=4095 G=16 D=128"}
# The cpu cases run both cpu families on every host: op.family() takes decode_attention_cpu256 on hosts without
# AVX-512 and the default kernels elsewhere, and either runs on any x86 host.
CPU_FAMILIES = (op.FAMILY, op.CPU256_FAMILY)
PARAMS = [pytest.param(check, target, family, id=f"{target}-{check.name}" + (f"-{family}" if family else ""))
          for check in cases.checks() for target in TARGETS
          for family in (CPU_FAMILIES if target == "cpu" else (None,))
          if target in check.targets and (target == "cpu" or check.name not in XE2_SKIP)]


@pytest.mark.parametrize("check,target,family", PARAMS)
def test_matches_reference(queue, monkeypatch, check, target, family):
    if family is not None:
        monkeypatch.setattr(op, "family", lambda queue, target: family)
    result = check.run(queue, target)
    assert result.passed, result.describe()


def test_family_follows_the_host_isa(queue):
    from xe2rt import targets
    narrow = targets.cpu_256bit(queue.sycl_device, "cpu")
    assert narrow == (not targets.cpu_has_flag(queue.sycl_device, "avx512f"))
    assert op.family(queue, "cpu") == (op.CPU256_FAMILY if narrow else op.FAMILY)
    assert op.family(queue, "bmg") == op.family(queue, "lnl") == op.FAMILY


@pytest.mark.parametrize("target", TARGETS)
def test_heads_in_lanes_kernels_only_for_g_multiple_of_8(queue, target):
    """decode_attention_cpu256 has decode_attention_g8_* (Q K^T and the softmax 8 heads at a time), taken exactly when
    G is a multiple of 8; the default cpu family and the Xe2 binaries have none, and their names never change."""
    from xe2rt.ops.common import program_for
    families = (op.FAMILY, op.CPU256_FAMILY) if target == "cpu" else (op.FAMILY,)
    for family in families:
        program = program_for(queue, family, target)
        lanes = family == op.CPU256_FAMILY
        assert any("_g8_" in n for n in program.kernel_names) == lanes
        for g in (1, 3, 4, 8, 12, 16):
            split, split_at, merge = op.kernel_names(128, g, program)
            g8 = lanes and g % 8 == 0
            assert (split, split_at) == (("decode_attention_g8_d128", "decode_attention_at_g8_d128") if g8 else
                                         ("decode_attention_d128", "decode_attention_at_d128"))
            assert merge == "decode_attention_reduce_d128"


def _inputs(queue, hq=8, hkv=2, d=64, t=40, seed=3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((hq, d), dtype=np.float32).astype(np.float16)
    k = rng.standard_normal((hkv, t, d), dtype=np.float32).astype(np.float16)
    v = rng.standard_normal((hkv, t, d), dtype=np.float32).astype(np.float16)
    return (q, k, v), (to_device(q, queue), to_device(k, queue), to_device(v, queue))


def _close(y, q, k, v, length, scale=None):
    err = np.abs(dpnp.asnumpy(y).astype(np.float64) - decode_attention_ref(q, k, v, length, scale))
    assert np.all(err <= decode_attention_bound(q, k, v, length, scale))


@pytest.mark.parametrize("scale", [-1.0, -0.125, 0.0])
def test_negative_and_zero_scales_within_the_bound(queue, scale):
    """A negative scale flips every score (the same output as -q with -scale, bit for bit); the bound follows |scale|
    (decode_attention_bound took c = scale log2 e, negative, and was too small by up to 69x for these)."""
    (q, k, v), (qd, kd, vd) = _inputs(queue, hq=4, hkv=1, d=64, t=300)
    y = xe2rt.decode_attention(qd, kd, vd, 300, scale=scale)
    _close(y, q, k, v, 300, scale)
    if scale:
        flipped = xe2rt.decode_attention(to_device(-q, queue), kd, vd, 300, scale=-scale)
        np.testing.assert_array_equal(dpnp.asnumpy(y), dpnp.asnumpy(flipped))


@pytest.mark.parametrize("target", TARGETS)
def test_out_warm_calls_and_bind(queue, target):
    (q, k, v), (qd, kd, vd) = _inputs(queue)
    out = dpnp.full((8, 64), 7, dtype=np.float16, sycl_queue=queue)
    assert xe2rt.decode_attention(qd, kd, vd, 33, out=out, target=target) is out
    _close(out, q, k, v, 33)
    # warm calls (same shapes: replayed) with new contents and a new length
    for length in (33, 33, 40):
        (q2, k2, v2), (qd2, kd2, vd2) = _inputs(queue, seed=length)
        _close(xe2rt.decode_attention(qd2, kd2, vd2, length, target=target), q2, k2, v2, length)
    plan = xe2rt.bind(xe2rt.decode_attention, qd, kd, vd, 39, target=target)
    _close(plan(), q, k, v, 39)
    q3 = -q
    qd[...] = to_device(q3, queue)
    _close(plan(), q3, k, v, 39)


@pytest.mark.parametrize("target,hq", [(t, 4) for t in TARGETS] + [("cpu", 8)] * ("cpu" in TARGETS))
def test_device_length_one_plan_serves_every_length(queue, target, hq):
    """A length in device memory (read when the kernel runs): one plan, bound once, for every length up to
    max_length, split (S > 1: the chunk is derived in the kernel) or not; values outside [1, max_length] clamp.
    G = 8 on the cpu: decode_attention_at_g8_d128 where the host takes decode_attention_cpu256."""
    t = 1100 if target == "cpu" else 300  # S = 4 on a 2-unit cpu (FILL 4, Hkv 1), S = 5 on Xe2 (MIN_CHUNK 64)
    (q, k, v), (qd, kd, vd) = _inputs(queue, hq=hq, hkv=1, d=128, t=t, seed=5)
    length = dpnp.zeros(1, dtype=np.int32, sycl_queue=queue)
    out = dpnp.empty((hq, 128), dtype=np.float16, sycl_queue=queue)
    plan = xe2rt.bind(xe2rt.decode_attention, qd, kd, vd, length, max_length=t, out=out, target=target)
    assert plan.launches == 2  # split: partials and the reduce
    for n in (1, 17, t // 2 + 3, t - 1, t):
        length[...] = n
        plan()
        _close(out, q, k, v, n)
    for stored, used in ((0, 1), (-5, 1), (t + 50, t)):
        length[...] = stored
        plan()
        _close(out, q, k, v, used)
    short = xe2rt.bind(xe2rt.decode_attention, qd, kd, vd, length, max_length=40, out=out, target=target)
    assert short.launches == 1  # S = 1 for 40 tokens
    length[...] = 1000  # clamped to max_length
    short()
    _close(out, q, k, v, 40)
    # the op called directly with a device length: the same results
    length[...] = 77
    _close(xe2rt.decode_attention(qd, kd, vd, length, max_length=t, target=target), q, k, v, 77)


def test_device_length_bad_input(queue):
    _, (qd, kd, vd) = _inputs(queue)
    one = dpnp.full(1, 20, dtype=np.int32, sycl_queue=queue)
    with pytest.raises(xe2rt.InputTypeError, match="needs max_length"):
        xe2rt.decode_attention(qd, kd, vd, one)
    with pytest.raises(xe2rt.InputError, match="max_length must satisfy 1 <= max_length <= max_tokens = 40 .*got 41"):
        xe2rt.decode_attention(qd, kd, vd, one, max_length=41)
    with pytest.raises(xe2rt.InputError, match="got 0"):
        xe2rt.decode_attention(qd, kd, vd, one, max_length=0)
    with pytest.raises(xe2rt.InputError, match="max_length applies to a device length only"):
        xe2rt.decode_attention(qd, kd, vd, 20, max_length=20)
    with pytest.raises(xe2rt.InputError, match="one element, got shape \\(2,\\)"):
        xe2rt.decode_attention(qd, kd, vd, dpnp.zeros(2, dtype=np.int32, sycl_queue=queue), max_length=20)
    with pytest.raises(xe2rt.InputTypeError, match="length must be int32, got int64"):
        xe2rt.decode_attention(qd, kd, vd, dpnp.zeros(1, dtype=np.int64, sycl_queue=queue), max_length=20)
    other = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
    with pytest.raises(xe2rt.InputError, match="different queues"):
        xe2rt.decode_attention(qd, kd, vd, dpnp.zeros(1, dtype=np.int32, sycl_queue=other), max_length=20)
    (q, k, v), _ = _inputs(queue)
    _close(xe2rt.decode_attention(qd, kd, vd, one, max_length=40), q, k, v, 20)  # still usable


def test_warm_calls_are_replayed(queue):
    """The workspace reaches the recorded op as an argument, so warm calls replay instead of running the op."""
    from xe2rt import fastcall
    (q, k, v), (qd, kd, vd) = _inputs(queue, seed=11)
    xe2rt.decode_attention(qd, kd, vd, 31, target="cpu")
    entries = [e for key, e in fastcall._entries.items() if key[0] is op._with_workspace and 31 in key]
    assert entries and all(isinstance(e, fastcall._Entry) for e in entries)
    _close(xe2rt.decode_attention(qd, kd, vd, 31, target="cpu"), q, k, v, 31)


def test_split_rule_documented_examples():
    """The rule of the module docstring, at its stated examples."""
    bmg = {"GH": 4, "BT": 16, "MIN_CHUNK": 64, "MAX_SPLITS": 128}
    cpu = {"BT": 16, "MIN_CHUNK": 256, "MAX_SPLITS": 128, "ITEMS_PER_CU": 2}
    assert op.split_plan(bmg, "bmg", 640, 8, 4, 32768) == (80, 416)
    assert op.split_plan(bmg, "bmg", 640, 8, 4, 5120) == (80, 64)
    assert op.split_plan(bmg, "bmg", 640, 8, 4, 17) == (1, 32)
    assert op.split_plan(bmg, "bmg", 640, 1, 16, 32768) == (128, 256)  # MAX_SPLITS
    # 2 compute units x ITEMS_PER_CU 2 = 4 work-items fill this machine's cpu
    assert op.split_plan(cpu, "cpu", 4, 8, 4, 32768) == (1, 32768)
    assert op.split_plan(cpu, "cpu", 4, 4, 8, 32768) == (1, 32768)
    assert op.split_plan(cpu, "cpu", 4, 2, 16, 32768) == (2, 16384)
    assert op.split_plan(cpu, "cpu", 4, 1, 4, 300) == (2, 160)
    for length in (1, 15, 16, 17, 4095, 32768):
        s, chunk = op.split_plan(bmg, "bmg", 640, 2, 8, length)
        assert chunk % 16 == 0 and s * chunk >= length and (s - 1) * chunk < length + chunk


# ---- bad input: raised before any launch, with the rule and the value ----

def _bad(queue, **changes):
    _, (qd, kd, vd) = _inputs(queue)
    args = {"q": qd, "k_cache": kd, "v_cache": vd, "length": 20}
    args.update(changes)
    return args


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("what,changes,error,match", [
    ("heads not dividing", lambda q: {"q": dpnp.zeros((7, 64), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "multiple of the kv heads"),
    ("G above 16", lambda q: {"q": dpnp.zeros((34, 64), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "within 1..16"),
    ("D 96", lambda q: {"q": dpnp.zeros((8, 96), dtype=np.float16, sycl_queue=q),
                        "k_cache": dpnp.zeros((2, 40, 96), dtype=np.float16, sycl_queue=q),
                        "v_cache": dpnp.zeros((2, 40, 96), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "must be 64 or 128, got D = 96"),
    ("q D differs", lambda q: {"q": dpnp.zeros((8, 128), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "caches' D = 64"),
    ("v shape differs", lambda q: {"v_cache": dpnp.zeros((2, 41, 64), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "v_cache must have k_cache's shape"),
    ("length 0", lambda q: {"length": 0}, xe2rt.InputError, "got 0"),
    ("length past the cache", lambda q: {"length": 41}, xe2rt.InputError, "max_tokens = 40"),
    ("length float", lambda q: {"length": 20.0}, xe2rt.InputTypeError, "length must be an int"),
    ("length bool", lambda q: {"length": True}, xe2rt.InputTypeError, "length must be an int"),
    ("q float32", lambda q: {"q": dpnp.zeros((8, 64), dtype=np.float32, sycl_queue=q)},
     xe2rt.InputTypeError, "q must be float16"),
    ("k bfloat-ish float32", lambda q: {"k_cache": dpnp.zeros((2, 40, 64), dtype=np.float32, sycl_queue=q)},
     xe2rt.InputTypeError, "k_cache must be float16"),
    ("k not contiguous", lambda q: {"k_cache": dpnp.zeros((2, 40, 128), dtype=np.float16, sycl_queue=q)[:, :, ::2]},
     xe2rt.InputError, "k_cache must be C-contiguous"),
    ("v not contiguous", lambda q: {"v_cache": dpnp.zeros((2, 80, 64), dtype=np.float16, sycl_queue=q)[:, ::2]},
     xe2rt.InputError, "v_cache must be C-contiguous"),
    ("k 2-D", lambda q: {"k_cache": dpnp.zeros((40, 64), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "k_cache must be 3-D"),
    ("q numpy", lambda q: {"q": np.zeros((8, 64), dtype=np.float16)}, xe2rt.InputTypeError, "dpnp array"),
    ("scale string", lambda q: {"scale": "0.1"}, xe2rt.InputTypeError, "scale must be a real number"),
    ("scale inf", lambda q: {"scale": float("inf")}, xe2rt.InputError, "scale must be finite"),
    ("scale 1e38", lambda q: {"scale": 1e38}, xe2rt.InputError, r"\|scale\| must be <= .* for D = 64"),
    ("length numpy", lambda q: {"length": np.array([17], np.int32)}, xe2rt.InputTypeError,
     r"got a numpy array .*dpnp.asarray\(length"),
    ("out wrong shape", lambda q: {"out": dpnp.zeros((8, 32), dtype=np.float16, sycl_queue=q)},
     xe2rt.InputError, "out must have shape"),
    ("out float32", lambda q: {"out": dpnp.zeros((8, 64), dtype=np.float32, sycl_queue=q)},
     xe2rt.InputTypeError, "out must be float16"),
    ("out numpy", lambda q: {"out": np.zeros((8, 64), dtype=np.float16)}, xe2rt.InputTypeError,
     r"out must be a dpnp array .*dpnp.asarray\(out\)"),
])
def test_bad_input(queue, target, what, changes, error, match):
    args = _bad(queue, **changes(queue))
    with pytest.raises(error, match=match):
        xe2rt.decode_attention(args.pop("q"), args.pop("k_cache"), args.pop("v_cache"), args.pop("length"),
                               target=target, **args)


@pytest.mark.parametrize("target", TARGETS)
def test_nan_and_inf_scores_propagate(queue, target):
    """A NaN in a key inside the context poisons every head of its kv head, a NaN in one query head only that head,
    and a +inf score (inf - inf in the softmax) its head, as in the float64 reference: never finite garbage."""
    (q, k, v), _ = _inputs(queue, hq=4, hkv=1, t=20)

    def nan_heads(q, k):
        y = dpnp.asnumpy(xe2rt.decode_attention(to_device(q, queue), to_device(k, queue), to_device(v, queue), 20,
                                                target=target))
        with np.errstate(invalid="ignore", over="ignore"):
            ref = decode_attention_ref(q, k, v, 20)
        return list(np.isnan(y).all(axis=1)), list(np.isnan(ref).all(axis=1)), np.isfinite(y).all(axis=1)
    k_nan = k.copy()
    k_nan[0, 5, 3] = np.nan
    got, ref, _ = nan_heads(q, k_nan)
    assert ref == [True] * 4 and got == ref
    q_nan = q.copy()
    q_nan[1, 0] = np.nan
    got, ref, finite = nan_heads(q_nan, k)
    assert ref == [False, True, False, False] and got == ref and finite[[0, 2, 3]].all()
    k_inf = k.copy()
    k_inf[0, 7, :] = 0
    k_inf[0, 7, 0] = np.inf  # score +inf for the heads with q[h, 0] > 0, -inf for the others
    got, ref, _ = nan_heads(q, k_inf)
    assert any(ref) and not all(ref) and got == ref


@pytest.mark.parametrize("target", TARGETS)
def test_out_overlapping_input_refused(queue, target):
    _, (qd, kd, vd) = _inputs(queue)
    with pytest.raises(xe2rt.InputError, match="out overlaps input q"):
        xe2rt.decode_attention(qd, kd, vd, 20, out=qd, target=target)


def test_arrays_on_different_queues(queue):
    other = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
    (q, k, v), (qd, kd, vd) = _inputs(queue)
    with pytest.raises(xe2rt.InputError, match="different queues"):
        xe2rt.decode_attention(qd, kd, to_device(v, other), 20)
    with pytest.raises(xe2rt.InputError, match="different queues"):
        xe2rt.decode_attention(qd, kd, vd, 20, out=dpnp.empty((8, 64), dtype=np.float16, sycl_queue=other))
    # a rejected call leaves everything usable
    _close(xe2rt.decode_attention(qd, kd, vd, 20), q, k, v, 20)


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_xe2_misaligned_view_refused(queue, target):
    _, (qd, kd, vd) = _inputs(queue)
    flat = dpnp.zeros(2 * 40 * 64 + 1, dtype=np.float16, sycl_queue=queue)
    shifted = flat[1:].reshape(2, 40, 64)  # starts 2 bytes into the allocation
    with pytest.raises(xe2rt.InputError, match="16-byte aligned"):
        xe2rt.decode_attention(qd, shifted, vd, 20, target=target)


def test_cpu_accepts_misaligned_view(queue):
    (q, k, v), (qd, kd, vd) = _inputs(queue)
    flat = dpnp.zeros(k.size + 1, dtype=np.float16, sycl_queue=queue)
    flat[1:] = to_device(k.reshape(-1), queue)
    _close(xe2rt.decode_attention(qd, flat[1:].reshape(k.shape), vd, 20, target="cpu"), q, k, v, 20)


def test_threads_on_one_queue_use_their_own_workspace(queue):
    """Two threads calling on one queue with split contexts (S = 4 on a 2-unit cpu, a reduce per call): each
    thread's workspace is its own, so every result matches its reference."""
    import threading
    length, results, errors = 1024, {}, []

    def worker(seed):
        try:
            (q, k, v), (qd, kd, vd) = _inputs(queue, hq=4, hkv=1, d=64, t=length, seed=seed)
            outs = [xe2rt.decode_attention(qd, kd, vd, length - i, target="cpu") for i in range(12)]
            results[seed] = (q, k, v, [dpnp.asnumpy(y) for y in outs])
        except Exception as exc:  # reported below, with the thread's seed
            errors.append((seed, exc))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in (21, 22)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for q, k, v, outs in results.values():
        for i, y in enumerate(outs):
            err = np.abs(y.astype(np.float64) - decode_attention_ref(q, k, v, length - i))
            assert np.all(err <= decode_attention_bound(q, k, v, length - i))


def test_decode_attention_default_scale_is_head_dim_to_minus_half(queue):
    """R40: the default score scale against HF's head_dim ** -0.5, from a closed form: two tokens, q . k0 = 16,
    q . k1 = 0, v0 = e0, v1 = e1 -> out[0] = sigmoid(16 / sqrt(64)) = sigmoid(2)."""
    d = 64
    q = np.zeros((1, d), np.float16)
    q[0, 0] = 4
    k = np.zeros((1, 4, d), np.float16)
    k[0, 0, 0] = 4
    v = np.zeros((1, 4, d), np.float16)
    v[0, 0, 0] = 1
    v[0, 1, 1] = 1
    out = xe2rt.decode_attention(dpnp.asarray(q, sycl_queue=queue), dpnp.asarray(k, sycl_queue=queue),
                                 dpnp.asarray(v, sycl_queue=queue), 2).asnumpy()
    want = 1 / (1 + math.exp(-2.0))
    assert abs(float(out[0, 0]) - want) < 2e-3 and abs(float(out[0, 1]) - (1 - want)) < 2e-3
