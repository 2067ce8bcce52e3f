"""Tensor parallelism over MPI ranks (mpi4py on Intel MPI from PyPI, `pip install 'xe2rt[mpi]'`): one device per rank,
the reduction of the row-parallel partials as an MPI allreduce.

Devices: rank r of a host takes GPU (local rank mod #GPUs) on a GPU host; on a CPU it takes one of
min(local ranks, #cores) equal sub-devices of the CPU device (so 2 ranks on 2 cores get a core each; 4 ranks on 2
cores share them two by two).

Transport: device pointers go to MPI only when the library says it can read them: MPIX_Query_ze_support() (Intel MPI /
MPICH extension, looked up in the loaded libmpi) or "level_zero" among the MPI 4.1 `mpi_memory_alloc_kinds` of
COMM_WORLD, and the rank's device is a Level Zero GPU. Otherwise partials are staged through host memory (a copy to
numpy, the allreduce, a copy back). `device_pointers=True` forces the pointer path, which is valid on a CPU device
(its USM allocations are host memory) and is how the tests exercise it here; asking for it on a GPU the library
cannot read raises. The choice and its evidence are in `RankGroup.transport` (the bench prints it at start).

Failure: every collective is preceded by check-and-agree: each rank validates its own inputs, then one allreduce of
an error flag; if any rank failed, every rank raises RankError naming the failing ranks and their messages, before
any launch or data collective. Anything else that escapes on one rank (a bug, a driver error) would leave the others
waiting in the allreduce: `run_or_abort` (used by the bench and the test worker) prints the traceback and calls
MPI.COMM_WORLD.Abort, which ends every rank.
"""
from __future__ import annotations

import ctypes
import os
import sys
import traceback

import dpctl
import dpnp
import numpy as np

from ..errors import InputError, Xe2rtError
from . import block, local, sharding


class RankError(Xe2rtError, RuntimeError):
    """Raised on every rank when any rank failed a check before a collective; names the ranks and their errors."""


