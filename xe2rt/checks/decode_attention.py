"""decode_attention correctness cases (xe2rt.checks protocol): every case against the float64 reference with the
elementwise bound derived in xe2rt.reference.attention.decode_attention_bound (fp32 scores / softmax / sums, one fp16
rounding). Caches are longer than `length` and their tail is NaN, so a kernel that uses a token past the length
shows. A read past the length whose value the kernel then masks does not show (the score is replaced by -inf before
it is used): the kernels' clamped reads are what keeps them inside the cache, and no output can check that.
"""
from __future__ import annotations

from dataclasses import dataclass

import dpnp
import numpy as np

from ..reference.attention import decode_attention_bound, decode_attention_ref
from . import Check, Result

FAMILY = "decode_attention"
BOUND_RULE = ("elementwise bound of reference.attention.decode_attention_bound: weight perturbation eps/(1-eps) "
              "sum p|v-y|/sum p (score error (D+3)u32 c A, exponent arguments, exp2 4 ulp per rescale) + gamma_n "
              "(P+|y|) for the fp32 sums + u16|y| for the fp16 rounding")


@dataclass(frozen=True)
class Case:
    name: str
    hq: int
    hkv: int
    d: int
    length: int
    pad: int = 5  # max_tokens = length + pad, the pad NaN
    scale: float | None = None
    splits: int | None = None  # force the split count (xe2rt.ops.decode_attention.run)
    needle: int | None = None  # token whose key aligns with every query (one token dominates)
    far_below: bool = False  # q in [1, 2], k in [-2, -1]: every score far below 0 (the merge's maximum must not be 0)
    layer_view: bool = False  # caches as layer 1 of a [2, Hkv, max_tokens, D] stack (a view at an offset)
    seed: int = 0


CASES = [
    Case("L=1 Llama-3.2-1B (Hq 32, Hkv 8, D 64)", 32, 8, 64, 1),
    Case("L=17 G=1 D=128", 8, 8, 128, 17),
    Case("L=17 G=16 D=64", 16, 1, 64, 17),
    Case("L=17 G=8 D=128, 8 forced splits (6 empty)", 16, 2, 128, 17, splits=8),
    Case("L=100 G=3 D=64 scale=0.3, 3 forced splits", 6, 2, 64, 100, scale=0.3, splits=3),
    # the merge of split partials: the dominant token in the last split (its score ~180 above the other splits' in
    # log2 units, so exp2(m_s - max) underflows for them), and every score ~ -200 (a maximum started at 0 underflows)
    Case("L=100 G=2 D=64 needle in the last of 3 forced splits", 2, 1, 64, 100, scale=1.0, splits=3, needle=98),
    Case("L=100 G=4 D=64 every score ~ -200, 3 forced splits", 4, 1, 64, 100, scale=1.0, splits=3, far_below=True),
    Case("L=4095 Llama-3.2-1B (Hq 32, Hkv 8, D 64)", 32, 8, 64, 4095),
    Case("L=4095 Llama-3.1-8B (Hq 32, Hkv 8, D 128)", 32, 8, 128, 4095),
    Case("L=2048 Qwen3-4B (Hq 32, Hkv 8, D 128)", 32, 8, 128, 2048, seed=1),
    Case("L=4095 Qwen3-30B-A3B (Hq 32, Hkv 4, D 128)", 32, 4, 128, 4095),
    Case("L=4095 G=16 D=128", 16, 1, 128, 4095),
    Case("L=333 G=4 D=128 caches a layer view", 8, 2, 128, 333, layer_view=True),
    Case("L=32768 G=4 D=128", 4, 1, 128, 32768, pad=0),
    Case("L=32768 G=8 D=64 needle at token 20000", 16, 2, 64, 32768, pad=0, needle=20000),
]
QUICK = {0, 3, 4, 7}


def make_inputs(case: Case):
    """Host float16 q [Hq, D], k / v caches [Hkv, length + pad, D] (NaN past length)."""
    rng = np.random.default_rng(case.seed)
    t = case.length + case.pad
    q = rng.standard_normal((case.hq, case.d), dtype=np.float32)
    k = rng.standard_normal((case.hkv, t, case.d), dtype=np.float32)
    v = rng.standard_normal((case.hkv, t, case.d), dtype=np.float32)
    if case.far_below:
        q = rng.uniform(1, 2, q.shape).astype(np.float32)
        k = -rng.uniform(1, 2, k.shape).astype(np.float32)
    if case.needle is not None:
        # every query of kv head h points along its needle key: that token's score is ~|q|^2 / sqrt(D) above the rest
        g = case.hq // case.hkv
        q = np.repeat(k[:, case.needle, :], g, axis=0) * 2.5
    q, k, v = (a.astype(np.float16) for a in (q, k, v))
    k[:, case.length:] = np.nan
    v[:, case.length:] = np.nan
    return q, k, v


def _device_caches(case: Case, k, v, queue):
    if not case.layer_view:
        return dpnp.asarray(k, sycl_queue=queue), dpnp.asarray(v, sycl_queue=queue)
    stack = np.full((2, 2) + k.shape, np.nan, dtype=np.float16)
    stack[1, 0], stack[1, 1] = k, v
    dev = dpnp.asarray(stack, sycl_queue=queue)
    return dev[1, 0], dev[1, 1]


def run_case(case: Case, queue, target: str | None) -> Result:
    import xe2rt
    from ..ops import decode_attention as op

    q, k, v = make_inputs(case)
    q_dev = dpnp.asarray(q, sycl_queue=queue)
    k_dev, v_dev = _device_caches(case, k, v, queue)
    if case.splits is None:
        y = xe2rt.decode_attention(q_dev, k_dev, v_dev, case.length, scale=case.scale, target=target)
    else:
        y, _ = op.run(q_dev, k_dev, v_dev, case.length, scale=case.scale, target=target, splits=case.splits)
    y = dpnp.asnumpy(y).astype(np.float64)
    ref = decode_attention_ref(q, k, v, case.length, case.scale)
    bound = decode_attention_bound(q, k, v, case.length, case.scale)
    ratio = np.abs(y - ref) / bound
    ratio[np.isnan(ratio)] = np.inf
    worst = np.unravel_index(np.argmax(ratio), ratio.shape)
    return Result(float(ratio.max()), 1.0, metric="max |y - ref| / elementwise bound", bound_rule=BOUND_RULE,
                  detail=f"worst [head {worst[0]}, d {worst[1]}]: |y - ref| {abs(y[worst] - ref[worst]):.3g}, "
                         f"bound {bound[worst]:.3g}, ref {ref[worst]:.4g}")


def checks(quick: bool = False) -> list[Check]:
    return [Check(FAMILY, case.name, lambda queue, target, case=case: run_case(case, queue, target))
            for i, case in enumerate(CASES) if not quick or i in QUICK]
