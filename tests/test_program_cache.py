"""Built programs kept on disk for the CPU device (xe2rt.program_cache): stored after a build, loaded by the next
process without compiling, the same results bit for bit as a build from SPIR-V; damaged files and unwritable
folders fall back to building, and XE2RT_PROGRAM_CACHE=0 turns it off."""
import ast
import ctypes
import os
import subprocess
import sys
import time
import warnings

import pytest

import xe2rt
from xe2rt import _compat, config, program_cache

# One clean process: the op's programs built from SPIR-V (the cache off), then through the cache, then again after
# the files were damaged in three ways. Prints one line per step: stats, files, output digest.
SCRIPT = r'''
import gc, hashlib, os, sys
import numpy as np, dpctl, dpnp
from pathlib import Path
import xe2rt
from xe2rt import module, program_cache

q = dpctl.SyclQueue("opencl:cpu")
rng = np.random.default_rng(5)
x = dpnp.asarray(rng.standard_normal((3, 4096)).astype(np.float16), sycl_queue=q)
w = dpnp.asarray(rng.standard_normal(4096).astype(np.float16), sycl_queue=q)
folder = Path(os.environ["XE2RT_CACHE_DIR"]) / "programs"

def step(name):
    module.clear(programs=True)
    gc.collect()  # the previous step's programs freed (a loaded one: the bundle xe2rt._compat allocated)
    before = dict(program_cache.stats)
    out = dpnp.asnumpy(xe2rt.rms_norm(x, w, eps=1e-6, target="cpu"))
    delta = {k: program_cache.stats[k] - before[k] for k in before}
    files = sorted(folder.glob("*.bin")) if folder.exists() else []
    print(name, delta["hits"], delta["stores"], delta["rejected"], len(files),
          hashlib.sha256(out.tobytes()).hexdigest(), flush=True)
    return files

os.environ["XE2RT_PROGRAM_CACHE"] = "0"
step("off")
del os.environ["XE2RT_PROGRAM_CACHE"]
files = step("store")
step("load")
for f in files:  # a byte changed: the digest no longer matches
    data = bytearray(f.read_bytes()); data[len(data) // 2] ^= 0xFF; f.write_bytes(bytes(data))
step("altered")
for f in files:  # cut short
    f.write_bytes(f.read_bytes()[:20])
step("short")
for f in files:  # a whole file the runtime refuses: the digest right, the binary not one
    body = b"\x7fELF" + bytes(4000)
    f.write_bytes(hashlib.sha256(body).digest() + body)
step("refused")
step("load again")
'''


@pytest.fixture
def cpu_cache(queue):
    if not program_cache.enabled(queue):
        pytest.skip("the disk cache needs the OpenCL CPU device and the pinned dpctl's libsycl internals "
                    "(xe2rt._compat); without them every program is built from SPIR-V")


def test_programs_are_kept_loaded_and_rebuilt_when_damaged(cpu_cache, tmp_path):
    env = dict(os.environ, XE2RT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("XE2RT_PROGRAM_CACHE", None)
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {}
    for line in run.stdout.splitlines():
        *name, hits, stores, rejected, files, digest = line.split()
        rows[" ".join(name)] = (int(hits), int(stores), int(rejected), int(files), digest)
    assert list(rows) == ["off", "store", "load", "altered", "short", "refused", "load again"], run.stdout
    kernels = rows["store"][1]
    assert rows["off"][:4] == (0, 0, 0, 0), rows["off"]  # nothing read or written with XE2RT_PROGRAM_CACHE=0
    assert kernels >= 1 and rows["store"][:4] == (0, kernels, 0, kernels), rows["store"]
    assert rows["load"][:4] == (kernels, 0, 0, kernels), rows["load"]
    for damaged in ("altered", "short", "refused"):  # each file refused, removed, built again and stored again
        assert rows[damaged][:4] == (0, kernels, kernels, kernels), (damaged, rows[damaged])
    assert rows["load again"][:4] == (kernels, 0, 0, kernels), rows["load again"]
    # the same output bit for bit, whichever way the program came
    assert len({row[4] for row in rows.values()}) == 1, rows


def test_the_cache_key_covers_the_binary_the_device_and_the_cpu_runtime_settings(queue, cpu_cache, monkeypatch):
    base = program_cache.key(queue, b"spirv", "")
    assert program_cache.key(queue, b"spirv", "") == base
    assert program_cache.key(queue, b"spirv!", "") != base
    assert program_cache.key(queue, b"spirv", "-cl-fast-relaxed-math") != base
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "corei7-avx")
    assert program_cache.key(queue, b"spirv", "") != base


def test_an_unwritable_folder_warns_once_and_builds(queue, cpu_cache, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(blocker))
    monkeypatch.setattr(program_cache, "_warned", set())
    built = []
    with pytest.warns(RuntimeWarning, match=r"not keeping built programs in .*a_file/programs: .*XE2RT_CACHE_DIR"):
        assert program_cache.load_or_build(queue, b"x", "", lambda: built.append(1) or "program", "k") == "program"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        assert program_cache.load_or_build(queue, b"x", "", lambda: "again", "k") == "again"


def test_a_bad_switch_is_named(queue, monkeypatch):
    monkeypatch.setenv("XE2RT_PROGRAM_CACHE", "yes")
    with pytest.raises(xe2rt.ConfigError, match=r"XE2RT_PROGRAM_CACHE='yes': use 0 to build every program"):
        config.program_cache_enabled()


