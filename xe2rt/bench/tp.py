"""tp family: the Llama-3-8B MLP block (H 4096, I 14336, W4A16 g128) tensor-parallel on 1, 2 and 4 shards.

`python -m xe2rt bench --families tp`: one process, shards on local queues (CPU sub-devices here: 1 shard on one
core, 2 shards on two cores, 4 shards as 2 queues per core; plus the unsharded block on the whole CPU device).
`mpiexec -n R python -m xe2rt bench --families tp`: R ranks, one device each (run_ranks); rank 0 also times the
unsharded block alone on its own device (the others idle) as the 1-rank baseline, and only rank 0 prints and writes.

Per token: wall time of the whole block (every shard's gate, up, SiLU-mul and down, then the reduction), median of
the timed iterations; the forward is instrumented with one wait between the shards' work and the reduction, so
`reduce share` = (reduction + under MPI the check-and-agree collective) / total (host staging included).
Strong-scaling efficiency = T1 / (R * T_R), T1 = the unsharded block on one device of the same kind (one core here).
Bytes per rank: its W4 shard (codes + fp16 scales) plus x in and partial out; the reduction moves H * 2 bytes per rank. On real cards the shard bytes over the card's
bandwidth set the time; this 2-core machine shows correctness and overheads, not card scaling. The block's
weights (91 MB) exceed the 32 MiB L3 here, so each token reads them from memory without a rotating pool.
"""
from __future__ import annotations

import statistics
import time

import dpnp
import numpy as np

from ..parallel import block, local
from ..quant import QuantizedW4
from .quant import w4_bytes
from . import report
from .harness import BenchContext, Result, timed_samples

SHAPE = (4096, 14336)  # Llama-3-8B hidden, intermediate
QUICK_SHAPE = (512, 1024)
GROUP = 128
SHARDS = (1, 2, 4)