def world_size_from_env() -> int:
    """World size the launcher announced (Intel MPI / MPICH hydra: PMI_SIZE; Open MPI: OMPI_COMM_WORLD_SIZE), without
    initializing MPI; 1 when not started by mpiexec."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return int(value)
    return 1


def mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(f"xe2rt.parallel.mpi needs mpi4py and an MPI library: pip install 'xe2rt[mpi]' "
                          f"(mpi4py + impi-rt) ({exc})") from exc
    return MPI


def _loaded_libmpi() -> str | None:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libmpi.so"):
                    return path
    except OSError:
        pass
    return None


def gpu_awareness(MPI) -> dict:
    """What the MPI library says about device memory: MPIX_Query_ze_support() (None when absent) and the MPI 4.1
    memory allocation kinds of COMM_WORLD (None when the key is absent)."""
    ze = None
    path = _loaded_libmpi()
    if path:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "MPIX_Query_ze_support"):
            ze = int(lib.MPIX_Query_ze_support())
    info = MPI.COMM_WORLD.Get_info()
    kinds = info.Get("mpi_memory_alloc_kinds")
    info.Free()
    return {"libmpi": path, "MPIX_Query_ze_support": ze, "mpi_memory_alloc_kinds": kinds}


def rank_device(local_rank: int, local_size: int, device=None):
    root = dpctl.SyclDevice(device) if isinstance(device, str) else (device or dpctl.select_default_device())
    if root.is_gpu:
        gpus = dpctl.get_devices(backend=root.backend, device_type="gpu")
        return gpus[local_rank % len(gpus)]
    subs = local.sub_devices(root, min(local_size, root.partition_max_sub_devices or 1))
    return subs[local_rank % len(subs)]


class RankGroup:
    """This rank's place in COMM_WORLD (or `comm`), its device and queue, and the allreduce transport."""

    def __init__(self, comm=None, device=None, device_pointers: bool | None = None, profiling: bool = False):
        MPI = self.MPI = mpi()
        self.comm = comm or MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        props = ["in_order", "enable_profiling"] if profiling else ["in_order"]
        # a rank whose device filter fails must not leave the others waiting in a later collective
        self.device, error = _attempt(lambda: rank_device(self.local_rank, self.local_size, device))
        if error is None:
            self.queue, error = _attempt(lambda: dpctl.SyclQueue(self.device, property=props))
        self.agree(error, "RankGroup")
        aware = gpu_awareness(MPI)
        level_zero_gpu = self.device.is_gpu and self.device.backend == dpctl.backend_type.level_zero
        says_yes = aware["MPIX_Query_ze_support"] == 1 or "level_zero" in (aware["mpi_memory_alloc_kinds"] or "")
        evidence = (f"{MPI.Get_library_version().splitlines()[0].strip()}; MPIX_Query_ze_support() = "
                    f"{aware['MPIX_Query_ze_support']}; mpi_memory_alloc_kinds = {aware['mpi_memory_alloc_kinds']!r}; "
                    f"device {self.device.name!r} ({self.device.backend.name}, "
                    f"{self.device.max_compute_units} compute units)")
        error = None
        if device_pointers is None:
            self.device_pointers = level_zero_gpu and says_yes
            why = "auto"
        else:
            self.device_pointers = bool(device_pointers)
            why = "forced"
            if self.device_pointers and self.device.is_gpu and not says_yes:
                error = InputError(f"RankGroup: device_pointers=True but the MPI library cannot read GPU memory "
                                   f"({evidence}); use host staging (device_pointers=None or False)")
        self.agree(error, "RankGroup")
        self.transport = (f"{'device pointers' if self.device_pointers else 'host staging'} ({why}): {evidence}")

    def agree(self, error: BaseException | None, what: str) -> None:
        """Check-and-agree: one allreduce of an error flag; if any rank failed, raise RankError on every rank."""
        if not self.comm.allreduce(1 if error is not None else 0, op=self.MPI.MAX):
            return
        messages = self.comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
        failed = "; ".join(f"rank {r}: {m}" for r, m in enumerate(messages) if m)
        raise RankError(f"{what}: failed on {sum(m is not None for m in messages)} of {self.size} ranks before the "
                        f"collective, so every rank stops here ({failed})") from error

    def _buffer(self, a):
        return [self.MPI.buffer.fromaddress(a.__sycl_usm_array_interface__["data"][0], a.nbytes),
                self.MPI.FLOAT if a.dtype == np.float32 else self.MPI.SHORT]

    def allreduce_sum(self, partial):
        """Sum of every rank's float16 partial in fp32, rounded once to float16, on every rank's queue. The caller
        has agreed on shapes (the blocks below fix them at construction)."""
        MPI = self.MPI
        if self.device_pointers:
            p32 = partial.astype(np.float32)
            dpctl.utils.SequentialOrderManager[self.queue].wait()
            self.queue.wait()  # MPI does not order itself after queued work: p32 must be complete
            self.comm.Allreduce(MPI.IN_PLACE, self._buffer(p32), op=MPI.SUM)
            return p32.astype(partial.dtype)
        buf = dpnp.asnumpy(partial).astype(np.float32)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return dpnp.asarray(buf.astype(partial.dtype), sycl_queue=self.queue)

    def allgather(self, part):
        """Every rank's equal-length float16 slice, concatenated in rank order along the last axis."""
        if self.device_pointers:
            out = dpnp.empty((self.size,) + tuple(part.shape), dtype=part.dtype, sycl_queue=self.queue)
            dpctl.utils.SequentialOrderManager[self.queue].wait()
            self.queue.wait()
            send = [self.MPI.buffer.fromaddress(part.__sycl_usm_array_interface__["data"][0], part.nbytes),
                    self.MPI.SHORT]
            self.comm.Allgather(send, self._buffer(out))
            return dpnp.moveaxis(out, 0, -2).reshape(part.shape[:-1] + (-1,)).copy()
        mine = dpnp.asnumpy(part)
        out = np.empty((self.size,) + mine.shape, dtype=mine.dtype)
        self.comm.Allgather(mine.view(np.uint16), out.view(np.uint16))
        return dpnp.asarray(np.moveaxis(out, 0, -2).reshape(mine.shape[:-1] + (-1,)), sycl_queue=self.queue)


def _agree_on_shard(group: RankGroup, what: str, parts: tuple, error) -> None:
    """Every rank's shard has the same kinds, shapes and groups (allgather of their descriptions)."""
    group.agree(error, what)
    mine = [sharding.describe(w) for w in parts]
    every = group.comm.allgather(mine)
    mismatch = [r for r, d in enumerate(every) if d != every[0]]
    if mismatch:
        raise RankError(f"{what}: ranks hold different shards: " +
                        "; ".join(f"rank {r}: {d}" for r, d in enumerate(every)) +
                        "; every rank's shard must match in kind, shape and group size")


