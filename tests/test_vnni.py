"""The AVX512-VNNI kernels (gemv_w4a16_vnni, gemm_w4a16_vnni) are chosen only where they can run: what a host
without AVX512-VNNI gets (simulated here by making targets.cpu_has_avx512_vnni false), and the host check itself."""
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


@pytest.fixture
def no_vnni(monkeypatch):
    """This process as on a CPU without AVX512-VNNI (the loader's own caches cleared before and after)."""
    artifacts.clear_caches()
    monkeypatch.setattr(targets, "cpu_has_avx512_vnni", lambda device: False)
    yield
    artifacts.clear_caches()


def test_host_check_reads_the_cpu_flags_and_the_runtime_override(queue, monkeypatch):
    has = "avx512_vnni" in targets.host_cpu_flags()
    assert targets.cpu_has_avx512_vnni(queue.sycl_device) == has
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "skx")  # the CPU runtime would compile for another CPU
    assert not targets.cpu_has_avx512_vnni(queue.sycl_device)


def test_without_vnni_the_fp32_kernels_run(queue, rng, no_vnni):
    qw = xe2rt.quantize_w4(rng.standard_normal((40, 256)).astype(np.float16), group_size=32).to_device(queue)
    assert gemv_op.program_variant(queue, "cpu", None).name == "gemv_w4a16"
    assert gemm_op.resolve_family("native", "cpu", queue) == "gemm_w4a16"
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
    assert not set(families) & {"gemv_w4a16_vnni", "gemm_w4a16_vnni"}


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
