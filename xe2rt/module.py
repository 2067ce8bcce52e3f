"""Loading kernels: `xe2rt.load(OUTDIR)` for a folder of per-target SPIR-V with its manifest, the shipped families
(xe2rt.artifacts, the same loader over the package's kernel folder) and `Module.from_source` (xe2rt._compile).

A folder holds `manifest.json` and `<target>/<module>.spv`; the manifest lists per binary its sha256, constants and
each kernel's signature (and, when the build recorded them, required work-group and sub-group sizes). A binary is
read once and refused unless its sha256 is the manifest's. Programs are built per (context, device, binary sha256,
kernel): the first launch of a kernel builds a one-kernel view of the module (xe2rt.spirv_module), `build_all()` the
whole module at once. Everything loaded or built lives in the caches below, which `clear()` empties; on the OpenCL
CPU device a built program is also kept on disk for the next process (xe2rt.program_cache).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import dpctl
import dpctl.program
import dpnp

from . import launch, program_cache, spirv_module, targets
from .errors import ArtifactError, ConfigError, InputError, InputTypeError, TargetError
from .launch import LocalMemory  # noqa: F401  (public as xe2rt.LocalMemory)

# dpctl's development branch renames create_program_from_spirv; the old name stays as a deprecated alias.
_create_from_spirv = getattr(dpctl.program, "create_kernel_bundle_from_spirv", None) or \
    dpctl.program.create_program_from_spirv


_DPNP_ARRAY = dpnp.ndarray
MAX_QUEUES_OK = 64  # other queues a module remembers as on its device and context (then it starts over)


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # OpenCL C scalar type name: half, float, int, uchar, ...
    space: str  # "global", "local", "constant" or "scalar"
    const: bool
    signed: bool | None = None  # integers: None when the SPIR-V did not say (prebuilt without kernel-arg strings)


class Kernel:
    """One kernel of a loaded module, built for the module's context and device. Call it to launch:
    `kernel(*args, global_size=..., local_size=..., queue=None) -> dpctl.SyclEvent` (see docs/own_kernels.md)."""
    __slots__ = ("name", "family", "target", "params", "sycl_kernel", "constants", "reqd_work_group_size",
                 "reqd_sub_group_size", "module", "__weakref__")

    def __init__(self, name, module, params, sycl_kernel, attrs: dict):
        self.name, self.module, self.params, self.sycl_kernel = name, module, params, sycl_kernel
        self.family, self.target, self.constants = module.name, module.target, module.constants
        wg = attrs.get("reqd_work_group_size")
        self.reqd_work_group_size = tuple(int(v) for v in wg) if wg else None
        self.reqd_sub_group_size = attrs.get("reqd_sub_group_size") or sycl_kernel.compile_sub_group_size or None

    def describe(self) -> str:
        return f"{self.family}/{self.name} (target {self.target})"

    def __repr__(self) -> str:
        def one(p: Param) -> str:
            if p.space == "scalar":
                return f"{p.type} {p.name}"
            const = "const " if p.const and p.space != "constant" else ""
            return f"__{p.space} {const}{p.type}* {p.name}"
        args = ", ".join(one(p) for p in self.params)
        return f"<xe2rt.Kernel {self.describe()}: {self.name}({args})>"

    def __call__(self, *args, global_size, local_size=None, queue: dpctl.SyclQueue | None = None):
        """Check every argument and the geometry against the signature and the device, then queue the kernel
        without waiting, ordered with dpnp's work on the queue. The queue is `queue`, else the first array
        argument's, else the module's; it must be on the module's device and context."""
        key, hits = launch.warm_key(self, args, global_size, local_size, queue)
        if key is not None:
            event = launch.warm_launch(key, args, hits)
            if event is not None:
                return event
        if queue is None:
            for a in args:
                if type(a) is _DPNP_ARRAY:
                    queue = a.get_array().sycl_queue
                    break
                if hasattr(a, "sycl_queue"):
                    queue = a.sycl_queue
                    break
            else:
                queue = self.module.queue
        elif not isinstance(queue, dpctl.SyclQueue):
            raise InputTypeError(f"{self.describe()}: queue must be a dpctl.SyclQueue, got {type(queue).__name__}")
        module_queue = self.module.queue
        if queue is not module_queue and queue not in self.module.queues_ok:
            if queue.sycl_device == module_queue.sycl_device and queue.sycl_context == module_queue.sycl_context:
                if len(self.module.queues_ok) >= MAX_QUEUES_OK:  # a queue per task: do not keep them all alive
                    self.module.queues_ok.clear()
                self.module.queues_ok.add(queue)
            else:
                raise InputError(f"{self.describe()}: built for {module_queue.sycl_device.name!r}, not for the "
                                 f"launch queue's device and context ({queue.sycl_device.name!r}); load the "
                                 f"module with queue=<that queue>")
        if local_size is None:
            if self.reqd_work_group_size is None:
                raise InputError(f"{self.describe()}: local_size is required (the kernel declares no "
                                 f"reqd_work_group_size)")
            local_size = self.reqd_work_group_size[:len(launch.as_tuple(global_size))]
        submission = launch.prepare(self, args, global_size, local_size, queue)
        if key is not None:
            launch.remember_warm(key, self, args, submission)
        return launch.enqueue(submission)


