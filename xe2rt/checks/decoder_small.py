"""Correctness cases of rms_norm, rope_kv and silu_mul (family decoder_small) against xe2rt.reference.decoder.

Every case reports max_i |got_i - ref_i| / bound_i (<= 1 passes), with a per-element bound derived from where the
op rounds (u = 2^-24, the fp32 unit roundoff; ulp16(v) the fp16 spacing at |v|):
  rms_norm: r = rsqrt(mean(s^2) + eps) in fp32 has relative error d <= ((m + 4) / 2 + 4) u, m = n / 8 + 16 the depth
            of the fp32 sum of squares (8- or 16-lane partial sums, then a tree); the inner fp16 value a = s r then
            moves by <= |a| d + ulp16(a) (the two roundings of a and of its perturbed value), and the output by
            |w| times that plus half an ulp16 of the output: bound = e + ulp16(|y| + e) / 2, e = |w| (|a| d + ulp16(a)).
            s = x + residual must equal the fp16 sum exactly (innocuous double rounding, see decoder_small.cl).
  rope_kv:  the fp32 rotation x1 cos - x2 sin has error <= (|x1| + |x2|) 2^-20 (cos/sin 4 ulp, three fp32
            roundings, a factor 2 of slack), plus with qk_norm the distance of the kernel's normalized input from the
            reference's fp16 one (the rms_norm bound plus half an ulp16) for both partners; bound = e + ulp16(|v| + e)/2.
            The caches are checked byte for byte: slot (h, positions[t]) holds exactly the returned k and the given v,
            every other slot keeps its sentinel bytes.
  silu_mul: exp (3 ulp), division (2.5 ulp), two more roundings: relative <= 2^-20 with slack, bound as above. The
            CPU kernel's exp is written out (decoder_small.cl): 2^t, t = fl(-g fl(log2 e)) off by <= 2 |t| u, so
            2^t is off by <= 2 |g| u relatively (ln 2 log2 e = 1), plus the degree-6 polynomial (truncation
            < 2.4e-7, Horner roundings < 2 u: < 2^-21 in all, no worse than libm's 3 ulp): relative
            <= 2^-20 + 2 |g| 2^-24, applied on every target (the Xe2 kernel's libm exp is within it).
"""
from __future__ import annotations

import numpy as np

from . import Check, Result

FAMILY = "decoder_small"
U = 2.0**-24
LLAMA3_8B = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 8192}
LLAMA3_1B = dict(LLAMA3_8B, factor=32.0)


def _ratio(got, ref, bound) -> tuple[float, str]:
    got = np.asarray(got, dtype=np.float64)
    ratio = np.abs(got - ref) / bound
    if not np.all(np.isfinite(got)):
        return float("inf"), "non-finite output"
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return float(ratio[i]), f"worst at {tuple(int(v) for v in i)}: got {got[i]:.6g}, ref {ref[i]:.6g}"


def _round_bound(ref, e):
    from ..reference.decoder import ulp16
    return e + ulp16(np.abs(ref) + e) / 2


def norm_bound(s, w, r_ref, n: int):
    """rms_norm per-element bound (module docstring) for y = w * fp16(s r)."""
    from ..reference.decoder import ulp16
    d = ((n / 8 + 16 + 4) / 2 + 4) * U
    a = np.abs(s * r_ref)
    e = np.abs(np.asarray(w, dtype=np.float64)) * (a * d + ulp16(a))
    y = np.asarray(w, dtype=np.float64) * a
    return _round_bound(y, e)


def _rms_case(name, shape, n_weight, residual, eps=1e-5, scale=1.0, unaligned=False, seed=0):
    def run(queue, target):
        import dpnp
        import xe2rt
        from ..reference.decoder import rms_norm_ref
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(shape) * scale).astype(np.float16)
        res = (rng.standard_normal(shape) * scale * 4).astype(np.float16) if residual else None
        w = (1.0 + 0.3 * rng.standard_normal(n_weight)).astype(np.float16)
        dev = (lambda a: _unaligned(a, queue)) if unaligned else (lambda a: dpnp.asarray(a, sycl_queue=queue))
        out = xe2rt.rms_norm(dev(x), dpnp.asarray(w, sycl_queue=queue), eps=eps,
                             residual=None if res is None else dev(res), target=target)
        y, s = (out if residual else (out, None))
        y_ref, s_ref = rms_norm_ref(x, w, eps, res)
        r_ref = 1.0 / np.sqrt(np.mean(s_ref * s_ref, axis=-1, keepdims=True) + eps)
        error, detail = _ratio(y.asnumpy(), y_ref, norm_bound(s_ref, w, r_ref, shape[-1]))
        if residual:
            bad = int(np.count_nonzero(s.asnumpy().view(np.uint16) != s_ref.astype(np.float16).view(np.uint16)))
            if bad:
                error, detail = float("inf"), f"s differs from fp16(x + residual) in {bad} elements"
        return Result(error, 1.0, metric="max |y - ref| / bound", detail=detail,
                      bound_rule="fp32 sum of squares + 1 ulp16 inner + 1/2 ulp16 out; s exact")
    return Check(FAMILY, f"rms_norm {name}", run)


