"""Every XE2RT_* environment variable, read and checked in one place.

XE2RT_TARGET        force a kernel target for every call: one of bmg, lnl, cpu, any case (default: chosen from the
                    device); checked when xe2rt is imported
XE2RT_KERNEL_DIR    load binaries and manifest.json from this folder instead of the packaged xe2rt/kernels
XE2RT_NO_ICD_SETUP  set to 1 to stop `import xe2rt` from pointing OCL_ICD_FILENAMES at the pip-installed OpenCL
                    CPU runtime (it only ever does so when OCL_ICD_FILENAMES is unset)
XE2RT_CACHE_DIR     folder of xe2rt's build cache (default ~/.cache/xe2rt): Module.from_source builds in
                    from_source/, programs built for the OpenCL CPU device in programs/ (xe2rt.program_cache)
XE2RT_PROGRAM_CACHE set to 0 to build every program from SPIR-V in every process instead of keeping the CPU
                    device's built programs in XE2RT_CACHE_DIR/programs (default 1)
XE2RT_MODEL_CACHE   folder for downloaded model wheels (xe2rt.models; default ~/.cache/xe2rt/models)
XE2RT_NATIVE_GRAPH  set to 0 to make xe2rt.graph (and the LLM decode step) replay plans launch by launch instead of
                    recording OpenCL command buffers (default 1)
XE2RT_BENCH_DECODE_LAYERS  decoder layers of `bench --families decode`'s random checkpoints (default 4; 1 with
                    --quick)
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import ConfigError

TARGETS = ("bmg", "lnl", "cpu")
XE2_TARGETS = ("bmg", "lnl")


def check_target_name(name: str, source: str) -> str:
    """The target's canonical (lower-case) name: BMG, Bmg and bmg are one target."""
    canonical = name.strip().lower() if isinstance(name, str) else name
    if canonical not in TARGETS:
        raise ConfigError(f"{source}={name!r} is not a known target; use one of {', '.join(TARGETS)}")
    return canonical


def forced_target() -> str | None:
    value = os.environ.get("XE2RT_TARGET", "").strip()
    return check_target_name(value, "XE2RT_TARGET") if value else None


_PACKAGED_KERNELS = Path(__file__).resolve().parent / "kernels"


def kernel_dir() -> Path:
    value = os.environ.get("XE2RT_KERNEL_DIR", "").strip()
    if not value:
        return _PACKAGED_KERNELS
    path = Path(value)
    if not (path / "manifest.json").is_file():
        raise ConfigError(f"XE2RT_KERNEL_DIR={value!r} has no manifest.json")
    return path


def _switch(variable: str, off: str, on: str) -> bool:
    """A variable that 0 turns off and 1 or unset leaves on; anything else is a ConfigError saying what each does."""
    value = os.environ.get(variable, "").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"{variable}={value!r}: use 0 to {off}, 1 or unset to {on}")
    return value != "0"


def native_graph_enabled() -> bool:
    return _switch("XE2RT_NATIVE_GRAPH", "replay graphs launch by launch",
                   "record OpenCL command buffers where the queue allows")


def icd_setup_enabled() -> bool:
    value = os.environ.get("XE2RT_NO_ICD_SETUP", "").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"XE2RT_NO_ICD_SETUP={value!r}: use 1 to disable, 0 or unset to enable")
    return value != "1"


def folder_problem(folder: Path) -> str | None:
    """Why files cannot be written into `folder` (created if missing), or None when they can: the check behind the
    cache variables (reports use file_problem, which creates nothing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"the folder cannot be created ({exc.strerror})"
    if not os.access(folder, os.W_OK):
        return "the folder is not writable"
    return None


def file_problem(path: Path) -> str | None:
    """Why a report cannot be written to `path`, or None when it can: bench's --json / --plot and selftest's --json
    check this before anything runs, so that a run's results are not lost at the end. Nothing is created: the
    nearest existing folder on the way is probed by creating and removing a temporary file in it (os.access says yes
    to root for a folder that refuses files), an existing file by opening it for appending."""
    path = Path(path)
    if path.is_dir():
        return "it is a folder, not a file"
    existing = path.parent.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        if path.exists():
            with open(path, "ab"):
                pass
        else:
            with tempfile.TemporaryFile(dir=existing):
                pass
    except OSError as exc:
        return f"{'the file' if path.exists() else f'the folder {existing}'} is not writable ({exc.strerror})"
    return None


def _configured_folder(variable: str, default: Path) -> tuple[str, Path]:
    """(the variable's value, the folder it names, or default when unset)."""
    value = os.environ.get(variable, "").strip()
    return value, (Path(value).expanduser() if value else default)


def _usable_folder(variable: str, default: Path, sub: str | None = None) -> Path:
    """The folder a cache variable names (default when unset), or its sub-folder `sub`, created if needed; a
    ConfigError naming the variable when it cannot be created or written."""
    value, base = _configured_folder(variable, default)
    folder = base / sub if sub else base
    problem = folder_problem(folder)
    if problem:
        where = f"{folder}: " if sub else ""
        raise ConfigError(f"{variable}={value or base!s}: {where}{problem}; set {variable} to a writable folder")
    return folder


def _cache_root() -> Path:
    return Path.home() / ".cache" / "xe2rt"  # read at each call: HOME may change, or be missing, after import


def model_cache_dir() -> Path:
    return _usable_folder("XE2RT_MODEL_CACHE", _cache_root() / "models")


def cache_dir() -> Path:
    """XE2RT_CACHE_DIR/from_source, the folder of Module.from_source builds."""
    return _usable_folder("XE2RT_CACHE_DIR", _cache_root(), "from_source")


def program_cache_path() -> Path:
    """XE2RT_CACHE_DIR/programs, the folder of xe2rt.program_cache (not created here)."""
    return _configured_folder("XE2RT_CACHE_DIR", _cache_root())[1] / "programs"


def program_cache_dir() -> tuple[Path, str | None]:
    """(XE2RT_CACHE_DIR/programs, created if missing; why files cannot be written there, or None)."""
    folder = program_cache_path()
    return folder, folder_problem(folder)


def program_cache_enabled() -> bool:
    return _switch("XE2RT_PROGRAM_CACHE", "build every program from SPIR-V in every process",
                   "keep the CPU device's built programs on disk")


def bench_decode_layers(default: int) -> int:
    """XE2RT_BENCH_DECODE_LAYERS: a positive int (default when unset or empty)."""
    value = os.environ.get("XE2RT_BENCH_DECODE_LAYERS", "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"XE2RT_BENCH_DECODE_LAYERS={value!r} must be a positive integer (decoder layers of the "
                          f"decode benchmark's checkpoints)")
    return int(value)
