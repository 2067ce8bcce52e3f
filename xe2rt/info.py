"""What xe2rt sees: devices, the target each gets, the shipped binaries and their ahead-of-time report."""
from __future__ import annotations

import os

import dpctl

from . import artifacts, config, program_cache, targets
from .errors import Xe2rtError


def _device_entry(device: dpctl.SyclDevice) -> dict:
    entry = {
        "filter": device.filter_string, "name": device.name, "type": device.device_type.name,
        "vendor": device.vendor, "driver": device.driver_version, "fp16": device.has_aspect_fp16,
        "sub_group_sizes": list(device.sub_group_sizes), "max_work_group_size": device.max_work_group_size,
        "local_mem_bytes": device.local_mem_size, "compute_units": device.max_compute_units,
    }
    try:
        detected = targets.detect(device)
        entry["detected_target"] = detected.target
        entry["chip"] = detected.chip
        entry["why"] = detected.reason
    except Xe2rtError as exc:
        entry["detected_target"] = None
        entry["why"] = str(exc)
    try:
        entry["target"] = targets.resolve(device)
    except Xe2rtError as exc:
        entry["target"] = None
        entry["why"] = str(exc)
    if entry["target"]:
        # What launches fill (256-GRF Xe2 kernels) and, for Xe2 targets, the chip figures the estimates would use.
        entry["hw_threads"] = targets.hw_threads(device, entry["target"])
        entry["avx512_vnni"] = entry["target"] == "cpu" and targets.cpu_has_avx512_vnni(device)
        entry["avx2"] = entry["target"] == "cpu" and targets.cpu_has_avx2(device)
        if entry["target"] in targets.NOMINAL_CHIP:
            chip, source = targets.chip_figures(device, entry["target"])
            entry["chip_figures"] = {"chip": chip.name, "xe_cores": chip.xe_cores, "clock_ghz": chip.clock_ghz,
                                     "mem_gbps": chip.mem_gbps, "source": source}
    return entry


def info(device: dpctl.SyclDevice | str | None = None) -> dict:
    """Devices (or the one given), the target each gets, the binaries shipped, and their AOT report."""
    devices = dpctl.get_devices() if device is None else [targets.select_device(device)]
    manifest = artifacts.manifest()
    binaries = {}
    for key, entry in sorted(manifest.get("artifacts", {}).items()):
        binaries[key] = {"sha256": entry["sha256"], "kernels": sorted(entry["kernels"]), "constants": entry["constants"],
                         "aot": entry.get("aot")}
    from . import __version__
    from .bench import xe2_static
    return {
        "hot_loops": xe2_static.rows_from_manifest(manifest),
        "version": __version__,
        "forced_target": config.forced_target(),
        "ocl_icd_filenames": os.environ.get("OCL_ICD_FILENAMES"),
        "kernel_dir": str(config.kernel_dir()),
        "program_cache": program_cache.describe(),
        "compilers": manifest.get("compilers"),
        "devices": [_device_entry(d) for d in devices],
        "binaries": binaries,
    }


def _aot_summary(aots: list[dict]) -> str:
    """Over the kernels of some binaries: what Intel's offline compiler reported."""
    ks = [k for aot in aots for k in aot["kernels"].values()]
    simd = "/".join(sorted({f"SIMD{k['simd_size']}" for k in ks}))
    grf = "/".join(sorted({str(k["grf_count"]) for k in ks}))
    private = sum(k.get("private_sends", 0) for k in ks)
    with_dpas = sum(1 for k in ks if k["dpas_instructions"])
    devices = "/".join(sorted({a["device"] for a in aots}))
    return (f"{simd}, GRF {grf}, max spill {max(k['spill_size'] for k in ks)} B, private sends {private}, "
            f"DPAS in {with_dpas} kernels (ocloc {aots[0]['ocloc']}, -device {devices})")


def format_info(data: dict, isa: bool = False) -> str:
    """One screen: the devices and the target each gets, then one line per target over its shipped binaries; with
    isa=True also every binary's ahead-of-time report and the per-kernel hot-loop table."""
    lines = [f"xe2rt {data['version']}  kernels: {data['kernel_dir']}",
             f"OCL_ICD_FILENAMES={data['ocl_icd_filenames']}  XE2RT_TARGET={data['forced_target']}",
             f"CPU device programs kept in: {data['program_cache']}", "", "devices:"]
    for d in data["devices"]:
        lines.append(f"  {d['filter']:14s} {d['name']!r} -> target {d['target']}  ({d['why']}), "
                     f"hardware threads to fill: {d.get('hw_threads', '-')}"
                     + ("; AVX512-VNNI: the W4 GEMV and GEMM can run the *_vnni kernels (dequant / variant \"vnni\" or "
                        "\"auto\"; xe2rt.models.llm does)" if d.get("avx512_vnni") else
                        "; AVX2: the W4 GEMV and GEMM can run the *_avx2 kernels (dequant / variant \"avx2\" or "
                        "\"auto\"; xe2rt.models.llm does), the GEMV with x as Q8_0 too (\"avx2_q8\", llm.load(..., "
                        "activations=\"q8\"))" if d.get("avx2") else ""))
    by_target: dict[str, list] = {}
    for key, b in data["binaries"].items():
        by_target.setdefault(key.split("/")[0], []).append((key, b))
    lines += ["", "shipped binaries per target (Xe2: what Intel's offline compiler reported over all their kernels):"]
    for target, items in by_target.items():
        kernels = sum(len(b["kernels"]) for _, b in items)
        aots = [b["aot"] for _, b in items if b["aot"]]
        lines.append(f"  {target:4s} {len(items)} binaries, {kernels} kernels"
                     + (f"; {_aot_summary(aots)}" if aots else ""))
    families = sorted({key.split("/", 1)[1].removesuffix(".spv") for key in data["binaries"]})
    lines.append(f"  families: {', '.join(families)}")
    if not isa:
        lines += ["", "per-binary ahead-of-time report and per-kernel hot loops: python -m xe2rt info --isa"]
        return "\n".join(lines)
    lines += ["", "binaries:"]
    for key, b in data["binaries"].items():
        detail = (f"{len(b['aot']['kernels'])} kernels, {_aot_summary([b['aot']])}" if b["aot"]
                  else f"{len(b['kernels'])} kernels")
        lines.append(f"  {key:28s} {b['sha256'][:12]}  {detail}")
    if data.get("hot_loops"):
        from .bench import xe2_static
        lines += ["", xe2_static.format_table(data["hot_loops"])]
    return "\n".join(lines)


def add_arguments(parser) -> None:
    """`python -m xe2rt info` options."""
    parser.add_argument("--device", help="SYCL filter string, e.g. opencl:cpu")
    parser.add_argument("--json", action="store_true", help="print JSON (everything, hot loops included)")
    parser.add_argument("--isa", action="store_true",
                        help="also each binary's ahead-of-time report and the per-kernel hot-loop table")


def run(args) -> int:
    import json
    data = info(args.device)
    print(json.dumps(data, indent=1) if args.json else format_info(data, isa=args.isa))
    return 0
