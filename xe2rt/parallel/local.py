"""Tensor parallelism inside one process: a list of queues, each shard on its own queue (device), every shard's work
submitted before anything is waited on, one reduction on the first (root) queue.

Devices: on a GPU host pass one device per card (`local_queues(R, devices=[...])`). A CPU device is split into
sub-devices (`create_sub_devices`, equal compute-unit counts; the Intel OpenCL CPU device supports partition
"equally" and "by counts", not by affinity domain), one queue per sub-device, more queues than sub-devices dealt out
round-robin. All queues are in-order and share one SYCL context when the devices allow it. Arrays move between
shards through the host (see `move`): x to every shard before any shard's work is submitted, the partials to the
root after every shard's work is submitted, so the shards' launches overlap whenever the launches are asynchronous.

Reduction of row-parallel partials: each shard's partial y is float16 (the decode ops' output), moved to the root,
summed there in fp32 in shard order, rounded once to float16. xe2rt.reference.mlp states the resulting error bound.
"""
from __future__ import annotations

import time

import dpctl
import dpnp
import numpy as np

from .. import _compat, validate
from ..errors import InputError, InputTypeError
from . import block, sharding


# Sub-devices and contexts are made once per process: programs are built per (context, device), so a new context per
# call would rebuild every kernel family for it.
_SUB_DEVICES: dict = {}
_CONTEXTS: dict = {}


def sub_devices(device, parts: int) -> list:
    """`parts` sub-devices of equal compute-unit count, or [device] when it cannot be partitioned that way."""
    if parts < 2 or device.partition_max_sub_devices < parts:
        return [device]
    key = (device, parts)
    if key not in _SUB_DEVICES:
        per = device.max_compute_units // parts
        try:
            _SUB_DEVICES[key] = list(device.create_sub_devices(partition=[per] * parts))
        except dpctl.SyclSubDeviceCreationError:
            _SUB_DEVICES[key] = [device]
    return _SUB_DEVICES[key]


def _context(devices: list):
    key = tuple(devices)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = dpctl.SyclContext(devices)
    return _CONTEXTS[key]


def local_queues(count: int, device=None, *, devices=None, profiling: bool = False) -> list:
    """`count` in-order queues: over `devices` (e.g. one per GPU) when given, else over sub-devices of `device`
    (filter string or SyclDevice; default: dpctl's default device), round-robin when there are fewer devices."""
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise InputError(f"local_queues: count must be an integer >= 1, got {count!r}")
    count = int(count)
    if devices is None:
        if device is not None and not isinstance(device, (str, dpctl.SyclDevice)):
            raise InputTypeError(f"local_queues: device must be None, a filter string or a dpctl.SyclDevice, got "
                                 f"{type(device).__name__} {device!r}")
        root = dpctl.SyclDevice(device) if isinstance(device, str) else (device or dpctl.select_default_device())
        devices = sub_devices(root, min(count, root.partition_max_sub_devices or 1))
    elif device is not None:
        raise InputError("local_queues: give device or devices, not both")
    else:
        given = devices
        devices = list(devices) if isinstance(devices, (list, tuple)) else None
        if not devices or not all(isinstance(d, dpctl.SyclDevice) for d in devices):
            raise InputTypeError(f"local_queues: devices must be a non-empty list of dpctl.SyclDevice, got "
                                 f"{given!r}")
    used = [devices[i % len(devices)] for i in range(count)]
    distinct = list(dict.fromkeys(used))
    props = ["in_order", "enable_profiling"] if profiling else ["in_order"]
    try:
        context = _context(distinct)
        return [dpctl.SyclQueue(context, d, property=props) for d in used]
    except Exception:  # devices of different platforms cannot share a context: each keeps its own
        return [dpctl.SyclQueue(d, property=props) for d in used]


def _check_queues(owner: str, queues) -> list:
    queues = list(queues) if isinstance(queues, (list, tuple)) else queues
    if not isinstance(queues, list) or not queues or not all(isinstance(q, dpctl.SyclQueue) for q in queues):
        raise InputTypeError(f"{owner}: queues must be a non-empty list of dpctl.SyclQueue, got {queues!r}")
    return queues


