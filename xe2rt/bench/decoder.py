"""Small decoder-op rows (family decoder_small): rms_norm with the residual add, rope_kv with the cache write and
silu_mul at the shapes of Llama-3.2-1B, Llama-3.1-8B, Qwen3-4B and Qwen3-30B-A3B, T = 1 (decode) and T = 128.

Bytes (every byte the op reads or writes once):
  rms_norm (fused residual): x, residual in, y, s out: 4 T H 2 + H 2 (weight).
  rope_kv: q, k, v in, q, k out, k and v rows into the caches: (2 Hq + 4 Hkv) T D 2, plus positions, inv_freq
           and the q/k norm weights (small).
  silu_mul: gate_up in, y out: 3 T I 2.
Inputs rotate through a pool (capped at POOL_MAX copies: at T = 1 a whole pool of 8 KB rows would be tens of
thousands of allocations; a decode step's activations come from cache anyway, which the note states).
Columns: kernel time from events; wall = the public op with the queue drained; host = the op call alone (checks,
packing, submission), in the note beside the kernel time. Alternative: the dpnp composition a user would write
(fp16 arrays, fp32 statistics for the norm, a cos/sin table gathered by positions for RoPE), wall clock, same run.
"""
from __future__ import annotations

import statistics
import time

import dpnp
import numpy as np

from ..ops import decoder_small as op
from ..reference.decoder import inv_freq
from .harness import BenchContext, Result

POOL_MAX = 256
LLAMA3 = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
# name: (H, Hq, Hkv, D, I, theta, rope_scaling, qk_norm)
MODELS = {
    "Llama-3.2-1B": (2048, 32, 8, 64, 8192, 500000.0, dict(LLAMA3, factor=32.0), False),
    "Llama-3.1-8B": (4096, 32, 8, 128, 14336, 500000.0, dict(LLAMA3, factor=8.0), False),
    "Qwen3-4B": (2560, 32, 8, 128, 9728, 1000000.0, None, True),
    "Qwen3-30B-A3B": (2048, 32, 4, 128, None, 1000000.0, None, True),  # MoE MLP: silu_mul is fused in moe_ffn
}
MAX_TOKENS = 4096


def _host_seconds(ctx: BenchContext, call) -> float:
    """Median time of the op call itself (no wait), the queue drained between calls."""
    times = []
    for i in range(2 + ctx.iters):
        ctx.queue.wait()
        start = time.perf_counter()
        call(i)
        elapsed = time.perf_counter() - start
        if i >= 2:
            times.append(elapsed)
    ctx.queue.wait()
    return statistics.median(times)


_floor: dict = {}


def launch_floor(ctx: BenchContext) -> float:
    """Kernel time of the smallest launch of this family (silu_mul on [1, 2]): what any T = 1 row cannot go below
    on this runtime, measured in the same run."""
    if ctx not in _floor:
        gu = dpnp.ones((1, 2), dtype=np.float16, sycl_queue=ctx.queue)
        out = dpnp.empty((1, 1), dtype=np.float16, sycl_queue=ctx.queue)
        _floor[ctx] = ctx._median_event_seconds(lambda i: op.run_silu_mul(gu, out=out)[1], 2, max(ctx.iters, 10))
    return _floor[ctx]


def _warmup(ctx, copies: int, pool_bytes: int) -> int:
    """Warm-up launches before a row's timed loop: a whole pass over a pool that fits in the LLC (the probe before the
    loop streams far more than the LLC, so without it every timed launch would read its copy from memory, not from the
    cache a decode step's activations come from, and not as the read-only ceiling beside it reads), else 2."""
    return copies if pool_bytes <= ctx.llc_bytes else 2


def _row(ctx, name, case, seconds, wall, host, nbytes, alt_name, alt, copies, pool_bytes):
    where = "pool > LLC" if pool_bytes > ctx.llc_bytes else "pool in LLC, warmed after the probe"
    floor = launch_floor(ctx)
    return Result("decoder_small", case, ctx.target, seconds, wall, bytes=nbytes, alternative=alt_name,
                  alt_seconds=alt, read_gbps=ctx.last_read_gbps,
                  note=f"{name}: kernel {seconds * 1e6:.1f} us, host {host * 1e6:.1f} us/call, wall {wall * 1e6:.1f} us; "
                       f"{copies} copies ({where}); launch floor {floor * 1e6:.1f} us"
                       + (f", so at most {_ceiling(nbytes, floor, ctx.last_read_gbps):.0f}% of the probe"
                          if ctx.last_read_gbps else "")
                       + (_read_only(ctx, nbytes, copies) if pool_bytes <= ctx.llc_bytes else ""))


