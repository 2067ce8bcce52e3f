"""The public loader on kernels written for this test (none of them from spirv_src/): an fp16 scalar argument, a
local-memory reduction, a required sub-group size and a required work-group size, all in one module, built for bmg,
lnl and cpu, loaded with xe2rt.load and launched on dpnp arrays; every wrong launch refused before anything is
queued; damaged binaries refused; Module.from_source cached on disk across processes.

References are float64 numpy on the fp16/fp32 inputs. Tolerances: axpy in half rounds a*x (unless fused) and the
sum, each to half (unit roundoff u = 2^-11): |err| <= u |a x| + u (|ref| + u |a x|), plus 2^-24 for subnormals;
checked per element (near cancellation a relative tolerance on the result would be wrong). block_sum adds 64 fp32 values in a tree of depth 6: |err| <= 6 * 2^-24 * sum|x|
(rtol 1e-6 for the non-negative inputs used). subgroup_max and the scaled copy are exact.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt import _compile
from xe2rt.errors import BuildError

from conftest import to_device

SOURCE = r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable

__kernel void axpy_half(__global half* y, __global const half* x, half a, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}

__kernel void block_sum(__global const float* x, __global float* partial, __local float* scratch, uint n) {
    uint lid = get_local_id(0), gid = get_global_id(0), size = get_local_size(0);
    scratch[lid] = gid < n ? x[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = size / 2; s > 0; s /= 2) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = scratch[0];
}

__attribute__((intel_reqd_sub_group_size(16)))
__kernel void subgroup_max(__global const float* x, __global float* out) {
    float v = sub_group_reduce_max(x[get_global_id(0)]);
    if (get_sub_group_local_id() == 0) out[get_global_id(0) / 16] = v;
}

__attribute__((reqd_work_group_size(32, 1, 1)))
__kernel void scale_copy(__global float* out, __global const float* x, float scale) {
    out[get_global_id(0)] = scale * x[get_global_id(0)];
}
"""
NAMES = ["axpy_half", "block_sum", "subgroup_max", "scale_copy"]


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    return _compile.build_folder(SOURCE, tmp_path_factory.mktemp("own") / "out", targets=("bmg", "lnl", "cpu"),
                                 name="own")


@pytest.fixture
def mod(outdir, queue):
    return xe2rt.load(outdir, queue=queue, target="cpu")


def axpy_case(mod, queue, target=None):
    x = np.linspace(-3, 3, 1000).astype(np.float16)
    y = np.linspace(1, 2, 1000).astype(np.float16)
    a = 1.7  # not a half value: the kernel must get half(1.7), not a double's or a float's bits
    ref = np.float64(np.float16(a)) * x.astype(np.float64) + y.astype(np.float64)
    dy = to_device(y, queue)
    event = mod.kernel("axpy_half")(dy, to_device(x, queue), a, 1000, global_size=1024, local_size=64)
    assert isinstance(event, dpctl.SyclEvent)
    ax = np.abs(np.float64(np.float16(a)) * x.astype(np.float64))
    u = 2.0**-11
    bound = u * ax + u * (np.abs(ref) + u * ax) + 2.0**-24
    err = np.abs(dy.asnumpy().astype(np.float64) - ref)
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.2f}"


def test_manifest_lists_every_kernel_per_target(outdir):
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert sorted(manifest["artifacts"]) == ["bmg/own.spv", "cpu/own.spv", "lnl/own.spv"]
    entry = manifest["artifacts"]["cpu/own.spv"]
    assert sorted(entry["kernels"]) == sorted(NAMES)
    assert [p["type"] for p in entry["kernels"]["axpy_half"]] == ["half", "half", "half", "int"]
    assert entry["kernel_attrs"]["subgroup_max"]["reqd_sub_group_size"] == 16
    assert entry["kernel_attrs"]["scale_copy"]["reqd_work_group_size"] == [32, 1, 1]


def test_fp16_scalar_argument(mod, queue):
    assert mod.target == "cpu"
    axpy_case(mod, queue)
    # numpy scalars convert by the signature too
    dy = to_device(np.zeros(64, np.float16), queue)
    mod.kernel("axpy_half")(dy, to_device(np.ones(64, np.float16), queue), np.float16(-2.5), np.int64(64),
                            global_size=64, local_size=64)
    assert (dy.asnumpy() == -2.5).all()


def test_float_scalar_is_float_not_double(mod, queue):
    x = np.arange(64, dtype=np.float32) + 0.3
    out = dpnp.empty(64, dtype=np.float32, sycl_queue=queue)
    mod.kernel("scale_copy")(out, to_device(x, queue), 0.1, global_size=64)  # local size from reqd_work_group_size
    np.testing.assert_array_equal(out.asnumpy(), np.float32(0.1) * x)


def test_local_memory_reduction(mod, queue, rng):
    x = rng.random(64 * 37 - 5).astype(np.float32)  # an odd size: the last group is partial
    groups = 37
    partial = dpnp.empty(groups, dtype=np.float32, sycl_queue=queue)
    mod.kernel("block_sum")(to_device(x, queue), partial, xe2rt.LocalMemory(64 * 4), x.size,
                            global_size=64 * groups, local_size=64)
    ref = np.add.reduceat(x.astype(np.float64), np.arange(0, x.size, 64))
    np.testing.assert_allclose(partial.asnumpy(), ref, rtol=1e-6)


def test_required_sub_group_size(mod, queue, rng):
    kernel = mod.kernel("subgroup_max")
    assert kernel.reqd_sub_group_size == 16
    x = rng.standard_normal(256).astype(np.float32)
    out = dpnp.empty(16, dtype=np.float32, sycl_queue=queue)
    kernel(to_device(x, queue), out, global_size=256, local_size=64)
    np.testing.assert_array_equal(out.asnumpy(), x.reshape(16, 16).max(axis=1))


