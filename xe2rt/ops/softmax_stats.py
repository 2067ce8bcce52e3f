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


def check_temperature(op: str, temperature) -> float:
    """temperature as the kernel's float32 argument: a real number, finite and > 0 in float32."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise InputTypeError(f"{op}: temperature must be a real number, got {type(temperature).__name__} "
                             f"{temperature!r}")
    with np.errstate(over="ignore"):
        t = np.float32(temperature)
    if not (math.isfinite(float(temperature)) and np.isfinite(t) and t > 0):
        raise InputError(f"{op}: temperature must be finite and > 0 (also in float32), got {temperature!r}")
    return float(t)


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
    event = launch.launch(program.kernel(_KERNELS[np.dtype(x.dtype)]), [x, out, rows, n, t], global_size,
                          local_size, queue)
    return out, event


def softmax_stats(x, *, temperature=1.0, out=None, target: str | None = None):
    """Per row of x [rows, n] (float16 or float32, C-contiguous, n >= 1): float32 [rows, 2] holding the row maximum m
    and s = sum of exp((x - m) / temperature) (1 for entries equal to m), in fp32; see the module for the rules on
    infinities and NaN and how rows combine. temperature: finite and > 0. `out` may give the float32 [rows, 2]
    result array; `target` forces a kernel target (bmg, lnl, cpu) for this call."""
    return run(x, temperature=temperature, out=out, target=target)[0]
