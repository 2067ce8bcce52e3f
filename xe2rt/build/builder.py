"""Build modules (xe2rt.build.spec) into `<out>/<target>/<module>.spv` and their manifest entries.

A manifest entry (the format of xe2rt/kernels/manifest.json) records the binary's sha256, the sha256 of its sources and
the headers they include, the build options, the integer constants, and each kernel's signature and attributes as
xe2rt.build.reflect reads them from SPIR-V. Argument names and C types come from a second compile of the same
sources with argument info kept (the shipped binary stays as it always was), which must agree with the shipped
binary on every kernel, argument kind, storage class and type, and on the work-group and sub-group sizes.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..errors import BuildError
from . import reflect, toolchain
from .spec import Module

MANIFEST = "manifest.json"
FORMAT = 1
# The fields of a parameter entry the runtime has read since the first manifest; reflect adds more.
PARAM_CORE = ("name", "type", "space", "const")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(Path(path).read_bytes())


def load_manifest(directory: Path) -> dict:
    path = Path(directory) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write_json_atomic(path: Path, data: dict) -> None:
    """Write to a temporary name and move it into place, so a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; a manifest is as readable as the binaries
    os.replace(tmp, path)


def check_output_folder(out: Path, shown: str) -> None:
    """Before building: refuse an output folder that exists and is not a build folder (a build replaces its folder
    whole, so a user's files there would be lost) or that cannot be created / replaced (its parent is not
    writable). `shown` names it in the messages (the option or argument the user gave)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).exists())):
        raise BuildError(f"{shown}: exists and is not an xe2rt build folder (no {MANIFEST}); it would be replaced "
                         f"whole, so give a new or empty folder")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise BuildError(f"{shown}: cannot be created or replaced: {parent} is not a writable folder")


def replace_folder(staged: Path, out: Path, shown: str) -> None:
    """Put the finished build folder `staged` at `out`, replacing what is there: copied beside `out` first, so the
    last step is one rename (a reader sees the old folder or the new one). An OS refusal is a BuildError naming
    `shown`."""
    out = Path(out)
    final = out.parent / f".{out.name}.new-{os.getpid()}"
    old = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        shutil.copytree(staged, final)
        os.chmod(final, 0o777 & ~_umask())  # copytree copied the private mode of the temporary folder
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.rename(out, old)
        os.rename(final, out)
    except OSError as exc:
        shutil.rmtree(final, ignore_errors=True)
        if old is not None and not out.exists():
            os.rename(old, out)  # put the previous build back
            old = None
        raise BuildError(f"{shown}: cannot write the build folder: {exc.strerror or exc}") from None
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def included_files(sources: list[Path], include_dirs: list[Path]) -> list[Path]:
    """The sources and every header they include with #include "...", transitively, in a stable order (a header is
    looked up next to the file including it, then in the include folders, as clang does for quoted includes)."""
    seen: list[Path] = []
    todo = list(sources)
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(errors="replace"), re.M):
            found = next((d / name for d in (path.parent, *include_dirs) if (d / name).is_file()), None)
            if found is not None:
                todo.append(found.resolve())
    return seen


def clang_arguments(module: Module, target: str) -> tuple[list[str], list[str]]:
    """(arguments after the fixed clang options, the same as recorded in the manifest)."""
    t = module.targets[target]
    defines = [f"-DXE2RT_TARGET_{target.upper()}=1"] + [f"-D{k}={v}" for k, v in sorted(t.constants.items())]
    defines += [f"-D{k}" if v == "" else f"-D{k}={v}" for k, v in sorted(t.defines.items())]
    includes = [f"-I{d}" for d in module.include_dirs]
    return [*defines, "-I", ".", *includes, *t.options], [*toolchain.CLANG_OPTIONS, *defines, *includes, *t.options]


def _agree(shipped: dict, with_info: dict, what: str) -> None:
    a, b = reflect.structure(shipped), reflect.structure(with_info)
    if a != b:
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        raise BuildError(f"{what}: the argument-info build disagrees with the binary on kernels {diff}; "
                         f"the signature cannot be trusted")


def build_target(module: Module, target: str, out_dir: Path, work: Path) -> dict:
    """Write `out_dir/<target>/<module>.spv` and return its manifest entry."""
    t = module.targets[target]
    what = f"{module.name} for target {target}"
    out = out_dir / target / f"{module.name}.spv"
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{module.name}_{target}_", dir=work))
    if t.spirv is not None:
        shutil.copyfile(t.spirv, out)
        checked = toolchain.validate(out, what)
        reflected = _reflect(out.read_bytes(), what)
        source, sources_sha = t.spirv.name, {t.spirv.name: sha256_file(t.spirv)}
        build_options = {"prebuilt": t.spirv.name}
    else:
        args, recorded = clang_arguments(module, target)
        checked = toolchain.compile_spirv(module.sources, args, out, work, what, extensions=module.spirv_extensions)
        info = work / "arg_info.spv"
        toolchain.compile_spirv(module.sources, args, info, work, f"{what} (argument info)", arg_info=True,
                                extensions=module.spirv_extensions)
        reflected = _reflect(info.read_bytes(), what)
        _agree(_reflect(out.read_bytes(), what), reflected, what)
        source = module.sources[0].name
        sources_sha = {p.name: sha256_file(p) for p in included_files(module.sources, module.include_dirs)}
        build_options = {"clang": recorded, "llvm-spirv": toolchain.spirv_options(module.spirv_extensions)}
        if len(module.sources) > 1:
            build_options["sources"] = [p.name for p in module.sources]
    if checked != "spirv-val":  # what checked a binary spirv-val cannot read to the end (toolchain.validate)
        build_options["validated"] = checked
    shutil.rmtree(work, ignore_errors=True)
    if not reflected["kernels"]:
        raise BuildError(f"{what}: the module defines no kernel (no OpEntryPoint of the Kernel model)")
    return {
        "family": module.name,
        "target": target,
        "source": source,
        "sha256": sha256_file(out),
        "sources_sha256": sources_sha,
        "build_options": build_options,
        "constants": dict(t.constants),
        "kernels": reflected["kernels"],
        "kernel_attrs": reflected["kernel_attrs"],
        "aot_spec": module.aot,
    }


def _reflect(spirv: bytes, what: str) -> dict:
    try:
        return reflect.reflect(spirv)
    except reflect.SpirvError as exc:
        raise BuildError(f"{what}: {exc}") from None


def build(modules: list[Module], targets, out_dir: Path, previous: dict | None = None, log=print) -> dict:
    """Build every module for each of `targets` it declares into `out_dir`; return the manifest (not written).

    An ahead-of-time report of `previous` is kept for a binary whose sha256 and AOT options are unchanged."""
    toolchain.require_tools()
    names = [m.name for m in modules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BuildError(f"module names declared twice: {dupes} (each names <target>/<module>.spv)")
    artifacts = {}
    old = (previous or {}).get("artifacts", {})
    with tempfile.TemporaryDirectory(prefix="xe2rt-build-") as work:
        for module in modules:
            for target in targets:
                if target not in module.targets:
                    continue
                entry = build_target(module, target, Path(out_dir), Path(work))
                key = f"{target}/{module.name}.spv"
                prior = old.get(key, {})
                # An ahead-of-time report stays valid only for the exact SPIR-V (and ocloc options) it was made from.
                if prior.get("aot", {}).get("spirv_sha256") == entry["sha256"] and \
                        prior.get("aot_spec") == entry["aot_spec"]:
                    entry["aot"] = prior["aot"]
                artifacts[key] = entry
                log(f"  built {key}  {entry['sha256'][:12]}  kernels: {', '.join(entry['kernels'])}")
    return {"format": FORMAT, "compilers": toolchain.compilers(), "artifacts": artifacts}