def test_pinned_runtime_has_what_the_cache_needs():
    """libsycl's context / device getNative and make_kernel_bundle, and dpctl's SyclProgram_Make (xe2rt._compat):
    present in the pinned versions (on Linux), so the cache is not silently off there."""
    assert _compat.native_programs_available() == (_compat.PINNED_VERSIONS and sys.platform.startswith("linux"))


def test_sub_device_queues_load_programs_made_for_every_device_of_their_context(queue, cpu_cache, tmp_path,
                                                                                 monkeypatch):
    """The queues of xe2rt.parallel.local_queues share one context of two sub-devices. A program made from a binary
    for one of them only made libsycl abort the process; it is made for every device of the context. Stored from a
    sub-device queue and loaded again in this process, the program gives the same output bit for bit."""
    import dpnp
    import numpy as np
    from xe2rt import parallel
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    qs = parallel.local_queues(2, queue.sycl_device)
    assert all(program_cache.enabled(q) for q in qs)
    spirv = (config.kernel_dir() / "cpu" / "stream_read.spv").read_bytes()
    import dpctl.program
    built = program_cache.load_or_build(qs[1], spirv, "", lambda: dpctl.program.create_program_from_spirv(
        qs[1], spirv, ""), "stream_read")
    loaded = program_cache.load_or_build(qs[1], spirv, "", lambda: pytest.fail("built again, not loaded"),
                                         "stream_read")
    assert loaded is not built and loaded.has_sycl_kernel("stream_read")
    x = dpnp.asarray(np.linspace(-1, 1, 4096, dtype=np.float32), sycl_queue=qs[1])
    outs = []
    for program in (built, loaded):
        out = dpnp.zeros(64, dtype=np.float32, sycl_queue=qs[1])
        args = [x.get_array().usm_data, out.get_array().usm_data, ctypes.c_int64(4096)]
        qs[1].submit(program.get_sycl_kernel("stream_read"), args, [64], [16]).wait()
        outs.append(dpnp.asnumpy(out))
    assert np.array_equal(outs[0], outs[1]) and outs[0].sum() != 0, outs
    assert len(list((tmp_path / "cache" / "programs").glob("*.bin"))) == 1


CONCURRENT = r'''
import os, sys, time
from pathlib import Path
import numpy as np, dpctl, dpnp, xe2rt
from xe2rt import program_cache
q = dpctl.SyclQueue("opencl:cpu")
x = dpnp.asarray(np.linspace(-2, 2, 3 * 2048, dtype=np.float16).reshape(3, 2048), sycl_queue=q)
w = dpnp.asarray(np.linspace(0.5, 1.5, 2048, dtype=np.float16), sycl_queue=q)
if len(sys.argv) > 1:  # a barrier: both processes call the op within milliseconds of each other
    ready = Path(sys.argv[1])
    (ready / str(os.getpid())).touch()
    deadline = time.monotonic() + 120
    while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.002)
out = dpnp.asnumpy(xe2rt.rms_norm(x, w, eps=1e-5, target="cpu"))
print(program_cache.stats["hits"], program_cache.stats["stores"], out.astype(np.float32).sum())
'''


def test_processes_wanting_the_same_program_at_once_build_it_once(cpu_cache, tmp_path):
    """Two processes with an empty cache want the same program at the same moment (a barrier before the op). One
    builds and stores it under the program's lock; the other waits for the lock and loads it (without the lock both
    build: the build takes far longer than the barrier's skew). The file left is whole and a third process loads
    it; the three outputs are equal."""
    env = dict(os.environ, XE2RT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("XE2RT_PROGRAM_CACHE", None)
    ready = tmp_path / "ready"
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(ready)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    counts = [tuple(map(int, out.split()[:2])) for out, _ in outs]  # (hits, stores) of each process
    programs = sum(stores for _, stores in counts)
    assert programs >= 1 and sorted(counts) == [(0, programs), (programs, 0)], counts  # built once, loaded once
    files = list((tmp_path / "cache" / "programs").glob("*"))
    assert {f.suffix for f in files} == {".bin", ".lock"}, files  # no temporary file left behind
    assert len([f for f in files if f.suffix == ".bin"]) == programs, files
    third = subprocess.run([sys.executable, "-c", CONCURRENT + "print(program_cache.stats)"], capture_output=True,
                           text=True, env=env, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]
    stats = ast.literal_eval(third.stdout.splitlines()[-1])
    assert stats["hits"] == programs and stats["stores"] == stats["rejected"] == 0, stats
    assert len({out.split()[2] for out, _ in outs} | {third.stdout.split()[2]}) == 1, (outs, third.stdout)


def test_a_lock_held_too_long_gives_way_to_a_build(queue, cpu_cache, tmp_path, monkeypatch):
    """A process that holds a program's lock past LOCK_WAIT_S (hung, or a very slow build) does not stall another:
    the other builds without the lock."""
    import fcntl
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(program_cache, "LOCK_WAIT_S", 0.3)
    spirv = b"not built: the build function below is what runs"
    path = program_cache.folder() / f"{program_cache.key(queue, spirv, '')}.lock"
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # this descriptor holds it; load_or_build opens its own
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # storing "built" fails (not a program): warned, not the point here
            assert program_cache.load_or_build(queue, spirv, "", lambda: "built", "k") == "built"
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        os.close(holder)
