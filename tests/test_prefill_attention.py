"""prefill_attention: every case of xe2rt.checks.prefill_attention (float64 reference, derived elementwise bound) on
each kernel target it is meant for (bmg / lnl: the Xe2 kernels with software DPAS and 2D block reads on the CPU
device), the kernel choice and geometry, the static Xe2 report, and every bad-input rule (rejected before launch,
nothing written)."""
import numpy as np
import pytest

import dpctl
import dpnp

import xe2rt
from xe2rt import artifacts
from xe2rt.checks import prefill_attention as C
from xe2rt.errors import InputError, InputTypeError
from xe2rt.ops import prefill_attention as P
from conftest import to_device

CASES = [(check, target) for check in C.checks() for target in check.targets]


@pytest.mark.parametrize("check, target", CASES, ids=[f"{c.name}-{t}" for c, t in CASES])
def test_against_float64_reference(queue, check, target):
    result = check.run(queue, target)
    assert result.passed, f"{check} on {target}: {result.describe()}"


def test_quick_checks_are_a_subset():
    quick = {c.name for c in C.checks(quick=True)}
    assert quick and quick <= {c.name for c in C.checks()}


def test_default_target_and_public_export(queue, rng):
    """xe2rt.prefill_attention on the CPU device (default target cpu) returns without waiting and matches the
    explicit cpu launch bit for bit; causal and non-causal differ except on the last row."""
    q, k, v = (to_device(rng.standard_normal(s).astype(np.float16), queue) for s in [(20, 4, 64), (20, 2, 64),
                                                                                    (20, 2, 64)])
    a = dpnp.asnumpy(xe2rt.prefill_attention(q, k, v))
    b = dpnp.asnumpy(P.run(q, k, v, target="cpu")[0])
    full = dpnp.asnumpy(xe2rt.prefill_attention(q, k, v, causal=False))
    assert np.array_equal(a, b)
    assert np.array_equal(a[-1], full[-1])  # the last row sees every token either way
    assert np.abs(a[:-1].astype(np.float32) - full[:-1]).max() > 1e-2


def test_geometry():
    xe2 = {"XE2_SHAPE": 1, "GROUP_HEADS": 8}
    assert P.geometry(xe2, 17, 32, 8) == {"local": (16, 4), "global": (32, 32)}
    assert P.geometry(xe2, 4096, 32, 2) == {"local": (16, 8), "global": (4096, 32)}
    assert P.geometry(xe2, 1, 12, 4) == {"local": (16, 1), "global": (16, 12)}  # ratio 3: one head per group
    assert P.geometry({"XE2_SHAPE": 0, "KB": 16}, 17, 32, 8) == {"local": (16, 1), "global": (32, 32)}


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_static_xe2_report(target):
    """The shipped native Xe2 binaries as ocloc compiled them (build_scripts/aot.py): SIMD16, no spills, no
    private-memory sends, DPAS in every kernel, a hot loop of 2D block loads with >= 2 DPAS per send (prefetches
    counted as sends)."""
    entry = artifacts.manifest()["artifacts"][f"{target}/prefill_attention.spv"]
    report = entry.get("aot")
    assert report, "no AOT report recorded; run python build_scripts/aot.py"
    for d in P.HEAD_DIMS:
        k = report["kernels"][f"prefill_attention_d{d}"]
        hot = k["hot_loop"]
        assert k["simd_size"] == 16 and k["spill_size"] == 0 and k["private_sends"] == 0, k
        assert hot["block2d_loads"] > 0 and hot["dpas"] / hot["sends"] >= 2, hot


# ---- bad input: clear errors before launch, out untouched ----

def arrays(queue, t=8, hq=4, hkv=2, d=64, dtype=np.float16):
    return tuple(dpnp.zeros(s, dtype=dtype, sycl_queue=queue) for s in [(t, hq, d), (t, hkv, d), (t, hkv, d)])


@pytest.mark.parametrize("shapes, message", [
    (((8, 4, 64), (9, 2, 64), (9, 2, 64)), "same number of tokens"),
    (((8, 4, 64), (8, 2, 64), (8, 1, 64)), "same shape"),
    (((8, 4, 64), (8, 2, 128), (8, 2, 128)), "same head_dim"),
    (((8, 6, 64), (8, 4, 64), (8, 4, 64)), "multiple of KV heads"),
    (((8, 0, 64), (8, 2, 64), (8, 2, 64)), "Hq = 0 must be a positive multiple"),
    (((8, 4, 96), (8, 2, 96), (8, 2, 96)), "64 or 128"),
    (((8, 4, 32), (8, 2, 32), (8, 2, 32)), "64 or 128"),
    (((4097, 1, 64), (4097, 1, 64), (4097, 1, 64)), "[1, 4096]"),
    (((0, 1, 64), (0, 1, 64), (0, 1, 64)), "[1, 4096]"),
    (((8, 256), (8, 2, 64), (8, 2, 64)), "3-D"),
])
@pytest.mark.parametrize("target", ["cpu", "bmg"])
def test_bad_shapes(queue, shapes, message, target):
    q, k, v = (dpnp.zeros(s, dtype=np.float16, sycl_queue=queue) for s in shapes)
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        P.run(q, k, v, target=target, variant="xe2emu" if target == "bmg" else "native")