def test_two_kernels_ordered_without_waits(mod, queue, rng):
    """axpy then block_sum reading axpy's output, queued back to back: dpnp's order manager orders them."""
    x = rng.random(256).astype(np.float16)
    y = dpnp.zeros(256, dtype=np.float16, sycl_queue=queue)
    mod.kernel("axpy_half")(y, to_device(x, queue), 2.0, 256, global_size=256, local_size=64)
    y32 = y.astype(np.float32)  # a dpnp op between the two kernels
    partial = dpnp.empty(4, dtype=np.float32, sycl_queue=queue)
    mod.kernel("block_sum")(y32, partial, xe2rt.LocalMemory(256), 256, global_size=256, local_size=64)
    ref = (2 * x.astype(np.float64)).reshape(4, 64).sum(axis=1)
    np.testing.assert_allclose(partial.asnumpy(), ref, rtol=1e-6)


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_xe2_binary_runs_under_xe2rt_target(outdir, queue, monkeypatch, target):
    monkeypatch.setenv("XE2RT_TARGET", target)
    mod = xe2rt.load(outdir, queue=queue)
    assert mod.target == target and mod.path.name == "own.spv" and mod.path.parent.name == target
    axpy_case(mod, queue)


def test_bind_replays_a_user_kernel(mod, queue):
    x = to_device(np.ones(64, np.float16), queue)
    y = to_device(np.zeros(64, np.float16), queue)
    plan = xe2rt.bind(mod.kernel("axpy_half"), y, x, 0.5, 64, global_size=64, local_size=64)
    assert plan.launches == 1 and float(y[0]) == 0.0  # binding launches nothing
    for _ in range(3):
        plan.launch()
    assert (y.asnumpy() == 1.5).all()


# ---- errors: each names the argument and the rule, and launches nothing ----

def _wrong(mod, queue, other_queue):
    y = to_device(np.full(64, 7, np.float16), queue)
    x = to_device(np.ones(64, np.float16), queue)
    x32 = to_device(np.ones(64, np.float32), queue)
    axpy = mod.kernel("axpy_half")
    block = mod.kernel("block_sum")
    g, l = dict(global_size=64, local_size=64), dict(global_size=64, local_size=64)
    return y, [
        (lambda: axpy(y, x, 1.0, global_size=64, local_size=64), r"takes 4 arguments \(y, x, a, n\), got 3"),
        (lambda: axpy(y, x, y, 64, **g), r"argument 'a': declared half \(a scalar\) got an array"),
        (lambda: axpy(y, 1.0, 1.0, 64, **g), r"argument 'x': declared half\* needs a device array"),
        (lambda: axpy(y, x32, 1.0, 64, **g), r"argument 'x': declared half\* needs float16, got float32"),
        (lambda: axpy(y, to_device(np.ones(64, np.float64), queue), 1.0, 64, **g),
         r"argument 'x': declared half\* needs float16, got float64"),
        (lambda: axpy(y, np.ones(64, np.float16), 1.0, 64, **g), r"argument 'x'.*needs a device array"),
        (lambda: axpy(y, x, 1.0, 64.0, **g), r"argument 'n': declared int takes an integer, got float"),
        (lambda: axpy(y, x, 1.0, 2**31, **g), r"argument 'n': 2147483648 does not fit the kernel's int"),
        (lambda: axpy(y, x, 1e6, 64, **g), r"argument 'a': 1000000.0 overflows the kernel's half \(max 65504"),
        (lambda: axpy(y, to_device(np.ones(64, np.float16), other_queue), 1.0, 64, queue=queue, **g),
         r"argument 'x': lives on another queue than the launch queue"),
        (lambda: axpy(y, x, 1.0, 64, global_size=100, local_size=64),
         r"global size \(100,\) is not a multiple of local size \(64,\)"),
        (lambda: axpy(y, x, 1.0, 64, global_size=1 << 20, local_size=1 << 19), r"work-group of 524288 .*limit"),
        (lambda: block(x32, x32, xe2rt.LocalMemory(1 << 30), 64, **l),
         r"needs 1073741824 bytes of local memory \(SLM\); device limit"),
        (lambda: block(x32, x32, xe2rt.LocalMemory(6), 64, **l),
         r"argument 'scratch': LocalMemory\(6\) is not a whole number of float"),
        (lambda: block(x32, x32, 64.0, 64, **l), r"argument 'scratch': declared __local float\* takes "
                                                  r"xe2rt.LocalMemory"),
        (lambda: mod.kernel("scale_copy")(x32, x32, 1.0, global_size=64, local_size=64),
         r"declares reqd_work_group_size\(32, 1, 1\); the launch asks for local size \(64,\)"),
        (lambda: axpy(y, x, 1.0, 64, global_size=64), r"local_size is required"),
        (lambda: axpy(y, x, 1.0, 64, queue=[queue], **g), r"queue must be a dpctl.SyclQueue, got list"),
        (lambda: block(x32, x32, 64, 64, **l), r"argument 'scratch': declared __local float\* takes "
                                                r"xe2rt.LocalMemory\(nbytes\), got int 64"),
        (lambda: axpy(y, x, 1.0, 64, global_size=64.0, local_size=64), r"launch sizes must be ints .* got 64.0"),
        (lambda: axpy(y, x, 1.0, 64, global_size="64", local_size=64), r"launch sizes must be ints"),
        (lambda: axpy(y, x, 1.0, 64, global_size=-64, local_size=64), r"global size \(-64,\) must be >= 0"),
        (lambda: axpy(y, x, 1.0, 64, global_size=64, local_size=0), r"local size \(0,\) must be >= 1"),
        (lambda: axpy(y, x, 1.0, 64, global_size=2**62, local_size=64),
         r"the SYCL runtime refused the launch \(global \(4611686018427387904,\), local \(64,\)\)"),
        (lambda: axpy(y, x, 10**400, 64, **g), r"argument 'a': 1000.* overflows the kernel's half"),
        (lambda: mod.kernel("scale_copy")(x32, x32, np.longdouble("1e400"), global_size=32, local_size=32),
         r"argument 'scale': .* overflows the kernel's float"),
    ]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "after-warm-calls"])
