"""Launch-cost rows (`--families launch`): what an op costs the host per call, against the SYCL floor.

- floor: `queue.submit_async` of the op's own kernel with arguments packed beforehand (no checks, no ordering);
- C API: the same launch through dpctl's C function `DPCTLQueue_SubmitNDRange` with its argument arrays made
  beforehand, as xe2rt submits every launch (xe2rt._capi), still without checks or ordering;
- dpnp: one dpnp elementwise op on the same sizes (what every other step of a pipeline costs);
- op / op out= / bind: the public op (allocating its output, or writing `out=`), and a Plan from xe2rt.bind;
- a user kernel (an fp16 axpy from Module.from_source, i.e. xe2rt.load on its cached build folder): floor, the
  Kernel call with its checks, and bind;
- on an in-order queue, per kernel: a bind plan against a graph of BURST copies of it (xe2rt.graph), one call per
  burst.
Each is timed in bursts of BURST calls that are not drained (the queue is drained between bursts, untimed), the
methods interleaved burst by burst so that a machine shared with other work slows them alike; the median burst is
reported per call, as wall time and as this thread's CPU time (the latter barely moves when other processes compete
for the cores).

Also: how soon a large GEMV call returns against its kernel time; a scaled-down decode step (32 layers x (dpnp
RMS-norm-like scale + 7 W4A16 GEMVs)) wall time against the sum of its kernel times; and the first call of each
family in a fresh process.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import dpctl
import dpnp
import numpy as np

import xe2rt

from .. import _capi, launch, validate
from ..ops import gemv_fp16 as gemv_fp16_op
from ..ops import gemv_w4a16 as gemv_w4a16_op
from .harness import BenchContext, Result

BURST = 50
ROUNDS = 15
QUICK_ROUNDS = 3


def _timed_bursts(ctx: BenchContext, methods: dict, rounds: int) -> dict:
    """Per method: (median wall us per call, median thread-CPU us per call) over `rounds` interleaved bursts."""
    walls = {name: [] for name in methods}
    cpus = {name: [] for name in methods}
    for call in methods.values():  # warm: kernels built, caches filled
        for _ in range(5):
            call()
    ctx.queue.wait()
    for _ in range(rounds):
        for name, call in methods.items():
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            for _ in range(BURST):
                call()
            cpus[name].append((time.thread_time() - cpu0) / BURST * 1e6)
            walls[name].append((time.perf_counter() - wall0) / BURST * 1e6)
            ctx.queue.wait()
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in methods}


def _dpctl_argument(item, arg):
    """What dpctl's submit_async takes for one packed argument (xe2rt packs an array as its address)."""
    if type(item) is int:
        return launch.memory_at(validate.usm_view(arg))
    if type(item) is _capi.LocalArg:
        return dpctl.LocalAccessor(item.code, (item.count,))
    if type(item) is _capi.RawArg:
        data = bytes(item)
        return dpctl.RawKernelArg(len(data), np.frombuffer(data, np.uint8))
    return item  # a ctypes scalar


def _floor_calls(op, *args, **kwargs):
    """(dpctl's submit_async, dpctl's C API as xe2rt calls it) of the kernel `op(*args, **kwargs)` launches, each
    with its arguments packed once: no checks, no ordering, no argument records."""
    with launch.recording() as recorder:
        op(*args, **kwargs)
    (step,) = [s for s in recorder.steps if isinstance(s, launch.Submission)]
    queue, kernel, gs, ls, raw = step.queue, step.sycl_kernel, step.global_size, step.local_size, step.raw
    packed = [_dpctl_argument(item, arg) for item, arg in zip(step.packed, step.keep)]
    held = step.keep  # the arrays stay alive while these closures do
    return lambda: (queue.submit_async(kernel, packed, gs, ls), held), lambda: (raw.submit(), held)