@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_wrong_dtype(queue, which, dtype):
    q, k, v = arrays(queue)
    given = {"q": q, "k": k, "v": v}
    given[which] = given[which].astype(dtype)
    with pytest.raises(InputTypeError, match=f"{which} must be float16"):
        xe2rt.prefill_attention(**given)


def test_not_a_device_array(queue):
    q, k, v = arrays(queue)
    with pytest.raises(InputTypeError, match="dpnp array"):
        xe2rt.prefill_attention(dpnp.asnumpy(q), k, v)
    with pytest.raises(InputTypeError, match=r"out must be a dpnp array .*dpnp.asarray\(out\)"):
        xe2rt.prefill_attention(q, k, v, out=np.zeros(q.shape, np.float16))


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_non_contiguous_views(queue, which):
    q, k, v = arrays(queue)
    given = {"q": q, "k": k, "v": v}
    big = dpnp.zeros((given[which].shape[0], given[which].shape[1], 128), dtype=np.float16, sycl_queue=queue)
    given[which] = big[:, :, ::2]  # D = 64 values at stride 2
    with pytest.raises(InputError, match="C-contiguous"):
        xe2rt.prefill_attention(**given)


def test_arrays_on_different_queues(queue):
    other = dpctl.SyclQueue(queue.sycl_context, queue.sycl_device)
    q, k, v = arrays(queue)
    with pytest.raises(InputError, match="share a queue"):
        xe2rt.prefill_attention(q, k, dpnp.asarray(v, sycl_queue=other))


def test_bad_out_scale_causal_variant(queue):
    q, k, v = arrays(queue)
    with pytest.raises(InputError, match="out must have shape"):
        xe2rt.prefill_attention(q, k, v, out=dpnp.zeros((8, 4, 128), dtype=np.float16, sycl_queue=queue))
    with pytest.raises(InputError, match="overlaps input q"):
        xe2rt.prefill_attention(q, k, v, out=q)
    for scale, error in ((float("nan"), InputError), ("0.1", InputTypeError), (True, InputTypeError),
                         (1e38, InputError)):
        with pytest.raises(error, match="scale must be|scale\\| must be <="):
            xe2rt.prefill_attention(q, k, v, scale=scale)
    with pytest.raises(InputTypeError, match="causal must be True or False, got int 1"):
        xe2rt.prefill_attention(q, k, v, causal=1)
    with pytest.raises(InputError, match="variant must be"):
        P.run(q, k, v, variant="fast")


def test_rejected_call_writes_nothing_and_leaves_the_op_usable(queue, rng):
    q, k, v = (to_device(rng.standard_normal(s).astype(np.float16), queue) for s in [(8, 4, 64), (8, 2, 64),
                                                                                  (8, 2, 64)])
    out = dpnp.full((8, 4, 64), 7.0, dtype=np.float16, sycl_queue=queue)
    with pytest.raises(InputError):
        xe2rt.prefill_attention(q, k[:, :1], v, out=out)
    assert np.all(dpnp.asnumpy(out) == 7.0)
    xe2rt.prefill_attention(q, k, v, out=out)
    assert np.all(np.isfinite(dpnp.asnumpy(out))) and not np.all(dpnp.asnumpy(out) == 7.0)


def test_unaligned_base_breaks_the_2d_rules_on_xe2(queue, rng):
    """A view starting 2 bytes into its buffer is C-contiguous but not 64-byte aligned: the Xe2 kernels refuse it
    (their 2D block loads would be undefined), the cpu kernels take it."""
    flat = dpnp.zeros(1 + 8 * 4 * 64, dtype=np.float16, sycl_queue=queue)
    q = flat[1:].reshape(8, 4, 64)
    _, k, v = arrays(queue)
    with pytest.raises(InputError, match="64-byte aligned"):
        P.run(q, k, v, target="bmg", variant="xe2emu")
    P.run(q, k, v, target="cpu")[0].sycl_queue.wait()


