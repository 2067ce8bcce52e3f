"""The small ops of a decoder layer (issue 16): rms_norm (fused residual add, per-head form), rope_kv (RoPE in place
on q and k, Llama-3 scaling, optional Qwen3 q/k norm, KV-cache write in the same launch) and silu_mul.

Kernels (spirv_src/decoder_small.cl, where the rounding points and both code shapes are written down):
rms_norm_f16, rope_kv_d64, rope_kv_d128, silu_mul_f16. One launch per call, nothing allocated but the outputs.

Decomposition and geometry:
  rms_norm over rows = prod(x.shape[:-1]) rows of n = x.shape[-1] values:
    Xe2: a work-group per row of SPR = clamp(ceil(n / (128 NORM_CHUNKS_PER_SG)), 1, NORM_SGS) sub-groups of 16
         (ushort8 block reads of 128-value chunks, chunk c to sub-group c mod SPR; sub-group reduce, then SLM)
         -> local 16 SPR, global rows x 16 SPR.
    cpu: a work-item per row (vload_half8 along it) -> local LOCAL, global ceil(rows / LOCAL) LOCAL.
  rope_kv over T tokens and the Hq + Hkv heads of q and k (a k head also writes its k and v rows to the caches):
    Xe2: a sub-group per (token, head), SGS per work-group -> local 16 SGS, global ceil(T (Hq + Hkv) / SGS) 16 SGS.
    cpu: a work-item per (token, HC heads), one cos/sin table each -> items T ceil((Hq + Hkv) / HC), local LOCAL.
  silu_mul over [T, 2I] -> [T, I]:
    Xe2: a sub-group per (token, 128 outputs) -> global ceil(T ceil(I / 128) / SGS) 16 SGS, local 16 SGS.
    cpu: a work-item per (token, 64 outputs) with exp written out as arithmetic the runtime vectorizes (its own exp is
         called per element) -> items T ceil(I / 64), local SILU_LOCAL.

inv_freq for rope_kv is computed on the host in float32 by xe2rt.reference.decoder.inv_freq (HF's formula) and kept on
the device per (queue, D, theta, scaling) for good (the scaling dict normalized to a frozen Llama3Scaling): the
kernel's angles are HF's float32 products, from a table whose power is correctly rounded (the same on every host). The table is a fastcall resident constant, so warm xe2rt.rope_kv calls
replay from xe2rt.fastcall's cache (see replayable_rope_kv; with check_positions true the positions are still read back
and checked on every call) and plans (xe2rt.bind) hold it.

Positions: rope_kv reads `positions` back to the host before launching (check_positions=True, the default: this waits
for whatever queued work produces positions) and rejects any outside [0, max_tokens) or repeated. With
check_positions=False nothing is read back; the kernel then skips the cache write of any out-of-range position (it
never writes outside the caches) and still rotates q and k.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import dpnp
import numpy as np

from .. import fastcall, launch, validate
from ..errors import InputError, InputTypeError
from ..reference.decoder import inv_freq as _inv_freq
from .common import ceil_div, is_xe2, program_for

FAMILY = "decoder_small"
SUB_GROUP = 16
HEAD_DIMS = (64, 128)
_F16 = [np.float16]
_F32_MAX = float(np.finfo(np.float32).max)
_freq_tables: dict = {}
_scalings: dict = {}  # a scaling dict's items -> its Llama3Scaling (valid ones only)


def _eps(op: str, eps, name: str = "eps") -> float:
    """The norms' eps (rms_norm, rope_kv's qk_norm, gemv_w4a16's norm=): the kernels take it as a float32."""
    value = validate.real_number(eps)
    if value is None or not 0 <= value <= _F32_MAX:  # NaN fails too
        raise InputError(f"{op}: {name} must be a real number in [0, {_F32_MAX:.8g}] (a float32: the kernels add it "
                         f"in float32), got {validate.shown(eps)}")
    return value


def _same_shape(op: str, name: str, a, shape: tuple, rule: str) -> None:
    if tuple(a.shape) != tuple(shape):
        raise InputError(f"{op}: {name} must have shape {tuple(shape)} ({rule}), got {tuple(a.shape)}")


