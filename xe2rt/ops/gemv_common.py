"""What the three decode GEMV ops (fp16, W8A16, W4A16) share: the x / out checks and the seed 000 geometry.

Geometry: ceil(N / ROWS) work-groups; each owns ROWS rows and splits every row's K into K_SPLIT slices whose partial
sums meet in SLM (ROWS x K_SPLIT floats). A thread (an SG-lane sub-group on Xe2, a work-item on the CPU) handles RPT
rows (1 when the spec sets none) of one slice:
    local size = ROWS / RPT x K_SPLIT x (SG on Xe2, 1 on cpu),  global size = ceil(N / ROWS) x local size

Batched decode (x [M, K], 2 <= M <= 16): kernel <name>_m<MB> for the smallest MB in BATCHES with M <= MB reads the
weights once for all M rows; a thread owns RPT = clamp(BATCH_ACCS / MB, 1, ROWS) rows with MB accumulators each, and
the SLM holds MB x ROWS x K_SPLIT floats. M = 1 keeps the single-row kernel.
"""
from __future__ import annotations

import numpy as np

from .. import launch, validate
from ..errors import InputError, InputTypeError
from .common import ceil_div, is_xe2


MAX_M = 16
BATCHES = (2, 4, 8, 16)  # compile-time batch widths MB of the batched kernels (x rows m >= M are skipped)


def batch_width(m: int) -> int:
    """MB of the kernel that serves M = m x rows (1: the single-row kernel)."""
    return 1 if m == 1 else next(mb for mb in BATCHES if m <= mb)


def kernel_name(base: str, m: int) -> str:
    return base if m == 1 else f"{base}_m{batch_width(m)}"


XQ_STRIDE = 96  # gemv_w4a16.cl: local ints per 128-k step of x in the VNNI kernels (WIDE_STEP 2)


def geometry(constants: dict, target: str, n: int, m: int = 1, k: int = 0) -> tuple[int, int, int]:
    """(global size, local size, SLM floats) for N rows and M x rows (K: the VNNI kernels keep x in SLM)."""
    rows, k_split = constants["ROWS"], constants["K_SPLIT"]
    lanes = constants["SG"] if is_xe2(target) else 1
    mb = batch_width(m)
    rpt = constants.get("RPT", 1) if mb == 1 else min(max(constants["BATCH_ACCS"] // mb, 1), rows)
    local = rows // rpt * k_split * lanes
    slm = mb * rows * k_split
    if mb == 1 and constants.get("WIDE_STEP") == 2:
        slm += k // 128 * XQ_STRIDE
    return ceil_div(n, rows) * local, local, slm


def launch_args(m: int, head: list, n: int, k: int, slm_floats: int) -> list:
    """Kernel arguments: the arrays, N, K, (M for the batched kernels), the SLM buffer (`partial`, floats)."""
    slm = launch.LocalMemory(4 * slm_floats)
    return [*head, n, k, slm] if m == 1 else [*head, n, k, m, slm]


def check_quantized(op: str, qw, kind: type, made_by: str) -> None:
    """qw is a `kind` whose parts agree with each other and live on a device (not numpy host arrays)."""
    if not isinstance(qw, kind):
        raise InputTypeError(f"{op}: qw must be a {kind.__name__} ({made_by}), got {type(qw).__name__}")
    qw.check(op)
    if qw.sycl_queue is None:
        raise InputError(f"{op}: qw's parts are numpy (host) arrays; the kernel needs them on the device: "
                         f"qw = qw.to_device(x.sycl_queue)")


def check_decode_inputs(op: str, x, n: int, k: int, weights: dict, out, qw=None) -> tuple:
    """Checks x (float16 [K] or [M, K], M <= 16) against weights [N, K] and out; returns (queue, y shape, M).
    `qw`, the quantized weight the parts come from, is what a queue mismatch names (it moves as a whole)."""
    validate.device_array(op, "x", x, dtypes=[np.float16], ndims=[1, 2])
    if x.ndim == 2 and x.shape[0] > MAX_M:
        raise InputError(f"{op}: x must be [K] or [M, K] with M <= {MAX_M} (batched decode reads the weights once "
                         f"for all M rows; use gemm_fp16 for larger M), got shape {tuple(x.shape)}")
    if x.shape[-1] != k:
        name = next(iter(weights))
        raise InputError(f"{op}: x has K = {x.shape[-1]} but {name} is [N, K] = {(n, k)}; K must match")
    if qw is not None:
        validate.same_queue(op, **weights)  # the parts agree with each other (a hand-built qw may not)
    queue = validate.same_queue(op, x=x, **({"qw": qw} if qw is not None else weights), out=out)
    validate.require_fp16(op, queue)
    m = x.shape[0] if x.ndim == 2 else 1
    y_shape = (m, n) if x.ndim == 2 else (n,)
    if out is not None:
        validate.out_array(op, out, shape=y_shape, dtype=np.float16, queue=queue, inputs={"x": x, **weights})
    validate.fits_int32(op, N=n, K=k)
    return queue, y_shape, m


def output(out, y_shape: tuple, queue, n: int, k: int, m: int = 1):
    """(y, done): y is out or a new array; done when M = 0, N = 0 or K = 0 left nothing to launch (numpy's
    results: an empty y, or zeros for K = 0)."""
    y = out if out is not None else launch.new_output(y_shape, np.float16, queue)
    if m and n and not k:
        launch.host_step(lambda: y.fill(0))
    return y, m == 0 or n == 0 or k == 0
