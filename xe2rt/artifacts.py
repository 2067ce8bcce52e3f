"""Shipped SPIR-V binaries: manifest lookup, sha256 verification, and one program per (context, device, target, family)
whose kernels are built on first use, each once, and reused."""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import dpctl
import dpctl.program

from . import config, spirv_module
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


class Program:
    """One family's shipped binary for one (context, device, target). Kernels are built on first use, each from a
    one-kernel view of the verified module (xe2rt.spirv_module), so a first call pays for the kernel it launches and
    not for the whole family; `build_all()` builds the whole module at once (xe2rt.warmup)."""

    def __init__(self, family: str, target: str, path: Path, entry: dict, spirv: bytes, queue: dpctl.SyclQueue):
        self.family, self.target, self.path, self.entry = family, target, path, entry
        self._spirv, self._queue = spirv, queue
        self.kernels: dict[str, Kernel] = {}

    @property
    def constants(self) -> dict:
        return self.entry["constants"]

    @property
    def kernel_names(self) -> list[str]:
        return list(self.entry["kernels"])

    def kernel(self, name: str | None = None) -> Kernel:
        name = name or self.family
        kernel = self.kernels.get(name)
        if kernel is None:
            if name not in self.entry["kernels"]:
                raise ArtifactError(f"{self.path} has no kernel {name!r}; it has {sorted(self.entry['kernels'])}")
            with _lock:
                kernel = self.kernels.get(name)
                if kernel is None:
                    built = _build_module(self._queue, self, spirv_module.single_kernel(self._spirv, name),
                                          (self.entry["sha256"], name))
                    kernel = self.kernels[name] = self._kernel_from(built, name)
        return kernel

    def build_all(self) -> None:
        """Build every kernel of the family in one module build (cheaper than one build per kernel)."""
        with _lock:
            missing = [n for n in self.entry["kernels"] if n not in self.kernels]
            if not missing:
                return
            built = _build_module(self._queue, self, self._spirv, (self.entry["sha256"], None))
            for name in missing:
                self.kernels[name] = self._kernel_from(built, name)

    def _kernel_from(self, sycl_program, name: str) -> Kernel:
        if not sycl_program.has_sycl_kernel(name):
            raise ArtifactError(f"{self.path}: kernel {name!r} listed in the manifest is missing from the built "
                                f"program")
        return Kernel(name=name, family=self.family, target=self.target,
                      params=tuple(Param(p["name"], p["type"], p["space"], p["const"])
                                   for p in self.entry["kernels"][name]),
                      sycl_kernel=sycl_program.get_sycl_kernel(name), constants=self.entry["constants"])


_manifest_cache: dict[Path, dict] = {}
_program_cache: dict[tuple, Program] = {}
# Identical binaries shipped under several targets (e.g. emulation variants) are built once per context and device.
_built_by_sha: dict[tuple, object] = {}
_lock = threading.RLock()


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
    """The family's program for this queue's context and device: binary read and verified once, kernels built on
    first use and then reused."""
    key = (queue.sycl_context, queue.sycl_device, target, family, config.kernel_dir())
    program = _program_cache.get(key)
    if program is not None:
        return program
    with _lock:
        program = _program_cache.get(key)
        if program is None:
            path, entry = artifact_entry(target, family)
            program = Program(family, target, path, entry, verified_spirv(path, entry), queue)
            _program_cache[key] = program
    return program


def _build_module(queue: dpctl.SyclQueue, program: Program, spirv: bytes, what: tuple):
    """A built SYCL program for this context and device, shared by every target shipping the same binary (e.g. the
    emulation variants). Called with _lock held."""
    built_key = (queue.sycl_context, queue.sycl_device, *what)
    sycl_program = _built_by_sha.get(built_key)
    if sycl_program is None:
        try:
            sycl_program = _create_from_spirv(queue, spirv, "")
        except Exception as exc:  # dpctl raises SyclProgramCompilationError without the log on some backends
            which = f"kernel {what[1]!r} of " if what[1] else ""
            raise ArtifactError(f"building {which}{program.path} (family {program.family}, target {program.target}) "
                                f"for {queue.sycl_device.name!r} failed: {type(exc).__name__}: {exc}") from exc
        _built_by_sha[built_key] = sycl_program
    return sycl_program


generation = 0  # bumped by clear_caches, so caches built on top of this one (ops.common) can tell


def clear_caches() -> None:
    """Forget loaded manifests and built programs (tests use it after swapping XE2RT_KERNEL_DIR)."""
    global generation
    with _lock:
        generation += 1
        _manifest_cache.clear()
        _program_cache.clear()
        _built_by_sha.clear()