def _read_only(ctx, nbytes: int, copies: int) -> str:
    """The note's measured ceiling for a cache-resident row: one stream_read launch that only reads the row's bytes
    (same pool size), its kernel time and % of the probe. An op that reads and writes those bytes is not faster."""
    seconds = ctx.read_launch_seconds(nbytes, copies)
    probe = ctx.last_read_gbps
    share = f" = {100.0 * nbytes / seconds / (probe * 1e9):.0f}% of the probe" if probe else ""
    return f"; a launch that only reads the same bytes (stream_read): {seconds * 1e6:.1f} us{share}"


def _ceiling(nbytes: int, floor: float, read_gbps: float) -> float:
    """The % of the probe a launch moving nbytes can reach when its kernel time cannot go below the launch floor
    (measured in the same run): nbytes / floor / probe."""
    return 100.0 * nbytes / max(floor, 1e-9) / (read_gbps * 1e9)


def _rms_rows(ctx, rng, model, h, t):
    x = rng.standard_normal((t, h)).astype(np.float16)
    copies = min(POOL_MAX, ctx.copies_for(2 * x.nbytes))
    xs, rs = ctx.pool(x, copies), ctx.pool(x, copies)
    pool_bytes = copies * 2 * x.nbytes
    w = dpnp.asarray((1 + 0.1 * rng.standard_normal(h)).astype(np.float16), sycl_queue=ctx.queue)
    out = (dpnp.empty((t, h), dtype=np.float16, sycl_queue=ctx.queue),
           dpnp.empty((t, h), dtype=np.float16, sycl_queue=ctx.queue))
    import xe2rt
    seconds = ctx.time_events(lambda i: op.run_rms_norm(xs[i % copies], w, eps=1e-5, residual=rs[i % copies],
                                                        out=out)[1], warmup=_warmup(ctx, copies, pool_bytes))
    call = lambda i: xe2rt.rms_norm(xs[i % copies], w, eps=1e-5, residual=rs[i % copies], out=out)  # noqa: E731
    wall = ctx.time_wall(call)
    host = _host_seconds(ctx, call)

    def composition(i):
        s = xs[i % copies] + rs[i % copies]
        sf = s.astype(np.float32)
        var = dpnp.mean(sf * sf, axis=-1, keepdims=True)
        return s, w * (sf / dpnp.sqrt(var + 1e-5)).astype(np.float16)
    alt = ctx.time_wall(composition)
    return _row(ctx, "rms_norm+residual", f"rms {model} T{t}", seconds, wall, host, 4 * t * h * 2 + h * 2,
                "dpnp composition", alt, copies, pool_bytes)


