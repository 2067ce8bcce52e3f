"""Command line of `python -m xe2rt bench`: measure, write JSON (and optionally a PNG roofline), print the tables.

Progress goes to stderr; the tables go to stdout, the measured rows last. Under mpiexec every rank runs the tp family
instead (bench/tp.py run_ranks), rank 0 reporting through the same pieces (bench/report.py).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
from pathlib import Path

from . import FAMILIES, STATIC_TABLE, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="SYCL filter string (default: dpctl's default device)")
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=sorted(FAMILIES))
    parser.add_argument("--quick", action="store_true", help="tiny shapes and pool: checks the machinery only")
    parser.add_argument("--iters", type=int, default=20, help="timed launches per case (median reported)")
    parser.add_argument("--json", help=f"where to write results (default {report.DEFAULT_JSON}, or the next free "
                                       f"numbered name beside it when that exists)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    parser.add_argument("--plot", help="also write a roofline plot here: .png, .svg or .pdf (.png is added to "
                                       "other names; needs matplotlib)")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=DIR",
                        help="run a peer in the same run (decode family: llama.cpp=DIR with llama-bench)")


PEERS = {"llama.cpp": ("llama-bench", "llama-quantize")}  # peer name: the tools its folder must hold


def run(args: argparse.Namespace) -> int:
    from ..errors import InputError
    out = report.output_path(args.json, args.overwrite)  # refused before anything is measured
    plot_path = None
    if args.plot:
        if importlib.util.find_spec("matplotlib") is None:
            raise InputError("--plot needs matplotlib: pip install 'xe2rt[plot]'")
        plot_path = Path(args.plot)
        if plot_path.suffix.lower() not in (".png", ".svg", ".pdf"):  # matplotlib would add .png itself
            plot_path = plot_path.with_name(plot_path.name + ".png")
        report.writable_file("--plot", plot_path)
    if args.iters < 1:
        raise InputError(f"--iters must be >= 1, got {args.iters}")
    peers = {}
    for item in getattr(args, "peer", []):
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise InputError(f"--peer {item!r}: expected NAME=DIR, e.g. llama.cpp=/path/to/llama.cpp/build/bin")
        if name not in PEERS:
            raise InputError(f"--peer {item!r}: unknown peer {name!r}; supported: {', '.join(sorted(PEERS))}")
        if not Path(folder).is_dir():
            raise InputError(f"--peer {item!r}: {folder} is not a folder")
        missing = [tool for tool in PEERS[name] if not (Path(folder) / tool).is_file()]
        if missing:
            raise InputError(f"--peer {item!r}: {folder} has no {', '.join(missing)} (the folder of the built "
                             f"binaries, e.g. llama.cpp/build/bin)")
        if "decode" not in args.families or args.quick:
            raise InputError(f"--peer {item!r} runs beside the decode family's Llama rows, which a run with "
                             f"{'--quick' if args.quick else '--families ' + ' '.join(args.families)} does not have; "
                             f"use --families decode without --quick")
        peers[name] = folder
    from ..parallel.mpi import world_size_from_env
    if world_size_from_env() > 1:  # under mpiexec: every rank runs the tp family, rank 0 reports
        from .tp import run_ranks
        return run_ranks(args, out)
    import xe2rt
    from .harness import BenchContext
    ctx = BenchContext(device=args.device, quick=args.quick, iters=args.iters)
    ctx.peers = peers
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
    static = importlib.import_module(STATIC_TABLE)
    static_rows = static.rows_from_manifest()
    report.write_json(out, ctx.device, ctx.target, args.quick, rows, read_gbps=read_gbps,
                      read_gbps_start=read_before, read_gbps_end=read_after, fma_gflops=ctx.fma_gflops,
                      llc_bytes=ctx.llc_bytes, pool_bytes=ctx.pool_bytes, static_hot_loops=static_rows)
    ctx.say(f"wrote {out}")
    if plot_path is not None:
        report.plot(rows, read_gbps, ctx.fma_gflops, plot_path, ctx.device.name)
        ctx.say(f"wrote {plot_path}")
    kernel_rows = [r for r in rows if r["family"] != "launch"]
    launch_rows = [r for r in rows if r["family"] == "launch"]
    print(static.format_table(static_rows))
    if launch_rows:
        from .launch import format_table as format_launch_table
        print()
        print(format_launch_table(launch_rows))
    if kernel_rows:
        print()
        print(f"measured on {ctx.device.name!r} (also in {out}):")
        print(report.format_table(kernel_rows, read_gbps))
    return 0