def _no_overlap(op: str, written: dict, others: dict) -> None:
    """No array the kernel writes shares bytes with another argument (byte ranges taken once per array)."""
    ranges = [(name, validate.usm_byte_range(validate.usm_view(a))) for name, a in
              list(written.items()) + list(others.items()) if a is not None and a.size]
    n_written = sum(1 for name, _ in ranges if name in written)
    for i in range(n_written):
        wname, (w0, w1) = ranges[i]
        for name, (a0, a1) in ranges[i + 1:]:
            if w0 < a1 and a0 < w1:
                raise InputError(f"{op}: {wname} overlaps {name}; the kernel writes {wname}, so it must be a "
                                 f"separate array")


# ---- rms_norm ----

def rms_norm_geometry(constants: dict, target: str, rows: int, n: int) -> tuple[int, int]:
    if is_xe2(target):
        spr = max(1, min(constants["NORM_SGS"], ceil_div(n, 128 * constants["NORM_CHUNKS_PER_SG"])))
        return rows * SUB_GROUP * spr, SUB_GROUP * spr
    local = constants["LOCAL"]
    return ceil_div(rows, local) * local, local


def rms_norm(x, weight, *, eps, residual=None, out=None, target: str | None = None):
    """RMSNorm over the last axis as Hugging Face's LlamaRMSNorm / Qwen3RMSNorm compute it (fp32 statistics):
    y = fp16(weight * fp16(s * rsqrt(mean(s^2) + eps))). x float16 [T, H] with weight [H], or the per-head form
    [T, heads, head_dim] with weight [head_dim]. With `residual` (x's shape), s = fp16(x + residual) is computed once
    and (y, s) is returned (out, if given, is the (y, s) pair); otherwise y (out, if given, is y)."""
    return run_rms_norm(x, weight, eps=eps, residual=residual, out=out, target=target)[0]


def run_rms_norm(x, weight, *, eps, residual=None, out=None, target: str | None = None):
    """rms_norm returning (result, event); event is None when nothing was launched."""
    op = "rms_norm"
    validate.device_array(op, "x", x, dtypes=_F16, ndims=[2, 3])
    validate.device_array(op, "weight", weight, dtypes=_F16, ndims=[1])
    if residual is not None:
        validate.device_array(op, "residual", residual, dtypes=_F16, ndims=[2, 3])
    queue = validate.same_queue(op, x=x, weight=weight, residual=residual)
    validate.require_fp16(op, queue)
    eps = _eps(op, eps)
    n = x.shape[-1]
    _same_shape(op, "weight", weight, (n,), "the length of x's last axis")
    if residual is not None:
        _same_shape(op, "residual", residual, x.shape, "x's shape")
    if n == 0:
        raise InputError(f"{op}: x's last axis must not be empty, got shape {tuple(x.shape)}")
    rows = x.size // n
    validate.fits_int32(op, n=n, rows=rows)
    if residual is None:
        if out is not None:
            validate.out_array(op, out, shape=x.shape, dtype=np.float16, queue=queue, inputs={"x": x, "weight": weight})
        y = out if out is not None else launch.new_output(x.shape, np.float16, queue)
        s = y  # never written: has_res = 0
    else:
        if out is not None:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise InputTypeError(f"{op}: with residual, out must be a (y, s) tuple of two dpnp arrays, got "
                                     f"{type(out).__name__}")
            inputs = {"x": x, "weight": weight, "residual": residual}
            for a in out:
                validate.out_array(op, a, shape=x.shape, dtype=np.float16, queue=queue, inputs=inputs)
            if x.size and validate.overlaps(out[0], out[1]):
                raise InputError(f"{op}: out y and out s overlap; they must be separate arrays")
            y, s = out
        else:
            y, s = launch.new_outputs([(x.shape, np.float16)] * 2, queue)
    result = y if residual is None else (y, s)
    if rows == 0:
        return result, None
    program = program_for(queue, FAMILY, target)
    global_size, local_size = rms_norm_geometry(program.constants, program.target, rows, n)
    event = launch.launch(program.kernel("rms_norm_f16"),
                  [x, x if residual is None else residual, weight, y, s, rows, n, eps, int(residual is not None)],
                  global_size, local_size, queue)
    return result, event


# ---- rope_kv ----

