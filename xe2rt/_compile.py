"""A minimal OpenCL C -> SPIR-V compile for `Module.from_source` and small build folders, with the toolchain the
shipped kernels take (clang-15, llvm-spirv-15, spirv-val; TOOLCHAIN.md section 1), and the on-disk cache of
from_source builds.

This is the one place that runs the compiler at run time; the build command (`python -m xe2rt build`, with spec
files and SPIR-V-derived signatures) is meant to replace `compile_spirv` and `build_folder` here. Kernel signatures
are read from the preprocessed source (scalar and pointer parameters of the OpenCL C scalar types) and the
reqd_work_group_size / intel_reqd_sub_group_size attributes.

Cache: one folder per key under XE2RT_CACHE_DIR (default ~/.cache/xe2rt/from_source), the key a sha256 over the
source, the options, the device name and driver version, the target and the compiler binaries (path, size, mtime).
A folder is written under a temporary name and renamed into place, and its binary is checked against the sha256 in
its manifest when loaded (a mismatch rebuilds it).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import config
from .errors import CompileError

CLANG, LLVM_SPIRV, SPIRV_VAL = "clang-15", "llvm-spirv-15", "spirv-val"
# As build_scripts/build_spirv.py: -disable-llvm-passes because llvm-spirv-15 cannot translate everything clang-15's
# -O2 pipeline emits; the device compilers optimize the SPIR-V themselves.
CLANG_OPTIONS = ("-cl-std=CL2.0", "-target", "spir64", "-O2", "-Xclang", "-disable-llvm-passes",
                 "-Xclang", "-no-opaque-pointers", "-emit-llvm")
SPIRV_OPTIONS = ("--spirv-ext=+SPV_INTEL_subgroups",)
MODULE_NAME = "from_source"

_ATTRS = r"((?:__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)\s*)*)"
_KERNEL_RE = re.compile(_ATTRS + r"(?:__kernel|kernel)\s+" + _ATTRS + r"void\s+(\w+)\s*\(([^)]*)\)", re.S)
_PARAM_RE = re.compile(r"^(?P<quals>(?:(?:__)?(?:global|local|constant|private)\s+|const\s+|restrict\s+|volatile\s+)*)"
                       r"(?P<type>(?:unsigned\s+)?\w+)\s*(?P<ptr>\*)?\s*(?:const\s+)?(?:restrict\s+|__restrict\s+)?"
                       r"(?P<name>\w+)$")
_UNSIGNED = {"unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint", "unsigned long": "ulong",
             "unsigned": "uint", "size_t": "ulong"}
SCALAR_TYPES = ("half", "float", "double", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong")


def _run(cmd: list[str], what: str, source_path: Path | None = None) -> str:
    if shutil.which(cmd[0]) is None:
        raise CompileError(f"{cmd[0]} not found: install clang-15, llvm-spirv-15 and spirv-tools "
                           f"(apt-get install -y clang-15 llvm-spirv-15 spirv-tools)")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        where = f" (source saved as {source_path})" if source_path else ""
        raise CompileError(f"{what} failed{where}:\n{proc.stderr.strip() or proc.stdout.strip()}\n"
                           f"command: {' '.join(cmd)}")
    return proc.stdout


def parse_signatures(preprocessed: str) -> tuple[dict, dict]:
    """(kernel -> [{name, type, space, const}], kernel -> {reqd_work_group_size, reqd_sub_group_size})."""
    kernels, attrs = {}, {}
    for before, after, name, params in _KERNEL_RE.findall(preprocessed):
        signature = []
        for raw in filter(None, (p.strip() for p in " ".join(params.split()).split(","))):
            if raw == "void":
                continue
            m = _PARAM_RE.match(raw)
            if m is None:
                raise CompileError(f"kernel {name}: cannot read parameter {raw!r} (the launcher takes pointers to, "
                                   f"and values of, {', '.join(SCALAR_TYPES)})")
            quals = m.group("quals").replace("__", "").split()
            cl_type = _UNSIGNED.get(" ".join(m.group("type").split()), m.group("type"))
            if cl_type not in SCALAR_TYPES:
                raise CompileError(f"kernel {name}: parameter {raw!r} has type {cl_type!r}; the launcher takes "
                                   f"pointers to, and values of, {', '.join(SCALAR_TYPES)}")
            space = next((q for q in quals if q in ("global", "local", "constant")), None)
            if m.group("ptr") and space is None:
                raise CompileError(f"kernel {name}: pointer parameter {raw!r} needs an address space")
            signature.append({"name": m.group("name"), "type": cl_type,
                              "space": space if m.group("ptr") else "scalar", "const": "const" in quals})
        kernels[name] = signature
        text = before + after
        wg = re.search(r"reqd_work_group_size\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)", text)
        sg = re.search(r"intel_reqd_sub_group_size\s*\(\s*(\d+)\s*\)", text)
        attrs[name] = {"reqd_work_group_size": [int(v) for v in wg.groups()] if wg else None,
                       "reqd_sub_group_size": int(sg.group(1)) if sg else None}
    return kernels, attrs


def compile_spirv(source: str, options: tuple, target: str, workdir: Path) -> dict:
    """Compile `source` for `target` into workdir/<target>.spv; the manifest entry (sha256, signatures, options)."""
    for option in options:
        if not isinstance(option, str):
            raise CompileError(f"options must be strings (clang options such as -DN=4), got {option!r}")
    src = workdir / "source.cl"
    src.write_text(source)
    defines = [f"-DXE2RT_TARGET_{target.upper()}=1", *options]
    bc, spv = workdir / f"{target}.bc", workdir / f"{target}.spv"
    _run([CLANG, *CLANG_OPTIONS, *defines, "-c", str(src), "-o", str(bc)], f"compiling for {target}", src)
    _run([LLVM_SPIRV, str(bc), "-o", str(spv), *SPIRV_OPTIONS], f"translating to SPIR-V for {target}", src)
    if shutil.which(SPIRV_VAL):
        _run([SPIRV_VAL, str(spv)], f"validating the SPIR-V for {target}", src)
    preprocessed = _run([CLANG, "-E", "-P", "-cl-std=CL2.0", *defines, str(src)], "preprocessing", src)
    kernels, attrs = parse_signatures(preprocessed)
    if not kernels:
        raise CompileError(f"the source defines no __kernel function for target {target}")
    return {"target": target, "sha256": hashlib.sha256(spv.read_bytes()).hexdigest(), "constants": {},
            "kernels": kernels, "kernel_attrs": attrs,
            "build_options": {"clang": [*CLANG_OPTIONS, *defines], "llvm-spirv": list(SPIRV_OPTIONS)}}


def build_folder(source: str, outdir, *, targets=config.TARGETS, options: tuple = (), name: str = "kernels") -> Path:
    """Compile `source` for every target into a build folder (manifest.json + <target>/<name>.spv) that xe2rt.load
    reads. Writes nothing unless every target compiles; the folder is replaced as a whole."""
    outdir = Path(os.fspath(outdir)).resolve()
    for target in targets:
        config.check_target_name(target, "targets")
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
    try:
        artifacts = {}
        with tempfile.TemporaryDirectory() as work:
            for target in targets:
                entry = compile_spirv(source, tuple(options), target, Path(work))
                entry["family"] = name
                (staging / target).mkdir()
                shutil.copyfile(Path(work) / f"{target}.spv", staging / target / f"{name}.spv")
                artifacts[f"{target}/{name}.spv"] = entry
        manifest = {"format": 1, "artifacts": artifacts, "compilers": _compilers(),
                    "rebuild_command": "Module.from_source(...) or xe2rt._compile.build_folder(...) "
                                       f"(options {list(options)})"}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        if outdir.exists():
            shutil.rmtree(outdir)
        os.replace(staging, outdir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return outdir


def _compilers() -> dict:
    """Which compiler binaries ran (path, size, mtime): cheap to take, and it changes when they are replaced."""
    found = {}
    for tool in (CLANG, LLVM_SPIRV):
        path = shutil.which(tool)
        if path:
            real = os.path.realpath(path)
            stat = os.stat(real)
            found[tool] = f"{real} {stat.st_size} {stat.st_mtime_ns}"
        else:
            found[tool] = None
    return found


def cache_key(source: str, options: tuple, device, target: str) -> str:
    facts = [source, list(options), device.name, device.driver_version, target, _compilers()]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def cached_build(source: str, options: tuple, device, target: str) -> Path:
    """The build folder of `source` for one target, from the disk cache or compiled into it."""
    if not isinstance(source, str) or not source.strip():
        raise CompileError("from_source: source must be non-empty OpenCL C text")
    folder = config.cache_dir() / cache_key(source, options, device, target)
    if (folder / "manifest.json").is_file():
        return folder
    return build_folder(source, folder, targets=(target,), options=options, name=MODULE_NAME)
