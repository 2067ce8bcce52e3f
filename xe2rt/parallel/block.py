"""What the one-process and the MPI paths share: the decode op for each weight kind, the SiLU-mul, the checks of x
and of an MLP's three weights, and one device's shard of the Llama MLP block.

Llama MLP: y = down(silu(gate(x)) * up(x)), gate and up [I, H], down [H, I]. Tensor-parallel over R devices: gate and
up column-parallel (device r owns I/R rows of each, so its slice of silu(gate) * up needs nothing from the others),
down row-parallel over the same I slice (device r's partial y [H] covers its I/R columns): one reduction per block.
"""
from __future__ import annotations

import numpy as np

from .. import _compat, validate
from ..errors import InputError, InputTypeError
from ..ops.gemv_fp16 import gemv_fp16
from ..ops.gemv_w4a16 import gemv_w4a16
from ..ops.gemv_w8a16 import gemv_w8a16
from . import sharding

_OPS = {"fp16": gemv_fp16, "w4": gemv_w4a16, "w8": gemv_w8a16}


def linear(x, w):
    """y = w @ x with the decode op of w's kind (fp16 y on x's queue)."""
    return _OPS[sharding.kind(w)](x, w)


def silu_mul(g, u):
    """float16 silu(g) * u, computed in fp32 with dpnp on g's queue (asynchronous, ordered after g and u)."""
    import dpnp
    g32 = g.astype(np.float32)
    _compat.before_vm(g.sycl_queue)  # exp, add, divide, multiply run on oneMKL VM: no host task may be pending
    e = dpnp.exp(-g32)
    _compat.before_vm(g.sycl_queue)
    d = 1.0 + e
    _compat.before_vm(g.sycl_queue)
    d = g32 / d
    u32 = u.astype(np.float32)
    _compat.before_vm(g.sycl_queue)
    return (d * u32).astype(np.float16)


def check_x(owner: str, x, k: int, queue) -> None:
    """x is float16 [K] or [1, K] (decode), C-contiguous, on `queue`."""
    validate.device_array(owner, "x", x, dtypes=[np.float16], ndims=[1, 2])
    if x.ndim == 2 and x.shape[0] != 1:
        raise InputError(f"{owner}: x must be [K] or [1, K] (decode, M = 1), got shape {tuple(x.shape)}")
    if x.shape[-1] != k:
        raise InputError(f"{owner}: x has K = {x.shape[-1]}, the weights take K = {k}")
    if queue is not None and x.sycl_queue != queue:
        raise InputError(f"{owner}: x must be on the first (root) queue of the group, "
                         f"{validate.describe_queue(queue)}; it is on {validate.describe_queue(x.sycl_queue)}: "
                         f"dpnp.asarray(x, sycl_queue=queues[0])")


def check_timings(owner: str, timings) -> None:
    if timings is not None and not isinstance(timings, dict):
        raise InputTypeError(f"{owner}: timings must be a dict (filled with seconds) or None, got "
                             f"{type(timings).__name__}")


def check_mlp(owner: str, gate, up, down) -> tuple[int, int]:
    """(H, I) of gate [I, H], up [I, H], down [H, I]; InputError naming the mismatch otherwise."""
    (i_g, h_g), (i_u, h_u), (h_d, i_d) = sharding.shape(gate), sharding.shape(up), sharding.shape(down)
    if (i_g, h_g) != (i_u, h_u):
        raise InputError(f"{owner}: gate is {sharding.describe(gate)} and up is {sharding.describe(up)}; both must "
                         f"be [I, H] of one shape")
    if (h_d, i_d) != (h_g, i_g):
        raise InputError(f"{owner}: down is {sharding.describe(down)} but gate is [I, H] = [{i_g}, {h_g}]; down must "
                         f"be [H, I] = [{h_g}, {i_g}]")
    return h_g, i_g


def split_mlp(gate, up, down, shards: int) -> list[tuple]:
    """[(gate_r, up_r, down_r)] host shards; every split is checked before any is returned."""
    check_mlp("split_mlp", gate, up, down)
    parts = (sharding.split_column_parallel(gate, shards), sharding.split_column_parallel(up, shards),
             sharding.split_row_parallel(down, shards))
    return list(zip(*parts))


class MLPShard:
    """One device's gate_r, up_r ([I/R, H]) and down_r ([H, I/R]) on one queue."""

    def __init__(self, gate, up, down, queue):
        self.hidden, self.inter = check_mlp("MLPShard", gate, up, down)
        self.queue = queue
        self.gate, self.up, self.down = (sharding.place(w, queue) for w in (gate, up, down))

    def partial(self, x):
        """down_r @ (silu(gate_r x) * up_r x): this shard's partial y [H] (float16), all work queued on its queue."""
        h = silu_mul(linear(x, self.gate), linear(x, self.up))
        return linear(h, self.down)

    @property
    def nbytes(self) -> int:
        return sum(sharding.nbytes(w) for w in (self.gate, self.up, self.down))