def test_every_wrong_launch_is_refused_before_launch(mod, queue, warm):
    """Each wrong launch is refused, also when a correct call with the same arrays, scalar types and sizes has
    stored a warm entry (launch.warm_launch), whose checks are the scalars' values."""
    other_queue = dpctl.SyclQueue(queue.sycl_device)  # same device, another queue
    y, cases = _wrong(mod, queue, other_queue)
    if warm:
        x, scratch = to_device(np.ones(64, np.float16), queue), to_device(np.ones(64, np.float32), queue)
        zero = to_device(np.zeros(64, np.float16), queue)
        for _ in range(2):  # the same keys as the wrong calls below where they can have one
            mod.kernel("axpy_half")(zero, x, 0.0, 64, global_size=64, local_size=64)
            mod.kernel("axpy_half")(zero, x, 0.0, 64, global_size=64, local_size=64, queue=queue)
            mod.kernel("block_sum")(scratch, scratch, xe2rt.LocalMemory(256), 64, global_size=64, local_size=64)
    for call, message in cases:
        with pytest.raises(xe2rt.Xe2rtError, match=message):
            call()
    queue.wait()
    assert (y.asnumpy() == 7).all()  # nothing ran
    axpy_case(mod, queue)  # and everything still works


def test_warm_entries_hold_every_queue_their_key_names(mod, queue):
    """An array may live on another SyclQueue object equal to the launch queue; the warm entries (a user kernel's and
    a shipped op's replay) name its queue by id, so they must hold it: otherwise its id could be reused by an
    unrelated queue and a warm call would accept an array the checks refuse."""
    from xe2rt import fastcall, launch
    alias = dpctl.SyclQueue(queue._get_capsule())  # the same sycl::queue, another Python object
    alias_id = id(alias)
    x = to_device(np.ones(64, np.float16), alias)
    y = to_device(np.zeros(64, np.float16), queue)
    w = to_device(np.ones((8, 64), np.float16), queue)
    for _ in range(2):
        mod.kernel("axpy_half")(y, x, 1.0, 64, global_size=64, local_size=64)
        xe2rt.gemv_fp16(x, w)
    queue.wait()
    del x, alias
    held = [q for entry in launch._warm_calls.values() for q in entry[-1]]
    assert any(id(q) == alias_id for q in held)
    assert any(id(q) == alias_id for entry in fastcall._entries.values() if hasattr(entry, "queues")
               for q in entry.queues)


def test_warm_calls_take_each_calls_scalars_and_views(mod, queue, rng):
    """Repeated calls with one key (launch.warm_launch) use each call's scalar values; a view starting inside its
    allocation, an int for the half parameter and a scalar out of range on a warm key take the full path."""
    axpy = mod.kernel("axpy_half")
    x_host = rng.standard_normal(128).astype(np.float16)
    x = to_device(x_host, queue)
    y = to_device(np.zeros(64, np.float16), queue)
    expect = np.zeros(64, np.float64)
    for step, a in enumerate([0.5, -2.0, 0.125, 3.0]):
        n = 64 - 8 * step
        axpy(y, x, a, n, global_size=64, local_size=64)
        expect[:n] += a * x_host[:n].astype(np.float64)
        expect = expect.astype(np.float16).astype(np.float64)  # y is half after each step
    np.testing.assert_allclose(y.asnumpy(), expect, rtol=2**-9, atol=2**-14)
    from xe2rt import launch
    assert any(key[0] is axpy for key in launch._warm_calls)  # the calls after the first were warm
    y2 = to_device(np.zeros(64, np.float16), queue)
    axpy(y2, x[64:], 1.0, 64, global_size=64, local_size=64)  # a view inside x, same facts as x[:64] would have
    axpy(y2, x[64:], 1.0, 64, global_size=64, local_size=64)
    np.testing.assert_array_equal(y2.asnumpy(), (2 * x_host[64:].astype(np.float32)).astype(np.float16))
    for _ in range(2):  # an int into half: converted, on a key of its own; the second call is warm
        axpy(y2, x[:64], 1, 64, global_size=64, local_size=64)
    expect2 = 2 * x_host[64:].astype(np.float64) + 2 * x_host[:64].astype(np.float64)
    np.testing.assert_allclose(y2.asnumpy(), expect2, rtol=2**-10, atol=2**-14)  # two roundings to half
    before = y2.asnumpy()
    with pytest.raises(xe2rt.InputError, match=r"argument 'n': 2147483648 does not fit the kernel's int"):
        axpy(y2, x[:64], 1.0, 2**31, global_size=64, local_size=64)
    with pytest.raises(xe2rt.InputError, match=r"argument 'a': 100000.0 overflows the kernel's half"):
        axpy(y2, x[:64], 1e5, 64, global_size=64, local_size=64)
    with pytest.raises(xe2rt.InputTypeError, match=r"argument 'n': declared int takes an integer, got bool"):
        axpy(y2, x[:64], 1.0, True, global_size=64, local_size=64)
    with pytest.raises(xe2rt.InputTypeError, match=r"launch sizes must be ints"):
        axpy(y2, x[:64], 1.0, 64, global_size=(True,), local_size=64)
    np.testing.assert_array_equal(y2.asnumpy(), before)  # nothing ran


