"""Timing and measurement pieces shared by every family benchmark.

Methodology (seed 000): kernel time from SYCL profiling events (command_start/command_end); weights rotate through a
pool of copies several times larger than the last-level cache so every launch reads from memory; bytes by the
seed's formulas; bandwidth quoted against the device's own read bandwidth measured by the shipped stream_read kernel
right before and right after each timed loop (the higher of the two), because the bandwidth a shared machine gives
drifts by tens of percent within a minute. The alternative a user would run (dpnp/oneMKL, numpy) is timed by wall clock with the queue
drained, and so is ours beside it, so the speed ratio compares like with like.
"""
from __future__ import annotations

import glob
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

import dpctl
import dpnp
import numpy as np

from .. import artifacts, launch, targets

MiB = 2**20
T = TypeVar("T")


def timed_samples(step: Callable[[int], T], iters: int, warmup: int = 2) -> list[T]:
    """The one timing loop: step(i) for i in range(warmup + iters), keeping what the last `iters` calls return
    (each step measures itself: events, wall clock, or a per-part breakdown); callers take the medians."""
    samples = []
    for i in range(warmup + iters):
        sample = step(i)
        if i >= warmup:
            samples.append(sample)
    return samples


@dataclass
class Result:
    family: str
    case: str
    variant: str
    seconds: float  # median kernel time from profiling events
    wall_seconds: float  # median wall time of the public op call, queue drained
    bytes: int | None = None  # seed 000 byte formula
    flops: int | None = None
    alternative: str | None = None
    alt_seconds: float | None = None  # median wall time of the alternative
    note: str = ""
    read_gbps: float | None = None  # stream_read probe bracketing this row's timed loop
    gbps: float | None = field(default=None)
    pct_read_bw: float | None = field(default=None)
    tflops: float | None = field(default=None)
    speedup_vs_alt: float | None = field(default=None)

    def finish(self, run_read_gbps: float) -> "Result":
        self.read_gbps = self.read_gbps or run_read_gbps
        if self.bytes:
            self.gbps = self.bytes / self.seconds / 1e9
            self.pct_read_bw = 100.0 * self.gbps / self.read_gbps
        if self.flops:
            self.tflops = self.flops / self.seconds / 1e12
        if self.alt_seconds:
            self.speedup_vs_alt = self.alt_seconds / self.wall_seconds
        return self

    def as_dict(self) -> dict:
        return asdict(self)


def last_level_cache_bytes(device: dpctl.SyclDevice) -> int:
    """The CPU's largest cache level from sysfs for a CPU device (OpenCL reports only L2); the device's own figure
    otherwise."""
    if device.is_cpu:
        sizes = []
        for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
            text = Path(path).read_text().strip()
            unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1)
            sizes.append(int(text.rstrip("KMG")) * unit)
        if sizes:
            return max(sizes)
    return max(device.global_mem_cache_size, 1)


class EventSpan:
    """The profiling span of a list of events (an op's launches), shaped like one event for
    BenchContext.time_events."""

    def __init__(self, events):
        self.events = events

    def wait(self):
        self.events[-1].wait()

    @property
    def profiling_info_start(self):
        return self.events[0].profiling_info_start

    @property
    def profiling_info_end(self):
        return self.events[-1].profiling_info_end


