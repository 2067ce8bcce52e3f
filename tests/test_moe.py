"""moe_ffn_w4a16 on opencl:cpu against the float64 reference (xe2rt.reference.moe), with the derived per-element
fp32 bound (formula in that module) and a plain relative bar. The Xe2 binaries run here too (tests/test_moe_xe2.py)."""
import numpy as np
import pytest

import dpnp
import xe2rt
from xe2rt.ops import moe as op
from xe2rt.quant import QuantizedW4
from xe2rt.quant_experts import QuantizedW4Experts
from xe2rt.reference import moe as ref

from conftest import to_device


def random_experts(rng, e, h, i, group_size=128, symmetric=True, queue=None):
    """Uniform random codes and zero points, LLM-sized fp16 scales (0.005 .. 0.015 for gate_up; down scaled so
    outputs stay O(1) whatever I is)."""
    def stack(rows, k, scale):
        return QuantizedW4(rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8),
                           (rng.uniform(0.5, 1.5, size=(rows, k // group_size)) * scale).astype(np.float16),
                           None if symmetric else rng.integers(0, 16, size=(rows, k // group_size), dtype=np.uint8),
                           group_size)
    experts = QuantizedW4Experts(stack(e * 2 * i, h, 0.02), stack(e * h, i, 0.5 / np.sqrt(i)), e)
    return experts.to_device(queue) if queue is not None else experts


def routing(rng, t, k, e, pool=None, wdtype=np.float16):
    """ids [T, k] int32, distinct per token, drawn from the first `pool` experts (so experts repeat across tokens and
    experts past the pool are never chosen), weights [T, k] positive, each row summing to 1 as softmax_topk gives."""
    pool = e if pool is None else pool
    ids = np.stack([rng.choice(pool, size=k, replace=False) for _ in range(t)]).astype(np.int32).reshape(t, k)
    w = rng.uniform(0.1, 1.0, size=(t, k))
    return ids, (w / w.sum(axis=1, keepdims=True)).astype(wdtype)


def run_and_check(queue, rng, experts_dev, x, ids, w, target="cpu", rel=1e-2):
    (y_dev, invalid), _ = op.run(to_device(x, queue), experts_dev, to_device(ids, queue), to_device(w, queue),
                                 target=target)
    y = dpnp.asnumpy(y_dev).astype(np.float64)
    host = experts_dev.to_host()
    want, bound = ref.reference(x, host, ids, w, magic=ref.magic_for(target))
    assert y.shape == want.shape
    assert np.isfinite(y).all()
    diff = np.abs(y - want)
    bad = np.argwhere(diff > bound)
    assert bad.size == 0, f"{len(bad)} elements over the bound, first {bad[0]}: |y - ref| {diff[tuple(bad[0])]} > " \
                          f"{bound[tuple(bad[0])]}"
    assert diff.max() <= rel * np.abs(want).max() + 1e-3
    expected_invalid = int(((ids < 0) | (ids >= experts_dev.num_experts)).sum())
    assert int(dpnp.asnumpy(invalid)[0]) == expected_invalid
    return y, want


@pytest.mark.parametrize("t", [1, 3, 16, 64])
@pytest.mark.parametrize("group_size,symmetric", [(128, True), (32, False), (64, True)])
def test_moe_tokens(queue, rng, t, group_size, symmetric):
    """E 8, k 2, the ids drawn from 6 experts: experts repeat across tokens (at T = 64 an expert has ~21 pairs,
    several PB chunks) and experts 6, 7 are never chosen."""
    e, h, i, k = 8, 256, 384, 2
    experts = random_experts(rng, e, h, i, group_size, symmetric, queue)
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids, w = routing(rng, t, k, e, pool=6)
    run_and_check(queue, rng, experts, x, ids, w)


@pytest.mark.parametrize("wdtype", [np.float16, np.float32])
def test_moe_k1_and_weight_dtypes(queue, rng, wdtype):
    e, h, i = 5, 384, 256
    experts = random_experts(rng, e, h, i, 64, False, queue)
    x = rng.standard_normal((7, h)).astype(np.float16)
    ids, w = routing(rng, 7, 1, e, wdtype=wdtype)
    w[:] = rng.uniform(0.2, 1.5, size=w.shape)  # k = 1 with unnormalized weights: the weight must still scale y
    run_and_check(queue, rng, experts, x, ids, w)


def test_moe_all_tokens_one_expert_set(queue, rng):
    """Every token picks the same 3 experts: one slot per expert with T = 64 pairs (16 PB chunks)."""
    e, h, i, t = 16, 256, 256, 64
    experts = random_experts(rng, e, h, i, queue=queue)
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids = np.tile(np.array([[11, 2, 7]], dtype=np.int32), (t, 1))
    w = rng.uniform(0, 1, size=(t, 3)).astype(np.float32)
    run_and_check(queue, rng, experts, x, ids, w)


# tile 1: T k <= FUSED_PAIRS, the cpu groups the ids inside gate_up and down; tile 4: above it, the route kernel does
FUSED_AND_ROUTED = pytest.mark.parametrize("tile", [1, 4], ids=["fused", "routed"])


@FUSED_AND_ROUTED
def test_moe_token_repeats_an_expert(queue, rng, tile):
    """A token may name one expert twice (not what softmax_topk returns, but legal input): both pairs count."""
    e, h, i = 4, 128, 128
    experts = random_experts(rng, e, h, i, queue=queue)
    x = np.tile(rng.standard_normal((3, h)).astype(np.float16), (tile, 1))
    ids = np.tile(np.array([[1, 1], [0, 3], [3, 3]], dtype=np.int32), (tile, 1))
    w = np.tile(np.array([[0.25, 0.75], [0.5, 0.5], [1.0, 1.0]], dtype=np.float16), (tile, 1))
    y, want = run_and_check(queue, rng, experts, x, ids, w)
    # the first token's two pairs add up to one full pass through expert 1
    single, _ = ref.reference(x[:1], experts.to_host(), np.array([[1]], dtype=np.int32), np.ones((1, 1)))
    assert np.allclose(want[0], single[0], rtol=1e-12, atol=1e-12)


def test_moe_matches_dequantized_float_weights(queue, rng):
    """dequantize() is what the kernels multiply with: a float64 composition from it agrees with the reference."""
    e, h, i, t, k = 4, 256, 128, 5, 2
    experts = random_experts(rng, e, h, i, 32, False)
    gu, dn = experts.dequantize()
    assert gu.shape == (e, 2 * i, h) and dn.shape == (e, h, i) and gu.dtype == np.float32
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids, w = routing(rng, t, k, e)
    want, _ = ref.reference(x, experts, ids, w)
    y = np.zeros((t, h))
    for tt in range(t):
        for j in range(k):
            ex = ids[tt, j]
            a = gu[ex].astype(np.float64) @ x[tt].astype(np.float64)
            hh = ref.silu(a[:i]) * a[i:]
            y[tt] += float(w[tt, j]) * (dn[ex].astype(np.float64) @ hh)
    assert np.allclose(y, want, rtol=1e-10, atol=1e-10)
    run_and_check(queue, rng, experts.to_device(queue), x, ids, w)


@FUSED_AND_ROUTED
def test_moe_invalid_ids_are_dropped_and_counted(queue, rng, tile):
    """Ids outside [0, E) (vLLM marks experts of another rank with -1) contribute zero; the device counts them;
    check_ids=True refuses them before launch."""
    e, h, i = 6, 128, 256
    experts = random_experts(rng, e, h, i, queue=queue)
    x = np.tile(rng.standard_normal((4, h)).astype(np.float16), (tile, 1))
    ids = np.tile(np.array([[0, -1], [5, 6], [-7, 100], [2, 3]], dtype=np.int32), (tile, 1))
    w = np.full((4 * tile, 2), 0.5, dtype=np.float16)
    y, want = run_and_check(queue, rng, experts, x, ids, w)
    assert np.all(y[2::4] == 0.0)
    with pytest.raises(xe2rt.InputError, match=r"topk_ids\[0, 1\] = -1"):
        xe2rt.moe_ffn_w4a16(to_device(x, queue), experts, to_device(ids, queue), to_device(w, queue),
                            check_ids=True)
    good = np.array([[0, 1]] * (4 * tile), dtype=np.int32)
    y2 = xe2rt.moe_ffn_w4a16(to_device(x, queue), experts, to_device(good, queue), to_device(w, queue),
                             check_ids=True)
    assert np.isfinite(dpnp.asnumpy(y2)).all()


def test_moe_nan_in_x_propagates_to_its_token(queue, rng):
    e, h, i = 4, 128, 128
    experts = random_experts(rng, e, h, i, queue=queue)
    x = rng.standard_normal((3, h)).astype(np.float16)
    x[1, 5] = np.nan
    ids, w = routing(rng, 3, 2, e)
    y = dpnp.asnumpy(xe2rt.moe_ffn_w4a16(to_device(x, queue), experts, to_device(ids, queue), to_device(w, queue)))
    assert np.isnan(y[1]).all()
    assert np.isfinite(y[[0, 2]]).all()


def test_moe_out_and_determinism(queue, rng):
    e, h, i, t = 8, 256, 256, 16
    experts = random_experts(rng, e, h, i, queue=queue)
    x = to_device(rng.standard_normal((t, h)).astype(np.float16), queue)
    ids, w = routing(rng, t, 2, e)
    ids, w = to_device(ids, queue), to_device(w, queue)
    out = dpnp.full((t, h), 7.0, dtype=np.float16, sycl_queue=queue)
    y = xe2rt.moe_ffn_w4a16(x, experts, ids, w, out=out)
    assert y is out
    first = dpnp.asnumpy(out).copy()
    for _ in range(3):
        assert np.array_equal(dpnp.asnumpy(xe2rt.moe_ffn_w4a16(x, experts, ids, w)).view(np.uint16),
                              first.view(np.uint16))


@pytest.mark.parametrize("t,k,launches", [(1, 8, 3), (2, 8, 3), (3, 8, 4), (64, 2, 4)])
def test_cpu_decomposition(queue, rng, t, k, launches):
    """cpu: T k <= FUSED_PAIRS pairs take three launches (gate_up and down group the ids themselves, then combine),
    more take four (the route kernel first); both agree with the reference."""
    fused_pairs = xe2rt.artifacts.load(queue, "cpu", op.FAMILY).constants["FUSED_PAIRS"]
    assert (t * k <= fused_pairs) == (launches == 3)
    e, h, i = 16, 256, 256
    experts = random_experts(rng, e, h, i, queue=queue)
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids, w = routing(rng, t, k, e)
    events = []
    op.run(to_device(x, queue), experts, to_device(ids, queue), to_device(w, queue), target="cpu", events=events)
    assert len(events) == launches
    run_and_check(queue, rng, experts, x, ids, w)


# Real (E, k, H, I): Qwen3-30B-A3B, OLMoE and DeepSeek-V2-Lite with every expert; Mixtral-8x7B with its real H and I
# but 2 of its 8 experts (each Mixtral expert is 88 MB of codes; the kernels index experts, so E only sizes the pool).
REAL = {"qwen3_30b_a3b": (128, 8, 2048, 768), "olmoe": (64, 8, 2048, 1024), "deepseek_v2_lite": (64, 6, 2048, 1408),
        "mixtral_8x7b_2_experts": (2, 2, 4096, 14336)}


@pytest.mark.parametrize("name", REAL)
def test_moe_real_shapes(queue, rng, name):
    e, k, h, i = REAL[name]
    experts = random_experts(rng, e, h, i, queue=queue)
    t = 1 if e < 8 else 3
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids, w = routing(rng, t, k, e)
    run_and_check(queue, rng, experts, x, ids, w)


def test_bound_tells_wrong_answers_apart(queue, rng):
    """The bound is loose by design (worst case over signs), but not blind: the kernel's y sits inside it while
    results of plausible bugs (one pair routed to the wrong expert, a weight off by 10%, the up projection taken
    from the gate rows) fall outside it."""
    e, h, i, t, k = 8, 512, 256, 4, 2
    experts = random_experts(rng, e, h, i, queue=queue)
    host = experts.to_host()
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids, w = routing(rng, t, k, e)
    y, want = run_and_check(queue, rng, experts, x, ids, w)
    _, bound = ref.reference(x, host, ids, w, magic=ref.magic_for("cpu"))
    wrong_ids = ids.copy()
    wrong_ids[2, 1] = next(c for c in range(e) if c not in ids[2])
    w_off = w.astype(np.float64)
    w_off[1, 0] *= 1.1
    gate_only = QuantizedW4Experts(
        QuantizedW4(np.concatenate([np.asarray(host.gate_up.packed).reshape(e, 2, i, -1)[:, :1]] * 2, axis=1)
                    .reshape(e * 2 * i, -1),
                    np.concatenate([np.asarray(host.gate_up.scales).reshape(e, 2, i, -1)[:, :1]] * 2, axis=1)
                    .reshape(e * 2 * i, -1), None, host.gate_up.group_size), host.down, e)
    for bad_ids, bad_w, bad_experts in ((wrong_ids, w, host), (ids, w_off, host), (ids, w, gate_only)):
        other, _ = ref.reference(x, bad_experts, bad_ids, bad_w)
        assert (np.abs(y - other) > bound).any()