def _unaligned(a, queue):
    """A C-contiguous device copy of `a` starting 2 bytes past a 16-byte boundary (the Xe2 per-element fallback)."""
    import dpnp
    base = dpnp.empty(a.size + 1, dtype=a.dtype, sycl_queue=queue)
    view = base[1:].reshape(a.shape)
    view[...] = dpnp.asarray(a, sycl_queue=queue)
    return view


def _rope_case(name, tokens, hq, hkv, d, theta, scaling=None, qk_norm=False, max_tokens=64, positions=None,
               unaligned=False, seed=0):
    def run(queue, target):
        import dpnp
        import xe2rt
        from ..reference.decoder import rms_norm_ref, rope_kv_ref, ulp16
        rng = np.random.default_rng(seed)
        pos = (np.asarray(positions, dtype=np.int32) if positions is not None
               else np.sort(rng.choice(max_tokens, tokens, replace=False)).astype(np.int32))
        q = (rng.standard_normal((tokens, hq, d)) * 2).astype(np.float16)
        k = (rng.standard_normal((tokens, hkv, d)) * 2).astype(np.float16)
        v = rng.standard_normal((tokens, hkv, d)).astype(np.float16)
        # sentinel bytes: random finite fp16 bit patterns (cheap at 4M elements)
        kc = rng.integers(0, 0x7bff, (hkv, max_tokens, d), dtype=np.uint16).view(np.float16)
        vc = rng.integers(0, 0x7bff, (hkv, max_tokens, d), dtype=np.uint16).view(np.float16)
        dev = (lambda a: _unaligned(a, queue)) if unaligned else (lambda a: dpnp.asarray(a, sycl_queue=queue))
        dq, dk, dv, dkc, dvc = dev(q), dev(k), dev(v), dev(kc), dev(vc)
        norm = None
        if qk_norm:
            qw = (1.0 + 0.3 * rng.standard_normal(d)).astype(np.float16)
            kw = (1.0 + 0.3 * rng.standard_normal(d)).astype(np.float16)
            norm = (qw, kw, 1e-6)
        xe2rt.rope_kv(dq, dk, dv, dpnp.asarray(pos, sycl_queue=queue), dkc, dvc, theta=theta, scaling=scaling,
                      qk_norm=None if norm is None else (dpnp.asarray(qw, sycl_queue=queue),
                                                         dpnp.asarray(kw, sycl_queue=queue), 1e-6),
                      target=target)
        q_ref, k_ref, _, _ = rope_kv_ref(q, k, v, pos, kc[:, :0], vc[:, :0], theta=theta, scaling=scaling,
                                         qk_norm=norm, write_caches=False)
        got_q, got_k = dq.asnumpy(), dk.asnumpy()
        worst = (0.0, "")
        for which, x, got, ref, w in (("q", q, got_q, q_ref, norm and norm[0]), ("k", k, got_k, k_ref,
                                                                                 norm and norm[1])):
            xin = np.asarray(x, dtype=np.float64)
            slack = np.zeros_like(xin)
            if qk_norm:
                y_ref, _ = rms_norm_ref(x, w, 1e-6)
                r_ref = 1.0 / np.sqrt(np.mean(xin * xin, axis=-1, keepdims=True) + 1e-6)
                slack = norm_bound(xin, w, r_ref, d) + ulp16(y_ref) / 2
                xin = y_ref
            half = d // 2
            mag = np.abs(xin[..., :half]) + np.abs(xin[..., half:])
            pair = slack[..., :half] + slack[..., half:]
            e = np.concatenate([mag, mag], axis=-1) * 2.0**-20 + np.concatenate([pair, pair], axis=-1)
            ratio, detail = _ratio(got, ref, _round_bound(ref, e))
            if ratio >= worst[0]:
                worst = (ratio, f"{which}: {detail}")
        error, detail = worst
        # the caches, byte for byte
        want_kc, want_vc = kc.copy(), vc.copy()
        want_kc[:, pos, :] = got_k.transpose(1, 0, 2)
        want_vc[:, pos, :] = v.transpose(1, 0, 2)
        for cname, got, want in (("k_cache", dkc.asnumpy(), want_kc), ("v_cache", dvc.asnumpy(), want_vc)):
            bad = int(np.count_nonzero(got.view(np.uint16) != want.view(np.uint16)))
            if bad:
                error, detail = float("inf"), f"{cname} differs from the expected bytes in {bad} elements"
        return Result(error, 1.0, metric="max |out - ref| / bound", detail=detail,
                      bound_rule="fp32 rotation (|x1|+|x2|) 2^-20 [+ qk_norm bound] + 1/2 ulp16; caches bytewise")
    return Check(FAMILY, f"rope_kv {name}", run)


def every_finite_half() -> np.ndarray:
    """The 63488 finite float16 values."""
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    return h[np.isfinite(h)]