def move(a, queue):
    """a's contents on `queue` (a itself when already there), staged through the host: waits for a's queue."""
    if a.sycl_queue == queue:
        return a
    # A USM copy between two sub-devices' queues of one context (queue.memcpy_async) hung on the OpenCL CPU runtime
    # (2 of 4 trials never completed), so every cross-queue move goes through the host. It waits only for the
    # array it moves, and the blocks below move results only after every shard's work has been submitted.
    return dpnp.asarray(dpnp.asnumpy(a), sycl_queue=queue)


def check_partials(owner: str, partials, queues) -> None:
    """One float16 partial per queue, on that queue, all of one shape."""
    if not isinstance(partials, (list, tuple)) or len(partials) != len(queues):
        raise InputError(f"{owner}: needs one partial per queue ({len(queues)}), got "
                         f"{len(partials) if isinstance(partials, (list, tuple)) else type(partials).__name__}")
    for r, p in enumerate(partials):
        validate.device_array(owner, f"partials[{r}]", p, dtypes=[np.float16, np.float32], ndims=[1, 2])
        if np.dtype(p.dtype) != np.dtype(partials[0].dtype):
            raise InputTypeError(f"{owner}: partials[{r}] is {np.dtype(p.dtype)} but partials[0] is "
                                 f"{np.dtype(partials[0].dtype)}; a reduction needs one dtype")
        if tuple(p.shape) != tuple(partials[0].shape):
            raise InputError(f"{owner}: partials[{r}] has shape {tuple(p.shape)} but partials[0] has "
                             f"{tuple(partials[0].shape)}; a reduction needs one shape")
        if p.sycl_queue != queues[r]:
            raise InputError(f"{owner}: partials[{r}] is not on queues[{r}] ({validate.describe_queue(queues[r])}; it "
                             f"is on {validate.describe_queue(p.sycl_queue)}); each shard's partial must be on its own "
                             f"shard's queue")


def reduce_sum(partials, queues):
    """sum(partials) on queues[0]: moved to the root, accumulated in fp32 in shard order, returned in the partials'
    dtype. Checks (one per queue, same dtype and shape, each on its queue) come before anything is submitted."""
    queues = _check_queues("reduce_sum", queues)
    check_partials("reduce_sum", partials, queues)
    if len(partials) == 1:
        return partials[0]
    root = queues[0]
    moved = [move(p, root) for p in partials]
    acc = moved[0].astype(np.float32)
    for p in moved[1:]:
        p32 = p.astype(np.float32)
        _compat.before_vm(root)  # add runs on oneMKL VM: no host task may be pending (xe2rt._compat)
        dpnp.add(acc, p32, out=acc)
    return acc.astype(partials[0].dtype)


class _Group:
    def __init__(self, owner: str, queues):
        self.queues = _check_queues(owner, queues)
        self.root = self.queues[0]
        
    @property
    def shards(self) -> int:
        return len(self.queues)

    def wait(self) -> None:
        for q in self.queues:
            q.wait()


class ColumnParallelLinear(_Group):
    """y = w @ x with w split by output rows: every shard reads all of x, the y slices are gathered on the root."""

    def __init__(self, weight, queues):
        super().__init__("ColumnParallelLinear", queues)
        self.n, self.k = sharding.shape(weight)
        self.weights = [sharding.place(w, q) for w, q in
                        zip(sharding.split_column_parallel(weight, self.shards), self.queues)]

    def forward(self, x):
        block.check_x("ColumnParallelLinear", x, self.k, self.root)
        xs = [move(x, q) for q in self.queues]  # every copy before any launch: moves wait on their source queue
        parts = [block.linear(xr, w) for xr, w in zip(xs, self.weights)]
        y = dpnp.empty(x.shape[:-1] + (self.n,), dtype=np.float16, sycl_queue=self.root)
        rows = self.n // self.shards
        for r, p in enumerate(parts):
            y[..., r * rows:(r + 1) * rows] = move(p, self.root)
        return y


