"""Ahead-of-time compile every bmg/lnl SPIR-V binary with Intel's offline compiler and record what it reports.

No Xe2 GPU is needed: ocloc compiles the shipped SPIR-V to native Xe2 code, and the same compile, asked for IGC's shader
dump, writes the zebin's .zeinfo (SIMD width, GRF count, spill size, private size, SLM, has_dpas) and each kernel's
annotated ISA, from which build_scripts/hotloop.py reads the hot loop (instructions, DPAS, sends and their bytes,
private-memory sends). The runtime still loads SPIR-V through dpctl; this report is the evidence that the Xe2
binaries suit the chips.

Rules (a failure exits non-zero): the compile succeeds; every kernel is SIMD16; no kernel spills; no kernel sends to
private memory (scratch: an accumulator tile indexed at run time lands there, and `spill_size` does not count it);
a family whose spec says `expect_dpas = true` has DPAS instructions in every kernel. The rules hold for every bmg/lnl
binary, the software-DPAS / 2D-block families (gemm_fp16_xe2emu, gemm_fp16_ult) included.

    python build_scripts/aot.py            # compile, check the rules, record the report in the manifest
    python build_scripts/aot.py --check    # compile, check the rules, and compare with the recorded report
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (KERNEL_DIR, MANIFEST, OCLOC_DEVICE, REBUILD_COMMAND, XE2_TARGETS, load_manifest,  # noqa: E402
                    sha256_file, write_json_atomic)
from hotloop import report_file  # noqa: E402
from ocloc import Ocloc, find_ocloc  # noqa: E402

REQUIRED_SIMD = 16
# IGC adds this entry when a module carries global data (e.g. the erf built-in's constant tables); it holds the
# module's symbol table, is never launched, and is not one of our kernels.
IGC_SYMBOL_TABLE_PROGRAM = "Intel_Symbol_Table_Void_Program"


def compile_and_inspect(tool: Ocloc, spv: Path, target: str, options: str, work: Path) -> dict:
    out_base = work / f"{spv.stem}_{target}"
    dump = work / f"dump_{spv.stem}_{target}"
    # The shader dump does not change the code (same ISA with and without it); it adds the annotated .asm per kernel.
    dump_options = f"{options} -igc_opts 'ShaderDumpEnable=1,DumpToCustomDir={dump}'".strip()
    args = ["compile", "-file", str(spv), "-spirv_input", "-device", OCLOC_DEVICE[target],
            "-output", str(out_base), "-output_no_suffix", "-options", dump_options]
    proc = tool.run(args)
    binary = out_base.with_suffix(".bin")
    if proc.returncode != 0 or not binary.exists():
        raise SystemExit(f"ocloc failed for {target}/{spv.name} (options {options!r}):\n{proc.stdout}{proc.stderr}")
    ze_info_paths = sorted(dump.glob("*.zeinfo"))
    if len(ze_info_paths) != 1:
        raise SystemExit(f"expected one .zeinfo in IGC's dump for {target}/{spv.name}, found {len(ze_info_paths)}")
    ze_info = yaml.safe_load(ze_info_paths[0].read_text())
    asm = {}
    for path in sorted(dump.glob("*_simd*_entry_*.asm")):
        name, hot = report_file(path)
        if name:
            asm[name] = (path.read_text(errors="replace"), hot)
    kernels = {}
    for kernel in ze_info.get("kernels", []):
        if kernel["name"] == IGC_SYMBOL_TABLE_PROGRAM:
            continue
        env = kernel.get("execution_env", {})
        text, hot = asm.get(kernel["name"], ("", {}))
        dpas_count = len(re.findall(r"^\s*(?:\([^)]*\)\s*)?dpas\.", text, re.M))
        kernels[kernel["name"]] = {
            "simd_size": env.get("simd_size"),
            "grf_count": env.get("grf_count"),
            "spill_size": env.get("spill_size", 0),
            "private_size": env.get("private_size", 0),
            "slm_size": env.get("slm_size", 0),
            "has_dpas": bool(env.get("has_dpas", False)),
            "dpas_instructions": dpas_count,
            "block_loads": len(re.findall(r"load\.ugm\.d\d+x\d+t|load_block2d\.ugm\.d\d+\w*\.a64 ", text)),
            "reqd_sub_group_size": kernel.get("user_attributes", {}).get("intel_reqd_sub_group_size"),
            "asm_instructions": hot.get("kernel_instructions", 0),
            "private_sends": hot.get("kernel_private_sends", 0),
            "hot_loop": hot.get("hot_loop"),
        }
    return kernels


def rule_violations(key: str, kernels: dict, expect_dpas: bool) -> list[str]:
    problems = []
    if not kernels:
        problems.append(f"{key}: ocloc reported no kernels")
    for name, k in kernels.items():
        if k["simd_size"] != REQUIRED_SIMD:
            problems.append(f"{key}:{name}: SIMD{k['simd_size']}, expected SIMD{REQUIRED_SIMD}")
        if k["spill_size"]:
            problems.append(f"{key}:{name}: spills {k['spill_size']} bytes (GRF {k['grf_count']}); reduce VL/tile")
        if k.get("private_sends"):
            problems.append(f"{key}:{name}: {k['private_sends']} sends to private memory (scratch; private_size "
                            f"{k['private_size']}): index register arrays with constants only (unrolled loops)")
        if expect_dpas and not (k["has_dpas"] and k["dpas_instructions"] > 0):
            problems.append(f"{key}:{name}: no DPAS instructions (has_dpas={k['has_dpas']}, "
                            f"dpas in ISA: {k['dpas_instructions']})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the report recorded in the manifest")
    parser.add_argument("--no-fetch", action="store_true", help="do not fetch ocloc from Debian unstable")
    args = parser.parse_args()
    manifest = load_manifest(KERNEL_DIR)
    if not manifest:
        sys.exit(f"no {KERNEL_DIR / MANIFEST}; run python build_scripts/build_spirv.py first")
    tool = find_ocloc(fetch=not args.no_fetch)
    version = tool.version()
    print(f"ocloc {version} ({tool.origin})")
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for key, entry in sorted(manifest["artifacts"].items()):
            if entry["target"] not in XE2_TARGETS:
                continue
            spv = KERNEL_DIR / key
            spec = entry.get("aot_spec", {})
            options = spec.get("options", "")
            kernels = compile_and_inspect(tool, spv, entry["target"], options, Path(tmp))
            report = {"device": OCLOC_DEVICE[entry["target"]], "ocloc": version, "options": options,
                      "spirv_sha256": sha256_file(spv), "kernels": kernels}
            problems += rule_violations(key, kernels, bool(spec.get("expect_dpas", False)))
            for name, k in kernels.items():
                hot = k["hot_loop"] or {}
                print(f"  {key:32s} {name:30s} SIMD{k['simd_size']} GRF {k['grf_count']} spill {k['spill_size']} "
                      f"private {k['private_sends']} SLM {k['slm_size']} dpas {k['dpas_instructions']} | hot loop: "
                      f"{hot.get('instructions', '-')} instr, {hot.get('dpas', '-')} dpas, {hot.get('sends', '-')} "
                      f"sends, {hot.get('global_load_bytes', '-')} B loaded")
            if args.check:
                recorded = entry.get("aot")
                if recorded is None:
                    problems.append(f"{key}: no AOT report in the manifest")
                elif recorded.get("spirv_sha256") != report["spirv_sha256"]:
                    problems.append(f"{key}: AOT report was made from another SPIR-V binary")
                elif recorded.get("ocloc") != version:
                    print(f"  note: {key} was recorded with ocloc {recorded.get('ocloc')}, this is {version}; "
                          f"rules checked, exact figures not compared")
                elif recorded != report:
                    problems.append(f"{key}: recorded AOT report differs from a fresh compile")
            else:
                entry["aot"] = report
    for p in problems:
        print("AOT FAIL", p)
    if problems:
        print(f"{len(problems)} problems; after fixing, rebuild with: {REBUILD_COMMAND}")
        return 1
    if not args.check:
        write_json_atomic(KERNEL_DIR / MANIFEST, manifest)
        print(f"recorded AOT reports in {KERNEL_DIR / MANIFEST}")
    else:
        print("AOT check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
