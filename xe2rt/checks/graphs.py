"""xe2rt.graph on the user's device: the attention half of a decoder layer (rms_norm with residual, a GEMV to q/k/v,
rope_kv writing the KV cache, decode_attention reading its length from the device, the output GEMV) bound as plans,
replayed as one graph, must give every output and both caches bit for bit as calling the plans does. The case runs on
an in-order queue of the check's device, where the graph is one OpenCL command buffer if the device's OpenCL driver
records them (the detail says which path ran, and why not the native one).

Metric: fp16 values that differ from the plans' (bound 0): the same kernels on the same inputs are deterministic.
"""
from __future__ import annotations

import numpy as np

from . import Check, Result

FAMILY = "graphs"
RULE = "a replay is the plans' launches: every fp16 value equal, bit for bit"


def decoder_plans(q, rng, length: int = 37, target: str | None = None):
    """(plans, outputs): the attention half of a small GQA layer (Hq 8, Hkv 2, D 64, H 256, cache of 64 tokens) as
    xe2rt.bind plans on queue q; outputs (y, s, qkv, k_cache, v_cache, attn, out)."""
    import dpnp
    import xe2rt
    hq, hkv, d, h, max_tokens = 8, 2, 64, 256, 64

    def dev(a):
        return dpnp.asarray(a, sycl_queue=q)

    def empty(*shape):
        return dpnp.empty(shape, dtype=np.float16, sycl_queue=q)
    x, res = dev(rng.standard_normal((1, h)).astype(np.float16)), dev(rng.standard_normal((1, h)).astype(np.float16))
    ln = dev((1 + rng.standard_normal(h) / 8).astype(np.float16))
    y, s = empty(1, h), empty(1, h)
    wqkv = dev((rng.standard_normal(((hq + 2 * hkv) * d, h)) / 16).astype(np.float16))
    qkv = empty(1, (hq + 2 * hkv) * d)
    qv, kv, vv = qkv[:, :hq * d].reshape(1, hq, d), qkv[:, hq * d:(hq + hkv) * d].reshape(1, hkv, d), \
        qkv[:, (hq + hkv) * d:].reshape(1, hkv, d)
    kc = dev((rng.standard_normal((hkv, max_tokens, d)) / 4).astype(np.float16))
    vc = dev(rng.standard_normal((hkv, max_tokens, d)).astype(np.float16))
    poslen = dev(np.array([length - 1, length], np.int32))
    attn = empty(hq, d)
    wo = dev((rng.standard_normal((h, hq * d)) / 16).astype(np.float16))
    out = dpnp.empty(h, dtype=np.float16, sycl_queue=q)
    t = {"target": target}
    plans = [
        xe2rt.bind(xe2rt.rms_norm, x, ln, eps=1e-5, residual=res, out=(y, s), **t),
        xe2rt.bind(xe2rt.gemv_fp16, y.reshape(h), wqkv, out=qkv.reshape(-1), **t),
        xe2rt.bind(xe2rt.rope_kv, qv, kv, vv, poslen[0:1], kc, vc, theta=10000.0, check_positions=False, **t),
        xe2rt.bind(xe2rt.decode_attention, qv.reshape(hq, d), kc, vc, poslen[1:2], max_length=max_tokens, out=attn,
                   **t),
        xe2rt.bind(xe2rt.gemv_fp16, attn.reshape(hq * d), wo, out=out, **t),
    ]
    return plans, (y, s, qkv, kc, vc, attn, out)


def snapshot(arrays) -> list:
    import dpnp
    return [dpnp.asnumpy(a).copy() for a in arrays]


def _run(queue, target):
    import dpctl
    import dpnp
    import xe2rt
    q = queue if queue.is_in_order else dpctl.SyclQueue(queue.sycl_context, queue.sycl_device, property="in_order")
    plans, outs = decoder_plans(q, np.random.default_rng(21), target=target)
    kc0, vc0 = snapshot(outs[3:5])
    for p in plans:
        p()
    q.wait()
    want = snapshot(outs)
    outs[3][...] = dpnp.asarray(kc0, sycl_queue=q)  # the caches as they were (rope_kv wrote one row)
    outs[4][...] = dpnp.asarray(vc0, sycl_queue=q)
    for a in (outs[0], outs[1], outs[2], outs[5], outs[6]):
        a.fill(np.nan)
    g = xe2rt.graph(plans)
    g()
    g.wait()
    got = snapshot(outs)
    names = ("y", "s", "qkv", "k_cache", "v_cache", "attn", "out")
    bad = {n: int((a.view(np.uint16) != b.view(np.uint16)).sum()) for n, a, b in zip(names, got, want)}
    how = "one OpenCL command buffer" if g.native else f"launch by launch ({g.why})"
    worst = max(bad, key=bad.get)
    detail = f"{g.launches} kernels as {how}" + (f"; {bad[worst]} differ in {worst}" if bad[worst] else "")
    return Result(float(sum(bad.values())), 0.0, "fp16 values unlike the plans'", RULE, detail)


def checks(quick: bool = False) -> list[Check]:
    return [Check(FAMILY, "decoder layer attention half, replayed as one graph", _run)]