class Module:
    """One binary of a build folder (one target), for one queue's context and device. `kernel(name)` gives a
    Kernel; `target` says which binary was loaded; `isa` is ocloc's report when the build ran it (--aot)."""

    def __init__(self, folder: Path, name: str, target: str, entry: dict, spirv: bytes, queue: dpctl.SyclQueue,
                 rebuild: str):
        self.folder, self.name, self.target, self.entry, self.queue = folder, name, target, entry, queue
        self.path = folder / target / f"{name}.spv"
        self._spirv, self._rebuild = spirv, rebuild
        self.kernels: dict[str, Kernel] = {}
        self.queues_ok: set = set()  # other queues found to be on the module's device and context
        self.manifest_mtime = None  # the manifest's mtime when loaded (xe2rt.load reloads a rebuilt folder)

    @property
    def constants(self) -> dict:
        return self.entry.get("constants", {})

    @property
    def kernel_names(self) -> list[str]:
        return list(self.entry["kernels"])

    @property
    def isa(self) -> dict | None:
        return self.entry.get("aot")

    def __repr__(self) -> str:
        return f"<xe2rt.Module {self.name} (target {self.target}) kernels {self.kernel_names}>"

    def kernel(self, name: str | None = None) -> Kernel:
        """The kernel `name` (default: the one named like the module), built on first use and then reused."""
        if name is None:
            name = self.name
        if not isinstance(name, str):
            raise InputTypeError(f"{self.name}: a kernel name is a str, got {type(name).__name__} {name!r:.40}")
        kernel = self.kernels.get(name)
        if kernel is None:
            if name not in self.entry["kernels"]:
                raise ArtifactError(f"{self.path} has no kernel {name!r}; it has {sorted(self.entry['kernels'])}")
            with _lock:
                kernel = self.kernels.get(name)
                if kernel is None:
                    try:
                        single = spirv_module.single_kernel(self._spirv, name)
                    except (KeyError, ValueError) as exc:
                        raise ArtifactError(f"{self.path}: {exc} (the manifest lists {name!r}; edited?); "
                                            f"{self._rebuild}") from None
                    self._check_signatures(single, [name])
                    device = self.queue.sycl_device
                    launch.check_sub_group_size(f"{self.name}/{name} (target {self.target})",
                                                (self.entry.get("kernel_attrs", {}).get(name) or {}).get(
                                                    "reqd_sub_group_size"), device, device.sub_group_sizes)
                    built = self._build(single, name)
                    kernel = self.kernels[name] = self._kernel_from(built, name)
        return kernel

    def _check_signatures(self, spirv: bytes, names: list) -> None:
        """Refuse a manifest whose signature or attributes for a kernel in `names` are not the binary's (an edited
        manifest: the sha256 covers the binary only). Compared as reflect.structure does: kinds, storage classes,
        SPIR-V types and required sizes; names, C spellings and the sign of integers are not in every binary."""
        from .build import reflect
        try:
            binary = reflect.structure(reflect.reflect(spirv))
        except reflect.SpirvError as exc:
            raise ArtifactError(f"{self.path}: {exc}; {self._rebuild}") from None
        attrs = self.entry.get("kernel_attrs") or {}
        for name in names:
            try:
                listed = reflect.structure({"kernels": {name: self.entry["kernels"][name]},
                                            "kernel_attrs": {name: attrs.get(name) or {}}})[name]
            except (KeyError, TypeError, AttributeError) as exc:
                raise ArtifactError(f"{self.path}: the manifest's entry for kernel {name!r} is malformed "
                                    f"({type(exc).__name__}: {exc}); {self._rebuild}") from None
            mine = binary.get(name)
            same = mine is not None and mine[0] == listed[0]
            if same and name in attrs:  # older build folders have no kernel_attrs; unset sizes are None or absent
                same = _set_fields(mine[1]) == _set_fields(listed[1])
            if not same:
                raise ArtifactError(f"{self.path}: the manifest's signature of kernel {name!r} is not the binary's "
                                    f"(edited manifest?): manifest {listed}, binary {mine}; {self._rebuild}")

    def build_all(self) -> None:
        """Build every kernel of the module in one build (cheaper than one build per kernel)."""
        with _lock:
            missing = [n for n in self.entry["kernels"] if n not in self.kernels]
            if missing:
                self._check_signatures(self._spirv, missing)
                built = self._build(self._spirv, None)
                for name in missing:
                    self.kernels[name] = self._kernel_from(built, name)

    def _build(self, spirv: bytes, kernel: str | None):
        """A built SYCL program for this context and device, shared by every module with the same binary (e.g. the
        emulation variants shipped under several targets). Called with _lock held."""
        key = (self.queue.sycl_context, self.queue.sycl_device, self.entry["sha256"], kernel)
        program = _built.get(key)
        if program is None:
            try:
                program = program_cache.load_or_build(self.queue, spirv, "",
                                                      lambda: _create_from_spirv(self.queue, spirv, ""),
                                                      kernel or next(iter(self.entry["kernels"])))
            except ConfigError:
                raise
            except Exception as exc:  # dpctl raises SyclProgramCompilationError without the log on some backends
                which = f"kernel {kernel!r} of " if kernel else ""
                reason = str(exc).strip() or "the device compiler gave no message"
                raise ArtifactError(f"building {which}{self.path} (module {self.name}, target {self.target}) for "
                                    f"{self.queue.sycl_device.name!r} failed: {type(exc).__name__}: {reason}") from exc
            _built[key] = program
        return program

    def _kernel_from(self, program, name: str) -> Kernel:
        if not program.has_sycl_kernel(name):
            raise ArtifactError(f"{self.path}: kernel {name!r} listed in the manifest is missing from the built "
                                f"program; {self._rebuild}")
        params = tuple(Param(p["name"], p["type"], p["space"], bool(p.get("const", False)), p.get("signed"))
                       for p in self.entry["kernels"][name])
        attrs = self.entry.get("kernel_attrs", {}).get(name) or {}
        return Kernel(name, self, params, program.get_sycl_kernel(name), attrs)

    @classmethod
    def from_source(cls, source: str, *, options=(), queue: dpctl.SyclQueue | None = None) -> "Module":
        """Compile OpenCL C `source` for the queue's device (its xe2rt target) with clang options `options`, cached
        on disk by source, options, device, driver and compiler (xe2rt._compile)."""
        from . import _compile  # runs the compiler only here: an import of xe2rt never needs it
        queue = default_queue(queue)
        target = targets.resolve(queue.sycl_device)
        options = _compile.clang_options(options)
        folder = _compile.cached_build(source, options, queue.sycl_device, target)
        try:
            return load(folder, queue=queue, target=target)
        except ArtifactError:  # a damaged cache entry (its binary no longer matches its manifest): build it again
            shutil.rmtree(folder, ignore_errors=True)
            folder = _compile.cached_build(source, options, queue.sycl_device, target)
            return load(folder, queue=queue, target=target)