_F32_NORMAL = (float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max))
_SCALING_FIELDS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclasses.dataclass(frozen=True)
class Llama3Scaling:
    """A validated llama3 rope_scaling: frozen and hashable, so it keys the inv_freq tables and xe2rt.fastcall's
    replay cache (a dict can key neither). rope_kv accepts it in place of the config's dict."""
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: float

    def __post_init__(self):
        for name in _SCALING_FIELDS:
            value = getattr(self, name)
            number = validate.real_number(value)
            # the frequencies are computed in float32 (HF's formula): a field float32 rounds to 0 or inf (or a
            # subnormal, whose reciprocal overflows) would make them inf or NaN
            if number is None or not _F32_NORMAL[0] <= number <= _F32_NORMAL[1]:
                raise InputError(f"rope_kv: scaling[{name!r}] must be a finite number > 0 within float32's normal "
                                 f"range [{_F32_NORMAL[0]:.4g}, {_F32_NORMAL[1]:.4g}] (the frequencies are computed "
                                 f"in float32), got {validate.shown(value)}")
            object.__setattr__(self, name, number)  # plain floats: 8 and 8.0 are one key
        if not np.float32(self.high_freq_factor) > np.float32(self.low_freq_factor):
            raise InputError(f"rope_kv: scaling needs high_freq_factor > low_freq_factor in float32 (their difference "
                             f"divides), got {self.high_freq_factor!r} and {self.low_freq_factor!r}")

    def as_dict(self) -> dict:
        return {"rope_type": "llama3", **{name: getattr(self, name) for name in _SCALING_FIELDS}}


def scaling_key(scaling) -> Llama3Scaling | None:
    """A config's rope_scaling dict (or a Llama3Scaling) as a validated Llama3Scaling; None for plain theta."""
    op = "rope_kv"
    if scaling is None or type(scaling) is Llama3Scaling:
        return scaling
    if type(scaling) is dict:  # the decode loop passes the same config dict every call: normalize it once
        try:
            items = tuple((name, type(value), value) for name, value in scaling.items())  # types: True is not 1
            known = _scalings.get(items)
        except TypeError:  # an unhashable value: validated below, not remembered
            items = known = None
        if known is not None:
            return known
    if not isinstance(scaling, dict):
        raise InputTypeError(f"{op}: scaling must be None, a rope_scaling dict or a Llama3Scaling, got "
                             f"{type(scaling).__name__}")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise InputError(f"{op}: scaling supports rope_type 'llama3' only (plain theta: scaling=None), got "
                         f"rope_type {kind!r}")
    result = Llama3Scaling(*(scaling.get(name) for name in _SCALING_FIELDS))
    if type(scaling) is dict and items is not None:
        if len(_scalings) >= 64:
            _scalings.clear()
        _scalings[items] = result
    return result


def freq_table(queue, head_dim: int, theta: float, key: Llama3Scaling | None):
    """inv_freq [D / 2] float32 on the queue's device, made and uploaded once per (queue, D, theta, scaling) and kept
    for good (a few hundred bytes per model configuration): registered with xe2rt.fastcall as a resident constant, so
    warm calls replay it without a lookup."""
    cache_key = (queue, head_dim, theta, key)
    table = _freq_tables.get(cache_key)
    if table is None:
        table = dpnp.asarray(_inv_freq(head_dim, theta, None if key is None else key.as_dict()), sycl_queue=queue)
        _freq_tables[cache_key] = fastcall.resident(table)
    return table


def rope_geometry(constants: dict, target: str, tokens: int, heads: int) -> tuple[int, int]:
    if is_xe2(target):
        local = SUB_GROUP * constants["SGS"]
        return ceil_div(tokens * heads, constants["SGS"]) * local, local
    local = constants["LOCAL"]
    return ceil_div(tokens * ceil_div(heads, constants["HC"]), local) * local, local


def rope_kv(q, k, v, positions, k_cache, v_cache, *, theta, scaling=None, qk_norm=None, check_positions=True,
            target: str | None = None):
    """Rotary embedding (Hugging Face rotate-half) applied IN PLACE to q [T, Hq, D] and k [T, Hkv, D] (float16,
    D 64 or 128) at positions (int32 [T] device array), and the rotated k and v written to k_cache / v_cache
    (float16 [Hkv, max_tokens, D]) at [:, positions[t], :], in one launch. theta: rope_theta; scaling: None or a
    config's rope_scaling dict with rope_type "llama3"; qk_norm: None or (q_weight [D], k_weight [D], eps) for Qwen3's
    per-head RMSNorm before the rotation. Returns (q, k). check_positions=True (the default) reads positions back
    (waiting for the queue) and rejects values outside [0, max_tokens) or repeated ones before anything is
    launched."""
    return run_rope_kv(q, k, v, positions, k_cache, v_cache, theta=theta, scaling=scaling, qk_norm=qk_norm,
                       check_positions=check_positions, target=target)[0]


