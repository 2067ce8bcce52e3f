"""Command line of `python -m xe2rt bench`: measure, print a table, write JSON (and optionally a PNG plot)."""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import time
from pathlib import Path

from . import FAMILIES, STATIC_TABLE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="SYCL filter string (default: dpctl's default device)")
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=sorted(FAMILIES))
    parser.add_argument("--quick", action="store_true", help="tiny shapes and pool: checks the machinery only")
    parser.add_argument("--iters", type=int, default=20, help="timed launches per case (median reported)")
    parser.add_argument("--json", default="bench_results/bench.json", help="where to write results")
    parser.add_argument("--plot", help="also write a roofline PNG here (needs matplotlib)")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=DIR",
                        help="run a peer in the same run (decode family: llama.cpp=DIR with llama-bench)")


def format_table(rows: list[dict], read_gbps: float) -> str:
    head = (f"{'family':12s} {'case':22s} {'variant':8s} {'kernel ms':>9s} {'GB/s':>7s} {'%readBW':>7s} "
            f"{'TFLOP/s':>8s} {'probe':>6s} {'wall ms':>8s} {'alternative':>22s} {'alt ms':>8s} {'speedup':>7s}  note")
    lines = [f"device read bandwidth (stream_read): {read_gbps:.1f} GB/s for the whole run (higher of start and end); "
             f"each row's %readBW is against its own probe (column 'probe', GB/s, higher of right before and right "
             f"after its timed loop)", head, "-" * len(head)]
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    for r in rows:
        lines.append(f"{r['family']:12s} {r['case']:22s} {r['variant']:8s} {r['seconds'] * 1e3:9.3f} "
                     f"{fmt(r['gbps'], '7.1f'):>7s} {fmt(r['pct_read_bw'], '6.1f'):>6s}% "
                     f"{fmt(r['tflops'], '8.4f'):>8s} {r['read_gbps']:6.1f} {r['wall_seconds'] * 1e3:8.3f} {r['alternative'] or '-':>22s} "
                     f"{fmt(r['alt_seconds'] and r['alt_seconds'] * 1e3, '8.3f'):>8s} "
                     f"{fmt(r['speedup_vs_alt'], '6.2f'):>6s}x  {r['note']}")
    return "\n".join(lines)


def plot(rows: list[dict], read_gbps: float, path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'xe2rt[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = [r for r in rows if r["bytes"] and r["flops"]]
    for family in sorted({r["family"] for r in points}):
        mine = [r for r in points if r["family"] == family]
        ax.loglog([r["flops"] / r["bytes"] for r in mine], [r["flops"] / r["seconds"] / 1e9 for r in mine], "o",
                  label=family)
    if points:
        lo = min(r["flops"] / r["bytes"] for r in points) / 2
        hi = max(r["flops"] / r["bytes"] for r in points) * 2
        ax.loglog([lo, hi], [lo * read_gbps, hi * read_gbps], "--", label=f"read BW {read_gbps:.1f} GB/s")
        ax.legend(fontsize=8)
    ax.set_xlabel("arithmetic intensity (flop / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("xe2rt roofline (kernel time)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> int:
    from ..parallel.mpi import world_size_from_env
    if world_size_from_env() > 1:  # under mpiexec: every rank runs the tp family, rank 0 reports
        from .tp import run_ranks
        return run_ranks(args)
    import xe2rt
    from .harness import BenchContext
    ctx = BenchContext(device=args.device, quick=args.quick, iters=args.iters)
    ctx.peers = dict(p.split("=", 1) for p in getattr(args, "peer", []) if "=" in p)
    ctx.say(f"xe2rt {xe2rt.__version__} bench on {ctx.device.name!r} (target {ctx.target}), "
            f"LLC {ctx.llc_bytes / 2**20:.0f} MiB, weight pool >= {ctx.pool_bytes / 2**20:.0f} MiB")
    ctx.say("[0] measuring device read bandwidth (stream_read)")
    read_before = ctx.measure_read_bandwidth()
    ctx.say(f"    {read_before:.1f} GB/s")
    ctx.say("    fp32 multiply-add peak (fma_peak)")
    ctx.say(f"    {ctx.measure_fma_peak():.0f} GFLOP/s")
    results = []
    for index, family in enumerate(args.families, 1):
        ctx.say(f"[{index}/{len(args.families)}] {family}")
        module = importlib.import_module(FAMILIES[family])
        results += module.cases(ctx)
    ctx.say("[end] measuring device read bandwidth again")
    read_after = ctx.measure_read_bandwidth()
    # Rows are quoted against their own bracketing probes; the run-level figure (higher of start and end, so a probe
    # slowed by a busy moment cannot inflate ratios) covers rows that carry none.
    read_gbps = max(read_before, read_after)
    ctx.say(f"    {read_after:.1f} GB/s (start {read_before:.1f})")
    rows = [result.finish(read_gbps).as_dict() for result in results]
    kernel_rows = [r for r in rows if r["family"] != "launch"]
    launch_rows = [r for r in rows if r["family"] == "launch"]
    if kernel_rows:
        print(format_table(kernel_rows, read_gbps))
    if launch_rows:
        from .launch import format_table as format_launch_table
        print()
        print(format_launch_table(launch_rows))
    static = importlib.import_module(STATIC_TABLE)
    static_rows = static.rows_from_manifest()
    print()
    print(static.format_table(static_rows))
    report = {"xe2rt_version": xe2rt.__version__, "device": ctx.device.name, "target": ctx.target,
              "driver": ctx.device.driver_version, "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "quick": args.quick, "read_gbps": read_gbps, "read_gbps_start": read_before,
              "read_gbps_end": read_after, "fma_gflops": ctx.fma_gflops, "llc_bytes": ctx.llc_bytes, "pool_bytes": ctx.pool_bytes, "rows": rows,
              "static_hot_loops": static_rows}
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    ctx.say(f"wrote {out}")
    if args.plot:
        plot(rows, read_gbps, args.plot)
        ctx.say(f"wrote {args.plot}")
    return 0
