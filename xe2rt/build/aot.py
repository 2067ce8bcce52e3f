"""Ahead-of-time compile of bmg/lnl SPIR-V with Intel's offline compiler (ocloc), and what it reports.

No Xe2 GPU is needed: ocloc compiles the SPIR-V to native Xe2 code, and the same compile, asked for IGC's shader dump,
writes the zebin's .zeinfo (SIMD width, GRF count, spill size, private size, SLM, has_dpas) and each kernel's annotated
ISA, from which xe2rt.build.hotloop reads the hot loop (instructions, DPAS, sends and their bytes, private-memory
sends). The project's rules for its own kernels (`rule_violations`): SIMD16, no spills, no private-memory sends, DPAS
where the spec says `expect_dpas = true`.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import BuildError
from .builder import sha256_file
from .hotloop import report_file
from .ocloc import Ocloc

OCLOC_DEVICE = {"bmg": "bmg", "lnl": "lnl-m"}
REQUIRED_SIMD = 16
# IGC adds this entry when a module carries global data (e.g. the erf built-in's constant tables); it holds the
# module's symbol table, is never launched, and is not one of our kernels.
IGC_SYMBOL_TABLE_PROGRAM = "Intel_Symbol_Table_Void_Program"


def _yaml():
    try:
        import yaml
    except ImportError:
        raise BuildError("the ahead-of-time report reads ocloc's .zeinfo (YAML): pip install 'xe2rt[build]' "
                         "(pyyaml)") from None
    return yaml


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
        raise BuildError(f"ocloc failed for {target}/{spv.name} (options {options!r}):\n{proc.stdout}{proc.stderr}")
    ze_info_paths = sorted(dump.glob("*.zeinfo"))
    if len(ze_info_paths) != 1:
        raise BuildError(f"expected one .zeinfo in IGC's dump for {target}/{spv.name}, found {len(ze_info_paths)}")
    ze_info = _yaml().safe_load(ze_info_paths[0].read_text())
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


def report(tool: Ocloc, version: str, spv: Path, target: str, options: str, work: Path) -> dict:
    """The "aot" entry of a manifest artifact."""
    if target not in OCLOC_DEVICE:
        raise BuildError(f"no ahead-of-time compile for target {target!r}; ocloc targets are {sorted(OCLOC_DEVICE)}")
    kernels = compile_and_inspect(tool, spv, target, options, work)
    return {"device": OCLOC_DEVICE[target], "ocloc": version, "options": options,
            "spirv_sha256": sha256_file(spv), "kernels": kernels}


def rule_violations(key: str, kernels: dict, expect_dpas: bool, simd: int | None = REQUIRED_SIMD) -> list[str]:
    """Breaches of the shipped kernels' rules. `simd` None: a kernel is held only to the sub-group size it declares
    (intel_reqd_sub_group_size), the rule for a user's kernels, where IGC's own SIMD choice is no fault."""
    problems = []
    if not kernels:
        problems.append(f"{key}: ocloc reported no kernels")
    for name, k in kernels.items():
        want = simd if simd is not None else k.get("reqd_sub_group_size")
        if want is not None and k["simd_size"] != want:
            problems.append(f"{key}:{name}: SIMD{k['simd_size']}, expected SIMD{want}")
        if k["spill_size"]:
            problems.append(f"{key}:{name}: spills {k['spill_size']} bytes (GRF {k['grf_count']}); reduce VL/tile")
        if k.get("private_sends"):
            problems.append(f"{key}:{name}: {k['private_sends']} sends to private memory (scratch; private_size "
                            f"{k['private_size']}): index register arrays with constants only (unrolled loops)")
        if expect_dpas and not (k["has_dpas"] and k["dpas_instructions"] > 0):
            problems.append(f"{key}:{name}: no DPAS instructions (has_dpas={k['has_dpas']}, "
                            f"dpas in ISA: {k['dpas_instructions']})")
    return problems


def summary_line(key: str, name: str, k: dict) -> str:
    hot = k["hot_loop"] or {}
    return (f"  {key:32s} {name:30s} SIMD{k['simd_size']} GRF {k['grf_count']} spill {k['spill_size']} "
            f"private {k['private_sends']} SLM {k['slm_size']} dpas {k['dpas_instructions']} | hot loop: "
            f"{hot.get('instructions', '-')} instr, {hot.get('dpas', '-')} dpas, {hot.get('sends', '-')} "
            f"sends, {hot.get('global_load_bytes', '-')} B loaded")
