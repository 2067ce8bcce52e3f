"""Built programs kept on disk for the OpenCL CPU device, whose runtime compiles every SPIR-V program again in every
process (about 0.3-30 s a kernel; a bmg kernel built for the CPU device's software DPAS is the slow end).

Intel's GPU drivers keep a cache of their own (Level Zero and OpenCL); Intel's OpenCL CPU runtime does not, but it
returns the x86 binary of a built program (`clGetProgramInfo(CL_PROGRAM_BINARIES)`) and builds a program from such a
binary without compiling it (`clCreateProgramWithBinary`; Intel's developer reference for the CPU runtime, "Final
Kernel Binary Save/Load"). xe2rt.module builds every program through `load_or_build`: on the CPU device it looks for
the binary first and, after a build from SPIR-V, stores it.

Key: sha256 over this format's number, the SPIR-V's bytes, the build options, the device's name and driver version,
the platform's version, the host CPU's feature flags (the runtime compiles for the host's instruction set), and every
CL_CONFIG_* variable set (they change the CPU runtime's code). A file is `<key>.bin` under `programs/` in the cache
folder (XE2RT_CACHE_DIR, default ~/.cache/xe2rt), its first 32 bytes the sha256 of the rest; it is written under a
temporary name and renamed into place, so a file is always whole. A process about to build a program holds an
exclusive lock on `<key>.lock` beside it (`fcntl.flock`, released by the kernel if the process dies) and looks for the
file again once it has the lock: processes that want the same program at once (MPI ranks of one node, test workers)
build it once, the others wait and load it. A wait longer than LOCK_WAIT_S ends in a build of its own.

A program is made from the binary for every device of the queue's context (all CPU devices: the root device, or
sub-devices of it, which run the same code). The cache never fails a build: a file that is short, altered or refused
by the runtime is removed and the program built from SPIR-V; a folder that cannot be written is skipped (a warning,
once). XE2RT_PROGRAM_CACHE=0 turns it off. Deleting the folder is always safe. Without the libsycl / dpctl internals
it needs (xe2rt._compat, checked against the pinned versions) every program is built from SPIR-V, as before.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import dpctl

from . import _compat, config

try:
    import fcntl
except ImportError:  # Windows has none: processes there may build the same program at once, as before
    fcntl = None

FORMAT = 1
CL_SUCCESS = 0
CL_PROGRAM_NUM_DEVICES, CL_PROGRAM_DEVICES = 0x1162, 0x1163
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_KERNEL_PROGRAM = 0x1194
_DIGEST = 32
LOCK_WAIT_S = 600.0  # longer than any build seen (a whole bmg W4 family for the CPU device: about 160 s)

stats = {"hits": 0, "stores": 0, "rejected": 0}  # this process's counts (tests/test_program_cache.py)
_warned: set = set()
_host_flags: str | None = None


def enabled(queue: dpctl.SyclQueue) -> bool:
    """Whether programs for `queue`'s device go through the disk cache."""
    if not config.program_cache_enabled():
        return False
    # every device of the context a CPU device: a program made from a binary is made for all of them (libsycl aborts
    # the process, an exception through the foreign call, when a program's devices are not the context's: seen with
    # a program made for one of the two sub-devices of xe2rt.parallel.local_queues' context)
    return (queue.backend == dpctl.backend_type.opencl and _compat.native_programs_available()
            and all(d.is_cpu for d in queue.sycl_context.get_devices()))


def _cpu_flags() -> str:
    global _host_flags
    if _host_flags is None:
        flags = ""
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags = " ".join(sorted(line.split(":", 1)[1].split()))
                        break
        except OSError:
            pass
        _host_flags = flags
    return _host_flags


def describe() -> str:
    """One line for `python -m xe2rt info`: the folder and what it holds, or why nothing is kept (creates nothing)."""
    try:
        if not config.program_cache_enabled():
            return "nothing (XE2RT_PROGRAM_CACHE=0)"
        path = config.program_cache_path()
    except Exception as exc:  # noqa: BLE001 - info reports a bad setting or a missing home instead of failing on it
        return f"nothing ({exc})"
    if not _compat.native_programs_available():
        return "nothing (this dpctl / libsycl is not the pinned one: every program is built from SPIR-V)"
    files = list(path.glob("*.bin")) if path.is_dir() else []
    return f"{path} ({len(files)} programs, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB)"


def key(queue: dpctl.SyclQueue, spirv: bytes, options: str) -> str:
    device = queue.sycl_device
    h = hashlib.sha256()
    parts = [str(FORMAT), hashlib.sha256(spirv).hexdigest(), options, device.name, device.driver_version,
             device.sycl_platform.version, _cpu_flags()]
    parts += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("CL_CONFIG_")]
    for part in parts:
        h.update(part.encode("utf-8", "replace") + b"\0")
    return h.hexdigest()


def folder() -> Path | None:
    """The cache's `programs` folder, or None (with a warning, once per folder) when it cannot be written."""
    try:
        path, problem = config.program_cache_dir()
    except RuntimeError as exc:  # Path.home() without a home
        path, problem = Path("~/.cache/xe2rt/programs"), str(exc)
    if problem:
        _warn_once(str(path), f"xe2rt: not keeping built programs in {path}: {problem} (set XE2RT_CACHE_DIR to a "
                              f"writable folder, or XE2RT_PROGRAM_CACHE=0)")
        return None
    return path


