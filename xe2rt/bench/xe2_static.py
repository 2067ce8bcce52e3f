"""Static hot-loop table of every bmg/lnl kernel, from the ocloc report in the manifest, with an ESTIMATED ceiling per
chip. Nothing here ran on a GPU: the figures are read from the compiled ISA (xe2rt/build/hotloop.py) and combined
with stated chip figures (xe2rt.targets.CHIPS); they bound, they do not measure.

Per hot-loop iteration: I instructions, D dpas.8x8, S sends, L bytes loaded from global memory (2D block loads by
their register footprint, prefetches not counted).
- Kernels without DPAS (GEMV, ...): bytes per instruction b = L / I.
    issue-bound GB/s  = b x XVEs x clock     (one SIMD16 instruction per XVE per clock, enough threads to issue)
    memory-bound GB/s = the chip's memory bandwidth
- Kernels with DPAS (GEMM): DPAS per send D / S. One dpas.8x8 is 8 x 16 x 16 fp16 MACs = 4096 flop and keeps a
  XVE's share of the XMX (2048 / 8 = 256 flop per clock) busy 16 clocks.
    DPAS-bound TFLOP/s = peak x min(1, 16 D / I)     peak = 2048 flop/clk x Xe cores x clock
    load-bound TFLOP/s = memory bandwidth x flop per byte of the work-group tile (every A and B byte read from
                         memory once per work-group: (TM SGS_M) x (64 SGS_N) outputs per 2 x 32 (TM SGS_M + 64 SGS_N)
                         bytes per 32 k, i.e. sub-groups of one work-group share operands through the caches)
The ceiling is the lower bound of each pair.

    python -m xe2rt.bench.xe2_static        # print the table
"""
from __future__ import annotations

import re

from .. import artifacts, targets

FLOP_PER_DPAS = 2 * 8 * 16 * 16
XMX_CLOCKS_PER_DPAS = FLOP_PER_DPAS // (2048 // 8)  # 16
TARGET_CHIPS = {"bmg": ("BMG-G21", "BMG-G31"), "lnl": ("LNL",)}


def tile_rows(kernel: str) -> int | None:
    match = re.search(r"_m(\d+)(?:_|$)", kernel)
    return int(match.group(1)) if match else None


def estimate(hot: dict, chip: targets.Chip, constants: dict, kernel: str) -> dict:
    """The derived figures and the estimated ceiling of one hot loop on one chip."""
    instr, dpas, sends, loaded = hot["instructions"], hot["dpas"], hot["sends"], hot["global_load_bytes"]
    if dpas:
        peak = chip.xmx_fp16_flop_per_clk_per_core * chip.xe_cores * chip.clock_ghz / 1e3  # TFLOP/s
        dpas_bound = peak * min(1.0, XMX_CLOCKS_PER_DPAS * dpas / instr)
        load_bound = None
        tm = tile_rows(kernel)
        if tm and "SGS_M" in constants:
            rows, cols = tm * constants["SGS_M"], constants["SG_N"] * constants["SGS_N"]
            flop_per_byte = 2 * rows * cols * 32 / (2 * 32 * (rows + cols))
            load_bound = chip.mem_gbps * flop_per_byte / 1e3
        bounds = {"DPAS": dpas_bound, "load": load_bound}
        unit = "TFLOP/s"
        derived = {"dpas_per_send": dpas / sends if sends else None}
    else:
        per_instr = loaded / instr if instr else 0.0
        bounds = {"issue": per_instr * chip.xves * chip.clock_ghz if loaded else None, "memory": chip.mem_gbps}
        unit = "GB/s"
        derived = {"bytes_per_instruction": per_instr}
    known = {k: v for k, v in bounds.items() if v is not None}
    bound = min(known, key=known.get)
    return {"chip": chip.name, "unit": unit, "bounds": bounds, "ceiling": known[bound], "bound_by": bound, **derived}


def rows_from_manifest(manifest: dict | None = None) -> list[dict]:
    manifest = manifest if manifest is not None else artifacts.manifest()
    rows = []
    for key, entry in sorted(manifest.get("artifacts", {}).items()):
        aot = entry.get("aot")
        if not aot or entry.get("target") not in TARGET_CHIPS:
            continue
        for kernel, report in sorted(aot["kernels"].items()):
            hot = report.get("hot_loop")
            row = {"binary": key, "kernel": kernel, "target": entry["target"], "hot_loop": hot,
                   "private_sends": report.get("private_sends", 0), "estimates": []}
            if hot:
                row["estimates"] = [estimate(hot, targets.CHIPS[c], entry.get("constants", {}), kernel)
                                    for c in TARGET_CHIPS[entry["target"]]]
            rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    head = (f"{'binary':26s} {'kernel':34s} {'instr':>5s} {'dpas':>4s} {'sends':>5s} {'loadB':>6s} {'priv':>4s} "
            f"{'B/instr':>7s} {'dpas/send':>9s}  estimated ceiling per chip (bound)")
    lines = ["static hot loop per kernel (ocloc ISA; ESTIMATES from stated chip figures: xe2rt/bench/xe2_static.py)",
             head, "-" * len(head)]
    for r in rows:
        h = r["hot_loop"]
        if not h:
            lines.append(f"{r['binary']:26s} {r['kernel']:34s} no loop")
            continue
        est = r["estimates"]
        per_instr = est[0].get("bytes_per_instruction") if est else None
        per_send = est[0].get("dpas_per_send") if est else None
        ceil = "  ".join(
            f"{e['chip']} {e['ceiling']:.1f} {e['unit']} ("
            + ", ".join(f"{k} {v:.1f}" for k, v in e["bounds"].items() if v is not None) + ")" for e in est)
        lines.append(f"{r['binary']:26s} {r['kernel']:34s} {h['instructions']:5d} {h['dpas']:4d} {h['sends']:5d} "
                     f"{h['global_load_bytes']:6d} {h['private_sends']:4d} "
                     f"{'-' if per_instr is None else format(per_instr, '7.2f'):>7s} "
                     f"{'-' if per_send is None else format(per_send, '9.2f'):>9s}  {ceil}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(rows_from_manifest()))