class BenchContext:
    def __init__(self, device: str | None = None, quick: bool = False, iters: int = 20, log=sys.stderr):
        selected = targets.select_device(device)
        self.queue = dpctl.SyclQueue(selected, property="enable_profiling")
        self.device = self.queue.sycl_device
        self.target = targets.resolve(self.device)
        self.quick = quick
        self.iters = 3 if quick else iters
        self.llc_bytes = last_level_cache_bytes(self.device)
        # Several times the last-level cache so a rotating pool defeats it; quick mode only checks the machinery.
        self.pool_bytes = 4 * MiB if quick else max(8 * self.llc_bytes, 256 * MiB)
        self.log = log
        self.read_gbps = float("nan")
        self.fma_gflops = float("nan")  # measure_fma_peak
        self.last_read_gbps: float | None = None  # probe bracketing the latest time_events call
        self._probe = None

    def say(self, message: str) -> None:
        print(message, file=self.log, flush=True)

    def copies_for(self, bytes_per_copy: int) -> int:
        return max(2, math.ceil(self.pool_bytes / max(bytes_per_copy, 1)))

    def pool(self, host: np.ndarray, copies: int) -> list:
        """`copies` device copies of one host array (each its own allocation)."""
        first = dpnp.asarray(host, sycl_queue=self.queue)
        return [first] + [dpnp.copy(first) for _ in range(copies - 1)]

    def time_events(self, submit: Callable[[int], dpctl.SyclEvent], warmup: int = 2) -> float:
        """Median profiled kernel time of submit(i) (i rotates the pool); the read bandwidth right before and after
        the loop goes to last_read_gbps (the higher of the two)."""
        before = self._probe_gbps(3)
        seconds = self._median_event_seconds(submit, warmup, self.iters)
        self.last_read_gbps = max(before, self._probe_gbps(3))
        return seconds

    def time_rounds(self, submits: list, nbytes: list, rounds: int = 5, flops: list | None = None) -> list:
        """Kernel times of several rows measured in turn, `rounds` times over: in each round every row gets its own
        probe before and after a window of max(3, iters // rounds) launches (after one warm-up), so on a machine
        whose speed moves between seconds each row is seen in every phase instead of in one. With `flops`, the
        fma_peak kernel is also run before and after each window (the higher counts), and each round's roofline
        time max(nbytes / probe, flops / peak) is kept. Per row, (seconds, read_gbps, ratios, roof): the round whose
        ratio nbytes / seconds / read_gbps is the median of the row's rounds (rounds is odd, so a real round), that
        ratio for every round in order, and every round's (roofline time / seconds, peak GFLOP/s) (empty without
        flops)."""
        if rounds < 1 or rounds % 2 == 0:
            raise ValueError(f"time_rounds: rounds must be odd and >= 1, got {rounds}")
        per_row: list = [[] for _ in submits]
        roof: list = [[] for _ in submits]
        iters = max(3, self.iters // rounds)
        for _ in range(rounds):
            for j, submit in enumerate(submits):
                before = self._probe_gbps(3)
                peak = self.measure_fma_peak(10000, record=False) if flops else None
                seconds = self._median_event_seconds(submit, 1, iters)
                gbps = max(before, self._probe_gbps(3))
                per_row[j].append((nbytes[j] / seconds / (gbps * 1e9), seconds, gbps))
                if flops:
                    peak = max(peak, self.measure_fma_peak(10000, record=False))
                    roof[j].append((max(nbytes[j] / (gbps * 1e9), flops[j] / (peak * 1e9)) / seconds, peak))
        out = []
        for samples, r in zip(per_row, roof):
            ratio, seconds, gbps = sorted(samples)[len(samples) // 2]
            out.append((seconds, gbps, [x for x, _, _ in samples], r))
        return out

    def _median_event_seconds(self, submit: Callable[[int], dpctl.SyclEvent], warmup: int, iters: int) -> float:
        def step(i):
            event = submit(i)  # or a list of the events of one op's launches: first start to last end
            events = event if isinstance(event, (list, tuple)) else [event]
            events[-1].wait()
            return (events[-1].profiling_info_end - events[0].profiling_info_start) * 1e-9
        return statistics.median(timed_samples(step, iters, warmup))

    def time_wall(self, call: Callable[[int], object], warmup: int = 2, iters: int | None = None) -> float:
        """Median wall time of call(i) with the queue drained after each call (`iters` timed calls, default the
        context's)."""
        def step(i):
            start = time.perf_counter()
            call(i)
            self.queue.wait()
            return time.perf_counter() - start
        return statistics.median(timed_samples(step, self.iters if iters is None else iters, warmup))

    def _probe_geometry(self, program) -> tuple[int, int]:
        """(global, local) of a probe kernel (stream_read, fma_peak): ITEMS_PER_UNIT work-items per compute unit, in
        work-groups of 8 sub-groups on Xe2 and of 1 on the cpu."""
        local = program.constants.get("SG", 1) * 8 if self.target in ("bmg", "lnl") else 1
        items = max(1, self.device.max_compute_units) * program.constants["ITEMS_PER_UNIT"]
        return -(-items // local) * local, local

    def _probe_gbps(self, iters: int) -> float:
        """GB/s of the shipped stream_read kernel over two buffers that together exceed the last-level cache."""
        if self._probe is None:
            program = artifacts.load(self.queue, self.target, "stream_read")
            n_floats = (self.pool_bytes // 2) // 4
            buffers = [dpnp.ones(n_floats, dtype=np.float32, sycl_queue=self.queue) for _ in range(2)]
            items, local = self._probe_geometry(program)
            sums = dpnp.empty(items, dtype=np.float32, sycl_queue=self.queue)
            self._probe = (program.kernel(), buffers, sums, n_floats, items, local)
        kernel, buffers, sums, n_floats, items, local = self._probe
        return n_floats * 4 / self._stream_read_seconds(kernel, buffers, sums, n_floats, items, local, 1, iters) / 1e9

    def _stream_read_seconds(self, kernel, buffers, sums, n_floats: int, items: int, local: int, warmup: int,
                             iters: int) -> float:
        """Median kernel time of stream_read over n_floats, `items` work-items, rotating through `buffers`; the sums
        of the work-items are checked, so a kernel that read nothing cannot give a time."""
        sums[...] = 0
        seconds = self._median_event_seconds(
            lambda i: launch.launch(kernel, [buffers[i % len(buffers)], sums, n_floats], items, local, self.queue),
            warmup, iters)
        if not np.isclose(float(dpnp.asnumpy(sums[:items]).sum(dtype=np.float64)), n_floats, rtol=1e-3):
            raise RuntimeError("stream_read returned a wrong sum; its time would be meaningless")
        return seconds

    def read_launch_seconds(self, nbytes: int, copies: int) -> float:
        """Kernel time of the fastest stream_read launch over nbytes, rotating through `copies` buffers as a row's pool
        does: one work-group, two, or the probe's geometry (a few kilobytes are read fastest by one work-group), the
        median of the context's iterations each. What a launch that only reads those bytes takes on this device: the
        measured ceiling beside a small op's row (an op that also writes them cannot be faster)."""
        program = artifacts.load(self.queue, self.target, "stream_read")
        n_floats = max(1, nbytes // 4)
        buffers = [dpnp.ones(n_floats, dtype=np.float32, sycl_queue=self.queue) for _ in range(max(2, copies))]
        items, local = self._probe_geometry(program)
        sums = dpnp.empty(items, dtype=np.float32, sycl_queue=self.queue)
        kernel = program.kernel()
        return min(self._stream_read_seconds(kernel, buffers, sums, n_floats, size, local, 2, self.iters)
                   for size in sorted({local, 2 * local, items}))

    def fma_peak_family(self) -> str:
        """fma_peak, or on the cpu target of a host without AVX-512 fma_peak_cpu256 (chains that fit 16 ymm registers:
        the default's spill there and read about 0.6x the device's multiply-add rate, fma_peak.toml)."""
        return "fma_peak_cpu256" if targets.cpu_256bit(self.device, self.target) else "fma_peak"

    def measure_fma_peak(self, iters: int = 40000, record: bool = True) -> float:
        """GFLOP/s of the shipped fma_peak kernel (independent fp32 multiply-add chains on every compute unit): the
        device's own multiply-add ceiling, which compute-bound rows are quoted against. Median of 3 launches after
        one warm-up; the sums are checked so a kernel that computed nothing cannot report a figure."""
        program = artifacts.load(self.queue, self.target, self.fma_peak_family())
        c = program.constants
        items, local = self._probe_geometry(program)
        sums = dpnp.empty(items, dtype=np.float32, sycl_queue=self.queue)
        kernel = program.kernel("fma_peak")
        seconds = self._median_event_seconds(
            lambda i: launch.launch(kernel, [sums, 0.999, 0.001, iters], items, local, self.queue), 1, 3)
        if not np.allclose(dpnp.asnumpy(sums), c["CHAINS"] * c["WIDTH"], rtol=1e-3):
            raise RuntimeError("fma_peak returned wrong sums; a FLOP figure would be meaningless")
        gflops = items * iters * c["CHAINS"] * c["WIDTH"] * 2 / seconds / 1e9
        if record:  # the run's figure (the JSON's fma_gflops, the roof compute-bound rows are quoted against)
            self.fma_gflops = gflops
        return gflops

    def measure_read_bandwidth(self) -> float:
        """The run-level read bandwidth (a longer probe)."""
        self.read_gbps = self._probe_gbps(self.iters)
        return self.read_gbps