def test_native_xe2_binary_refused_on_a_cpu_device(queue):
    q, k, v = arrays(queue)
    with pytest.raises(xe2rt.TargetError, match="needs an Intel Xe2 GPU"):
        P.run(q, k, v, target="bmg")


def test_cpu_scratch_does_not_pile_up_across_unwaited_calls(queue, rng):
    """The cpu kernels' fp32 K/V scratch is the thread's workspace for the queue (grown as needed), not a fresh array
    per call: a model's prompt queues one call per layer without waiting, and fresh scratch stayed allocated until
    each call's kernels had run (16 layers x 16 MB at a 4000-token Llama-3.2-1B prompt). Sixteen calls queued
    without waiting, RSS sampled every millisecond: growth within 4 scratch sizes (fresh arrays: 16)."""
    import os
    import threading
    import time
    t, hq, hkv, d = 1024, 8, 8, 128
    scratch = 4 * P.cpu_scratch_floats(P.program_for(queue, P.FAMILIES["native"], "cpu").constants, t, hkv, d)
    q, k, v = (to_device(rng.standard_normal((t, h, d)).astype(np.float16), queue) for h in (hq, hkv, hkv))
    out = dpnp.empty((t, hq, d), dtype=np.float16, sycl_queue=queue)
    P.run(q, k, v, out=out, target="cpu")
    queue.wait()
    page = os.sysconf("SC_PAGE_SIZE")

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    peak, stop = [rss()], []

    def sample():
        while not stop:
            peak[0] = max(peak[0], rss())
            time.sleep(0.001)

    start = rss()
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    for _ in range(16):
        P.run(q, k, v, out=out, target="cpu")
    queue.wait()
    stop.append(True)
    watcher.join()
    assert peak[0] - start <= 4 * scratch, ((peak[0] - start) / 2**20, scratch / 2**20)



def test_cpu_scratch_pad_rows_do_not_leak_stale_values(queue):
    """The cpu kernels convert K and V to an fp32 scratch in blocks of 16 tokens; the pad rows past T in the last
    block get weight 0, so they must hold zeros, not whatever the reused workspace held: NaN there (a previous
    call's data could be anything) must not reach any output, at T not a multiple of 16."""
    from xe2rt.ops.common import workspace
    workspace(P.OP, queue, 1 << 20, np.float32)[...] = np.nan
    for check in C.checks():
        if check.name.startswith(("T=17 Hq=4 Hkv=1 D=64 full", "T=40 ")):
            result = check.run(queue, "cpu")
            assert result.passed, f"{check} after a NaN workspace: {result.describe()}"


@pytest.mark.parametrize("target", ["cpu", "bmg", "lnl"])
def test_softmax_sum_adds_the_weights_pv_uses(queue, target):
    """All V rows 1.0, so the output is a convex combination of equal rows: exactly 1.0 when the softmax's sum adds
    the same (rounded) weights the P V product multiplies with. Token 0's score is `scale`, every other token's 0, with
    scale = -ln(p) for a p whose fp16 rounding error is 0.45 ulp, the same for every token, so a sum of unrounded
    weights against fp16 weights in P V would give 0.9995 in every output, well inside the derived bound."""
    p = 0.75 + 0.45 * 2.0**-11
    t, d = 33, 64
    q = np.zeros((t, 4, d), np.float16)
    q[:, :, 0] = 1
    k = np.zeros((t, 1, d), np.float16)
    k[0, 0, 0] = 1
    v = np.ones((t, 1, d), np.float16)
    for causal in (False, True):
        got, _ = P.run(*(to_device(a, queue) for a in (q, k, v)), causal=causal, scale=float(-np.log(p)),
                       target=target, variant=C.variant_for(queue, target))
        g = dpnp.asnumpy(got)
        assert (g == 1).all(), f"causal={causal}: {int((g != 1).sum())} of {g.size} outputs differ from 1.0"


def test_reference_ignores_a_future_tokens_non_finite_v():
    """In the float64 reference a causal row never reads a later token: with inf in token 10's v, rows 0-9 equal the
    attention of the first 10 tokens alone (they were NaN: weight 0 times inf), rows 10-19 are not finite. (The
    kernels multiply whole 16-token blocks: docs/prefill_attention.md, Accuracy.)"""
    from xe2rt.reference import attention as R
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in [(20, 4, 64), (20, 2, 64), (20, 2, 64)])
    v[10, 1, 3] = np.inf
    ref = R.prefill_attention_ref(q, k, v)
    np.testing.assert_allclose(ref[:10], R.prefill_attention_ref(q[:10], k[:10], v[:10]), rtol=1e-12, atol=0)
    assert not np.isfinite(ref[10:, 2:, 3]).any() and np.isfinite(ref[:, :2]).all()
