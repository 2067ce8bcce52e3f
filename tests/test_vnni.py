"""The integer-dot kernels (gemv_w4a16_vnni, gemm_w4a16_vnni with AVX512-VNNI; gemv_w4a16_avx2, gemm_w4a16_avx2 with
AVX2) are chosen only where they can run: what a host without them gets (simulated here by hiding the flags from
targets.host_cpu_flags), the host check itself, and the AVX2 kernels equal to the VNNI ones bit for bit."""
import numpy as np
import pytest

import dpctl
import dpnp
import xe2rt
from xe2rt import artifacts, config, module, targets
from xe2rt.warmup import runnable_families
from xe2rt.ops import gemm_w4a16 as gemm_op
from xe2rt.ops import gemv_w4a16 as gemv_op

from conftest import to_device


def _hide_flags(monkeypatch, *flags):
    real = targets.host_cpu_flags()
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: real - set(flags))


@pytest.fixture
def no_vnni(monkeypatch):
    """This process as on a CPU without AVX512-VNNI and AVX2 (the loader's own caches cleared before and after)."""
    artifacts.clear_caches()
    _hide_flags(monkeypatch, "avx512_vnni", "avx2")
    yield
    artifacts.clear_caches()


@pytest.fixture
def avx2_only(monkeypatch):
    """This process as on a CPU with AVX2 but no AVX512-VNNI (Zen 3, Skylake client); needs a host with AVX2."""
    if "avx2" not in targets.host_cpu_flags():
        pytest.skip("the host CPU has no AVX2, so the AVX2 kernels cannot run here")
    artifacts.clear_caches()
    _hide_flags(monkeypatch, "avx512_vnni")
    yield
    artifacts.clear_caches()


def test_host_check_reads_the_cpu_flags_and_the_runtime_override(queue, monkeypatch):
    flags = targets.host_cpu_flags()
    assert targets.cpu_has_avx512_vnni(queue.sycl_device) == ("avx512_vnni" in flags)
    assert targets.cpu_has_avx2(queue.sycl_device) == ("avx2" in flags)
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "skx")  # the CPU runtime would compile for another CPU
    assert not targets.cpu_has_avx512_vnni(queue.sycl_device) and not targets.cpu_has_avx2(queue.sycl_device)


def test_without_vnni_the_fp32_kernels_run(queue, rng, no_vnni):
    qw = xe2rt.quantize_w4(rng.standard_normal((40, 256)).astype(np.float16), group_size=32).to_device(queue)
    assert gemv_op.program_variant(queue, "cpu", None).name == "gemv_w4a16"
    assert gemm_op.resolve_family("native", "cpu", queue) == (
        "gemm_w4a16_cpu256" if targets.cpu_256bit(queue.sycl_device, "cpu") else "gemm_w4a16")
    x = rng.standard_normal((20, 256)).astype(np.float16)
    exact = x.astype(np.float64) @ qw.to_host().dequantize(np.float64).T
    y = dpnp.asnumpy(xe2rt.gemm_w4a16(to_device(x, queue), qw)).astype(np.float64)
    assert np.abs(y - exact).max() <= 1e-2 * np.abs(exact).max()
    with pytest.raises(xe2rt.InputError, match=r"dequant='vnni' needs the cpu target on a CPU device whose host has "
                                               r"AVX512-VNNI"):
        xe2rt.gemv_w4a16(to_device(x[0], queue), qw, dequant="vnni")
    with pytest.raises(xe2rt.InputError, match=r"variant='vnni' needs the cpu target on a CPU device"):
        gemm_op.run(to_device(x, queue), qw, variant="vnni")


def test_without_vnni_the_binary_is_refused_and_not_warmed(queue, no_vnni):
    with pytest.raises(xe2rt.TargetError, match=r"module 'gemv_w4a16_vnni' for cpu uses AVX512-VNNI instructions "
                                                r"\(constant CPU_AVX512_VNNI = 1\)"):
        module.load(config.kernel_dir(), queue=queue, target="cpu", module="gemv_w4a16_vnni")
    families = runnable_families(queue, "cpu")  # what xe2rt.warmup(queue) builds
    assert "gemv_w4a16" in families and "gemm_w4a16" in families
    assert not set(families) & {"gemv_w4a16_vnni", "gemm_w4a16_vnni", "gemv_w4a16_avx2", "gemm_w4a16_avx2"}
    with pytest.raises(xe2rt.TargetError, match=r"module 'gemv_w4a16_avx2' for cpu uses AVX2 instructions "
                                                r"\(constant CPU_AVX2 = 1\)"):
        module.load(config.kernel_dir(), queue=queue, target="cpu", module="gemv_w4a16_avx2")