def _rope_rows(ctx, rng, model, hq, hkv, d, theta, scaling, qk_norm, t):
    q = rng.standard_normal((t, hq, d)).astype(np.float16)
    kv = rng.standard_normal((t, hkv, d)).astype(np.float16)
    copies = min(POOL_MAX, ctx.copies_for(q.nbytes + 2 * kv.nbytes))
    qs, ks, vs = ctx.pool(q, copies), ctx.pool(kv, copies), ctx.pool(kv, copies)
    pool_bytes = copies * (q.nbytes + 2 * kv.nbytes)
    kc = dpnp.zeros((hkv, MAX_TOKENS, d), dtype=np.float16, sycl_queue=ctx.queue)
    vc = dpnp.zeros_like(kc)
    pos_host = np.arange(t, dtype=np.int32) if t > 1 else np.array([2000], np.int32)
    pos = dpnp.asarray(pos_host, sycl_queue=ctx.queue)
    norm = None
    if qk_norm:
        wq = dpnp.asarray((1 + 0.1 * rng.standard_normal(d)).astype(np.float16), sycl_queue=ctx.queue)
        norm = (wq, dpnp.copy(wq), 1e-6)

    def ours(i, check=True):
        return op.run_rope_kv(qs[i % copies], ks[i % copies], vs[i % copies], pos, kc, vc, theta=theta,
                              scaling=scaling, qk_norm=norm, check_positions=check)
    seconds = ctx.time_events(lambda i: ours(i)[1], warmup=_warmup(ctx, copies, pool_bytes))
    import xe2rt
    call = lambda i: xe2rt.rope_kv(qs[i % copies], ks[i % copies], vs[i % copies], pos, kc, vc,  # noqa: E731
                                   theta=theta, scaling=scaling, qk_norm=norm)
    wall = ctx.time_wall(call)
    host = _host_seconds(ctx, call)
    # check_positions=False: the public call, replayed warm by xe2rt.fastcall
    host_unchecked = _host_seconds(ctx, lambda i: xe2rt.rope_kv(qs[i % copies], ks[i % copies], vs[i % copies], pos,
                                                                kc, vc, theta=theta, scaling=scaling, qk_norm=norm,
                                                                check_positions=False))
    # the composition: HF-style fp16 cos/sin tables [max_tokens, D] gathered by positions
    angles = np.arange(MAX_TOKENS, dtype=np.float32)[:, None] * inv_freq(d, theta, scaling)[None, :]
    emb = np.concatenate([angles, angles], axis=-1)
    cos_t = dpnp.asarray(np.cos(emb).astype(np.float16), sycl_queue=ctx.queue)
    sin_t = dpnp.asarray(np.sin(emb).astype(np.float16), sycl_queue=ctx.queue)
    half = d // 2

    def composition(i):
        cos, sin = cos_t[pos][:, None, :], sin_t[pos][:, None, :]
        qq, kk = qs[i % copies], ks[i % copies]
        if norm is not None:
            for x, w in ((qq, norm[0]), (kk, norm[1])):
                xf = x.astype(np.float32)
                x[...] = w * (xf / dpnp.sqrt(dpnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)).astype(np.float16)
        for x in (qq, kk):
            rot = dpnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
            x[...] = x * cos + rot * sin
        kc[:, pos, :] = dpnp.transpose(kk, (1, 0, 2))
        vc[:, pos, :] = dpnp.transpose(vs[i % copies], (1, 0, 2))
    alt = ctx.time_wall(composition)
    nbytes = (2 * hq + 4 * hkv) * t * d * 2 + t * 4 + d * 2 + (2 * d * 2 if qk_norm else 0)
    label = "rope_kv" + ("+qk_norm" if qk_norm else "") + ("+llama3" if scaling else "")
    row = _row(ctx, label, f"rope {model} T{t}", seconds, wall, host, nbytes, "dpnp composition", alt, copies,
               pool_bytes)
    row.note += f"; host with check_positions=False {host_unchecked * 1e6:.1f} us/call"
    return row


def _silu_rows(ctx, rng, model, inter, t):
    gu = rng.standard_normal((t, 2 * inter)).astype(np.float16)
    copies = min(POOL_MAX, ctx.copies_for(gu.nbytes))
    pool = ctx.pool(gu, copies)
    pool_bytes = copies * gu.nbytes
    out = dpnp.empty((t, inter), dtype=np.float16, sycl_queue=ctx.queue)
    import xe2rt
    seconds = ctx.time_events(lambda i: op.run_silu_mul(pool[i % copies], out=out)[1],
                              warmup=_warmup(ctx, copies, pool_bytes))
    call = lambda i: xe2rt.silu_mul(pool[i % copies], out=out)  # noqa: E731
    wall = ctx.time_wall(call)
    host = _host_seconds(ctx, call)

    def composition(i):
        g, u = pool[i % copies][:, :inter], pool[i % copies][:, inter:]
        return g / (1 + dpnp.exp(-g)) * u
    alt = ctx.time_wall(composition)
    return _row(ctx, "silu_mul", f"silu {model} T{t}", seconds, wall, host, 3 * t * inter * 2, "dpnp composition",
                alt, copies, pool_bytes)


def cases(ctx: BenchContext) -> list[Result]:
    rng = np.random.default_rng(0)
    results = []
    models = ["Llama-3.1-8B"] if ctx.quick else list(MODELS)
    for model in models:
        h, hq, hkv, d, inter, theta, scaling, qk_norm = MODELS[model]
        for t in ((1,) if ctx.quick else (1, 128)):
            ctx.say(f"  decoder_small {model} T={t}")
            results.append(_rms_rows(ctx, rng, model, h, t))
            results.append(_rope_rows(ctx, rng, model, hq, hkv, d, theta, scaling, qk_norm, t))
            if inter is not None:
                results.append(_silu_rows(ctx, rng, model, inter, t))
    return results