def _silu_case(name, tokens, inter, scale=2.0, seed=0, every_gate=False):
    def run(queue, target):
        import dpnp
        import xe2rt
        from ..reference.decoder import silu_mul_ref
        rng = np.random.default_rng(seed)
        gu = (rng.standard_normal((tokens, 2 * inter)) * scale).astype(np.float16)
        if every_gate:  # every finite fp16 gate value once, up in [0.25, 1): exp over its whole input range, y finite
            gu[0, :inter] = every_finite_half()
            gu[0, inter:] = rng.uniform(0.25, 1.0, inter).astype(np.float16)
        y = xe2rt.silu_mul(dpnp.asarray(gu, sycl_queue=queue), target=target)
        with np.errstate(over="ignore"):  # exp(65504) is inf in float64 too: silu -> -0, as the kernels give
            ref = silu_mul_ref(gu)
        gate = np.abs(gu[:, :inter].astype(np.float64))
        with np.errstate(invalid="ignore"):
            rel = np.abs(ref) * (2.0**-20 + 2 * gate * 2.0**-24)
        error, detail = _ratio(y.asnumpy(), ref, _round_bound(ref, rel))
        return Result(error, 1.0, metric="max |y - ref| / bound", detail=detail,
                      bound_rule="fp32 exp/div relative 2^-20 + 2 |g| 2^-24 + 1/2 ulp16")
    return Check(FAMILY, f"silu_mul {name}", run)


def checks(quick: bool = False) -> list[Check]:
    cases = [
        _rms_case("Llama-3.2-1B T=1 H=2048 residual", (1, 2048), 2048, True),
        _rms_case("Llama-3.1-8B T=17 H=4096 residual", (17, 4096), 4096, True, scale=3.0),
        _rms_case("Qwen3-4B T=3 H=2560 eps=1e-6", (3, 2560), 2560, False, eps=1e-6),
        _rms_case("Qwen3 per-head T=17 x 32 heads x 128", (17, 32, 128), 128, False, eps=1e-6),
        _rms_case("odd H=1000 T=3 residual", (3, 1000), 1000, True),
        _rms_case("odd H=77 T=5 per-head 3 x 77", (5, 3, 77), 77, False),
        # rows of n % 128 == 64: the Xe2 kernel's 128-wide block path must not take them
        _rms_case("per-head D=64 T=3 x 8 heads", (3, 8, 64), 64, False),
        _rms_case("H=960 T=2 residual", (2, 960), 960, True),
        # mean squares near eps (x ~ 1e-3): a kernel that dropped eps would be far outside the bound
        _rms_case("small x (mean square ~ eps) T=3 H=2048 residual", (3, 2048), 2048, True, scale=2e-3),
        _rms_case("small x (mean square ~ eps) per-head T=3 x 8 x 128 eps=1e-6", (3, 8, 128), 128, False, eps=1e-6,
                  scale=5e-4),
        _rope_case("Llama-3.1-8B T=1 llama3 pos 2047", 1, 32, 8, 128, 500000.0, LLAMA3_8B, max_tokens=2048,
                   positions=[2047]),
        _rope_case("Llama-3.2-1B T=17 D=64 llama3", 17, 32, 8, 64, 500000.0, LLAMA3_1B),
        _rope_case("Qwen3-4B T=3 qk_norm", 3, 32, 8, 128, 1000000.0, qk_norm=True),
        _rope_case("Qwen3-30B-A3B T=17 Hkv=4 qk_norm", 17, 32, 4, 128, 1000000.0, qk_norm=True, max_tokens=40),
        _rope_case("plain theta=10000 T=3 D=128 GQA 1", 3, 8, 8, 128, 10000.0),
        _silu_case("Llama-3.2-1B T=1 I=8192", 1, 8192),
        _silu_case("Qwen3-4B T=3 I=9728", 3, 9728),
        _silu_case("odd T=17 I=1000", 17, 1000),
        _silu_case("odd T=3 I=77", 3, 77, scale=6.0),
        _silu_case("every finite fp16 gate T=1 I=63488", 1, 63488, every_gate=True),
    ]
    if not quick:
        cases += [
            _rms_case("H=8192 T=2 residual", (2, 8192), 8192, True, scale=8.0),
            _rms_case("T=512 H=2048 residual", (512, 2048), 2048, True, eps=1e-6),
            _rms_case("unaligned views T=3 H=2048 residual", (3, 2048), 2048, True, unaligned=True),
            _rope_case("Llama-3.1-8B T=17 llama3 prefill positions 0..16", 17, 32, 8, 128, 500000.0, LLAMA3_8B,
                       positions=list(range(17))),
            _rope_case("long context D=64 Hq=16 Hkv=1 llama3 pos 65535", 1, 16, 1, 64, 500000.0, LLAMA3_1B,
                       max_tokens=65536, positions=[65535]),
            _rope_case("unaligned views T=3 qk_norm", 3, 16, 4, 128, 1000000.0, qk_norm=True, unaligned=True),
            _silu_case("Llama-3.1-8B T=17 I=14336", 17, 14336),
        ]
    return cases
