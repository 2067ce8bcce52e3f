"""Compile every kernel family in spirv_src/ for every target into xe2rt/kernels/<target>/<family>.spv.

Each family is a spec `spirv_src/<family>.toml`:

    source = "gemv_fp16.cl"          # OpenCL C source in spirv_src/
    [targets.bmg]                    # one table per target: integer tuning constants, passed as -D<NAME>=<value>
    SG = 16                          # and recorded in the manifest, where the Python launch code reads them
    ...
    [aot]                            # optional, for the ocloc check of bmg/lnl (build_scripts/aot.py)
    options = "-ze-opt-large-register-file"
    expect_dpas = false

Every binary is validated with spirv-val, and manifest.json records its sha256, the sha256 of its source and the
headers it includes, the compilers, the build options, the tuning constants and each kernel's argument signature.

    python build_scripts/build_spirv.py            # rebuild and rewrite the manifest
    python build_scripts/build_spirv.py --check    # rebuild into a temporary folder; fail if anything differs
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (KERNEL_DIR, MANIFEST, REBUILD_COMMAND, SRC_DIR, TARGETS, load_manifest,  # noqa: E402
                    sha256_bytes, sha256_file, write_json_atomic)

CLANG = "clang-15"
LLVM_SPIRV = "llvm-spirv-15"
SPIRV_VAL = "spirv-val"
# -disable-llvm-passes: llvm-spirv-15 cannot translate what clang-15's -O2 pipeline emits for some kernels (`freeze`,
# unstructured merge blocks); both the Intel CPU runtime and IGC optimize the SPIR-V themselves.
CLANG_OPTIONS = ["-cl-std=CL2.0", "-target", "spir64", "-O2", "-Xclang", "-disable-llvm-passes",
                 "-Xclang", "-no-opaque-pointers", "-emit-llvm"]
SPIRV_OPTIONS = ["--spirv-ext=+SPV_INTEL_subgroups"]

_KERNEL_RE = re.compile(r"(?:__kernel|kernel)\s+void\s+(\w+)\s*\(([^)]*)\)", re.S)
_PARAM_RE = re.compile(r"^(?P<quals>(?:(?:__)?(?:global|local|constant|private)\s+|const\s+|restrict\s+|volatile\s+)*)"
                       r"(?P<type>\w+)\s*(?P<ptr>\*)?\s*(?:const\s+)?(?:restrict\s+)?(?P<name>\w+)$")


def tool_version(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True)
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


def compilers() -> dict:
    return {name: tool_version(name) for name in (CLANG, LLVM_SPIRV, SPIRV_VAL)}


def require_tools() -> None:
    missing = [t for t in (CLANG, LLVM_SPIRV, SPIRV_VAL) if shutil.which(t) is None]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: apt-get install -y clang-15 llvm-spirv-15 spirv-tools")


def included_files(source: Path) -> list[Path]:
    """The source and every spirv_src header it includes, transitively, in a stable order."""
    seen: list[Path] = []
    todo = [source]
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M):
            todo.append(SRC_DIR / name)
    return seen


def parse_signatures(preprocessed: str) -> dict[str, list[dict]]:
    """Kernel name -> [{name, space, type, const}] from preprocessed OpenCL C."""
    kernels = {}
    for name, params in _KERNEL_RE.findall(preprocessed):
        signature = []
        for raw in filter(None, (p.strip() for p in " ".join(params.split()).split(","))):
            m = _PARAM_RE.match(raw)
            if m is None:
                raise SystemExit(f"cannot parse kernel parameter {raw!r} of {name}")
            quals = m.group("quals").replace("__", "").split()
            space = next((q for q in quals if q in ("global", "local", "constant")), None)
            if m.group("ptr") and space is None:
                raise SystemExit(f"pointer parameter {raw!r} of {name} needs an address space")
            signature.append({"name": m.group("name"), "type": m.group("type"),
                              "space": space if m.group("ptr") else "scalar", "const": "const" in quals})
        kernels[name] = signature
    return kernels


def build_one(family: str, spec: dict, target: str, out_dir: Path) -> dict:
    source = SRC_DIR / spec["source"]
    constants = {k: int(v) for k, v in spec["targets"][target].items()}
    defines = [f"-DXE2RT_TARGET_{target.upper()}=1"] + [f"-D{k}={v}" for k, v in sorted(constants.items())]
    out = out_dir / target / f"{family}.spv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        bc = Path(tmp) / f"{family}.bc"
        run([CLANG, *CLANG_OPTIONS, *defines, "-I", ".", "-c", source.name, "-o", str(bc)], cwd=SRC_DIR)
        run([LLVM_SPIRV, str(bc), "-o", str(out), *SPIRV_OPTIONS])
    run([SPIRV_VAL, str(out)])
    preprocessed = run([CLANG, "-E", "-P", "-cl-std=CL2.0", *defines, "-I", ".", source.name], cwd=SRC_DIR)
    kernels = parse_signatures(preprocessed)
    if not kernels:
        raise SystemExit(f"{source.name} defines no kernel for target {target}")
    return {
        "family": family,
        "target": target,
        "source": source.name,
        "sha256": sha256_file(out),
        "sources_sha256": {p.name: sha256_file(p) for p in included_files(source)},
        "build_options": {"clang": CLANG_OPTIONS + defines, "llvm-spirv": SPIRV_OPTIONS},
        "constants": constants,
        "kernels": kernels,
        "aot_spec": spec.get("aot", {}),
    }


def run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def family_specs() -> dict[str, dict]:
    specs = {}
    for path in sorted(SRC_DIR.glob("*.toml")):
        spec = tomllib.loads(path.read_text())
        unknown = set(spec.get("targets", {})) - set(TARGETS)
        missing = set(TARGETS) - set(spec.get("targets", {}))
        if unknown or missing or "source" not in spec:
            raise SystemExit(f"{path.name}: needs `source` and [targets.X] for each of {TARGETS} "
                             f"(unknown: {sorted(unknown)}, missing: {sorted(missing)})")
        specs[path.stem] = spec
    return specs


def build_all(out_dir: Path, previous: dict) -> dict:
    artifacts = {}
    for family, spec in family_specs().items():
        for target in TARGETS:
            entry = build_one(family, spec, target, out_dir)
            key = f"{target}/{family}.spv"
            old = previous.get("artifacts", {}).get(key, {})
            # An ahead-of-time report stays valid only for the exact SPIR-V it was made from.
            if old.get("aot", {}).get("spirv_sha256") == entry["sha256"] and old.get("aot_spec") == entry["aot_spec"]:
                entry["aot"] = old["aot"]
            artifacts[key] = entry
            print(f"  built {key}  {entry['sha256'][:12]}  kernels: {', '.join(entry['kernels'])}")
    return {"format": 1, "compilers": compilers(), "artifacts": artifacts, "rebuild_command": REBUILD_COMMAND}


def without_aot(manifest: dict) -> dict:
    return {**manifest, "artifacts": {k: {f: v for f, v in a.items() if f != "aot"}
                                      for k, a in manifest.get("artifacts", {}).items()}}


def check(committed_dir: Path) -> int:
    committed = load_manifest(committed_dir)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = build_all(Path(tmp), committed)
        problems = []
        for key, entry in fresh["artifacts"].items():
            path = committed_dir / key
            if not path.exists():
                problems.append(f"{key}: not committed")
            elif path.read_bytes() != (Path(tmp) / key).read_bytes():
                problems.append(f"{key}: committed binary differs from a fresh build")
        stale = set(committed.get("artifacts", {})) - set(fresh["artifacts"])
        problems += [f"{key}: in the manifest but no longer built" for key in sorted(stale)]
        if without_aot(fresh) != without_aot(committed):
            for key in sorted(set(fresh["artifacts"]) & set(committed.get("artifacts", {}))):
                a, b = without_aot(fresh)["artifacts"][key], without_aot(committed)["artifacts"][key]
                problems += [f"{key}: manifest field {f!r} differs" for f in sorted(set(a) | set(b)) if a.get(f) != b.get(f)]
            if fresh["compilers"] != committed.get("compilers"):
                problems.append(f"compiler versions differ: {fresh['compilers']} vs {committed.get('compilers')}")
    for p in problems:
        print("MISMATCH", p)
    if problems:
        print(f"{len(problems)} mismatches; rebuild with: {REBUILD_COMMAND}")
        return 1
    print(f"check passed: {len(fresh['artifacts'])} binaries match their sources and the manifest")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rebuild into a temporary folder and compare")
    args = parser.parse_args()
    require_tools()
    if args.check:
        return check(KERNEL_DIR)
    previous = load_manifest(KERNEL_DIR)
    manifest = build_all(KERNEL_DIR, previous)
    for stale in set(previous.get("artifacts", {})) - set(manifest["artifacts"]):
        (KERNEL_DIR / stale).unlink(missing_ok=True)
    write_json_atomic(KERNEL_DIR / MANIFEST, manifest)
    print(f"wrote {KERNEL_DIR / MANIFEST} ({len(manifest['artifacts'])} binaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