def _check_position_values(positions, max_tokens: int) -> None:
    """positions (int32 [T], T > 0) read back (waiting for the queue: see the module docstring) and checked: each in
    [0, max_tokens), no two equal."""
    host = launch.to_host(positions)
    bad = (host < 0) | (host >= max_tokens)
    if bad.any():
        t = int(np.argmax(bad))
        raise InputError(f"rope_kv: positions must lie in [0, max_tokens = {max_tokens}) of the caches; "
                         f"{int(bad.sum())} do not (first: positions[{t}] = {int(host[t])})")
    if np.unique(host).size != host.size:
        raise InputError(f"rope_kv: positions must be distinct (two tokens would write one cache slot), got "
                         f"repeats among {host.size} positions")


def positions_data_check(q, k, v, positions, k_cache, v_cache, *, check_positions=True, **_) -> None:
    """rope_kv's check of device contents, for xe2rt.fastcall's replays (data_check): the positions, when asked for
    and when there are tokens (a replayed call has passed every other check of the op with the same facts)."""
    if check_positions and positions.shape[0]:
        _check_position_values(positions, k_cache.shape[1])


def replayable_rope_kv(replayed):
    """The public rope_kv around `replayed` (rope_kv wrapped by xe2rt.fastcall.cached with q, k and the caches
    in_place, so that a replay checks that none overlaps another argument, and positions_data_check, so that a replayed
    call with check_positions true reads its positions back and checks them before anything is queued): a scaling
    dict becomes its frozen Llama3Scaling first, which the replay cache can key. Inside xe2rt.bind the op is recorded
    as usual."""

    @functools.wraps(rope_kv)
    def call(q, k, v, positions, k_cache, v_cache, *, theta, scaling=None, qk_norm=None, check_positions=True,
             target: str | None = None):
        if scaling is not None:
            scaling = scaling_key(scaling)
        return replayed(q, k, v, positions, k_cache, v_cache, theta=theta, scaling=scaling, qk_norm=qk_norm,
                        check_positions=check_positions, target=target)

    call.__wrapped_op__ = rope_kv
    return call