def test_required_sub_group_size_the_device_lacks(tmp_path, queue, monkeypatch):
    """A kernel that requires sub-group size 128 (no CPU or Xe2 device has it) is refused at launch."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    mod = xe2rt.Module.from_source("__attribute__((intel_reqd_sub_group_size(128))) "
                                   "__kernel void wide(__global float* y) { y[get_global_id(0)] = 1.0f; }", queue=queue)
    y = to_device(np.zeros(128, np.float32), queue)
    with pytest.raises(xe2rt.LaunchLimitError, match=r"requires sub-group size 128; device .* supports \[.*16"):
        mod.kernel("wide")(y, global_size=128, local_size=128)
    assert (y.asnumpy() == 0).all()
    # one that calls a sub-group function fails in the device compile (with an empty message): refused before it
    uses = xe2rt.Module.from_source("__attribute__((intel_reqd_sub_group_size(128))) __kernel void s(__global int* y) "
                                    "{ y[get_global_id(0)] = get_sub_group_size(); }", queue=queue)
    with pytest.raises(xe2rt.LaunchLimitError, match=r"s \(target cpu\): requires sub-group size 128; device"):
        uses.kernel("s")


@pytest.mark.parametrize("edit,match", [
    (lambda e: e["kernels"]["axpy_half"][2].update(type="float", bits=32), "signature of kernel 'axpy_half' is not"),
    (lambda e: e["kernels"]["axpy_half"][0].update(space="local", kind="local", storage_class="Workgroup"),
     "signature of kernel 'axpy_half' is not"),
    (lambda e: e["kernels"]["axpy_half"].pop(), "signature of kernel 'axpy_half' is not"),
    (lambda e: e["kernel_attrs"]["axpy_half"].update(reqd_sub_group_size=128), "signature of kernel 'axpy_half'"),
    (lambda e: e["kernels"].update(ghost=e["kernels"]["axpy_half"]), "no kernel 'ghost'"),
    (lambda e: e.pop("kernels"), "entry 'cpu/own.spv' is malformed"),
])
def test_edited_manifest_is_refused_with_the_rebuild_command(outdir, tmp_path, queue, edit, match):
    """The sha256 covers the binary; the signatures in the manifest are checked against the binary's own when a
    kernel is first built, so an edited manifest cannot make the launcher pass arguments the kernel does not take."""
    copy = tmp_path / "copy"
    shutil.copytree(outdir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest["artifacts"]["cpu/own.spv"])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    name = "ghost" if "ghost" in match else "axpy_half"
    with pytest.raises(xe2rt.ArtifactError, match=match) as info:
        xe2rt.load(copy, queue=queue, target="cpu").kernel(name)
    assert "rebuild with" in str(info.value)
    (copy / "manifest.json").write_text("[1, 2]")
    with pytest.raises(xe2rt.ArtifactError, match="no 'artifacts' table"):
        xe2rt.load(copy, queue=queue, target="cpu")


def test_integer_scalars_of_every_width(tmp_path, queue, monkeypatch):
    """char (passed as its byte: dpctl refuses ctypes.c_int8), uchar, short, ushort, uint, long and ulong scalars
    arrive with their values, the extremes included."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    mod = xe2rt.Module.from_source("""__kernel void ints(__global long* o, char c, uchar uc, short s, ushort us,
                                                      uint ui, long l, ulong ul) {
        o[0] = c; o[1] = uc; o[2] = s; o[3] = us; o[4] = ui; o[5] = l; o[6] = (long)(ul >> 1); }""", queue=queue)
    o = to_device(np.zeros(7, np.int64), queue)
    for c, uc, s, us, ui, l, ul in [(-128, 255, -32768, 65535, 2**32 - 1, -2**63, 2**64 - 1),
                                    (127, 0, 32767, 0, 0, 2**63 - 1, 6), (np.int8(-5), np.uint8(7), -1, 1, 3, -1, 0)]:
        mod.kernel("ints")(o, c, uc, s, us, ui, l, ul, global_size=1, local_size=1).wait()
        assert o.asnumpy().tolist() == [int(c), int(uc), s, us, ui, l, int(ul) >> 1]


VECTOR_SOURCE = r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void scale4(__global float4* y, __global const float4* x, float a) {
    int i = get_global_id(0);
    y[i] = a * x[i];
}
__kernel void lanes(__global float* y, float4 v, int3 w, half2 h, uchar2 u) {
    y[0] = v.x; y[1] = v.y; y[2] = v.z; y[3] = v.w; y[4] = w.x; y[5] = w.y; y[6] = w.z; y[7] = h.x; y[8] = h.y;
    y[9] = u.x; y[10] = u.y;
}
__kernel void group_sum4(__global const float4* x, __global float* out, __local float4* tmp) {
    int l = get_local_id(0);
    tmp[l] = x[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l == 0) {
        float4 s = 0;
        for (int j = 0; j < (int)get_local_size(0); j++) s += tmp[j];
        out[get_group_id(0)] = s.x + s.y + s.z + s.w;
    }
}
"""