def test_with_avx2_only_auto_takes_the_avx2_kernels(queue, rng, avx2_only):
    """A host with AVX2 and no AVX512-VNNI: "auto" runs the AVX2 integer-dot kernels (GEMV at M = 1, GEMM above 16),
    "vnni" is refused by name, and warmup builds the AVX2 families, not the VNNI ones."""
    qw = xe2rt.quantize_w4(rng.standard_normal((40, 256)).astype(np.float16), group_size=32).to_device(queue)
    assert gemv_op.program_variant(queue, "cpu", "auto").name == gemv_op.AVX2_FAMILY
    assert gemv_op.program_variant(queue, "cpu", "auto", m=2).name == "gemv_w4a16"  # batched: the exact kernels
    assert gemm_op.resolve_family("auto", "cpu", queue) == "gemm_w4a16_avx2"
    families = runnable_families(queue, "cpu")
    assert {"gemv_w4a16_avx2", "gemm_w4a16_avx2"} <= set(families)
    assert not set(families) & {"gemv_w4a16_vnni", "gemm_w4a16_vnni"}
    with pytest.raises(xe2rt.InputError, match=r"dequant='vnni' needs the cpu target on a CPU device whose host has "
                                               r"AVX512-VNNI"):
        xe2rt.gemv_w4a16(to_device(np.zeros(256, np.float16), queue), qw, dequant="vnni")
    x = rng.standard_normal((20, 256)).astype(np.float16)
    exact = x.astype(np.float64) @ qw.to_host().dequantize(np.float64).T
    for m in (1, 20):
        y = dpnp.asnumpy(gemm_op.run(to_device(x[:m], queue), qw, variant="auto")[0]).astype(np.float64)
        assert np.abs(y - exact[:m]).max() <= 1e-2 * np.abs(exact).max()


@pytest.mark.skipif(not targets.cpu_has_avx512_vnni(dpctl.SyclQueue("opencl:cpu").sycl_device),
                    reason="the host CPU has no AVX512-VNNI, so the VNNI kernels the AVX2 ones must equal never run "
                           "here")
@pytest.mark.parametrize("group_size,symmetric", [(32, True), (128, False), (64, True)])
def test_avx2_kernels_equal_the_vnni_kernels_bit_for_bit(queue, rng, group_size, symmetric):
    """The AVX2 kernels multiply the same fixed-point x with the same codes as exact integers (vpmaddwd instead of
    vpdpbusd / vpdpwssd) and scale them alike, so their outputs are the VNNI kernels' bit for bit: the GEMV (plain
    and with the fused norm + residual + silu_mul) and the GEMM."""
    n, k = 1000, 2048 + 64
    w = rng.standard_normal((n, k)).astype(np.float32)
    qw = xe2rt.quantize_w4(w, group_size=group_size, symmetric=symmetric).to_device(queue)
    x = to_device(rng.standard_normal(k).astype(np.float16), queue)
    got = {d: dpnp.asnumpy(xe2rt.gemv_w4a16(x, qw, dequant=d)) for d in ("vnni", "avx2")}
    assert np.array_equal(got["vnni"], got["avx2"])
    res = to_device(rng.standard_normal(k).astype(np.float16), queue)
    nw = to_device((1 + 0.1 * rng.standard_normal(k)).astype(np.float16), queue)
    fused = {d: dpnp.asnumpy(xe2rt.gemv_w4a16(x, qw, dequant=d, norm=(nw, 1e-5), residual=res, silu_mul=True)[0])
             for d in ("vnni", "avx2")}
    assert np.array_equal(fused["vnni"], fused["avx2"])
    a = to_device(rng.standard_normal((37, k)).astype(np.float16), queue)
    gemm = {v: dpnp.asnumpy(gemm_op.run(a, qw, variant=v)[0]) for v in ("vnni", "avx2")}
    assert np.array_equal(gemm["vnni"], gemm["avx2"])


@pytest.mark.skipif(not targets.cpu_has_avx512_vnni(dpctl.SyclQueue("opencl:cpu").sycl_device),
                    reason="the host CPU has no AVX512-VNNI, so the VNNI GEMV never runs here")
def test_vnni_gemv_does_not_build_the_default_family(rng):
    """dequant='auto' on a VNNI host picks the VNNI program from the target alone: the default gemv_w4a16 program
    is not loaded for it."""
    from xe2rt.ops import common
    q = dpctl.SyclQueue("opencl:cpu")  # a queue no earlier test has loaded programs for
    qw = xe2rt.quantize_w4(rng.standard_normal((64, 256)).astype(np.float32), group_size=32).to_device(q)
    x = dpnp.asarray(rng.standard_normal((1, 256)).astype(np.float16), sycl_queue=q)
    xe2rt.gemv_w4a16(x, qw, dequant="auto")
    families = {key[1] for key in common._programs if key[0] == q}
    assert gemv_op.VNNI_FAMILY in families and gemv_op.FAMILIES[0] not in families, families
