"""`python -m xe2rt selftest`: prove every shipped kernel on this machine's device in one command.

1. Correctness: every family's checks (xe2rt.checks, the very cases and references the tests use) on the chosen
   device with its target (XE2RT_TARGET honoured), each with its error and its bound.
2. Native built-ins: on a device with the 2D block IO and matrix-multiply extensions (an Xe2 GPU), the unit-test
   kernels built with the REAL built-ins (gemm_fp16_ult_native) against the numpy reading of the specifications,
   naming every lane and component that differs. On any other device this part is skipped and says why.
3. Benchmark rows (--quick: a short subset), each beside the static estimate for the chip (an ESTIMATE from the ISA)
   and the seeds' published BMG figures, as ratios.
4. One JSON file to share, a one-screen summary; exit status 1 when a check fails, 2 for a usage error.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

# Published figures of the Xe2 kernel guides this project follows (seed documents), on BMG, in GB/s.
SEED_FIGURES = {"gemv_w4a16": 571.0, "gemv_w8a16": 552.0, "softmax_topk": 43.2}
QUICK_BENCH = ("gemv_w4a16", "gemv_w8a16", "softmax_topk")
FULL_BENCH = ("gemv_fp16", "gemv_w4a16", "gemv_w8a16", "softmax_topk", "gemm_fp16", "moe_ffn_w4a16")


class UsageError(Exception):
    """A mistake of the caller (device filter, JSON path): one line, exit 2."""


def add_arguments(parser) -> None:
    parser.add_argument("--device", help="SYCL filter string (default: every GPU, else the CPU)")
    parser.add_argument("--quick", action="store_true", help="a few cases per family and a short bench subset")
    parser.add_argument("--json", help="where to write the report (default: selftest_results/selftest_<time>.json)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --json file (refused otherwise)")
    parser.add_argument("--families", nargs="+", help="only these check families (default: all)")
    parser.add_argument("--no-bench", action="store_true", help="correctness only")


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("xe2rt", "dpctl", "dpnp", "intel-opencl-rt", "intel-sycl-rt", "intel-cmplr-lib-ur"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def choose_devices(filter_string: str | None) -> list:
    import dpctl
    if filter_string:
        from . import targets
        from .errors import InputError
        try:
            return [targets.select_device(filter_string)]
        except InputError as exc:  # the filter matches nothing: the message lists the devices there are
            raise UsageError(f"--device: {exc}") from None
    gpus = dpctl.get_devices(device_type="gpu")
    if gpus:
        return gpus
    cpus = dpctl.get_devices(device_type="cpu")
    if not cpus:
        raise UsageError("no GPU and no CPU SYCL device is visible (install intel-opencl-rt, see the README)")
    return cpus[:1]


def json_path(requested: str | None, overwrite: bool = False) -> Path:
    """The report path, checked writable before anything runs; an existing file is kept unless `overwrite` (as bench's
    --json)."""
    path = Path(requested) if requested else Path("selftest_results") / time.strftime("selftest_%Y%m%d_%H%M%S.json")
    if requested and path.is_file() and not overwrite:
        raise UsageError(f"--json {path} exists; pass --overwrite to replace it or choose another path")
    from . import config
    problem = config.file_problem(path)
    if problem:
        raise UsageError(f"cannot write the report to {path}: {problem}")
    return path  # nothing is created until the report is written: a refused or failed run leaves nothing


def _progress(total: int, label: str):
    try:
        from tqdm import tqdm
        return tqdm(total=total, desc=label, file=sys.stderr, leave=False, dynamic_ncols=True)
    except ImportError:
        class _Plain:
            def __init__(self):
                self.n = 0

            def update(self, k=1):
                self.n += k
                print(f"\r{label}: {self.n}/{total}", end="", file=sys.stderr, flush=True)

            def set_postfix_str(self, s):
                pass

            def close(self):
                print(file=sys.stderr)
        return _Plain()


def run_checks(queue, target: str, families: list[str], quick: bool, native: bool = False) -> list[dict]:
    """Every check of `families` that is meaningful for `target` (and, for those that need the real Xe2 built-ins,
    only when `native`), each as a JSON-able record."""
    from . import checks as C
    from . import targets as T
    todo = [c for f in families for c in C.checks_of(f, quick) if target in c.targets and (native or not c.native_xe2)
            and (not c.cpu_flag or T.cpu_has_flag(queue.sycl_device, c.cpu_flag))]
    bar = _progress(len(todo), f"checks ({target})")
    records = []
    for check in todo:
        start = time.perf_counter()
        try:
            r = check.run(queue, target)
            record = {"family": check.family, "case": check.name, "target": target, "seconds": 0.0,
                      "error": r.error, "bound": r.bound, "metric": r.metric, "bound_rule": r.bound_rule,
                      "detail": r.detail, "passed": bool(r.passed)}
        except Exception as exc:  # a kernel that cannot load or run is a failed check, named
            record = _failed(check.family, check.name, target, f"{type(exc).__name__}: {exc}")
        record["seconds"] = round(time.perf_counter() - start, 3)
        records.append(record)
        bar.set_postfix_str(check.family)
        bar.update(1)
    bar.close()
    return records


def _failed(family: str, case: str, target: str, detail: str) -> dict:
    """A check record that failed without a measured error (a kernel that could not load or run, nothing to check)."""
    return {"family": family, "case": case, "target": target, "seconds": 0.0, "error": None, "bound": None,
            "metric": None, "bound_rule": None, "detail": detail, "passed": False}


def has_native_builtins(device, target: str) -> tuple[bool, str]:
    """Whether the device runs the real 2D block IO and DPAS built-ins; with the reason when not."""
    import dpctl
    if target not in ("bmg", "lnl"):
        return False, f"target {target}: not an Xe2 device"
    if device.device_type != dpctl.device_type.gpu:
        return False, "not a GPU (the Xe2 binaries run here through the software built-ins, checked above)"
    from .ops.common import native_xe2
    if not native_xe2(device):  # the device's own chip, not a target forced with XE2RT_TARGET
        return False, (f"target {target} is forced, but {device.name!r} is not detected as an Xe2 chip (no 2D block "
                       f"IO / DPAS built-ins)")
    return True, ""


def run_native(queue, target: str) -> list[dict]:
    from .checks import builtins
    records = []
    for name, run in builtins.comparisons(builtins.NATIVE):
        try:
            r = run(queue, target)
            rec = {"error": r.error, "bound": r.bound, "metric": r.metric, "detail": r.detail,
                   "passed": bool(r.passed)}
        except Exception as exc:
            rec = {"error": None, "bound": None, "metric": None, "detail": f"{type(exc).__name__}: {exc}",
                   "passed": False}
        records.append({"family": "native_builtins", "case": name, "target": target, **rec})
    return records


def run_bench(device_filter: str, quick: bool) -> tuple[list[dict], dict]:
    """Bench rows of the headline families with the static estimate and the seeds' figures beside them."""
    import importlib
    from .bench import FAMILIES
    from .bench.harness import BenchContext
    from .bench import xe2_static
    ctx = BenchContext(device=device_filter, quick=quick, iters=5 if quick else 20, log=open(os.devnull, "w"))
    read = ctx.measure_read_bandwidth()
    results = []
    for family in (QUICK_BENCH if quick else FULL_BENCH):
        if family in FAMILIES:
            results += importlib.import_module(FAMILIES[family]).cases(ctx)
    rows = [r.finish(read).as_dict() for r in results]
    from . import targets
    # the chip the estimates describe: the GPU's own, or the target's nominal chip when its binaries run elsewhere
    chip = targets.detect(ctx.device).chip if ctx.device.is_gpu else targets.NOMINAL_CHIP.get(ctx.target)
    static = {}
    for srow in xe2_static.rows_from_manifest():
        for est in srow["estimates"]:
            if est["unit"] == "GB/s" and srow["target"] == ctx.target and est["chip"] == chip:
                fam = srow["binary"].split("/")[1].removesuffix(".spv")
                static[fam] = max(static.get(fam, 0.0), est["ceiling"])
    for row in rows:
        fam = row["family"]
        row["static_estimate_gbps"] = static.get(fam)
        row["vs_static_estimate"] = (row["gbps"] / static[fam]) if row.get("gbps") and static.get(fam) else None
        row["seed_bmg_gbps"] = SEED_FIGURES.get(fam)
        row["vs_seed_bmg"] = (row["gbps"] / SEED_FIGURES[fam]) if row.get("gbps") and fam in SEED_FIGURES else None
    return rows, {"read_gbps": read, "target": ctx.target}


