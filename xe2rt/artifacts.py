"""Shipped SPIR-V binaries: manifest lookup, sha256 verification, and one built program per (context, device, target,
family) whose kernel objects are fetched once and reused."""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import dpctl
import dpctl.program

from . import config
from .errors import ArtifactError

REBUILD_HINT = "rebuild with: python build_scripts/build_spirv.py && python build_scripts/aot.py (see README)"

# dpctl's development branch renames create_program_from_spirv; the old name stays as a deprecated alias.
_create_from_spirv = getattr(dpctl.program, "create_kernel_bundle_from_spirv", None) or \
    dpctl.program.create_program_from_spirv


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # OpenCL C scalar type name: half, float, int, uchar, ...
    space: str  # "global", "local", "constant" or "scalar"
    const: bool


@dataclass(frozen=True)
class Kernel:
    """A built kernel with what the launch helper needs to marshal arguments and check limits."""
    name: str
    family: str
    target: str
    params: tuple[Param, ...]
    sycl_kernel: dpctl.program.SyclKernel
    constants: dict = field(compare=False)

    def describe(self) -> str:
        return f"{self.family}/{self.name} (target {self.target})"


@dataclass
class Program:
    family: str
    target: str
    path: Path
    entry: dict
    sycl_program: object
    kernels: dict[str, Kernel]

    @property
    def constants(self) -> dict:
        return self.entry["constants"]

    def kernel(self, name: str | None = None) -> Kernel:
        name = name or self.family
        try:
            return self.kernels[name]
        except KeyError:
            raise ArtifactError(f"{self.path} has no kernel {name!r}; it has {sorted(self.kernels)}") from None


_manifest_cache: dict[Path, dict] = {}
_program_cache: dict[tuple, Program] = {}
# Identical binaries shipped under several targets (e.g. emulation variants) are built once per context and device.
_built_by_sha: dict[tuple, object] = {}
_lock = threading.Lock()


def manifest(kernel_dir: Path | None = None) -> dict:
    kernel_dir = kernel_dir or config.kernel_dir()
    if kernel_dir not in _manifest_cache:
        path = kernel_dir / "manifest.json"
        if not path.is_file():
            raise ArtifactError(f"missing {path}; {REBUILD_HINT}")
        _manifest_cache[kernel_dir] = json.loads(path.read_text())
    return _manifest_cache[kernel_dir]


def artifact_entry(target: str, family: str) -> tuple[Path, dict]:
    kernel_dir = config.kernel_dir()
    key = f"{target}/{family}.spv"
    entry = manifest(kernel_dir).get("artifacts", {}).get(key)
    if entry is None:
        raise ArtifactError(f"{kernel_dir / key} is not in the manifest (no {family} binary for target {target}); "
                            f"{REBUILD_HINT}")
    return kernel_dir / key, entry


def verified_spirv(path: Path, entry: dict) -> bytes:
    """The binary's bytes, refused unless their sha256 is the manifest's."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"missing kernel binary {path}; {REBUILD_HINT}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise ArtifactError(f"kernel binary {path} does not match its manifest: sha256 {digest[:16]}..., "
                            f"manifest says {entry['sha256'][:16]}... (corrupted or edited); {REBUILD_HINT}")
    return data


def load(queue: dpctl.SyclQueue, target: str, family: str) -> Program:
    """The built program for this queue's context and device; built once, then reused."""
    key = (queue.sycl_context, queue.sycl_device, target, family, config.kernel_dir())
    program = _program_cache.get(key)
    if program is not None:
        return program
    with _lock:
        program = _program_cache.get(key)
        if program is None:
            program = _build(queue, target, family)
            _program_cache[key] = program
    return program


def _build(queue: dpctl.SyclQueue, target: str, family: str) -> Program:
    path, entry = artifact_entry(target, family)
    spirv = verified_spirv(path, entry)
    built_key = (queue.sycl_context, queue.sycl_device, entry["sha256"])
    sycl_program = _built_by_sha.get(built_key)
    if sycl_program is None:
        try:
            sycl_program = _create_from_spirv(queue, spirv, "")
        except Exception as exc:  # dpctl raises SyclProgramCompilationError without the log on some backends
            raise ArtifactError(f"building {path} (family {family}, target {target}) for {queue.sycl_device.name!r} "
                                f"failed: {type(exc).__name__}: {exc}") from exc
        _built_by_sha[built_key] = sycl_program
    kernels = {}
    for name, signature in entry["kernels"].items():
        if not sycl_program.has_sycl_kernel(name):
            raise ArtifactError(f"{path}: kernel {name!r} listed in the manifest is missing from the built program")
        kernels[name] = Kernel(name=name, family=family, target=target,
                               params=tuple(Param(**p) for p in signature),
                               sycl_kernel=sycl_program.get_sycl_kernel(name), constants=entry["constants"])
    return Program(family, target, path, entry, sycl_program, kernels)


def clear_caches() -> None:
    """Forget loaded manifests and built programs (tests use it after swapping XE2RT_KERNEL_DIR)."""
    with _lock:
        _manifest_cache.clear()
        _program_cache.clear()
        _built_by_sha.clear()
