"""FP16 GEMV for decode: y[N] = W[N, K] . x[K] (or y[M, N] = x[M, K] . W^T for 1 <= M <= 16, the weights read once),
fp16 in and out, fp32 accumulation.

Geometry (seed 000, gemv_common.geometry): ceil(N / ROWS) work-groups of ROWS rows, K split into K_SPLIT slices
reduced in SLM.
  Xe2 targets: one SG-lane sub-group per (row, slice)   -> local size ROWS x K_SPLIT x SG
  cpu target:  one work-item per (RPT rows, slice)      -> local size ROWS / RPT x K_SPLIT
               (M = 1 and K <= SEQ_K_MAX on AVX-512 hosts: kernel gemv_fp16_short, the rows read one after
               another; short_rows_pay)
"""
from __future__ import annotations

import numpy as np

from .. import launch, targets, validate
from .common import program_for
from .gemv_common import check_decode_inputs, geometry, kernel_name, launch_args, output

OP = "gemv_fp16"
SHORT_ROWS_KERNEL = "gemv_fp16_short"  # cpu, M = 1, K <= SEQ_K_MAX, hosts with SHORT_ROWS_FLAG
# The host CPU flag under which the short-row kernel pays (docs/ops.md): on a Zen 4 (AVX-512) it was 1.09-1.25x at
# K 2048-4096; on a Zen 3 (AVX2 only) the side-by-side kernel was 1.11-1.34x at K = 2048 (2026-11-29, session 39).
SHORT_ROWS_FLAG = "avx512f"


def run(x, w, *, out=None, target: str | None = None):
    """Validate, launch, and return (y, event); event is None when nothing needed launching."""
    validate.device_array(OP, "w", w, dtypes=[np.float16], ndims=[2])
    n, k = w.shape
    queue, y_shape, m = check_decode_inputs(OP, x, n, k, {"w": w}, out)
    program = program_for(queue, OP, target)
    y, done = output(out, y_shape, queue, n, k, m)
    if done:
        return y, None
    global_size, local_size, slm_floats = geometry(program.constants, program.target, n, m)
    name = kernel_name(OP, m)
    if m == 1 and k <= program.constants.get("SEQ_K_MAX", 0) and short_rows_pay(queue):
        name = SHORT_ROWS_KERNEL
    event = launch.launch(program.kernel(name), launch_args(m, [x, w, y], n, k, slm_floats), global_size, local_size,
                          queue)
    return y, event


def short_rows_pay(queue) -> bool:
    """Whether the cpu target's short rows (K <= SEQ_K_MAX) are read one after another on this queue's device."""
    return targets.cpu_has_flag(queue.sycl_device, SHORT_ROWS_FLAG)


def gemv_fp16(x, w, *, out=None, target: str | None = None):
    """y = w @ x for float16 x [K] (y [N]) or x @ w.T for x [M, K] with M <= 16 (y [M, N]), w [N, K] row-major,
    accumulated in fp32; y is float16 on x's queue. `target` forces a kernel target (bmg, lnl, cpu) for this call."""
    return run(x, w, out=out, target=target)[0]
