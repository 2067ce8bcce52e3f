"""First calls build only the kernel they launch (one-kernel views of the verified module); warmup builds whole
families. The one-kernel views are valid SPIR-V with exactly one entry point."""
import concurrent.futures
import os
import shutil

import numpy as np
import pytest

import xe2rt
from xe2rt import artifacts, config, fastcall, spirv_module

from conftest import to_device

KERNEL_DIR = config.kernel_dir()
MANIFEST = artifacts.manifest(KERNEL_DIR)
# One key per distinct binary: most lnl binaries are byte for byte bmg's (same sha256), and a view is a function of
# the bytes alone.
BINARIES = sorted({entry["sha256"]: key for key, entry in sorted(MANIFEST["artifacts"].items(), reverse=True)}
                  .values())


@pytest.fixture
def fresh_caches():
    artifacts.clear_caches()
    fastcall.clear()
    yield
    artifacts.clear_caches()


def test_first_call_builds_one_kernel(queue, rng, fresh_caches):
    logits = to_device(rng.standard_normal((3, 128)).astype(np.float32), queue)
    xe2rt.softmax_topk(logits, 8, target="cpu")
    program = artifacts.load(queue, "cpu", "softmax_topk")
    assert len(program.kernels) == 1 and next(iter(program.kernels)).startswith("softmax_topk_f32_n128_k8_"), \
        list(program.kernels)
    assert len(program.kernel_names) > 10


def test_warmup_builds_whole_families(queue, fresh_caches):
    seconds = xe2rt.warmup(queue, ["gemv_w8a16", "gemv_w4a16_alt"], target="cpu")
    assert set(seconds) == {"gemv_w8a16", "gemv_w4a16_alt"} and all(s > 0 for s in seconds.values())
    for family in seconds:
        program = artifacts.load(queue, "cpu", family)
        assert set(program.kernels) == set(program.kernel_names)


def test_warmup_rejects_unknown_families(queue):
    with pytest.raises(xe2rt.InputError, match=r"warmup: no family 'gemv_int3' for target 'cpu'; shipped: "):
        xe2rt.warmup(queue, ["gemv_int3"], target="cpu")


def test_warmup_takes_a_device_or_filter_and_names_bad_arguments(queue):
    """A filter string or a SyclDevice names the device, as target_for and info take them (AttributeError before);
    families that are not names, a queue of another type and a filter that matches nothing get xe2rt errors; load(42)
    and bind(42) are InputTypeErrors (Xe2rtError, as the README promises), no longer plain TypeErrors."""
    assert set(xe2rt.warmup("opencl:cpu", "stream_read", target="cpu")) == {"stream_read"}
    assert set(xe2rt.warmup(queue.sycl_device, ["stream_read"], target="cpu")) == {"stream_read"}
    with pytest.raises(xe2rt.InputTypeError, match=r"families must be a family name or an iterable of them, got int"):
        xe2rt.warmup(queue, 42)
    with pytest.raises(xe2rt.InputTypeError, match=r"family names are str"):
        xe2rt.warmup(queue, ["stream_read", 3])
    with pytest.raises(xe2rt.InputTypeError, match=r"queue must be a dpctl.SyclQueue, a SyclDevice or a filter"):
        xe2rt.warmup(3.5)
    with pytest.raises(xe2rt.InputError, match=r"device filter 'nonsense' matches no SYCL device .*; devices here: "):
        xe2rt.warmup("nonsense")
    with pytest.raises(xe2rt.InputTypeError, match=r"load: folder must be a path"):
        xe2rt.load(42, queue=queue)
    with pytest.raises(xe2rt.InputTypeError, match=r"xe2rt.bind: op must be an xe2rt op"):
        xe2rt.bind(42)


def test_kernels_of_one_family_come_from_one_verified_binary(queue, rng, fresh_caches):
    """Two kernels of one family built separately, both right: each view is complete on its own."""
    w_host = rng.standard_normal((33, 256)).astype(np.float16)
    x_host = rng.standard_normal(256).astype(np.float16)
    x = to_device(x_host, queue)
    ref = w_host.astype(np.float64) @ x_host.astype(np.float64)
    for group_size, symmetric in ((32, False), (128, True)):
        qw = xe2rt.quantize_w4(w_host, group_size=group_size, symmetric=symmetric)
        # dequant="magic": family gemv_w4a16 itself (the default; "vnni"/"auto" would take gemv_w4a16_vnni)
        y = xe2rt.gemv_w4a16(x, qw.to_device(queue), target="cpu", dequant="magic").asnumpy().astype(np.float64)
        dq = qw.dequantize().astype(np.float64) @ x_host.astype(np.float64)
        np.testing.assert_allclose(y, dq, rtol=2e-2, atol=2e-2 * np.abs(ref).max())
    assert len(artifacts.load(queue, "cpu", "gemv_w4a16").kernels) == 2


@pytest.mark.parametrize("key", BINARIES)
def test_one_kernel_views_are_valid_spirv(key, tmp_path):
    spirv = (KERNEL_DIR / key).read_bytes()
    names = list(MANIFEST["artifacts"][key]["kernels"])
    assert sorted(spirv_module.entry_points(spirv)) == sorted(names)
    validator = shutil.which("spirv-val")
    paths = []
    for name in names:
        view = spirv_module.single_kernel(spirv, name)
        assert list(spirv_module.entry_points(view)) == [name]
        paths.append(tmp_path / f"{name}.spv")
        paths[-1].write_bytes(view)
    if validator:
        from xe2rt.build import toolchain
        from xe2rt.errors import BuildError
        # as the build validated the whole binary: spirv-val, or up to the vectors of any length of a module built
        # with SPV_INTEL_vector_compute, which spirv-val 2023.1 rejects (build_options["validated"])
        expected = MANIFEST["artifacts"][key]["build_options"].get("validated", "spirv-val")

        def validate(path):
            try:
                return path.stem, toolchain.validate(path, f"{key} view {path.stem}")
            except BuildError as exc:
                return path.stem, str(exc)
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:  # one spirv-val per view
            for name, result in pool.map(validate, paths):
                assert result == expected, (key, name, result)
    if not validator:
        pytest.skip("spirv-val (Debian package spirv-tools) is not installed: views checked for entry points only")


def test_single_kernel_rejects_unknown_names_and_non_spirv():
    spirv = (KERNEL_DIR / "cpu" / "gemv_fp16.spv").read_bytes()
    with pytest.raises(KeyError, match="no kernel 'nope'"):
        spirv_module.single_kernel(spirv, "nope")
    with pytest.raises(ValueError, match="not a SPIR-V module"):
        spirv_module.single_kernel(b"\0" * 7, "x")