def load_or_build(queue: dpctl.SyclQueue, spirv: bytes, options: str, build, kernel_name: str):
    """The program for `spirv` on `queue`'s device: from the cache when it holds it, else `build()` (a
    dpctl.program.SyclProgram built from the SPIR-V), stored for the next process. `kernel_name` is one kernel of the
    program (the way to its native handle)."""
    if not enabled(queue):
        return build()
    where = folder()
    if where is None:
        return build()
    path = where / f"{key(queue, spirv, options)}.bin"
    program = _load_or_none(path, queue, options)
    if program is None:
        with _build_lock(path):
            program = _load_or_none(path, queue, options)  # stored meanwhile by the process that held the lock?
            if program is None:
                return _build_and_store(path, build, kernel_name, queue)
    stats["hits"] += 1
    return program


def _build_and_store(path: Path, build, kernel_name: str, queue: dpctl.SyclQueue):
    program = build()
    try:
        binary = _binary_of(program, kernel_name, queue)
        if binary:
            _store(path, binary)
    except Exception as exc:  # noqa: BLE001
        _warn_once(str(path.parent), f"xe2rt: could not keep a built program in {path.parent} "
                                     f"({type(exc).__name__}: {exc})")
    return program


def _load_or_none(path: Path, queue: dpctl.SyclQueue, options: str):
    try:
        return _load(path, queue, options)
    except Exception as exc:  # noqa: BLE001 - the cache only ever saves a build; it never fails one
        _warn_once(str(path), f"xe2rt: could not load the built program {path} ({type(exc).__name__}: {exc}); "
                              f"building it from SPIR-V")
        return None


@contextmanager
def _build_lock(path: Path):
    """Hold the exclusive lock of the program at `path`. Without fcntl, when the lock file cannot be opened, or after
    LOCK_WAIT_S of waiting: no lock, and the build goes ahead."""
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            pass
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # held by another process: wait for it, up to the deadline
                if time.monotonic() <= deadline:
                    time.sleep(0.05)
                    continue
            except OSError:  # no locks on this file system (some network ones)
                pass
            os.close(fd)  # go ahead without the lock
            fd = None
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _load(path: Path, queue: dpctl.SyclQueue, options: str):
    try:
        data = path.read_bytes()
    except OSError:
        return None
    binary = data[_DIGEST:]
    if len(data) <= _DIGEST or hashlib.sha256(binary).digest() != data[:_DIGEST]:
        return _reject(path)
    from ._opencl import opencl
    cl = opencl()
    handles = _compat.native_opencl_context_devices(queue)
    if handles is None:
        return None
    context, devices = handles
    try:
        n = len(devices)
        devs = (ctypes.c_void_p * n)(*devices)
        sizes = (ctypes.c_size_t * n)(*[len(binary)] * n)
        blobs = (ctypes.c_char_p * n)(*[binary] * n)  # the CPU devices of one context (sub-devices) share the code
        status, err = (ctypes.c_int * n)(), ctypes.c_int(0)
        program = cl.program_with_binary(context, n, devs, sizes, blobs, status, ctypes.byref(err))
        if err.value != CL_SUCCESS or any(s != CL_SUCCESS for s in status) or not program:
            return _reject(path)
        if cl.build_program(program, n, devs, options.encode(), None, None) != CL_SUCCESS:
            cl.release_program(program)
            return _reject(path)
        return _compat.program_from_native_opencl(program, queue)
    finally:
        cl.release_context(context)


def _reject(path: Path):
    stats["rejected"] += 1
    try:
        path.unlink()
    except OSError:
        pass
    return None


def _binary_of(program, kernel_name: str, queue: dpctl.SyclQueue) -> bytes | None:
    """The binary of a built program for the queue's device (None when the runtime gives none)."""
    from ._opencl import opencl
    cl = opencl()
    kernel = _compat.native_opencl_kernel(program.get_sycl_kernel(kernel_name))
    if not kernel:
        return None
    try:
        native = ctypes.c_void_p()
        if cl.kernel_info(kernel, CL_KERNEL_PROGRAM, ctypes.sizeof(native), ctypes.byref(native), None) != CL_SUCCESS:
            return None
        count = ctypes.c_uint(0)
        if cl.program_info(native, CL_PROGRAM_NUM_DEVICES, ctypes.sizeof(count), ctypes.byref(count), None) \
                != CL_SUCCESS or not count.value:
            return None
        n = count.value
        devices, sizes = (ctypes.c_void_p * n)(), (ctypes.c_size_t * n)()
        if cl.program_info(native, CL_PROGRAM_DEVICES, ctypes.sizeof(devices), devices, None) != CL_SUCCESS or \
                cl.program_info(native, CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(sizes), sizes, None) != CL_SUCCESS:
            return None
        mine = _compat.native_opencl_device(queue)
        index = next((i for i in range(n) if devices[i] == mine), None)
        if index is None or not sizes[index]:
            return None  # not built for the queue's device
        # a buffer for every device: the CPU runtime refuses a NULL entry (CL_INVALID_VALUE), which the
        # specification allows
        buffers = [ctypes.create_string_buffer(max(sizes[i], 1)) for i in range(n)]
        pointers = (ctypes.c_void_p * n)(*[ctypes.addressof(b) for b in buffers])
        if cl.program_info(native, CL_PROGRAM_BINARIES, ctypes.sizeof(pointers), pointers, None) != CL_SUCCESS:
            return None
        return buffers[index].raw[:sizes[index]]
    finally:
        cl.release_kernel(kernel)


def _store(path: Path, binary: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".bin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(binary).digest() + binary)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    stats["stores"] += 1