_lock = threading.RLock()
_manifests: dict = {}  # folder -> (mtime_ns, manifest)
_modules: dict = {}  # (context, device, folder, target, module) -> Module
_built: dict = {}  # (context, device, binary sha256, kernel or None) -> SyclProgram
generation = 0  # bumped by clear(), so caches keyed on top of these (ops.common, fastcall) can tell


def _set_fields(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if v is not None}


def clear(programs: bool = False) -> None:
    """Forget every loaded manifest and module and the launcher's per-kernel verdicts (tests use it after swapping
    XE2RT_KERNEL_DIR). Caches keyed on top of these (ops.common, fastcall) see `generation` move. Built programs are
    keyed by their binary's sha256, so they stay valid and are kept (a rebuilt or edited binary has another sha256
    and is built afresh); `programs=True` drops them too, so that every kernel is compiled again on first use."""
    global generation
    with _lock:
        generation += 1
        _manifests.clear()
        _modules.clear()
        if programs:
            _built.clear()
        launch.clear()


def default_queue(queue: dpctl.SyclQueue | None) -> dpctl.SyclQueue:
    """`queue`, or the queue dpnp itself uses for the default device (so arrays made without sycl_queue= match)."""
    if queue is None:
        return dpctl.get_device_cached_queue(dpctl.select_default_device())
    if not isinstance(queue, dpctl.SyclQueue):
        raise InputTypeError(f"queue must be a dpctl.SyclQueue, got {type(queue).__name__}")
    return queue


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    try:
        mtime = path.stat().st_mtime_ns
    except (FileNotFoundError, NotADirectoryError):  # a file passed as the folder: NotADirectoryError
        if folder.is_file():
            raise ArtifactError(f"{folder} is a file; a build folder (with manifest.json) is expected") from None
        raise ArtifactError(f"{folder} has no manifest.json (not a build folder: python -m xe2rt build ... "
                            f"-o {folder})") from None
    cached = _manifests.get(folder)
    if cached is None or cached[0] != mtime:
        try:
            manifest = json.loads(path.read_text())
        except ValueError as exc:
            raise ArtifactError(f"{path} is not valid JSON ({exc}); {rebuild_hint(folder, {})}") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("artifacts"), dict):
            raise ArtifactError(f"{path} has no 'artifacts' table; {rebuild_hint(folder, {})}")
        for key, entry in manifest["artifacts"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) \
                    or not isinstance(entry.get("kernels"), dict):
                raise ArtifactError(f"{path}: entry {key!r} is malformed (each binary's entry needs 'sha256' and a "
                                    f"'kernels' table); {rebuild_hint(folder, manifest)}")
        cached = _manifests[folder] = (mtime, manifest)
    return cached[1]