def _attempt(fn):
    """(fn(), None), or (None, the exception fn raised): a rank's failure is not raised here but passed to a collective
    (RankGroup.agree, _agree_on_shard), since the other ranks must hear of it or they wait forever."""
    try:
        return fn(), None
    except Exception as exc:
        return None, exc


class _RankBlock:
    def _shard(self, weight, split):
        """This rank's part of `weight` by `split` (sharding.split_row_parallel / split_column_parallel); sets n, k."""
        self.n, self.k = sharding.shape(weight)
        return split(weight, self.group.size)[self.group.rank]

    def _check_x(self, x, k: int, what: str, timings=None) -> None:
        _, error = _attempt(lambda: (block.check_x(what, x, k, self.group.queue), block.check_timings(what, timings)))
        self.group.agree(error, what)


class MpiRowParallelLinear(_RankBlock):
    """y = w @ x, rank r holding columns [r K/R, (r+1) K/R) of w (whole quantization groups): allreduce of the
    partials. Every rank passes the full x [K] and gets the full y."""

    def __init__(self, group: RankGroup, weight):
        self.group = group
        shard, error = _attempt(lambda: self._shard(weight, sharding.split_row_parallel))
        _agree_on_shard(group, "MpiRowParallelLinear", (shard,) if shard is not None else (), error)
        self.weight = sharding.place(shard, group.queue)

    def forward(self, x):
        self._check_x(x, self.k, "MpiRowParallelLinear")
        cols = self.k // self.group.size
        xr = dpnp.ascontiguousarray(x[..., self.group.rank * cols:(self.group.rank + 1) * cols])
        return self.group.allreduce_sum(block.linear(xr, self.weight))


class MpiColumnParallelLinear(_RankBlock):
    """y = w @ x, rank r holding output rows [r N/R, (r+1) N/R): allgather of the slices."""

    def __init__(self, group: RankGroup, weight):
        self.group = group
        shard, error = _attempt(lambda: self._shard(weight, sharding.split_column_parallel))
        _agree_on_shard(group, "MpiColumnParallelLinear", (shard,) if shard is not None else (), error)
        self.weight = sharding.place(shard, group.queue)

    def forward(self, x):
        self._check_x(x, self.k, "MpiColumnParallelLinear")
        return self.group.allgather(block.linear(x, self.weight))


class MpiMLP(_RankBlock):
    """The Llama MLP block over the ranks of `group`: this rank's gate/up rows and down columns, one allreduce."""

    def __init__(self, group: RankGroup, gate, up, down):
        """From the full weights (every rank keeps its own shard)."""
        self.group = group
        parts, error = _attempt(lambda: block.split_mlp(gate, up, down, group.size)[group.rank])
        self._finish(parts if parts is not None else (), error)

    @classmethod
    def from_shard(cls, group: RankGroup, gate, up, down):
        """From this rank's own (gate_r, up_r, down_r); ranks must agree in kind, shape and group size."""
        self = cls.__new__(cls)
        self.group = group
        _, error = _attempt(lambda: block.check_mlp("MpiMLP.from_shard", gate, up, down))
        self._finish((gate, up, down), error)
        return self

    def _finish(self, parts, error) -> None:
        _agree_on_shard(self.group, "MpiMLP", parts, error)
        self.shard = block.MLPShard(*parts, self.group.queue)
        self.hidden = self.shard.hidden

    def forward(self, x, timings: dict | None = None):
        """y [H] float16 on every rank. With `timings`, records 'agree' (the check-and-agree collective), 'shards'
        (this rank's partial, waited for) and 'reduce' (the allreduce, staging included)."""
        import time
        begin = time.perf_counter()
        self._check_x(x, self.hidden, "MpiMLP", timings)
        start = time.perf_counter()
        partial = self.shard.partial(x)
        if timings is not None:
            self.group.queue.wait()
            mid = time.perf_counter()
        y = self.group.allreduce_sum(partial)
        if timings is not None:
            self.group.queue.wait()
            end = time.perf_counter()
            timings["agree"], timings["shards"], timings["reduce"] = start - begin, mid - start, end - mid
        return y


def run_or_abort(fn, *args, **kwargs):
    """fn(...); an exception escaping it on one rank of a multi-rank job ends every rank (MPI Abort) instead of
    leaving the others waiting in a collective."""
    try:
        return fn(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException:
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            rank = MPI.COMM_WORLD.Get_rank()
            sys.stderr.write(f"[rank {rank}] uncaught exception, aborting every rank:\n{traceback.format_exc()}")
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)
        raise
