"""FP16 GEMV for decode (M = 1): y[N] = W[N, K] . x[K], fp16 in and out, fp32 accumulation.

Geometry (seed 000): ceil(N / ROWS) work-groups; each owns ROWS rows and splits every row's K into K_SPLIT slices whose
partial sums meet in SLM (ROWS x K_SPLIT floats).
  Xe2 targets: one SG-lane sub-group per (row, slice)   -> local size ROWS x K_SPLIT x SG
  cpu target:  one work-item per (RPT rows, slice)      -> local size ROWS / RPT x K_SPLIT
"""
from __future__ import annotations

import dpnp
import numpy as np

from .. import launch, validate
from ..errors import InputError
from .common import ceil_div, is_xe2, program_for

OP = "gemv_fp16"


def geometry(constants: dict, target: str, n: int) -> tuple[int, int, int]:
    """(global size, local size, SLM floats) for N rows."""
    rows, k_split = constants["ROWS"], constants["K_SPLIT"]
    lanes_per_row_slice = constants["SG"] if is_xe2(target) else 1
    rows_per_thread = 1 if is_xe2(target) else constants["RPT"]
    local = rows // rows_per_thread * k_split * lanes_per_row_slice
    return ceil_div(n, rows) * local, local, rows * k_split


def run(x, w, *, out=None, target: str | None = None):
    """Validate, launch, and return (y, event); event is None when nothing needed launching."""
    validate.device_array(OP, "x", x, dtypes=[np.float16], ndims=[1, 2])
    validate.device_array(OP, "w", w, dtypes=[np.float16], ndims=[2])
    if x.ndim == 2 and x.shape[0] != 1:
        raise InputError(f"{OP}: x must be [K] or [1, K] (decode, M = 1), got shape {tuple(x.shape)}")
    n, k = w.shape
    if x.shape[-1] != k:
        raise InputError(f"{OP}: x has K = {x.shape[-1]} but w is [N, K] = {tuple(w.shape)}; K must match")
    queue = validate.same_queue(OP, x=x, w=w, out=out)
    validate.require_fp16(OP, queue)
    y_shape = (1, n) if x.ndim == 2 else (n,)
    if out is not None:
        validate.out_array(OP, out, shape=y_shape, dtype=np.float16, queue=queue, inputs={"x": x, "w": w})
    validate.fits_int32(OP, N=n, K=k)
    program = program_for(queue, OP, target)
    y = out if out is not None else dpnp.empty(y_shape, dtype=np.float16, sycl_queue=queue)
    if n == 0:
        return y, None
    if k == 0:
        y.fill(0)
        return y, None
    global_size, local_size, slm_floats = geometry(program.constants, program.target, n)
    event = launch.launch(program.kernel(), [x, w, y, n, k, slm_floats], global_size, local_size, queue)
    return y, event


def gemv_fp16(x, w, *, out=None, target: str | None = None):
    """y = w @ x for float16 x [K] or [1, K] and w [N, K] (row-major), accumulated in fp32; y is float16 [N] or
    [1, N] on x's queue. `target` forces a kernel target (bmg, lnl, cpu) for this call."""
    return run(x, w, out=out, target=target)[0]