def _per_call_cases(ctx: BenchContext, rounds: int) -> list[Result]:
    rng = np.random.default_rng(0)
    q = ctx.queue
    x = dpnp.asarray(rng.standard_normal(256).astype(np.float16), sycl_queue=q)
    w = dpnp.asarray(rng.standard_normal((16, 256)).astype(np.float16), sycl_queue=q)
    qw = xe2rt.quantize_w4(rng.standard_normal((16, 256)).astype(np.float16), group_size=128).to_device(q)
    logits = dpnp.asarray(rng.standard_normal((1, 128)).astype(np.float16), sycl_queue=q)
    y = dpnp.empty(16, dtype=np.float16, sycl_queue=q)
    top = (dpnp.empty((1, 8), dtype=np.float16, sycl_queue=q), dpnp.empty((1, 8), dtype=np.int32, sycl_queue=q))
    cases = [
        ("gemv_fp16 16x256", xe2rt.gemv_fp16, (x, w), {}, y, lambda: dpnp.add(x, x)),
        ("gemv_w4a16 16x256 g128", xe2rt.gemv_w4a16, (x, qw), {}, y, lambda: dpnp.add(x, x)),
        ("softmax_topk 1x128 k8", xe2rt.softmax_topk, (logits, 8), {}, top, lambda: dpnp.add(logits, logits)),
    ]
    results = []
    for case, op, args, kwargs, out, dpnp_op in cases:
        ctx.say(f"  launch cost: {case}")
        floor, c_api = _floor_calls(op, *args, **kwargs)
        methods = {
            "floor": floor,
            "C API": c_api,
            "dpnp": dpnp_op,
            "op": lambda: op(*args, **kwargs),
            "op out=": lambda: op(*args, **kwargs, out=out),
            "bind": xe2rt.bind(op, *args, **kwargs, out=out),
        }
        timing = _timed_bursts(ctx, methods, rounds)
        floor_wall, floor_cpu = timing["floor"]
        for name, (wall, cpu) in timing.items():
            results.append(Result("launch", case, name, seconds=wall * 1e-6, wall_seconds=wall * 1e-6,
                                  note=f"cpu {cpu:.1f} us; x floor: wall {wall / floor_wall:.2f}, "
                                       f"cpu {cpu / floor_cpu:.2f}"))
    return results