def test_vector_types(tmp_path, queue, monkeypatch, rng):
    """float4* pointers take float32 arrays aligned to 16 bytes; vectors by value (float4, int3, half2, uchar2) take
    their lanes as sequences and arrive lane by lane; __local float4* takes LocalMemory in whole float4. Exact
    (copies, a scale by 2, sums of small integers)."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    mod = xe2rt.Module.from_source(VECTOR_SOURCE, queue=queue)
    x_host = rng.standard_normal(64).astype(np.float32)
    x, y = to_device(x_host, queue), to_device(np.zeros(64, np.float32), queue)
    for _ in range(2):  # cold, then warm
        mod.kernel("scale4")(y, x, 2.0, global_size=16, local_size=4)
    np.testing.assert_array_equal(y.asnumpy(), 2 * x_host)
    mod.kernel("scale4")(y[4:], x[8:], 0.5, global_size=8, local_size=4)  # views at whole float4 offsets
    np.testing.assert_array_equal(y.asnumpy()[4:36], 0.5 * x_host[8:40])

    out = to_device(np.zeros(11, np.float32), queue)
    mod.kernel("lanes")(out, [1.5, -2, 3, 3e38], (7, -8, 2**31 - 1), np.array([0.5, 65504], np.float16), (255, 0),
                        global_size=1, local_size=1)
    assert out.asnumpy().tolist() == [1.5, -2, 3, np.float32(3e38), 7, -8, np.float32(2**31 - 1), 0.5, 65504, 255, 0]
    above = float(np.nextafter(np.float64(np.finfo(np.float32).max), np.inf))  # rounds to FLT_MAX, as a C cast
    mod.kernel("lanes")(out, [above, 2**70, 0, 0], [0, 0, 0], [65510.0, -0.0], [0, 0], global_size=1, local_size=1)
    got = out.asnumpy()
    assert got[0] == np.finfo(np.float32).max and got[1] == np.float32(2**70) and got[7] == 65504
    plan = xe2rt.bind(mod.kernel("lanes"), out, [1, 2, 3, 4], [5, 6, 7], [8, 9], [10, 11], global_size=1,
                      local_size=1)
    plan.launch().wait()
    assert out.asnumpy().tolist() == list(range(1, 12))

    sums = to_device(np.zeros(4, np.float32), queue)
    ints = to_device(np.arange(64, dtype=np.float32), queue)
    mod.kernel("group_sum4")(ints, sums, xe2rt.LocalMemory(4 * 16), global_size=16, local_size=4)
    np.testing.assert_array_equal(sums.asnumpy(), np.arange(64).reshape(4, 16).sum(axis=1))


def test_vector_types_wrong_launches(tmp_path, queue, monkeypatch):
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    mod = xe2rt.Module.from_source(VECTOR_SOURCE, queue=queue)
    x, y = to_device(np.ones(64, np.float32), queue), to_device(np.full(64, 7, np.float32), queue)
    scale4, lanes = mod.kernel("scale4"), mod.kernel("lanes")
    one = dict(global_size=1, local_size=1)
    good = ([1, 2, 3, 4], (1, 2, 3), (0.5, 1), (1, 2))
    cases = [
        (lambda: scale4(y, x[1:], 2.0, global_size=4, local_size=4),
         r"argument 'x': declared float4\* needs its first element aligned to 16 bytes .* 4 bytes past"),
        (lambda: scale4(y, to_device(np.ones(64, np.float16), queue), 2.0, global_size=4, local_size=4),
         r"argument 'x': declared float4\* needs float32, got float16"),
        (lambda: lanes(y, [1, 2, 3], *good[1:], **one), r"argument 'v': declared float4 takes 4 numbers, got shape"),
        (lambda: lanes(y, 1.0, *good[1:], **one), r"argument 'v': declared float4 \(a vector by value\) takes a list"),
        (lambda: lanes(y, x, *good[1:], **one), r"argument 'v': declared float4 \(a vector by value\) takes a list"),
        (lambda: lanes(y, good[0], (1.5, 2, 3), *good[2:], **one), r"argument 'w' lane 0: declared int takes an integer, got float 1.5"),
        (lambda: lanes(y, good[0], (1, 2, 2**31), *good[2:], **one), r"argument 'w' lane 2: 2147483648 does not fit the kernel's int"),
        (lambda: lanes(y, *good[:2], (1e5, 1), good[3], **one), r"argument 'h' lane 0: 100000.0 overflows the kernel's half"),
        (lambda: lanes(y, *good[:3], (256, 0), **one), r"argument 'u' lane 0: 256 does not fit the kernel's uchar"),
        (lambda: lanes(y, *good[:3], (True, 0), **one), r"argument 'u' lane 0: declared uchar takes an integer, got bool"),
        (lambda: lanes(y, np.array([np.longdouble("1e4000"), 0, 0, 0], np.longdouble), *good[1:], **one),
         r"argument 'v' lane 0: .* overflows the kernel's float"),
        (lambda: lanes(y, good[0], (1, 2, 2**70), *good[2:], **one), r"argument 'w' lane 2: \d+ does not fit"),
        (lambda: lanes(y, [[1, 2], 3, 4, 5], *good[1:], **one), r"argument 'v': .* got a nested sequence"),
        (lambda: scale4(y, to_device(np.ones(64, np.float64), queue), 2.0, global_size=4, local_size=4),
         r"argument 'x': declared float4\* needs float32, got float64"),
        (lambda: mod.kernel("group_sum4")(x, y, xe2rt.LocalMemory(8), global_size=16, local_size=4),
         r"argument 'tmp': LocalMemory\(8\) is not a whole number of float4 \(16 bytes each\)"),
    ]
    for call, message in cases:
        with pytest.raises(xe2rt.Xe2rtError, match=message):
            call()
    queue.wait()
    assert (y.asnumpy() == 7).all()  # nothing ran


def test_load_after_the_folder_is_rebuilt(tmp_path, queue):
    """xe2rt.load of a folder rebuilt in the same process returns the new binary (its manifest changed), not the
    module it loaded before."""
    out = tmp_path / "out"
    kernel = "__kernel void put(__global float* y) {{ y[get_global_id(0)] = {v}.0f; }}"
    _compile.build_folder(kernel.format(v=1), out, targets=("cpu",), name="m")
    y = to_device(np.zeros(4, np.float32), queue)
    first = xe2rt.load(out, queue=queue)
    first.kernel("put")(y, global_size=4, local_size=4).wait()
    assert (y.asnumpy() == 1).all()
    time.sleep(0.01)
    _compile.build_folder(kernel.format(v=2) + " __kernel void other(__global float* y) { }", out, targets=("cpu",),
                          name="m")
    second = xe2rt.load(out, queue=queue)
    assert second is not first and sorted(second.kernel_names) == ["other", "put"]
    second.kernel("put")(y, global_size=4, local_size=4).wait()
    assert (y.asnumpy() == 2).all()
    assert xe2rt.load(out, queue=queue) is second  # unchanged since: the cached module


def test_from_source_cache_follows_included_headers(tmp_path, queue, monkeypatch):
    """The from_source cache key covers the headers the source includes from -I folders (their contents) and the
    -I folders as absolute paths: an edited header, or the same relative -I from another folder, builds anew."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    source = '#include "scale.h"\n__kernel void put(__global float* y) { y[get_global_id(0)] = SCALE; }'
    y = to_device(np.zeros(2, np.float32), queue)
    for folder, value, options in (("a", 2, ["-I."]), ("a", 5, ["-I."]), ("b", 7, ["-I."]), ("b", 8, ["-I", "."]),
                                   ("b", 9, ["--include-directory=."])):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "scale.h").write_text(f"#define SCALE {value}.0f\n")
        monkeypatch.chdir(tmp_path / folder)
        xe2rt.Module.from_source(source, options=options, queue=queue).kernel("put")(
            y, global_size=2, local_size=2).wait()
        assert (y.asnumpy() == value).all(), (folder, options)