def binary_hashes() -> dict:
    """The sha256 of every binary the manifest lists, computed from the file as it is (the kernels the checks ran),
    "missing" for an absent one; the manifest's value is what artifacts.load compares it with."""
    import hashlib
    from . import artifacts, config
    folder = config.kernel_dir()
    out = {}
    for key in sorted(artifacts.manifest().get("artifacts", {})):
        path = folder / key
        out[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return out


def device_record(device, target: str) -> dict:
    import dpctl.utils
    info = {}
    try:
        info = dict(dpctl.utils.intel_device_info(device))
    except Exception:
        pass
    return {"name": device.name, "vendor": device.vendor, "type": device.device_type.name,
            "backend": device.backend.name, "driver": device.driver_version, "pci_id": info.get("device_id"),
            "target": target, "compute_units": device.max_compute_units, "intel_device_info": info}


def summary(report: dict) -> str:
    lines = [f"xe2rt {report['versions'].get('xe2rt')} selftest ({'quick' if report['quick'] else 'full'})"]
    for dev_rep in report["devices"]:
        d = dev_rep["device"]
        checks = dev_rep["checks"]
        failed = [c for c in checks if not c["passed"]]
        by_family: dict = {}
        for c in checks:
            fam = by_family.setdefault(c["family"], [0, 0])
            fam[0] += 1
            fam[1] += not c["passed"]
        lines.append(f"device {d['name']!r} ({d['type']}, driver {d['driver']}) -> target {d['target']}")
        lines.append("  " + "  ".join(f"{f} {n - bad}/{n}" for f, (n, bad) in sorted(by_family.items())))
        native = dev_rep["native_builtins"]
        if native["skipped"]:
            lines.append(f"  native built-ins vs spec: skipped ({native['skipped']})")
        else:
            bad = [r for r in native["records"] if not r["passed"]]
            lines.append(f"  native built-ins vs spec: {len(native['records']) - len(bad)}/{len(native['records'])} "
                         f"agree")
            failed += bad
        for c in failed[:12]:
            lines.append(f"  FAIL {c['family']}[{c['case']}] ({c['target']}): {c.get('detail') or ''} "
                         f"error {c.get('error')} bound {c.get('bound')}")
        for row in dev_rep.get("bench", []):
            seed = f"  {row['vs_seed_bmg']:.3f}x BMG seed {row['seed_bmg_gbps']:g} GB/s" if row.get("vs_seed_bmg") \
                else ""
            est = f"  {row['vs_static_estimate']:.3f}x static estimate {row['static_estimate_gbps']:.0f} GB/s" \
                if row.get("vs_static_estimate") else ""
            gbps = f"{row['gbps']:.1f} GB/s" if row.get("gbps") else ""
            lines.append(f"  bench {row['family']:14s} {row['case']:24s} {row.get('variant', ''):12s} "
                         f"{row['seconds'] * 1e3:8.3f} ms {gbps}{est}{seed}")
    lines.append(f"result: {'PASS' if report['passed'] else 'FAIL'}")
    return "\n".join(lines)


def run(args) -> int:
    try:
        return _run(args)
    except UsageError as exc:
        print(f"xe2rt selftest: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    import dpctl
    from . import checks as C
    from . import config, targets
    from .errors import Xe2rtError
    families = C.families()
    if args.families:
        unknown = sorted(set(args.families) - set(families))
        if unknown:
            raise UsageError(f"unknown check families {unknown}; there are {families}")
        families = list(args.families)
    path = json_path(args.json, bool(getattr(args, "overwrite", False)))
    devices = choose_devices(args.device)
    started = time.time()
    report = {"versions": _versions(), "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "quick": bool(args.quick), "xe2rt_target_env": os.environ.get("XE2RT_TARGET"),
              "kernel_dir": str(config.kernel_dir()), "binaries": binary_hashes(), "devices": []}
    for device in devices:
        try:
            target = targets.resolve(device)
        except Xe2rtError as exc:
            raise UsageError(f"device {device.name!r} has no usable kernel target: {exc}") from None
        queue = dpctl.SyclQueue(device)
        native_ok, why = has_native_builtins(device, target)
        checks = run_checks(queue, target, families, args.quick, native_ok)
        native = {"skipped": None if native_ok else why, "records": run_native(queue, target) if native_ok else []}
        if not checks:  # nothing proven on this device is not a pass
            checks.append(_failed(", ".join(families), "(none)", target,
                                  f"no check of the families {families} applies to target {target}"))
        entry = {"device": device_record(device, target), "checks": checks, "native_builtins": native}
        if not args.no_bench:
            filter_string = device.filter_string
            try:
                entry["bench"], entry["bench_context"] = run_bench(filter_string, args.quick)
            except Exception as exc:  # a kernel that cannot load for the bench is a failure, in the report
                entry["bench"], entry["bench_context"] = [], {"error": f"{type(exc).__name__}: {exc}"}
                checks.append(_failed("bench", "(run)", target,
                                      f"the bench could not run: {type(exc).__name__}: {exc}"))
        report["devices"].append(entry)
    report["seconds"] = round(time.time() - started, 1)
    report["passed"] = all(c["passed"] for d in report["devices"] for c in d["checks"]) and \
        all(r["passed"] for d in report["devices"] for r in d["native_builtins"]["records"])
    print(summary(report))  # first: a report that cannot be written loses nothing the run printed
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    except OSError as exc:
        print(f"xe2rt selftest: the report could not be written to {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"report written to {path} ({report['seconds']} s); share it with the xe2rt developers")
    return 0 if report["passed"] else 1
