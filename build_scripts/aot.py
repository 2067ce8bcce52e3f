"""Ahead-of-time compile every shipped bmg/lnl SPIR-V binary with Intel's offline compiler and record its report.

The compile and the report are xe2rt.build.aot (the same as `python -m xe2rt build --aot`); this script applies the
project's rules to the shipped kernels (a failure exits non-zero): the compile succeeds; every kernel is SIMD16; no
kernel spills; no kernel sends to private memory (scratch: an accumulator tile indexed at run time lands there, and
`spill_size` does not count it); a family whose spec says `expect_dpas = true` has DPAS instructions in every kernel.
The rules hold for every bmg/lnl binary, the software-DPAS / 2D-block families (gemm_fp16_xe2emu, gemm_fp16_ult)
included.

    python build_scripts/aot.py            # compile, check the rules, record the report in the manifest
    python build_scripts/aot.py --check    # compile, check the rules, and compare with the recorded report
    python build_scripts/aot.py --missing  # only binaries with no report for their current SPIR-V (after a rebuild)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import KERNEL_DIR, MANIFEST, REBUILD_COMMAND, XE2_TARGETS, load_manifest, write_json_atomic

from xe2rt.build.aot import report, rule_violations, summary_line
from xe2rt.build.ocloc import find_ocloc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the report recorded in the manifest")
    parser.add_argument("--no-fetch", action="store_true", help="do not fetch ocloc from Debian unstable")
    parser.add_argument("--missing", action="store_true",
                        help="compile only binaries whose recorded report is absent or was made from other SPIR-V")
    args = parser.parse_args()
    if args.missing and args.check:
        parser.error("--missing records reports; --check compares them: use one")
    manifest = load_manifest(KERNEL_DIR)
    if not manifest:
        sys.exit(f"no {KERNEL_DIR / MANIFEST}; run python build_scripts/build_spirv.py first")
    tool = find_ocloc(fetch=not args.no_fetch)
    version = tool.version()
    print(f"ocloc {version} ({tool.origin})")
    problems: list[str] = []
    keys = [key for key, entry in sorted(manifest["artifacts"].items()) if entry["target"] in XE2_TARGETS
            and not (args.missing and entry.get("aot", {}).get("spirv_sha256") == entry["sha256"])]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        # one ocloc process per core (each compile is single-threaded; outputs are named by binary and target)
        def compile_one(key):
            entry = manifest["artifacts"][key]
            return report(tool, version, KERNEL_DIR / key, entry["target"],
                          entry.get("aot_spec", {}).get("options", ""), Path(tmp))
        for key, fresh in zip(keys, pool.map(compile_one, keys)):
            entry = manifest["artifacts"][key]
            spec = entry.get("aot_spec", {})
            problems += rule_violations(key, fresh["kernels"], bool(spec.get("expect_dpas", False)))
            for name, k in fresh["kernels"].items():
                print(summary_line(key, name, k))
            if args.check:
                recorded = entry.get("aot")
                if recorded is None:
                    problems.append(f"{key}: no AOT report in the manifest")
                elif recorded.get("spirv_sha256") != fresh["spirv_sha256"]:
                    problems.append(f"{key}: AOT report was made from another SPIR-V binary")
                elif recorded.get("ocloc") != version:
                    print(f"  note: {key} was recorded with ocloc {recorded.get('ocloc')}, this is {version}; "
                          f"rules checked, exact figures not compared")
                elif recorded != fresh:
                    problems.append(f"{key}: recorded AOT report differs from a fresh compile")
            else:
                entry["aot"] = fresh
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