USER_KERNEL = """
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void axpy_half(__global half* y, __global const half* x, half a, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _user_kernel_case(ctx: BenchContext, rounds: int) -> list[Result]:
    """A kernel loaded through the public path, launched on dpnp arrays: its call against the submit_async floor."""
    case = "user axpy_half 256 (load)"
    ctx.say(f"  launch cost: {case}")
    kernel = xe2rt.Module.from_source(USER_KERNEL, queue=ctx.queue).kernel("axpy_half")
    x = dpnp.ones(256, dtype=np.float16, sycl_queue=ctx.queue)
    y = dpnp.zeros(256, dtype=np.float16, sycl_queue=ctx.queue)
    args, sizes = (y, x, 0.5, 256), dict(global_size=256, local_size=64)
    floor, c_api = _floor_calls(kernel, *args, **sizes)
    methods = {
        "floor": floor,
        "C API": c_api,
        "op": lambda: kernel(*args, **sizes),
        "bind": xe2rt.bind(kernel, *args, **sizes),
    }
    timing = _timed_bursts(ctx, methods, rounds)
    floor_wall, floor_cpu = timing["floor"]
    return [Result("launch", case, name, seconds=wall * 1e-6, wall_seconds=wall * 1e-6,
                   note=f"cpu {cpu:.1f} us; x floor: wall {wall / floor_wall:.2f}, cpu {cpu / floor_cpu:.2f}")
            for name, (wall, cpu) in timing.items()]


def _graph_case(ctx: BenchContext, rounds: int) -> list[Result]:
    """Per kernel, on an in-order queue of the run's device: a bound plan called BURST times, against one graph of
    BURST copies of that plan (xe2rt.graph: one OpenCL command buffer where the device records them) called once per
    BURST calls."""
    import types
    case = "gemv_w4a16 16x256 g128, in order"
    ctx.say(f"  launch cost: {case}")
    q = dpctl.SyclQueue(ctx.queue.sycl_context, ctx.queue.sycl_device, property="in_order")
    rng = np.random.default_rng(0)
    x = dpnp.asarray(rng.standard_normal(256).astype(np.float16), sycl_queue=q)
    qw = xe2rt.quantize_w4(rng.standard_normal((16, 256)).astype(np.float16), group_size=128).to_device(q)
    y = dpnp.empty(16, dtype=np.float16, sycl_queue=q)
    plan = xe2rt.bind(xe2rt.gemv_w4a16, x, qw, out=y)
    graph = xe2rt.graph([plan] * BURST)
    calls = [0]

    def one_in_burst():  # the whole graph on the burst's first call: BURST kernels per BURST calls
        if calls[0] % BURST == 0:
            graph()
        calls[0] += 1
    timing = _timed_bursts(types.SimpleNamespace(queue=q), {"bind": plan, "graph": one_in_burst}, rounds)
    bind_wall, bind_cpu = timing["bind"]
    how = "one OpenCL command buffer" if graph.native else f"launch by launch: {graph.why}"
    return [Result("launch", case, name, seconds=wall * 1e-6, wall_seconds=wall * 1e-6,
                   note=f"cpu {cpu:.1f} us per kernel; x bind: wall {wall / bind_wall:.2f}, cpu {cpu / bind_cpu:.2f}"
                        + (f"; a graph of {BURST} plans as {how}" if name == "graph" else ""))
            for name, (wall, cpu) in timing.items()]


def _return_time_case(ctx: BenchContext) -> Result:
    """A gemv_fp16 call on a large matrix: how long until Python has control back, against the kernel's time."""
    n = k = 1024 if ctx.quick else 8192
    rng = np.random.default_rng(1)
    w = dpnp.asarray(rng.standard_normal((n, k), dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
    x = dpnp.asarray(rng.standard_normal(k, dtype=np.float32).astype(np.float16), sycl_queue=ctx.queue)
    y = dpnp.empty(n, dtype=np.float16, sycl_queue=ctx.queue)
    kernel = ctx.time_events(lambda i: gemv_fp16_op.run(x, w, out=y)[1])
    returns = []
    for _ in range(ctx.iters):
        start = time.perf_counter()
        xe2rt.gemv_fp16(x, w, out=y)
        returns.append(time.perf_counter() - start)
        ctx.queue.wait()
    back = statistics.median(returns)
    return Result("launch", f"gemv_fp16 {n}x{k} return", "op out=", seconds=back, wall_seconds=back,
                  note=f"returns after {back * 1e6:.0f} us = {100 * back / kernel:.2f}% of its kernel time "
                       f"{kernel * 1e3:.2f} ms")


def _decode_step_case(ctx: BenchContext) -> list[Result]:
    """32 layers x (dpnp scale + 7 W4A16 GEMVs), Llama-3-8B's layer shapes scaled down 8x (H 512, KV 128, I 1792):
    each GEMV waited for (what every op did before launches became asynchronous), the public ops, and plans."""
    layers, h, kv, inter = (4, 128, 32, 512) if ctx.quick else (32, 512, 128, 1792)
    rng = np.random.default_rng(2)
    q = ctx.queue
    shapes = {"q": (h, h), "k": (kv, h), "v": (kv, h), "o": (h, h), "gate": (inter, h), "up": (inter, h),
              "down": (h, inter)}
    weights = [{name: xe2rt.quantize_w4(rng.standard_normal(shape).astype(np.float16) * 0.05).to_device(q)
                for name, shape in shapes.items()} for _ in range(layers)]
    gamma = dpnp.asarray(np.ones(h, np.float16), sycl_queue=q)
    h0 = dpnp.asarray(rng.standard_normal(h).astype(np.float16), sycl_queue=q)
    bufs = {name: dpnp.empty(shape[0], dtype=np.float16, sycl_queue=q) for name, shape in shapes.items()}
    xn = dpnp.empty(h, dtype=np.float16, sycl_queue=q)
    inputs = {"q": xn, "k": xn, "v": xn, "o": bufs["q"], "gate": bufs["o"], "up": bufs["o"], "down": bufs["up"]}

    def step(gemv):
        hidden = h0
        for layer in weights:
            dpnp.multiply(hidden, gamma, out=xn)  # the RMS-norm-like dpnp op
            for name in shapes:
                gemv(name, layer)
            hidden = bufs["down"]

    def kernel_seconds():
        events = []
        step(lambda name, layer: events.append(gemv_w4a16_op.run(inputs[name], layer[name], out=bufs[name])[1]))
        q.wait()
        return sum((e.profiling_info_end - e.profiling_info_start) * 1e-9 for e in events)

    plans = [{name: xe2rt.bind(xe2rt.gemv_w4a16, inputs[name], layer[name], out=bufs[name]) for name in shapes}
             for layer in weights]
    plan_of = {id(layer): p for layer, p in zip(weights, plans)}
    variants = {"waited": lambda name, layer: gemv_w4a16_op.run(inputs[name], layer[name], out=bufs[name])[1].wait(),
                "ops": lambda name, layer: xe2rt.gemv_w4a16(inputs[name], layer[name], out=bufs[name]),
                "bind": lambda name, layer: plan_of[id(layer)][name]()}
    kernels = statistics.median(kernel_seconds() for _ in range(3))
    results = []
    for label, gemv in variants.items():
        walls = []
        for i in range(2 + ctx.iters // 2):
            start = time.perf_counter()
            step(gemv)
            submitted = time.perf_counter() - start
            q.wait()
            if i >= 2:
                walls.append((time.perf_counter() - start, submitted))
        wall = statistics.median(w for w, _ in walls)
        host = statistics.median(s for _, s in walls)
        results.append(Result("launch", f"decode step {layers}L H{h} I{inter}", label, seconds=wall,
                              wall_seconds=wall,
                              note=f"{layers * 7} GEMVs + {layers} dpnp ops; wall {wall * 1e3:.2f} ms vs "
                                   f"sum of GEMV kernel times {kernels * 1e3:.2f} ms ({wall / kernels:.2f}x); "
                                   f"host done queuing after {host * 1e3:.2f} ms"))
    return results


FIRST_CALL = {
    "gemv_fp16": "x = d(r.standard_normal(4096)); w = d(r.standard_normal((64, 4096)))\n"
                 "f = lambda: xe2rt.gemv_fp16(x, w)",
    "gemv_w8a16": "x = d(r.standard_normal(4096)); qw = xe2rt.quantize_w8(h(r.standard_normal((64, 4096))))"
                  ".to_device(q)\nf = lambda: xe2rt.gemv_w8a16(x, qw)",
    "gemv_w4a16": "x = d(r.standard_normal(4096)); qw = xe2rt.quantize_w4(h(r.standard_normal((64, 4096))))"
                  ".to_device(q)\nf = lambda: xe2rt.gemv_w4a16(x, qw)",
    "gemm_fp16": "a = d(r.standard_normal((32, 512))); w = d(r.standard_normal((256, 512)))\n"
                 "f = lambda: xe2rt.gemm_fp16(a, w, activation='gelu', b_layout='nk')",
    "softmax_topk": "lg = d(r.standard_normal((4, 128)))\nf = lambda: xe2rt.softmax_topk(lg, 8)",
}
FIRST_CALL_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
import xe2rt, dpctl, dpnp, numpy as np
t1 = time.perf_counter()
q = dpctl.SyclQueue(sys.argv[1])
r = np.random.default_rng(0)
h = lambda a: np.asarray(a, np.float16)
d = lambda a: dpnp.asarray(h(a), sycl_queue=q)
{setup}
q.wait()
t2 = time.perf_counter(); f(); q.wait(); t3 = time.perf_counter(); f(); q.wait(); t4 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "first": t3 - t2, "second": t4 - t3}}))
"""


def _first_call_cases(ctx: BenchContext) -> list[Result]:
    results = []
    for family, setup in FIRST_CALL.items():
        ctx.say(f"  first call in a fresh process: {family}")
        proc = subprocess.run([sys.executable, "-c", FIRST_CALL_SCRIPT.format(setup=setup), ctx.device.filter_string],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"first-call probe for {family} failed:\n{proc.stderr[-2000:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(Result("launch", f"first call {family}", "fresh", seconds=got["first"],
                              wall_seconds=got["first"],
                              note=f"first call {got['first'] * 1e3:.0f} ms (builds the one kernel it launches), "
                                   f"second {got['second'] * 1e3:.2f} ms, import xe2rt {got['import'] * 1e3:.0f} ms"))
    return results


def cases(ctx: BenchContext) -> list[Result]:
    results = _per_call_cases(ctx, QUICK_ROUNDS if ctx.quick else ROUNDS)
    results += _user_kernel_case(ctx, QUICK_ROUNDS if ctx.quick else ROUNDS)
    results += _graph_case(ctx, QUICK_ROUNDS if ctx.quick else ROUNDS)
    ctx.say("  launch: large GEMV return time")
    results.append(_return_time_case(ctx))
    ctx.say("  launch: decode step")
    results += _decode_step_case(ctx)
    results += _first_call_cases(ctx)
    return results


def format_table(rows: list[dict]) -> str:
    head = f"{'launch case':30s} {'method':9s} {'wall us':>9s}  note"
    lines = [head, "-" * 110]
    for r in rows:
        lines.append(f"{r['case']:30s} {r['variant']:9s} {r['wall_seconds'] * 1e6:9.1f}  {r['note']}")
    return "\n".join(lines)
