"""W8A16 GEMV for decode (x [K], or [M, K] with M <= 16 sharing one read of the weights):
y[N] = scale[N] * (q[N, K] . x[K]), int8 weights with one fp16 scale per row, fp16 x and y, fp32 accumulation.

Geometry (seed 000, gemv_common.geometry): ceil(N / ROWS) work-groups of ROWS rows, K split into K_SPLIT slices
reduced in SLM.
  Xe2 targets: one SG-lane sub-group per (row, slice)   -> local size ROWS x K_SPLIT x SG
  cpu target:  one work-item per (RPT rows, slice)      -> local size ROWS / RPT x K_SPLIT
"""
from __future__ import annotations

from .. import launch
from ..quant import QuantizedW8
from .common import program_for
from .gemv_common import check_decode_inputs, check_quantized, geometry, kernel_name, launch_args, output

OP = "gemv_w8a16"


def run(x, qw, *, out=None, target: str | None = None):
    """Validate, launch, and return (y, event); event is None when nothing needed launching."""
    check_quantized(OP, qw, QuantizedW8, "xe2rt.quantize_w8")
    n, k = qw.shape
    queue, y_shape, m = check_decode_inputs(OP, x, n, k, {"qweight": qw.qweight, "scales": qw.scales}, out,
                                         qw=qw)
    program = program_for(queue, OP, target)
    y, done = output(out, y_shape, queue, n, k, m)
    if done:
        return y, None
    global_size, local_size, slm_floats = geometry(program.constants, program.target, n, m)
    event = launch.launch(program.kernel(kernel_name(OP, m)), launch_args(m, [x, qw.qweight, qw.scales, y], n, k,
                                                                        slm_floats), global_size, local_size, queue)
    return y, event


def gemv_w8a16(x, qw: QuantizedW8, *, out=None, target: str | None = None):
    """y = dequant(qw) @ x for float16 x [K] (y [N]) or x [M, K] with M <= 16 (y [M, N] = x @ dequant(qw).T), qw a
    QuantizedW8 [N, K] with device parts on x's queue; fp32 accumulation, y float16. `target` forces a kernel target
    (bmg, lnl, cpu) for this call."""
    return run(x, qw, out=out, target=target)[0]