class RowParallelLinear(_Group):
    """y = w @ x with w split by input columns (whole quantization groups): shard r reads its slice of x, the
    partial outputs are summed on the root in fp32."""

    def __init__(self, weight, queues):
        super().__init__("RowParallelLinear", queues)
        self.n, self.k = sharding.shape(weight)
        self.weights = [sharding.place(w, q) for w, q in
                        zip(sharding.split_row_parallel(weight, self.shards), self.queues)]

    def forward(self, x):
        block.check_x("RowParallelLinear", x, self.k, self.root)
        cols = self.k // self.shards
        xs = [move(dpnp.ascontiguousarray(x[..., r * cols:(r + 1) * cols]), q) for r, q in enumerate(self.queues)]
        partials = [block.linear(xr, w) for xr, w in zip(xs, self.weights)]
        return reduce_sum(partials, self.queues)


class ParallelMLP(_Group):
    """Llama MLP y = down(silu(gate x) * up x) over the queues: gate and up column-parallel, SiLU-mul on each
    shard, down row-parallel, one reduction on the root."""

    def __init__(self, gate, up, down, queues):
        super().__init__("ParallelMLP", queues)
        self.hidden, self.inter = block.check_mlp("ParallelMLP", gate, up, down)
        self.blocks = [block.MLPShard(*parts, q)
                       for parts, q in zip(block.split_mlp(gate, up, down, self.shards), self.queues)]

    @classmethod
    def from_shards(cls, shards, queues):
        """From [(gate_r, up_r, down_r)] already split (one per queue); shards must agree in kind, shape and group."""
        queues = _check_queues("ParallelMLP.from_shards", queues)
        given = shards
        shards = list(shards) if isinstance(shards, (list, tuple)) else None
        bad = None if shards is None else next(
            (r for r, s in enumerate(shards) if not (isinstance(s, (list, tuple)) and len(s) == 3)), None)
        if shards is None or bad is not None:
            what = (f"{type(given).__name__}" if shards is None else
                    f"a list whose item {bad} is a {type(shards[bad]).__name__}"
                    + (f" of {len(shards[bad])}" if isinstance(shards[bad], (list, tuple)) else ""))
            raise InputTypeError(f"ParallelMLP.from_shards: shards must be a list of (gate_r, up_r, down_r), one per "
                                 f"queue, got {what}")
        if len(shards) != len(queues):
            raise InputError(f"ParallelMLP.from_shards: {len(shards)} shards for {len(queues)} queues; one each")
        first = [sharding.describe(w) for w in shards[0]]
        for r, s in enumerate(shards):
            block.check_mlp(f"ParallelMLP.from_shards shard {r}", *s)
            mine = [sharding.describe(w) for w in s]
            if mine != first:
                raise InputError(f"ParallelMLP.from_shards: shard {r} is (gate, up, down) = {mine} but shard 0 is "
                                 f"{first}; shards must match in kind, shape and group size")
        self = cls.__new__(cls)
        _Group.__init__(self, "ParallelMLP", queues)
        self.blocks = [block.MLPShard(*s, q) for s, q in zip(shards, queues)]
        self.hidden, inter = block.check_mlp("ParallelMLP", *shards[0])
        self.inter = inter * len(shards)
        return self

    def forward(self, x, timings: dict | None = None):
        """y [H] (float16, on the root queue). With `timings` (a dict), waits once all partials are queued and
        records 'shards' (seconds until every partial is done) and 'reduce' (the reduction after that)."""
        block.check_x("ParallelMLP", x, self.hidden, self.root)
        block.check_timings("ParallelMLP", timings)
        start = time.perf_counter()
        xs = [move(x, b.queue) for b in self.blocks]  # every copy before any launch: moves wait on their source queue
        partials = [b.partial(xr) for b, xr in zip(self.blocks, xs)]
        if timings is not None:
            for q in self.queues:
                q.wait()
            mid = time.perf_counter()
        y = reduce_sum(partials, self.queues)
        if timings is not None:
            self.root.wait()
            end = time.perf_counter()
            timings["shards"], timings["reduce"] = mid - start, end - mid
        return y

    @property
    def shard_bytes(self) -> list[int]:
        return [b.nbytes for b in self.blocks]
