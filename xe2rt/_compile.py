"""The run-time compile behind `Module.from_source` and small build folders, and the on-disk cache of from_source
builds. The compile itself is the package build (xe2rt.build, `python -m xe2rt build`): the shipped kernels'
toolchain (clang-15, llvm-spirv-15, spirv-val), and kernel signatures and attributes read from the SPIR-V
(xe2rt.build.reflect). This module only writes the source to a file, describes it as a one-source module, and puts
the build folder in place.

Cache: one folder per key under XE2RT_CACHE_DIR (default ~/.cache/xe2rt/from_source), the key a sha256 over the
source, the options (include paths made absolute), the contents of the headers it includes (from -I, -isystem,
-iquote and -idirafter folders, by absolute path, and by -include / -imacros), the device name
and driver version, the target and the compiler binaries (path, size, mtime).
A folder is written under a temporary name and renamed into place, and its binary is checked against the sha256 in
its manifest when loaded (a mismatch rebuilds it). A cached folder is loaded without importing xe2rt.build.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import config
from .errors import BuildError, CompileError, InputTypeError

CLANG, LLVM_SPIRV = "clang-15", "llvm-spirv-15"
MODULE_NAME = "from_source"
SOURCE_NAME = "source.cl"  # clang's messages name it: source.cl:LINE:COL
CACHE_FORMAT = 2  # 2: built by xe2rt.build (signatures read from SPIR-V); 1 was a regex over the source


def _module(source_path: Path, name: str, targets, options: tuple):
    """A one-source xe2rt.build module: -DNAME=VALUE options become its constants (integers, recorded in the manifest
    as `python -m xe2rt build -D` records them) or defines, -IDIR include folders, the rest clang options."""
    from .build import cli, spec
    for option in options:
        if not isinstance(option, str):
            raise CompileError(f"options must be strings (clang options such as -DN=4), got {option!r}")
    include_dirs, rest = _include_dirs(options)
    defines, other = [], []
    for option in rest:
        if option.startswith("-D") and len(option) > 2:
            defines.append(option[2:])
        else:
            other.append(option)
    constants, plain = cli._parse_defines(defines)
    raw = {"sources": [str(source_path)], "include_dirs": include_dirs, "options": other, "constants": constants,
           "defines": {k: (v if v else True) for k, v in plain.items()}, "targets": {t: {} for t in targets}}
    return spec.resolve(raw, name, source_path.parent, "from_source")


def build_folder(source: str, outdir, *, targets=config.TARGETS, options: tuple = (), name: str = "kernels") -> Path:
    """Compile OpenCL C `source` for every target with xe2rt.build into a build folder (manifest.json,
    <target>/<name>.spv, and the source as source.cl) that xe2rt.load reads. Writes nothing unless every target
    builds (a compile error is a CompileError with the compiler's source.cl:LINE:COL message); the folder is
    replaced as a whole, so `outdir` must be new, empty or an earlier build folder (a BuildError otherwise, before
    anything is compiled: the same rule as `python -m xe2rt build -o`)."""
    from .build import builder
    if not isinstance(source, str) or not source.strip():
        raise CompileError("source must be non-empty OpenCL C text")
    shown = f"outdir {os.fspath(outdir)!r}"
    outdir = Path(os.fspath(outdir)).resolve()
    options = _absolute_includes(clang_options(options))
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    for target in targets:
        config.check_target_name(target, "targets")
    builder.check_output_folder(outdir, shown)
    with tempfile.TemporaryDirectory(prefix="xe2rt-src-") as work, \
            tempfile.TemporaryDirectory(prefix="xe2rt-out-") as staged:
        src = Path(work) / SOURCE_NAME
        src.write_text(source)
        staging = Path(staged)
        try:
            module = _module(src, name, targets, tuple(options))
            manifest = builder.build([module], targets, staging, log=lambda *_: None)
        except BuildError as exc:  # source.cl is the text passed here; its temporary folder is gone after this
            raise CompileError(str(exc).replace(f" (in {work})", " (source.cl: the source text given)")) from None
        (staging / SOURCE_NAME).write_text(source)
        manifest["rebuild_command"] = ("Module.from_source(...) or xe2rt._compile.build_folder(...) "
                                       f"(options {list(options)}); the source is {SOURCE_NAME} in this folder")
        builder.write_json_atomic(staging / builder.MANIFEST, manifest)
        builder.replace_folder(staging, outdir, shown)
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


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


# options that name an include folder or a file clang reads, besides -I (JoinedOrSeparate in clang: "-isystem DIR"
# or "-isystemDIR"): their paths are made absolute and what they lead to is hashed into the cache key like -I headers
_FOLDER_OPTIONS = ("-isystem", "-iquote", "-idirafter")
_FILE_OPTIONS = ("-include", "-imacros")


def _headers(source: str, include_dirs: list, forced: tuple = ()) -> dict:
    """{path: sha256} of every header `source` includes (by an absolute path, or from the include folders), and of
    the files `forced` (-include / -imacros) with theirs, transitively (a header's own includes are looked up next to
    it first), so that editing one makes a new cache key. Names found nowhere (the OpenCL C headers clang brings) are
    left to the compiler."""
    found: dict = {}
    todo = [(source, None)]

    def visit(path: Path) -> None:  # hash a header once, and scan it for its own includes
        key = str(path.resolve())
        if key not in found:
            data = path.read_bytes()
            found[key] = hashlib.sha256(data).hexdigest()
            todo.append((data.decode("utf-8", "replace"), path.resolve().parent))
    for name in forced:
        if Path(name).is_file():
            visit(Path(name))
    while todo:
        text, here = todo.pop()
        for name in _INCLUDE.findall(text):
            if Path(name).is_absolute():
                candidates = [Path(name)]
            else:
                candidates = [d / name for d in ([here] if here else []) + include_dirs]
            path = next((c for c in candidates if c.is_file()), None)
            if path is not None:
                visit(path)
    return found


def _extra_inputs(options: tuple) -> tuple[list, tuple]:
    """(folders of -isystem / -iquote / -idirafter, files of -include / -imacros) in `options` (made absolute by
    _absolute_includes, so each is one option and its path as the next item)."""
    folders, files = [], []
    for o, value in zip(options, options[1:]):
        if o in _FOLDER_OPTIONS and isinstance(value, str):
            folders.append(Path(value))
        elif o in _FILE_OPTIONS and isinstance(value, str):
            files.append(value)
    return folders, tuple(files)


def clang_options(options) -> tuple:
    """clang options as a tuple of str: None (none), one str (one option) or a sequence of str."""
    if options is None:
        return ()
    if isinstance(options, str):
        return (options,)
    try:
        items = tuple(options)
    except TypeError:
        raise InputTypeError(f"options must be a sequence of clang options (str), got {type(options).__name__}") \
            from None
    bad = next((o for o in items if not isinstance(o, str)), None)
    if bad is not None:
        raise InputTypeError(f"options must be clang options as str, got {type(bad).__name__} {bad!r:.40}")
    return items


def _absolute_includes(options: tuple) -> tuple:
    """The options with every include folder as one absolute -IDIR (a relative one means the current folder's, at
    this call): -IDIR, -I DIR, --include-directory=DIR and --include-directory DIR, as clang takes them; and the
    paths of -isystem, -iquote, -idirafter, -include and -imacros (joined or separate) absolute, as the option and
    its path."""
    out, i = [], 0
    while i < len(options):
        o = options[i]
        folder = None
        if isinstance(o, str):
            if o in ("-I", "--include-directory") and i + 1 < len(options) and isinstance(options[i + 1], str):
                folder, i = options[i + 1], i + 1
            elif o.startswith("-I") and len(o) > 2:
                folder = o[2:]
            elif o.startswith("--include-directory="):
                folder = o.split("=", 1)[1]
            else:
                other = next((opt for opt in _FOLDER_OPTIONS + _FILE_OPTIONS if o.startswith(opt)), None)
                path = o[len(other):] if other is not None else ""
                if path.startswith("-"):  # another option sharing the prefix (-include-pch): left as it is
                    other = None
                if other is not None:
                    if not path and i + 1 < len(options) and isinstance(options[i + 1], str):
                        path, i = options[i + 1], i + 1
                    if path:
                        out += [other, str(Path(path).resolve())]
                        i += 1
                        continue
        out.append(f"-I{Path(folder).resolve()}" if folder is not None else o)
        i += 1
    return tuple(out)


def _include_dirs(options: tuple) -> tuple[list, list]:
    """(absolute include folders in order, the other options), whichever form each -I option took."""
    folders, rest = [], []
    for o in _absolute_includes(tuple(options)):
        if isinstance(o, str) and o.startswith("-I") and len(o) > 2:
            folders.append(o[2:])
        else:
            rest.append(o)
    return folders, rest


def cache_key(source: str, options: tuple, device, target: str, headers: dict | None = None) -> str:
    facts = [CACHE_FORMAT, source, list(options), device.name, device.driver_version, target, _compilers(),
             headers or {}]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def cached_build(source: str, options: tuple, device, target: str) -> Path:
    """The build folder of `source` for one target, from the disk cache or compiled into it."""
    if not isinstance(source, str) or not source.strip():
        raise CompileError("from_source: source must be non-empty OpenCL C text")
    options = _absolute_includes(clang_options(options))
    include_dirs = [Path(d) for d in _include_dirs(options)[0]]
    extra_dirs, forced = _extra_inputs(options)
    headers = _headers(source, include_dirs + extra_dirs, forced)
    folder = config.cache_dir() / cache_key(source, options, device, target, headers)
    if (folder / "manifest.json").is_file():
        return folder
    try:
        return build_folder(source, folder, targets=(target,), options=options, name=MODULE_NAME)
    except BuildError:
        if (folder / "manifest.json").is_file():  # another process put the same build in place first
            return folder
        raise
