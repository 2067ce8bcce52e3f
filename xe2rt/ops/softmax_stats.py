"""Softmax statistics per row at a temperature: the vocabulary pass of LLM sampling in one launch.

softmax_stats(x, temperature=t) -> float32 [rows, 2], per row (m, s): m = the row maximum, s = sum_j e_j with e_j = 1
where x_j == m, else exp((x_j - m) / t) (softmax_topk's rule for infinities: an all -inf row gives (-inf, n), a row
with +inf counts its +inf entries; a NaN anywhere gives (NaN, NaN)). Rows combine exactly: against M = max_r m_r,
row r holds the mass s_r exp((m_r - M) / t), so a [V] vocabulary cut into rows gives the softmax normalizer, the
mass of each row (which row a draw falls in) and any token's probability without a pass over the whole vocabulary.

Kernels (spirv_src/softmax_stats.cl): softmax_stats_f16 and softmax_stats_f32, for x's dtype.
Geometry:
  Xe2 targets: a 16-lane sub-group per row, SGS sub-groups per work-group -> local 16 SGS,
               global ceil(rows / SGS) * local
  cpu target:  a work-item per row -> local LOCAL, global ceil(rows / LOCAL) * LOCAL
"""
from __future__ import annotations

import math

import numpy as np

from .. import launch, validate
from ..errors import InputError, InputTypeError
from .common import ceil_div, is_xe2, program_for

FAMILY = "softmax_stats"
SUB_GROUP = 16
_KERNELS = {np.dtype(np.float16): "softmax_stats_f16", np.dtype(np.float32): "softmax_stats_f32"}


def geometry(constants: dict, target: str, rows: int) -> tuple[int, int]:
    """(global size, local size) for `rows` rows."""
    if is_xe2(target):
        local = SUB_GROUP * constants["SGS"]
        return ceil_div(rows, constants["SGS"]) * local, local
    local = constants["LOCAL"]
    return ceil_div(rows, local) * local, local


MIN_TEMPERATURE = float(np.finfo(np.float32).tiny)  # float32's smallest normal: log2(e) / t stays finite
MAX_TEMPERATURE = 2.0 ** 120  # above 3.3e36 a float32 row spanning more than float32's range would lose terms


def real_temperature(op: str, temperature, rule: str) -> float:
    """A temperature argument as a Python float (inf where float() overflows: 10**400); InputTypeError naming `rule`
    for anything that is not a real number (bool included). Shared with xe2rt.models.llm's generate."""
    value = validate.real_number(temperature)
    if value is None:
        raise InputTypeError(f"{op}: temperature must be {rule}, got {type(temperature).__name__} {temperature!r}")
    return value


def check_temperature(op: str, temperature) -> float:
    """temperature as a float32 value: a real number in [MIN_TEMPERATURE, MAX_TEMPERATURE]. Below float32's smallest
    normal the kernel's scale log2(e) / t would overflow; above 2^120, x - m overflowing float32 in a row that spans
    more than float32's range (only float32 input) could stand for a term that is not negligible."""
    t = real_temperature(op, temperature, "a real number")
    if not MIN_TEMPERATURE <= t <= MAX_TEMPERATURE:  # NaN fails too
        raise InputError(f"{op}: temperature must be in [{MIN_TEMPERATURE:.8g}, 2^120 = {MAX_TEMPERATURE:.4g}] "
                         f"(float32's smallest normal number up to 2^120), got {validate.shown(temperature)}")
    return float(np.float32(t))


def scale_for(t: float) -> float:
    """The kernels' multiplier log2(e) / t, rounded once (to float32 at the launch)."""
    return math.log2(math.e) / t


def run(x, *, temperature=1.0, out=None, target: str | None = None):
    """Validate, launch, and return (out, event); event is None when there are no rows."""
    op = "softmax_stats"
    validate.device_array(op, "x", x, dtypes=[np.float16, np.float32], ndims=[2])
    queue = x.sycl_queue
    if np.dtype(x.dtype) == np.float16:
        validate.require_fp16(op, queue)
    rows, n = x.shape
    if n < 1:
        raise InputError(f"{op}: rows must hold at least one value (n >= 1), got x of shape {tuple(x.shape)}")
    t = check_temperature(op, temperature)
    validate.fits_int32(op, n=n)
    if out is not None:
        validate.out_array(op, out, shape=(rows, 2), dtype=np.float32, queue=queue, inputs={"x": x})
    else:
        out = launch.new_output((rows, 2), np.float32, queue)
    if rows == 0:
        return out, None
    program = program_for(queue, FAMILY, target)
    global_size, local_size = geometry(program.constants, program.target, rows)
    kernel = program.kernel(_KERNELS[np.dtype(x.dtype)])
    event = launch.launch(kernel, [x, out, rows, n, scale_for(t)], global_size, local_size, queue)
    return out, event


def softmax_stats(x, *, temperature=1.0, out=None, target: str | None = None):
    """Per row of x [rows, n] (float16 or float32, C-contiguous, n >= 1): float32 [rows, 2] holding the row maximum m
    and s = sum of exp((x - m) / temperature) (1 for entries equal to m), in fp32; see the module for the rules on
    infinities and NaN and how rows combine. temperature: a real number from float32's smallest normal (1.1754944e-38)
    to 2^120. `out` may give the float32 [rows, 2] result array; `target` forces a kernel target (bmg, lnl, cpu) for
    this call."""
    return run(x, temperature=temperature, out=out, target=target)[0]