def test_from_source_cache_follows_every_include_form(tmp_path, queue, monkeypatch):
    """Headers reached by an absolute #include, through -isystem / -iquote / -idirafter folders (joined or separate)
    and as -include / -imacros files are in the cache key too: an edited one builds anew (a stale build ran before,
    silently, in a new process with the same disk cache)."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    inc = tmp_path / "inc"
    inc.mkdir()
    y = to_device(np.zeros(2, np.float32), queue)
    put = "__kernel void put(__global float* y) { y[get_global_id(0)] = SCALE; }"
    cases = [(f'#include "{inc / "s1.h"}"\n' + put, "s1.h", []),
             ('#include "s2.h"\n' + put, "s2.h", ["-isystem", str(inc)]),
             ('#include "s3.h"\n' + put, "s3.h", [f"-idirafter{inc}"]),
             (put, "s4.h", ["-include", str(inc / "s4.h")]),
             (put, "s5.h", ["-imacros", str(inc / "s5.h")])]
    for source, header, options in cases:
        for value in (2, 3):
            (inc / header).write_text(f"#define SCALE {value}.0f\n")
            xe2rt.Module.from_source(source, options=options, queue=queue).kernel("put")(
                y, global_size=2, local_size=2).wait()
            assert (y.asnumpy() == value).all(), (header, options, value)
    # an option that only shares the prefix is not taken for one of them (-include-pch is not -include + "-pch")
    assert _compile._absolute_includes(("-include-pch", "x.pch")) == ("-include-pch", "x.pch")


def test_prebuilt_spirv_without_integer_signs(tmp_path, queue):
    """SPIR-V integers carry no sign; a prebuilt binary without kernel-arg type strings leaves it unknown, and the
    launcher then takes either sign (the same bits): a uint8 array for a uchar* the binary reports as char*, 3e9 for
    a uint it reports as int."""
    src = tmp_path / "k.cl"
    src.write_text("__kernel void b(__global uchar* p, uint v) { p[0] = (uchar)(v >> 24); }")
    spv = tmp_path / "k.spv"
    subprocess.run(["clang-15", "-cl-std=CL3.0", "-target", "spir64", "-emit-llvm", "-c", str(src), "-o",
                    str(tmp_path / "k.bc")], check=True)
    subprocess.run(["llvm-spirv-15", str(tmp_path / "k.bc"), "-o", str(spv)], check=True)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "xe2rt", "build", "--spirv", f"cpu={spv}", "-o", str(out), "--targets",
                    "cpu"], check=True, capture_output=True)
    kernel = xe2rt.load(out, queue=queue).kernel("b")
    assert [p.signed for p in kernel.params] == [None, None]
    p = to_device(np.zeros(1, np.uint8), queue)
    kernel(p, 3_000_000_000, global_size=1, local_size=1).wait()
    assert int(p.asnumpy()[0]) == 3_000_000_000 >> 24
    kernel(to_device(np.zeros(1, np.int8), queue), -1, global_size=1, local_size=1).wait()  # either sign
    with pytest.raises(xe2rt.InputTypeError, match=r"needs int8 or uint8 \(the binary does not record the sign\)"):
        kernel(to_device(np.zeros(1, np.int16), queue), 1, global_size=1, local_size=1)
    with pytest.raises(xe2rt.InputError, match=r"does not fit the kernel's int \[-2147483648, 4294967295\]"):
        kernel(p, 2**32, global_size=1, local_size=1)


def test_unknown_kernel_and_target_and_module(outdir, tmp_path, queue):
    mod = xe2rt.load(outdir, queue=queue, target="cpu")
    with pytest.raises(xe2rt.ArtifactError, match=r"has no kernel 'axpy'; it has \['axpy_half', 'block_sum', "):
        mod.kernel("axpy")
    only_cpu = _compile.build_folder(SOURCE, tmp_path / "cpu_only", targets=("cpu",), name="own")
    with pytest.raises(xe2rt.ArtifactError, match=r"has no binaries for target 'bmg'; it has targets \['cpu'\]"):
        xe2rt.load(only_cpu, queue=queue, target="bmg")
    with pytest.raises(xe2rt.ArtifactError, match=r"has no module 'other' for target cpu; it has \['own'\]"):
        xe2rt.load(outdir, queue=queue, target="cpu", module="other")
    with pytest.raises(xe2rt.ArtifactError, match=r"has no manifest.json"):
        xe2rt.load(tmp_path, queue=queue)
    with pytest.raises(xe2rt.ConfigError, match=r"target='gpu' is not a known target"):
        xe2rt.load(outdir, queue=queue, target="gpu")


def test_edited_binary_is_refused_with_the_rebuild_command(outdir, tmp_path, queue):
    copy = tmp_path / "edited"
    shutil.copytree(outdir, copy)
    spv = copy / "cpu" / "own.spv"
    data = bytearray(spv.read_bytes())
    data[len(data) // 2] ^= 0x10
    spv.write_bytes(bytes(data))
    with pytest.raises(xe2rt.ArtifactError, match=r"own\.spv does not match its manifest.*corrupted or edited.*"
                                                  r"rebuild with: "):
        xe2rt.load(copy, queue=queue, target="cpu")


def test_compile_error_names_file_and_line(tmp_path):
    bad = "__kernel void f(__global float* x) {\n    x[0] = undefined_name;\n}\n"
    with pytest.raises(xe2rt.CompileError, match=r"source\.cl:2:\d+: error: use of undeclared identifier"):
        _compile.build_folder(bad, tmp_path / "bad", targets=("cpu",))
    assert not (tmp_path / "bad").exists()  # nothing written


def test_build_folder_refuses_a_folder_it_would_destroy(tmp_path):
    """build_folder replaces its folder whole: a folder holding a user's files (no manifest.json) is refused before
    anything is compiled, as `python -m xe2rt build -o` refuses it (it was deleted, files and all)."""
    (tmp_path / "mine" / "data").mkdir(parents=True)
    (tmp_path / "mine" / "thesis.tex").write_text("keep")
    with pytest.raises(BuildError, match=r"outdir .*mine.*: exists and is not an xe2rt build folder"):
        _compile.build_folder("__kernel void k(__global int* o) { o[0] = 1; }", tmp_path / "mine", targets=("cpu",))
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["data", "thesis.tex"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(BuildError, match=r"cannot be created or replaced: .*file is not a writable folder"):
        _compile.build_folder("__kernel void k(__global int* o) { o[0] = 1; }", tmp_path / "file" / "out",
                              targets=("cpu",))


FROM_SOURCE_PROBE = """
import sys, time
import xe2rt, dpctl
q = dpctl.SyclQueue("opencl:cpu")
source = open(sys.argv[1]).read()
t0 = time.perf_counter()
mod = xe2rt.Module.from_source(source, options=["-DEXTRA=1"], queue=q)
print(time.perf_counter() - t0, mod.kernel_names)
"""


def test_from_source_is_cached_on_disk_across_processes(tmp_path, queue, monkeypatch):
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    mod = xe2rt.Module.from_source(SOURCE, options=["-DEXTRA=1"], queue=queue)
    assert mod.target == "cpu" and sorted(mod.kernel_names) == sorted(NAMES)
    axpy_case(mod, queue)
    (tmp_path / "k.cl").write_text(SOURCE)
    env = dict(os.environ, XE2RT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", FROM_SOURCE_PROBE, str(tmp_path / "k.cl")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seconds = float(proc.stdout.split()[0])
    assert seconds <= 0.2, f"from_source from the disk cache took {seconds:.3f} s"
    # other options are another entry; a damaged entry is rebuilt, not loaded
    other = xe2rt.Module.from_source(SOURCE, options=["-DEXTRA=2"], queue=queue)
    assert other.folder != mod.folder
    spv = mod.folder / "cpu" / f"{_compile.MODULE_NAME}.spv"
    spv.write_bytes(spv.read_bytes()[:-4])
    xe2rt.module.clear()
    rebuilt = xe2rt.Module.from_source(SOURCE, options=["-DEXTRA=1"], queue=queue)
    axpy_case(rebuilt, queue)


def test_from_source_is_cached_in_process(tmp_path, queue, monkeypatch):
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    first = xe2rt.Module.from_source(SOURCE, queue=queue)
    start = time.perf_counter()
    again = xe2rt.Module.from_source(SOURCE, queue=queue)
    assert again is first and time.perf_counter() - start < 0.2


def test_read_only_arrays_are_refused_where_the_kernel_may_write(queue):
    """A read-only device array (flags.writable False) passed for a __global pointer declared without const is refused
    before launch, as dpnp refuses it for out=; the shipped ops' out= too (the kernel wrote it before). A const
    pointer takes it."""
    m = xe2rt.Module.from_source("__kernel void fset(__global float* y, __global const float* x) "
                                 "{ y[get_global_id(0)] = x[get_global_id(0)] + 1.0f; }\n")
    k = m.kernel("fset")
    ro = dpnp.zeros(4, dtype=np.float32, sycl_queue=queue)
    ro.get_array().flags.writable = False
    y = dpnp.zeros(4, dtype=np.float32, sycl_queue=queue)
    with pytest.raises(xe2rt.InputError, match=r"argument 'y': declared float\* without const .* read-only"):
        k(ro, y, global_size=4, local_size=1)
    assert (dpnp.asnumpy(ro) == 0).all()
    k(y, ro, global_size=4, local_size=1).wait()  # read through a const pointer: fine
    assert (dpnp.asnumpy(y) == 1).all()
    gate_up = dpnp.ones((1, 64), dtype=np.float16, sycl_queue=queue)
    out = dpnp.zeros((1, 32), dtype=np.float16, sycl_queue=queue)
    out.get_array().flags.writable = False
    with pytest.raises(xe2rt.InputError, match="silu_mul: out is read-only"):
        xe2rt.silu_mul(gate_up, out=out)
    assert (dpnp.asnumpy(out) == 0).all()


def test_cached_ops_tell_minus_zero_from_zero(queue):
    """fastcall.cached keys a float scalar by its value, and -0.0 == 0.0: a call with -0.0 replayed the launch recorded
    for 0.0, so x / a gave +inf where numpy gives -inf."""
    from xe2rt import fastcall, launch
    k = xe2rt.Module.from_source("__kernel void dv(__global float* out, __global const float* x, float a) "
                                 "{ int i = get_global_id(0); out[i] = x[i] / a; }").kernel("dv")

    def div(x, a):
        out = launch.new_output(x.shape, np.float32, x.sycl_queue)
        k(out, x, a, global_size=x.size, local_size=1)
        return out
    cached = fastcall.cached(div)
    x = dpnp.ones(4, dtype=np.float32, sycl_queue=queue)
    assert (dpnp.asnumpy(cached(x, 0.0)) == np.inf).all()
    assert (dpnp.asnumpy(cached(x, -0.0)) == -np.inf).all()
    assert (dpnp.asnumpy(cached(x, (-0.0,)[0])) == -np.inf).all()  # the warm replay of -0.0 itself


def test_pointer_to_struct_builds_and_is_refused_at_launch(tmp_path, queue, monkeypatch):
    """A source with a __global pointer to a struct builds (its other kernels are usable) and launching that kernel
    is an InputTypeError naming the argument, as docs/own_kernels.md says; the whole source failed to build before
    (the binary reports the pointee as opaque, the argument-info build by its name)."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    m = xe2rt.Module.from_source("typedef struct {int a;} S;\n__kernel void ok(__global int* y) { y[0] = 1; }\n"
                                 "__kernel void f(__global S* y) { y[0].a = 1; }\n", queue=queue)
    y = to_device(np.zeros(4, np.int32), queue)
    m.kernel("ok")(y, global_size=1, local_size=1).wait()
    assert y.asnumpy()[0] == 1
    with pytest.raises(xe2rt.InputTypeError, match=r"argument 'y': parameter type 'S' is not supported"):
        m.kernel("f")(y, global_size=1, local_size=1)


