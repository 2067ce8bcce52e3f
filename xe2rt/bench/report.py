"""What `python -m xe2rt bench` hands back: the results table, the JSON report (never overwriting one silently) and
the roofline plot. Used by the single-process run (bench/cli.py) and the MPI run (bench/tp.py) alike."""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import xe2rt

from .. import config
from ..errors import InputError

DEFAULT_JSON = Path("bench_results") / "bench.json"


def writable_file(option: str, path: Path) -> None:
    """Refuse, before a run, a path that cannot be written (a run's results would be lost at its end)."""
    problem = config.file_problem(path)
    if problem:
        raise InputError(f"{option} {path}: {problem}")


def output_path(requested: str | None, overwrite: bool) -> Path:
    """Where the JSON goes, decided before anything is measured. An explicit path that exists is refused unless
    overwrite; the default path gets the next free numbered name (bench-2.json, ...) instead of replacing a run."""
    if requested is not None:
        path = Path(requested)
        if path.exists() and not overwrite:
            raise InputError(f"--json {path} exists; pass --overwrite to replace it or choose another path")
        writable_file("--json", path)
        return path
    if overwrite or not DEFAULT_JSON.exists():
        return DEFAULT_JSON
    n = 2
    while DEFAULT_JSON.with_name(f"{DEFAULT_JSON.stem}-{n}{DEFAULT_JSON.suffix}").exists():
        n += 1
    return DEFAULT_JSON.with_name(f"{DEFAULT_JSON.stem}-{n}{DEFAULT_JSON.suffix}")


def write_json(path: Path, device, target: str, quick: bool, rows: list[dict], **fields) -> Path:
    """The report: version, device, target, driver, time, quick flag, the given run-level fields, then the rows."""
    report = {"xe2rt_version": xe2rt.__version__, "device": device.name, "target": target,
              "driver": device.driver_version, "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "quick": quick, **fields, "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return path


def format_table(rows: list[dict], read_gbps: float) -> str:
    head = (f"{'family':12s} {'case':22s} {'variant':8s} {'kernel ms':>9s} {'GB/s':>7s} {'%readBW':>7s} "
            f"{'TFLOP/s':>8s} {'probe':>6s} {'wall ms':>8s} {'alternative':>22s} {'alt ms':>8s} {'speedup':>7s}  note")
    lines = [f"device read bandwidth (stream_read): {read_gbps:.1f} GB/s for the whole run (higher of start and end); "
             f"each row's %readBW is against its own probe (column 'probe', GB/s, higher of right before and right "
             f"after its timed loop)", head, "-" * len(head)]
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    speedup = lambda v: format(v, "6.2f") + "x" if v is not None else "-"  # noqa: E731
    for r in rows:
        lines.append(f"{r['family']:12s} {r['case']:22s} {r['variant']:8s} {r['seconds'] * 1e3:9.3f} "
                     f"{fmt(r['gbps'], '7.1f'):>7s} {fmt(r['pct_read_bw'], '6.1f'):>6s}% "
                     f"{fmt(r['tflops'], '8.4f'):>8s} {r['read_gbps']:6.1f} {r['wall_seconds'] * 1e3:8.3f} "
                     f"{r['alternative'] or '-':>22s} {fmt(r['alt_seconds'] and r['alt_seconds'] * 1e3, '8.3f'):>8s} "
                     f"{speedup(r['speedup_vs_alt']):>7s}  {r['note']}")
    return "\n".join(lines)


def roofline(ax, rows: list[dict], read_gbps: float, fma_gflops: float | None = None, label_points: bool = True,
             title: str = "roofline (kernel time)") -> None:
    """Draw measured rows on a log-log roofline: the memory roof (read bandwidth), the compute roof (the measured
    fp32 multiply-add peak) when given, and each point labelled with its case."""
    points = [r for r in rows if r.get("bytes") and r.get("flops")]
    if not points:
        ax.set_title(f"{title}: no rows with bytes and flops")
        return
    intensity = lambda r: r["flops"] / r["bytes"]  # noqa: E731
    lo, hi = min(map(intensity, points)) / 2, max(map(intensity, points)) * 4
    xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    roof = [read_gbps * x if not fma_gflops else min(read_gbps * x, fma_gflops) for x in xs]
    ax.loglog(xs, roof, "k-", lw=1, label=f"read {read_gbps:.1f} GB/s"
              + (f", fp32 FMA {fma_gflops:.0f} GFLOP/s" if fma_gflops else ""))
    for family in sorted({r["family"] for r in points}):
        mine = [r for r in points if r["family"] == family]
        ax.loglog([intensity(r) for r in mine], [r["flops"] / r["seconds"] / 1e9 for r in mine], "o", label=family)
        if label_points:
            for r in mine:
                ax.annotate(f"{r['case']} {r['variant']}".strip(), (intensity(r), r["flops"] / r["seconds"] / 1e9),
                            fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("arithmetic intensity (flop / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=7)


def plot(rows: list[dict], read_gbps: float, fma_gflops: float | None, path: Path, device: str) -> None:
    """The roofline as a PNG, without pyplot (no backend is chosen or changed)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'xe2rt[plot]'") from None
    fig = Figure(figsize=(8, 5.5))
    roofline(fig.add_subplot(), rows, read_gbps, fma_gflops, title=f"xe2rt roofline on {device} (kernel time)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def check_complete(path, families=None) -> None:
    """Raise if the JSON report at `path` lacks a measured row (seconds > 0) for any of `families` (default: every
    family of `python -m xe2rt bench`). .ci/run calls it on its quick run."""
    from . import FAMILIES
    report = json.loads(Path(path).read_text())
    measured = {r["family"] for r in report.get("rows", []) if r.get("seconds", 0) > 0 and r.get("wall_seconds", 0) > 0}
    missing = sorted(set(families or FAMILIES) - measured)
    if missing:
        raise SystemExit(f"{path}: no measured rows for families {missing}")
