"""W8A16 GEMV for decode (M = 1): y[N] = scale[N] * (q[N, K] . x[K]), int8 weights with one fp16 scale per row, fp16 x
and y, fp32 accumulation.

Geometry (seed 000): ceil(N / ROWS) work-groups; each owns ROWS rows and splits every row's K into K_SPLIT slices whose
partial sums meet in SLM (ROWS x K_SPLIT floats).
  Xe2 targets: one SG-lane sub-group per (row, slice)   -> local size ROWS x K_SPLIT x SG
  cpu target:  one work-item per (RPT rows, slice)      -> local size ROWS / RPT x K_SPLIT
"""
from __future__ import annotations

import dpnp
import numpy as np

from .. import launch, validate
from ..errors import InputError, InputTypeError
from ..quant import QuantizedW8
from .common import program_for
from .gemv_w4a16 import geometry

OP = "gemv_w8a16"


def run(x, qw, *, out=None, target: str | None = None):
    """Validate, launch, and return (y, event); event is None when nothing needed launching."""
    if not isinstance(qw, QuantizedW8):
        raise InputTypeError(f"{OP}: qw must be a QuantizedW8 (xe2rt.quantize_w8), got {type(qw).__name__}")
    qw.check(OP)
    if qw.sycl_queue is None:
        raise InputError(f"{OP}: qw's parts are numpy (host) arrays; the kernel needs them on the device: "
                         f"qw = qw.to_device(x.sycl_queue)")
    validate.device_array(OP, "x", x, dtypes=[np.float16], ndims=[1, 2])
    if x.ndim == 2 and x.shape[0] != 1:
        raise InputError(f"{OP}: x must be [K] or [1, K] (decode, M = 1), got shape {tuple(x.shape)}")
    n, k = qw.shape
    if x.shape[-1] != k:
        raise InputError(f"{OP}: x has K = {x.shape[-1]} but qw is [N, K] = {(n, k)}; K must match")
    queue = validate.same_queue(OP, x=x, qweight=qw.qweight, scales=qw.scales)
    validate.require_fp16(OP, queue)
    y_shape = (1, n) if x.ndim == 2 else (n,)
    if out is not None:
        validate.out_array(OP, out, shape=y_shape, dtype=np.float16, queue=queue,
                           inputs={"x": x, "qweight": qw.qweight, "scales": qw.scales})
    validate.fits_int32(OP, N=n, K=k)
    program = program_for(queue, OP, target)
    y = out if out is not None else dpnp.empty(y_shape, dtype=np.float16, sycl_queue=queue)
    if n == 0:
        return y, None
    if k == 0:
        y.fill(0)
        return y, None
    global_size, local_size, slm_floats = geometry(program.constants, program.target, n)
    event = launch.launch(program.kernel(), [x, qw.qweight, qw.scales, y, n, k, slm_floats], global_size,
                          local_size, queue)
    return y, event


def gemv_w8a16(x, qw: QuantizedW8, *, out=None, target: str | None = None):
    """y = dequant(qw) @ x for float16 x [K] or [1, K] and a QuantizedW8 [N, K] with device parts on x's queue;
    fp32 accumulation, y float16 [N] or [1, N]. `target` forces a kernel target (bmg, lnl, cpu) for this call."""
    return run(x, qw, out=out, target=target)[0]
