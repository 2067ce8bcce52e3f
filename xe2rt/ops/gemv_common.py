"""What the three decode GEMV ops (fp16, W8A16, W4A16) share: the x / out checks and the seed 000 geometry.

Geometry: ceil(N / ROWS) work-groups; each owns ROWS rows and splits every row's K into K_SPLIT slices whose partial
sums meet in SLM (ROWS x K_SPLIT floats). A thread (an SG-lane sub-group on Xe2, a work-item on the CPU) handles RPT
rows (1 when the spec sets none) of one slice:
    local size = ROWS / RPT x K_SPLIT x (SG on Xe2, 1 on cpu),  global size = ceil(N / ROWS) x local size
"""
from __future__ import annotations

import dpnp
import numpy as np

from .. import launch, validate
from ..errors import InputError, InputTypeError
from .common import ceil_div, is_xe2


def geometry(constants: dict, target: str, n: int) -> tuple[int, int, int]:
    """(global size, local size, SLM floats) for N rows."""
    rows, k_split = constants["ROWS"], constants["K_SPLIT"]
    lanes = constants["SG"] if is_xe2(target) else 1
    local = rows // constants.get("RPT", 1) * k_split * lanes
    return ceil_div(n, rows) * local, local, rows * k_split


def check_quantized(op: str, qw, kind: type, made_by: str) -> None:
    """qw is a `kind` whose parts agree with each other and live on a device (not numpy host arrays)."""
    if not isinstance(qw, kind):
        raise InputTypeError(f"{op}: qw must be a {kind.__name__} ({made_by}), got {type(qw).__name__}")
    qw.check(op)
    if qw.sycl_queue is None:
        raise InputError(f"{op}: qw's parts are numpy (host) arrays; the kernel needs them on the device: "
                         f"qw = qw.to_device(x.sycl_queue)")


def check_decode_inputs(op: str, x, n: int, k: int, weights: dict, out) -> tuple:
    """Checks x (float16 [K] or [1, K]) against weights [N, K] and out; returns (queue, y shape)."""
    validate.device_array(op, "x", x, dtypes=[np.float16], ndims=[1, 2])
    if x.ndim == 2 and x.shape[0] != 1:
        raise InputError(f"{op}: x must be [K] or [1, K] (decode, M = 1), got shape {tuple(x.shape)}")
    if x.shape[-1] != k:
        name = next(iter(weights))
        raise InputError(f"{op}: x has K = {x.shape[-1]} but {name} is [N, K] = {(n, k)}; K must match")
    queue = validate.same_queue(op, x=x, **weights, out=out)
    validate.require_fp16(op, queue)
    y_shape = (1, n) if x.ndim == 2 else (n,)
    if out is not None:
        validate.out_array(op, out, shape=y_shape, dtype=np.float16, queue=queue, inputs={"x": x, **weights})
    validate.fits_int32(op, N=n, K=k)
    return queue, y_shape


def output(out, y_shape: tuple, queue, n: int, k: int):
    """(y, done): y is out or a new array; done when N = 0 or K = 0 left nothing to launch (numpy's results)."""
    y = out if out is not None else dpnp.empty(y_shape, dtype=np.float16, sycl_queue=queue)
    if n and not k:
        launch.host_step(lambda: y.fill(0))
    return y, n == 0 or k == 0