def test_small_argument_mistakes_get_the_rule(tmp_path, queue, monkeypatch, outdir):
    """options=None is no options and a str target is one target (they were a TypeError and "targets='c'"); a file
    given as a build folder, a kernel name that is not a str, a global size past size_t with a zero dimension and a
    400-digit int for a float each get an xe2rt error stating the rule (they were raw Python errors, a silent launch
    and a 400-digit message)."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    src = "__kernel void g2(__global int* y, float v) { y[0] = (int)v; }\n"
    mod = xe2rt.Module.from_source(src, options=None, queue=queue)
    assert _compile.build_folder(src, tmp_path / "one", targets="cpu").is_dir()
    with pytest.raises(xe2rt.InputTypeError, match=r"options must be clang options as str, got int 3"):
        xe2rt.Module.from_source(src, options=["-DA=1", 3], queue=queue)
    (tmp_path / "file").write_text("x")
    with pytest.raises(xe2rt.ArtifactError, match=r"is a file; a build folder \(with manifest.json\) is expected"):
        xe2rt.load(tmp_path / "file", queue=queue)
    with pytest.raises(xe2rt.InputTypeError, match=r"a kernel name is a str, got list \['g2'\]"):
        mod.kernel(["g2"])
    y = to_device(np.zeros(4, np.int32), queue)
    with pytest.raises(xe2rt.LaunchLimitError, match=r"global size \(0, 1180591620717411303424\) is out of range"):
        mod.kernel("g2")(y, 1.0, global_size=(0, 2**70), local_size=(1, 1))
    with pytest.raises(xe2rt.InputError, match=r"argument 'v': 1000000000000000000000000000000000000\.\.\. overflows"):
        mod.kernel("g2")(y, 10**400, global_size=1, local_size=1)


def test_a_refused_launch_names_local_memory(tmp_path, queue, monkeypatch):
    """Static __local arrays are not counted by the launcher's local-memory check; when they and the LocalMemory
    arguments pass the device's limit the SYCL runtime refuses the launch, and the error now names that cause, the
    limit and the LocalMemory bytes (it said only that the runtime refused). Nothing is queued; the next launch runs."""
    monkeypatch.setenv("XE2RT_CACHE_DIR", str(tmp_path / "cache"))
    limit = queue.sycl_device.local_mem_size
    n = (limit - 4096) // 4  # static floats, under the limit alone
    k = xe2rt.Module.from_source(
        f"__kernel void st(__global float* y, __local float* d) {{ __local float buf[{n}]; int l = get_local_id(0);"
        f" buf[l] = l; d[l] = 2 * l; barrier(CLK_LOCAL_MEM_FENCE); y[get_global_id(0)] = buf[l] + d[l]; }}\n",
        queue=queue).kernel("st")
    y = to_device(np.zeros(4, np.float32), queue)
    with pytest.raises(xe2rt.LaunchLimitError, match=rf"local memory past the device's {limit} bytes, counting the "
                                                     rf"kernel's own __local arrays beside the 100000 bytes"):
        k(y, xe2rt.LocalMemory(100000), global_size=4, local_size=4)
    k(y, xe2rt.LocalMemory(64), global_size=4, local_size=4).wait()
    assert (y.asnumpy() == [0, 3, 6, 9]).all()
