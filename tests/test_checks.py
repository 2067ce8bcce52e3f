"""The correctness cases the selftest runs (xe2rt.checks), on the CPU device and every target's binary. The decoder
families' test modules parametrize over their own check modules; this file covers the rest."""
import pytest

from xe2rt import checks

FAMILIES = ["gemv_fp16", "gemv_w8a16", "gemv_w4a16", "gemm_fp16", "softmax_topk", "moe_ffn_w4a16"]
CASES = [(c, t) for f in FAMILIES for c in checks.checks_of(f) for t in c.targets]


@pytest.mark.parametrize("check, target", CASES, ids=[f"{c}-{t}" for c, t in CASES])
def test_check(queue, check, target):
    if check.native_xe2:
        pytest.skip("needs the real DPAS / 2D block IO built-ins of an Xe2 GPU; the CPU device has neither "
                    "(the same kernels run here through the software built-ins: the xe2emu cases)")
    result = check.run(queue, target)
    assert result.passed, f"{check} on {target}: {result.describe()}"
