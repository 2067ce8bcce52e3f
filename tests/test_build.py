"""`python -m xe2rt build`: kernels written for this test (an fp16 scalar argument, a local-memory reduction, a required
sub-group size, several kernels in one module, a module of two sources) built from the command line for bmg, lnl and
cpu; the manifest's signatures read from SPIR-V, field by field; compile errors, a missing spec file, prebuilt SPIR-V,
spec variants and the ocloc report. The cpu and bmg binaries run on the CPU device through the shipped loader
(XE2RT_KERNEL_DIR) against numpy."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xe2rt import artifacts, launch
from xe2rt.__main__ import main
from xe2rt.build import reflect
from xe2rt.errors import BuildError

from conftest import to_device

REPO = Path(__file__).resolve().parent.parent

KERNELS = """#pragma OPENCL EXTENSION cl_khr_fp16 : enable
// y = a * x + y in half precision: a half scalar argument.
__kernel void axpy_h(__global half* y, const __global half* restrict x, const half a, const uint n) {
    uint i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}

// One partial sum per work-group of 64 through local memory (a tree).
__attribute__((reqd_work_group_size(64, 1, 1)))
__kernel void group_sum(const __global float* x, __global float* sums, __local float* scratch, int n) {
    int lid = get_local_id(0), gid = get_global_id(0);
    scratch[lid] = gid < n ? x[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) sums[get_group_id(0)] = scratch[0];
}