def run_rope_kv(q, k, v, positions, k_cache, v_cache, *, theta, scaling=None, qk_norm=None, check_positions=True,
                target: str | None = None):
    """rope_kv returning ((q, k), event); event is None when nothing was launched."""
    op = "rope_kv"
    for name, a in (("q", q), ("k", k), ("v", v)):
        validate.device_array(op, name, a, dtypes=_F16, ndims=[3])
    validate.device_array(op, "positions", positions, dtypes=[np.int32], ndims=[1])
    for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
        validate.device_array(op, name, a, dtypes=_F16, ndims=[3])
    qw = kw = None
    norm_eps = 0.0
    if qk_norm is not None:
        if not isinstance(qk_norm, (tuple, list)) or len(qk_norm) != 3:
            got = (f"a {type(qk_norm).__name__} of {len(qk_norm)} items" if isinstance(qk_norm, (tuple, list))
                   else f"{type(qk_norm).__name__} {qk_norm!r:.60}")
            raise InputTypeError(f"{op}: qk_norm must be None or a (q_weight, k_weight, eps) tuple, got {got}")
        qw, kw, norm_eps = qk_norm
        validate.device_array(op, "qk_norm q_weight", qw, dtypes=_F16, ndims=[1])
        validate.device_array(op, "qk_norm k_weight", kw, dtypes=_F16, ndims=[1])
        norm_eps = _eps(op, norm_eps, "qk_norm eps")
    queue = validate.same_queue(op, q=q, k=k, v=v, positions=positions, k_cache=k_cache, v_cache=v_cache,
                                q_weight=qw, k_weight=kw)
    validate.require_fp16(op, queue)
    value = validate.real_number(theta)
    if value is None or not math.isfinite(value) or value <= 1:
        raise InputError(f"{op}: theta (rope_theta) must be a finite number > 1, got {validate.shown(theta)}")
    theta = value
    key = scaling_key(scaling)
    if not isinstance(check_positions, (bool, np.bool_)):
        raise InputTypeError(f"{op}: check_positions must be True or False, got {check_positions!r}")
    tokens, hq, d = q.shape
    if d not in HEAD_DIMS:
        raise InputError(f"{op}: head_dim (q's last axis) must be 64 or 128, got {d}")
    hkv = k.shape[1]
    _same_shape(op, "k", k, (tokens, hkv, d), "[T, Hkv, D] with q's T and D")
    if hkv == 0 or hq == 0 or hq % hkv:
        raise InputError(f"{op}: the query heads must be a positive multiple of the kv heads (GQA), got Hq = {hq}, "
                         f"Hkv = {hkv}")
    _same_shape(op, "v", v, k.shape, "k's shape")
    _same_shape(op, "positions", positions, (tokens,), "one position per token")
    max_tokens = k_cache.shape[1]
    _same_shape(op, "k_cache", k_cache, (hkv, max_tokens, d), "[Hkv, max_tokens, D]")
    _same_shape(op, "v_cache", v_cache, k_cache.shape, "k_cache's shape")
    if qk_norm is not None:
        _same_shape(op, "qk_norm q_weight", qw, (d,), "[head_dim]")
        _same_shape(op, "qk_norm k_weight", kw, (d,), "[head_dim]")
    validate.fits_int32(op, tokens_x_heads=tokens * (hq + hkv), max_tokens=max_tokens)
    _no_overlap(op, {"q": q, "k": k, "k_cache": k_cache, "v_cache": v_cache},
                {"v": v, "positions": positions, "q_weight": qw, "k_weight": kw})
    if tokens == 0:
        return (q, k), None
    if check_positions:
        _check_position_values(positions, max_tokens)
    program = program_for(queue, FAMILY, target)
    table = freq_table(queue, d, theta, key)
    global_size, local_size = rope_geometry(program.constants, program.target, tokens, hq + hkv)
    event = launch.launch(program.kernel(f"rope_kv_d{d}"),
                  [q, k, v, positions, k_cache, v_cache, table, q if qw is None else qw, q if kw is None else kw,
                   tokens, hq, hkv, max_tokens, norm_eps, int(qk_norm is not None)],
                  global_size, local_size, queue)
    return (q, k), event


# ---- silu_mul ----

def silu_mul_geometry(constants: dict, target: str, tokens: int, inter: int) -> tuple:
    if is_xe2(target):
        local = SUB_GROUP * constants["SGS"]
        return ceil_div(tokens * ceil_div(inter, 128), constants["SGS"]) * local, local
    local = constants["SILU_LOCAL"]
    return ceil_div(tokens * ceil_div(inter, 64), local) * local, local


def silu_mul(gate_up, *, out=None, target: str | None = None):
    """silu(gate) * up for gate_up float16 [T, 2I] (gate = [:, :I], up = [:, I:]) -> [T, I] float16, fp32 math."""
    return run_silu_mul(gate_up, out=out, target=target)[0]


def run_silu_mul(gate_up, *, out=None, target: str | None = None):
    """silu_mul returning (y, event); event is None when nothing was launched."""
    op = "silu_mul"
    validate.device_array(op, "gate_up", gate_up, dtypes=_F16, ndims=[2])
    queue = gate_up.sycl_queue
    validate.require_fp16(op, queue)
    tokens, width = gate_up.shape
    if width == 0 or width % 2:
        raise InputError(f"{op}: gate_up's last axis must be 2 I with I >= 1 (gate then up), got {width}")
    inter = width // 2
    validate.fits_int32(op, tokens_x_width=tokens * width)
    if out is not None:
        validate.out_array(op, out, shape=(tokens, inter), dtype=np.float16, queue=queue, inputs={"gate_up": gate_up})
    y = out if out is not None else launch.new_output((tokens, inter), np.float16, queue)
    if tokens == 0:
        return y, None
    program = program_for(queue, FAMILY, target)
    global_size, local_size = silu_mul_geometry(program.constants, program.target, tokens, inter)
    event = launch.launch(program.kernel("silu_mul_f16"), [gate_up, y, tokens, inter], global_size, local_size,
                          queue)
    return y, event