def _w4(rng, n, k):
    return QuantizedW4(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8),
                       (rng.uniform(0.5, 1.5, size=(n, k // GROUP)) * 0.003).astype(np.float16), None, GROUP)


def mlp_weights(rng, hidden: int, inter: int):
    return _w4(rng, inter, hidden), _w4(rng, inter, hidden), _w4(rng, hidden, inter)


def rank_bytes(hidden: int, inter: int, shards: int) -> int:
    """Bytes one shard reads and writes per token (seed 000 GEMV formulas: weights, x in, y out)."""
    part = inter // shards
    return 2 * w4_bytes(part, hidden, GROUP, True) + w4_bytes(hidden, part, GROUP, True)


def time_forward(forward, x, iters: int, warmup: int = 2) -> tuple[float, float, object]:
    """(median seconds per token, median reduction share, last y)."""
    last = {}

    def step(i):
        t = {}
        last["y"] = forward(x, t)
        total = sum(t.values())
        return total, (total - t["shards"]) / total

    samples = timed_samples(step, iters, warmup)
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples), last["y"]


def _row(case, variant, seconds, share, shards, hidden, inter, t1, diff, where, read_gbps=None) -> Result:
    per_rank = rank_bytes(hidden, inter, shards)
    eff = t1 / (shards * seconds) if t1 else None
    note = (f"{where}; reduce share {100 * share:.1f}%; "
            f"{'strong-scaling eff ' + format(100 * eff, '.0f') + '%; ' if eff else ''}"
            f"per-rank bytes {per_rank / 1e6:.1f} MB + {hidden * 2} B reduced; max|y-y1|/max|y1| {diff:.1e}")
    return Result("tp", case, variant, seconds, seconds, bytes=per_rank * shards, flops=6 * hidden * inter,
                  note=note, read_gbps=read_gbps)


def _diff(y, y1) -> float:
    a, b = dpnp.asnumpy(y).astype(np.float64), dpnp.asnumpy(y1).astype(np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def cases(ctx: BenchContext) -> list[Result]:
    hidden, inter = QUICK_SHAPE if ctx.quick else SHAPE
    case = f"mlp {hidden}x{inter} g{GROUP}"
    ctx.say(f"  tp {case}: preparing weights")
    weights = mlp_weights(np.random.default_rng(0), hidden, inter)
    x_host = np.random.default_rng(1).standard_normal(hidden).astype(np.float16)
    groups = {1: local.local_queues(2, ctx.device)[:1]}
    for r in SHARDS[1:]:
        groups[r] = local.local_queues(r, ctx.device)
    groups["whole"] = local.local_queues(1, ctx.device)
    results, t1, y1 = [], None, None
    for key, queues in groups.items():
        shards = 1 if key == "whole" else key
        model = local.ParallelMLP(*weights, queues)
        x = dpnp.asarray(x_host, sycl_queue=queues[0])
        before = ctx._probe_gbps(3)
        seconds, share, y = time_forward(model.forward, x, ctx.iters)
        read = max(before, ctx._probe_gbps(3))
        if key == 1:
            t1, y1 = seconds, y
        cores = sorted({q.sycl_device.max_compute_units for q in queues})
        where = (f"{len(queues)} queue(s) on {len({q.sycl_device for q in queues})} device(s) of {cores} CU, "
                 f"one process")
        diff = _diff(y, y1) if y1 is not None else 0.0
        variant = "whole CPU" if key == "whole" else f"local x{shards}"
        results.append(_row(case, variant, seconds, share, shards, hidden, inter, t1 if key != "whole" else None,
                            diff, where, read))
        ctx.say(f"    {variant}: {seconds * 1e3:.2f} ms/token, reduce {100 * share:.1f}%")
        del model
    return results


def run_ranks(args, out) -> int:
    """The tp rows under mpiexec (every rank runs this; rank 0 writes the JSON to `out` and prints)."""
    from ..parallel import mpi
    return mpi.run_or_abort(_run_ranks, args, out)


def _idle_until_rank0(group) -> None:
    """Wait for rank 0 without spinning a core (Intel MPI's blocking barrier busy-polls)."""
    request = group.comm.Ibarrier()
    while not request.Test():
        time.sleep(0.005)


def _run_ranks(args, out) -> int:
    import xe2rt
    from ..parallel.mpi import MpiMLP, RankGroup
    if list(args.families) != ["tp"]:
        raise SystemExit(f"under mpiexec only the tp family runs (got --families {' '.join(args.families)}); "
                         f"run the others without mpiexec")
    group = RankGroup(device=args.device)
    say = (lambda m: print(m, flush=True)) if group.rank == 0 else (lambda m: None)
    say(f"xe2rt {xe2rt.__version__} tp bench on {group.size} MPI ranks; allreduce transport: {group.transport}")
    hidden, inter = QUICK_SHAPE if args.quick else SHAPE
    iters = 3 if args.quick else args.iters
    case = f"mlp {hidden}x{inter} g{GROUP}"
    full = mlp_weights(np.random.default_rng(0), hidden, inter)  # same seed on every rank: same block
    shard = block.split_mlp(*full, group.size)[group.rank]
    model = MpiMLP.from_shard(group, *shard)
    x = dpnp.asarray(np.random.default_rng(1).standard_normal(hidden).astype(np.float16), sycl_queue=group.queue)
    last = {}

    def step(i):
        group.comm.Barrier()
        t = {}
        last["y"] = model.forward(x, t)
        per_rank = group.comm.allgather((t["shards"], t["reduce"] + t["agree"]))
        return max(a + b for a, b in per_rank), statistics.mean(b / (a + b) for a, b in per_rank)

    samples = timed_samples(step, iters, 2)
    seconds, share, y = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples), last["y"]
    # 1-rank baseline and the read-bandwidth probe on rank 0 alone, the other ranks idle
    rows = None
    if group.rank == 0:
        single = local.ParallelMLP(*full, [group.queue])
        t1, share1, y1 = time_forward(single.forward, x, iters)
        ctx = BenchContext(device=args.device, quick=args.quick, iters=iters)
        read = ctx.measure_read_bandwidth()
        where = f"{group.size} MPI ranks, {group.device.max_compute_units} CU each"
        rows = [_row(case, "mpi x1 (rank 0)", t1, share1, 1, hidden, inter, t1, 0.0,
                     f"rank 0 alone on its {group.device.max_compute_units}-CU device"),
                _row(case, f"mpi x{group.size}", seconds, share, group.size, hidden, inter, t1, _diff(y, y1), where)]
        rows = [r.finish(read).as_dict() for r in rows]
        group.comm.Ibarrier().Wait()
    else:
        _idle_until_rank0(group)
    if group.rank == 0:
        report.write_json(out, group.device, xe2rt.target_for(group.device), args.quick, rows, mpi_ranks=group.size,
                          transport=group.transport, read_gbps=read)
        print(f"wrote {out}", flush=True)
        print(report.format_table(rows, read), flush=True)
    return 0