// Sums of 16 ints by one sub-group of a size fixed at 16; lane 0 records the size it ran with.
__attribute__((intel_reqd_sub_group_size(16)))
__kernel void sg_sum(const __global int* x, __global int* sums, __global uint* sizes) {
    int v = sub_group_reduce_add(x[get_global_id(0)]);
    uint sg = get_group_id(0) * get_num_sub_groups() + get_sub_group_id();
    if (get_sub_group_local_id() == 0) {
        sums[sg] = v;
        sizes[sg] = get_sub_group_size();
    }
}
"""

SCALE = """#include "scale.h"
__kernel void scale_u8(const __global uchar* q, __global float* out, float step) {
    size_t i = get_global_id(0);
    out[i] = dequant(q[i], step);
}
"""
SCALE_H = "static inline float dequant(uchar q, float step) { return ((int)q - ZERO) * step; }\n"
SHIFT = """__kernel void shift_l(__global long* v, const ulong by) {
    size_t i = get_global_id(0);
    v[i] = v[i] << by;
}
"""


def xe2rt_build(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("XE2RT_TARGET", "XE2RT_KERNEL_DIR")}
    # The xe2rt of this checkout, whatever folder the command runs in.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "xe2rt", "build", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.fixture
def cli(monkeypatch, capsys):
    """The same command in this process (importing xe2rt in a subprocess costs seconds): (exit code, stderr)."""
    def run(*args, cwd):
        monkeypatch.chdir(cwd)
        code = main(["build", *map(str, args)])
        return code, capsys.readouterr().err
    return run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    (src / "mykernels.cl").write_text(KERNELS)
    out = src / "out"
    proc = xe2rt_build("mykernels.cl", "-o", out, "--targets", "bmg,lnl,cpu", cwd=src)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "manifest.json").read_text())


def test_layout_hashes_and_tools(built):
    out, manifest = built
    assert sorted(manifest["artifacts"]) == ["bmg/mykernels.spv", "cpu/mykernels.spv", "lnl/mykernels.spv"]
    assert set(manifest["compilers"]) == {"clang-15", "llvm-spirv-15", "spirv-val"}
    assert all("15." in manifest["compilers"][t] for t in ("clang-15", "llvm-spirv-15"))
    assert manifest["rebuild_command"].startswith("python -m xe2rt build mykernels.cl -o ")
    for key, entry in manifest["artifacts"].items():
        data = (out / key).read_bytes()
        import hashlib
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        target = key.split("/")[0]
        assert entry["target"] == target and entry["family"] == "mykernels" and entry["source"] == "mykernels.cl"
        assert f"-DXE2RT_TARGET_{target.upper()}=1" in entry["build_options"]["clang"]
        assert entry["constants"] == {} and "aot" not in entry
        assert list(entry["kernels"]) == ["axpy_h", "group_sum", "sg_sum"]


def param(name, type_, space, const, kind, storage_class, bits, signed):
    return {"name": name, "named": True, "type": type_, "space": space, "const": const, "kind": kind,
            "storage_class": storage_class, "bits": bits, "vector": 1, "signed": signed}


EXPECTED = {
    "axpy_h": [param("y", "half", "global", False, "buffer", "CrossWorkgroup", 16, None),
               param("x", "half", "global", True, "buffer", "CrossWorkgroup", 16, None),
               # by-value arguments are never const in SPIR-V (clang drops the qualifier): only pointees are
               param("a", "half", "scalar", False, "scalar", None, 16, None),
               param("n", "uint", "scalar", False, "scalar", None, 32, False)],
    "group_sum": [param("x", "float", "global", True, "buffer", "CrossWorkgroup", 32, None),
                  param("sums", "float", "global", False, "buffer", "CrossWorkgroup", 32, None),
                  param("scratch", "float", "local", False, "local", "Workgroup", 32, None),
                  param("n", "int", "scalar", False, "scalar", None, 32, True)],
    "sg_sum": [param("x", "int", "global", True, "buffer", "CrossWorkgroup", 32, True),
               param("sums", "int", "global", False, "buffer", "CrossWorkgroup", 32, True),
               param("sizes", "uint", "global", False, "buffer", "CrossWorkgroup", 32, False)],
}
ATTRS = {"axpy_h": (None, None), "group_sum": ([64, 1, 1], None), "sg_sum": (None, 16)}


@pytest.mark.parametrize("target", ["bmg", "lnl", "cpu"])
def test_signatures_field_by_field(built, target):
    entry = built[1]["artifacts"][f"{target}/mykernels.spv"]
    for kernel, expected in EXPECTED.items():
        got = entry["kernels"][kernel]
        assert len(got) == len(expected), kernel
        for g, e in zip(got, expected):
            for field, value in e.items():
                assert g[field] == value, (kernel, g["name"], field, g[field], value)
        attrs = entry["kernel_attrs"][kernel]
        assert (attrs["reqd_work_group_size"], attrs["reqd_sub_group_size"]) == ATTRS[kernel]
    assert entry["kernels"]["axpy_h"][1]["qualifiers"] == ["restrict", "const"]


def test_reader_on_the_shipped_binary_without_names(built):
    """The shipped-style binary has no argument names; the reader still gives kinds, types and attributes."""
    r = reflect.reflect((built[0] / "bmg/mykernels.spv").read_bytes())
    assert [p["name"] for p in r["kernels"]["axpy_h"]] == ["arg0", "arg1", "arg2", "arg3"]
    assert [(p["type"], p["space"], p["signed"]) for p in r["kernels"]["axpy_h"]] == \
        [("half", "global", None), ("half", "global", None), ("half", "scalar", None), ("int", "scalar", None)]
    assert r["kernel_attrs"]["sg_sum"]["reqd_sub_group_size"] == 16
    with pytest.raises(reflect.SpirvError, match="magic"):
        reflect.reflect(b"\0" * 20)


@pytest.fixture
def kernel_dir(built, monkeypatch):
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(built[0]))
    artifacts.clear_caches()
    yield built[0]
    monkeypatch.delenv("XE2RT_KERNEL_DIR")
    artifacts.clear_caches()


@pytest.mark.parametrize("target", ["cpu", "bmg"])
def test_runs_on_the_cpu_device(queue, kernel_dir, target, rng):
    program = artifacts.load(queue, target, "mykernels")
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    groups = -(-n // 64)
    sums = to_device(np.zeros(groups, np.float32), queue)
    launch.launch(program.kernel("group_sum"), [to_device(x, queue), sums, launch.LocalMemory(64 * 4), n], groups * 64, 64, queue).wait()
    ref = np.add.reduceat(np.pad(x.astype(np.float64), (0, groups * 64 - n)), np.arange(0, groups * 64, 64))
    # A 6-level tree of float32 additions: |error| <= 6 * 2^-24 * sum |x| per group.
    bound = 6 * 2.0 ** -24 * np.add.reduceat(np.abs(np.pad(x, (0, groups * 64 - n))).astype(np.float64),
                                             np.arange(0, groups * 64, 64))
    assert np.all(np.abs(sums.asnumpy() - ref) <= bound + 1e-30)

    xi = rng.integers(-1000, 1000, 256).astype(np.int32)
    out = to_device(np.zeros(16, np.int32), queue)
    sizes = to_device(np.zeros(16, np.uint32), queue)
    launch.launch(program.kernel("sg_sum"), [to_device(xi, queue), out, sizes], 256, 64, queue).wait()
    np.testing.assert_array_equal(sizes.asnumpy(), 16)
    np.testing.assert_array_equal(out.asnumpy(), xi.reshape(16, 16).sum(axis=1))


def test_compile_error_names_file_and_line_and_writes_nothing(tmp_path, cli):
    (tmp_path / "bad.cl").write_text("__kernel void k(__global float* y) {\n    y[0] = 1.0f;\n"
                                     "    y[1] = undeclared_thing;\n}\n")
    proc = xe2rt_build("bad.cl", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 2
    assert "bad.cl:3:12: error: use of undeclared identifier 'undeclared_thing'" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())
    # An earlier build in OUTDIR stays as it was.
    (tmp_path / "good.cl").write_text("__kernel void k(__global float* y) { y[0] = 1.0f; }\n")
    assert cli("good.cl", "-o", "out", "--targets", "cpu", cwd=tmp_path)[0] == 0
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    code, err = cli("bad.cl", "-o", "out", "--targets", "cpu", cwd=tmp_path)
    assert code == 2 and "bad.cl:3:12: error" in err
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before


def test_half_without_the_fp16_pragma_gets_the_fix(tmp_path, cli):
    (tmp_path / "h.cl").write_text("__kernel void k(__global half* y, half a) {\n    y[0] = a;\n}\n")
    code, err = cli("h.cl", "-o", "out", "--targets", "cpu", cwd=tmp_path)
    assert code == 2 and "h.cl:1:" in err and "'__private half' is not allowed" in err
    assert "hint: OpenCL C 2.0 allows half scalars" in err and "cl_khr_fp16 : enable" in err
    assert not (tmp_path / "out").exists()
    # other compile errors get no such hint
    (tmp_path / "f.cl").write_text("__kernel void k(__global float* y) { y[0] = nothing; }\n")
    code, err = cli("f.cl", "-o", "out", "--targets", "cpu", cwd=tmp_path)
    assert code == 2 and "undeclared identifier 'nothing'" in err and "hint:" not in err


def test_spec_with_a_missing_file(tmp_path, cli):
    (tmp_path / "fam.toml").write_text('source = "nowhere.cl"\n[targets.cpu]\nN = 1\n')
    code, err = cli("fam.toml", "-o", "out", cwd=tmp_path)
    assert code == 2
    assert f"source 'nowhere.cl' names a missing file ({tmp_path / 'nowhere.cl'})" in err
    assert not (tmp_path / "out").exists()
    code, err = cli("absent.toml", "-o", "out", cwd=tmp_path)
    assert code == 2 and "absent.toml does not exist" in err
    # a folder named as a source, and OpenCL C in a file not ending in .cl (clang takes it for a linker input, and
    # the error was a missing .bc from llvm-spirv)
    (tmp_path / "adir").mkdir()
    code, err = cli("adir", "-o", "out", cwd=tmp_path)
    assert code == 2 and "source" in err and "names a folder, not a file" in err, err
    (tmp_path / "k.txt").write_text("__kernel void k(__global float* y) { y[0] = 1.0f; }\n")
    code, err = cli("k.txt", "-o", "out", "--targets", "cpu", cwd=tmp_path)
    assert code == 2 and "must be an OpenCL C file ending in .cl (got .txt suffix)" in err, err
    assert not (tmp_path / "out").exists()


def test_spec_with_variants_includes_and_two_sources(tmp_path, cli, queue, monkeypatch):
    """A spec of two sources (linked) with a header, per-target constants and a variant table; both modules run."""
    (tmp_path / "src").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "src" / "scale.cl").write_text(SCALE)
    (tmp_path / "src" / "shift.cl").write_text(SHIFT)
    (tmp_path / "inc" / "scale.h").write_text(SCALE_H)
    (tmp_path / "q.toml").write_text(
        'sources = ["src/scale.cl", "src/shift.cl"]\ninclude_dirs = ["inc"]\n'
        '[constants]\nZERO = 8\n[targets.cpu]\n[targets.bmg]\nZERO = 7\n'
        '[variants.q_zero0.constants]\nZERO = 0\n')
    code, err = cli("q.toml", "-o", "out", cwd=tmp_path)
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sorted(manifest["artifacts"]) == ["bmg/q.spv", "bmg/q_zero0.spv", "cpu/q.spv", "cpu/q_zero0.spv"]
    constants = {k: a["constants"] for k, a in manifest["artifacts"].items()}
    assert constants == {"bmg/q.spv": {"ZERO": 7}, "cpu/q.spv": {"ZERO": 8}, "bmg/q_zero0.spv": {"ZERO": 0},
                         "cpu/q_zero0.spv": {"ZERO": 0}}
    entry = manifest["artifacts"]["cpu/q.spv"]
    assert sorted(entry["sources_sha256"]) == ["scale.cl", "scale.h", "shift.cl"]
    assert [(p["name"], p["type"], p["signed"]) for p in entry["kernels"]["shift_l"]] == \
        [("v", "long", True), ("by", "ulong", False)]
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(tmp_path / "out"))
    artifacts.clear_caches()
    try:
        q = np.arange(0, 256, 5, dtype=np.uint8)
        for family, zero in (("q", 8), ("q_zero0", 0)):
            out = to_device(np.zeros(q.size, np.float32), queue)
            launch.launch(artifacts.load(queue, "cpu", family).kernel("scale_u8"),
                          [to_device(q, queue), out, 0.25], q.size, 1, queue).wait()
            np.testing.assert_array_equal(out.asnumpy(), (q.astype(np.float64) - zero) * 0.25)  # exact in float32
        v = to_device(np.array([1, -3, 5], np.int64), queue)
        launch.launch(artifacts.load(queue, "cpu", "q").kernel("shift_l"), [v, 4], 3, 1, queue).wait()
        np.testing.assert_array_equal(v.asnumpy(), [16, -48, 80])
    finally:
        monkeypatch.delenv("XE2RT_KERNEL_DIR")
        artifacts.clear_caches()


def test_variant_build_targets(tmp_path, cli):
    """A variant may build for fewer targets than its base (build_targets); a bad list is refused by name."""
    (tmp_path / "k.cl").write_text("__kernel void k(__global float* y) { y[0] = (float)V; }\n")
    (tmp_path / "v.toml").write_text('source = "k.cl"\n[constants]\nV = 1\n[targets.bmg]\n[targets.cpu]\n'
                                     '[variants.v_cpu]\nbuild_targets = ["cpu"]\n[variants.v_cpu.constants]\nV = 2\n')
    code, err = cli("v.toml", "-o", "out", cwd=tmp_path)
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sorted(manifest["artifacts"]) == ["bmg/v.spv", "cpu/v.spv", "cpu/v_cpu.spv"]
    assert manifest["artifacts"]["cpu/v_cpu.spv"]["constants"] == {"V": 2}
    (tmp_path / "w.toml").write_text('source = "k.cl"\n[variants.w2]\nbuild_targets = ["gpu"]\n')
    code, err = cli("w.toml", "-o", "out2", cwd=tmp_path)
    assert code != 0 and "[variants.w2] build_targets must be a non-empty list of targets from" in err, err
    assert not (tmp_path / "out2").exists()


LONG_VECTOR = """typedef uchar uchar32 __attribute__((ext_vector_type(32)));
__kernel void rev(__global const uchar* x, __global uchar* y) {
    const uchar32 v = ((__global const uchar32*)x)[get_global_id(0)];
    ((__global uchar32*)y)[get_global_id(0)] = __builtin_shufflevector(v, v, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
        21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}
"""


def test_spirv_extensions_long_vectors(tmp_path, cli, queue, monkeypatch):
    """A 32-element vector (what gemv_w4a16_avx2_q8 passes to vpmaddubsw) needs spirv_extensions =
    ["SPV_INTEL_vector_compute"]: without it llvm-spirv refuses the module; with it the manifest records the option
    and what validated it, and the CPU device runs the kernel. An extension xe2rt does not know is refused by name."""
    (tmp_path / "lv.cl").write_text(LONG_VECTOR)
    (tmp_path / "plain.toml").write_text('source = "lv.cl"\n[targets.cpu]\n')
    code, err = cli("plain.toml", "-o", "out0", cwd=tmp_path)
    assert code != 0 and "llvm-spirv-15 translating plain for target cpu failed" in err, err
    (tmp_path / "lv.toml").write_text('source = "lv.cl"\nspirv_extensions = ["SPV_INTEL_vector_compute"]\n'
                                      '[targets.cpu]\n')
    code, err = cli("lv.toml", "-o", "out", cwd=tmp_path)
    assert code == 0, err
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"]["cpu/lv.spv"]
    assert "--spirv-ext=+SPV_INTEL_vector_compute" in entry["build_options"]["llvm-spirv"]
    assert entry["build_options"]["validated"].startswith("spirv-val up to VectorAnyINTEL")
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(tmp_path / "out"))
    program = artifacts.load(queue, "cpu", "lv")
    x = np.arange(64, dtype=np.uint8)
    y = to_device(np.zeros(64, np.uint8), queue)
    launch.launch(program.kernel("rev"), [to_device(x, queue), y], 2, 1, queue).wait()
    np.testing.assert_array_equal(y.asnumpy(), x.reshape(2, 32)[:, ::-1].reshape(-1))
    (tmp_path / "bad.toml").write_text('source = "lv.cl"\nspirv_extensions = ["SPV_KHR_magic"]\n[targets.cpu]\n')
    code, err = cli("bad.toml", "-o", "out2", cwd=tmp_path)
    assert code != 0 and "spirv_extensions ['SPV_KHR_magic'] not supported; a module may ask for " \
        "['SPV_INTEL_vector_compute']" in err, err


def test_prebuilt_spirv(tmp_path, cli, built):
    """SPIR-V from elsewhere, per target or for every target: validated, reflected (no names: arg0...)."""
    spv = built[0] / "cpu" / "mykernels.spv"
    code, err = cli("--spirv", f"cpu={spv}", "--name", "pre", "-o", "out", cwd=tmp_path)
    assert code == 0, err
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"]["cpu/pre.spv"]
    assert entry["sha256"] == built[1]["artifacts"]["cpu/mykernels.spv"]["sha256"]
    assert entry["build_options"] == {"prebuilt": "mykernels.spv"}
    assert [p["type"] for p in entry["kernels"]["axpy_h"]] == ["half", "half", "half", "int"]
    assert entry["kernel_attrs"]["sg_sum"]["reqd_sub_group_size"] == 16
    code, err = cli(spv, "--targets", "bmg,lnl", "-o", "out2", cwd=tmp_path)
    assert code == 0, err
    assert sorted(json.loads((tmp_path / "out2" / "manifest.json").read_text())["artifacts"]) == \
        ["bmg/mykernels.spv", "lnl/mykernels.spv"]
    # The spec form: a target table's `spirv`, beside a target compiled from the source.
    (tmp_path / "k.cl").write_text("__kernel void k(__global float* y) { y[0] = 1.0f; }\n")
    (tmp_path / "mix.toml").write_text(f'source = "k.cl"\n[targets.bmg]\n[targets.cpu]\nspirv = "{spv}"\n')
    code, err = cli("mix.toml", "-o", "out4", cwd=tmp_path)
    assert code == 0, err
    mix = json.loads((tmp_path / "out4" / "manifest.json").read_text())["artifacts"]
    assert list(mix["bmg/mix.spv"]["kernels"]) == ["k"] and "axpy_h" in mix["cpu/mix.spv"]["kernels"]
    (tmp_path / "junk.spv").write_bytes(spv.read_bytes()[:64])
    code, err = cli("--spirv", "cpu=junk.spv", "-o", "out3", cwd=tmp_path)
    assert code == 2 and "spirv-val validating junk for target cpu failed" in err
    assert not (tmp_path / "out3").exists()


def test_bad_command_lines(tmp_path, cli, built):
    (tmp_path / "k.cl").write_text("__kernel void k(__global float* y) { y[0] = 1.0f; }\n")
    for args, message in [(["--targets", "bmg,xe3"], "--targets 'bmg,xe3': targets are a comma-separated subset"),
                          (["-D", "1X=2"], "-D '1X=2': NAME must be a C identifier"),
                          (["--spirv", "gpu=a.spv"], "--spirv 'gpu=a.spv': expected TARGET=PATH")]:
        code, err = cli("k.cl", "-o", "out", *args, cwd=tmp_path)
        assert code == 2 and message in err, err
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    code, err = cli("k.cl", "-o", "notes", cwd=tmp_path)
    assert code == 2 and "is not an xe2rt build folder" in err
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    (tmp_path / "plain").write_text("a file")  # -o inside a file: one line before compiling (a traceback before)
    code, err = cli("k.cl", "-o", "plain/out", cwd=tmp_path)
    assert code == 2 and "-o plain/out: cannot be created or replaced" in err and len(err.strip().splitlines()) == 1


def test_defines_become_constants(tmp_path, cli):
    (tmp_path / "k.cl").write_text("__kernel void k(__global int* y) { y[0] = VL; y[1] = MODE_X; }\n")
    code, err = cli("k.cl", "-o", "out", "--targets", "cpu", "-D", "VL=16", "-D", "MODE_X=3+1", cwd=tmp_path)
    assert code == 0, err
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"]["cpu/k.spv"]
    assert entry["constants"] == {"VL": 16}
    assert entry["build_options"]["clang"][-3:] == ["-DXE2RT_TARGET_CPU=1", "-DVL=16", "-DMODE_X=3+1"]


def test_aot_report(tmp_path, cli, built):
    from xe2rt.build.ocloc import find_ocloc
    try:
        find_ocloc(fetch=False)
    except BuildError as exc:  # CI fetches it (build_scripts/aot.py --check runs before the tests)
        pytest.skip(f"no Xe2-capable ocloc on this machine: {exc}")
    (tmp_path / "k.cl").write_text(KERNELS)
    code, err = cli("k.cl", "-o", "out", "--targets", "bmg", "--aot", "--no-fetch", cwd=tmp_path)
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    entry = manifest["artifacts"]["bmg/k.spv"]
    report = entry["aot"]
    assert report["device"] == "bmg" and report["ocloc"] == manifest["compilers"]["ocloc"]
    assert report["spirv_sha256"] == entry["sha256"]
    assert sorted(report["kernels"]) == ["axpy_h", "group_sum", "sg_sum"]
    sg = report["kernels"]["sg_sum"]
    assert sg["simd_size"] == 16 and sg["reqd_sub_group_size"] == 16 and sg["spill_size"] == 0
    assert report["kernels"]["group_sum"]["slm_size"] == 0  # dynamic local memory is sized at launch
    assert report["kernels"]["group_sum"]["hot_loop"]["instructions"] > 0  # the tree loop


PREFETCH_KERNEL = """
void pf_line(const __global void* p, int rw, int locality, int cache) __asm__("llvm.prefetch.p1i8");
__kernel void sum_ahead(__global const float* a, __global float* out, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (i % 16 == 0)
            pf_line(a + i + 64, 0, 3, 1); /* 4 lines ahead; past the end is allowed: prefetches never fault */
        s += a[i];
    }
    out[0] = s;
}
"""


def test_prefetch_intrinsic_is_an_instruction(tmp_path):
    """LLVM's prefetch intrinsic declared by name (decode_attention_cpu256 does) passes llvm-spirv
    (toolchain.SPIRV_OPTIONS allows llvm.prefetch), and the CPU runtime makes it the x86 instruction itself, where
    OpenCL's prefetch() is a library call (__lprefetch): read in the runtime's own x86 dump, in a fresh process
    (CL_CONFIG_DUMP_ASM is read when the runtime starts). The kernel's result is checked too."""
    (tmp_path / "pf.cl").write_text(PREFETCH_KERNEL)
    script = f"""
import numpy as np, dpctl, dpnp, xe2rt
q = dpctl.SyclQueue("opencl:cpu")
m = xe2rt.Module.from_source(open({str(tmp_path / "pf.cl")!r}).read(), queue=q)
a = dpnp.asarray(np.arange(1000, dtype=np.float32), sycl_queue=q)
out = dpnp.zeros(1, dtype=np.float32, sycl_queue=q)
m.kernel("sum_ahead")(a, out, 1000, global_size=(1,), local_size=(1,)).wait()
print(float(out.asnumpy()[0]))
"""
    env = dict(os.environ, CL_CONFIG_DUMP_ASM="True", CL_CONFIG_DUMP_FILE_NAME_PREFIX=str(tmp_path / "dump"),
               XE2RT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) == float(np.arange(1000).sum())
    dumps = [p.read_text() for p in tmp_path.glob("dump*.s")]
    assert dumps, f"the CPU runtime wrote no x86 dump: {sorted(os.listdir(tmp_path))}"
    text = "\n".join(dumps)
    assert "prefetcht0" in text and "__lprefetch" not in text