def rebuild_hint(folder: Path, manifest: dict) -> str:
    command = manifest.get("rebuild_command") or f"python -m xe2rt build SOURCES... -o {folder}"
    return f"rebuild with: {command}"


def _choose(folder: Path, manifest: dict, target: str, module: str | None) -> str:
    """The module name to load for `target`, with errors that list what the folder has."""
    by_target: dict[str, list[str]] = {}
    for key in manifest["artifacts"]:
        t, _, file = key.partition("/")
        by_target.setdefault(t, []).append(file[:-4] if file.endswith(".spv") else file)
    if target not in by_target:
        raise ArtifactError(f"{folder} has no binaries for target {target!r}; it has targets {sorted(by_target)} "
                            f"(pass target= or set XE2RT_TARGET to one of them, or rebuild with --targets "
                            f"including {target})")
    names = sorted(by_target[target])
    if module is None:
        if len(names) != 1:
            raise InputError(f"{folder} holds modules {names} for target {target}: pass module= to choose one")
        return names[0]
    if module not in names:
        raise ArtifactError(f"{folder} has no module {module!r} for target {target}; it has {names}")
    return module


def verified_spirv(path: Path, entry: dict, hint: str) -> bytes:
    """The binary's bytes, refused unless their sha256 is the manifest's."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"missing kernel binary {path}; {hint}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.get("sha256"):
        raise ArtifactError(f"kernel binary {path} does not match its manifest: sha256 {digest[:16]}..., manifest "
                            f"says {str(entry.get('sha256'))[:16]}... (corrupted or edited); {hint}")
    return data


def load(folder, *, queue: dpctl.SyclQueue | None = None, target: str | None = None,
         module: str | None = None) -> Module:
    """The module in build folder `folder` for the queue's device: target from `target=`, else XE2RT_TARGET, else
    the device (as for the shipped kernels); `module=` names one when the folder holds several per target."""
    try:
        folder = Path(os.fspath(folder)).resolve()
    except TypeError:
        raise InputTypeError(f"load: folder must be a path (str or os.PathLike) to a build folder, got "
                             f"{type(folder).__name__} {folder!r:.40}") from None
    queue = default_queue(queue)
    chosen = targets.resolve(queue.sycl_device, target)
    key = (queue.sycl_context, queue.sycl_device, folder, chosen, module)
    loaded = _modules.get(key)
    if loaded is not None:
        try:  # a folder rebuilt since (its manifest rewritten) is loaded afresh
            if (folder / "manifest.json").stat().st_mtime_ns == loaded.manifest_mtime:
                return loaded
        except FileNotFoundError:
            pass
    with _lock:
        manifest = read_manifest(folder)
        name = _choose(folder, manifest, chosen, module)
        entry = manifest["artifacts"][f"{chosen}/{name}.spv"]
        # a cpu binary built with one of targets.HOST_ISA_CONSTANTS = 1 (CPU_AVX512_VNNI, CPU_AVX2) executes those x86
        # instructions: loaded only where the host has them (elsewhere the CPU runtime cannot compile it)
        flag = targets.missing_host_isa(queue.sycl_device, entry.get("constants", {}))
        if flag:
            constant = next(c for c, f in targets.HOST_ISA_CONSTANTS.items() if f == flag)
            raise TargetError(f"{folder}: module {name!r} for {chosen} uses {targets.HOST_ISA_NAMES[flag]} "
                              f"instructions (constant {constant} = 1), which {queue.sycl_device.name!r} cannot run "
                              f"(it needs a CPU device on a host with {flag}, CL_CONFIG_CPU_TARGET_ARCH unset)")
        hint = rebuild_hint(folder, manifest)
        spirv = verified_spirv(folder / chosen / f"{name}.spv", entry, hint)
        loaded = _modules[key] = Module(folder, name, chosen, entry, spirv, queue, hint)
        loaded.manifest_mtime = _manifests[folder][0]
    return loaded
