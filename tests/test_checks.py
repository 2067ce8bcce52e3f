"""The correctness cases the selftest runs (xe2rt.checks). The gemv and moe families' shape cases live only there and
run here on every target's binary; the decoder families' test modules parametrize over their own check modules; the
gemm_fp16 and softmax_topk checks are subsets of tests/test_gemm_fp16.py's and test_routing.py's grids (same
references and bounds), run here in their quick form so the selftest's modules stay proven."""
import pytest

from xe2rt import checks

from conftest import skip_unless_host_runs

FULL = ["gemv_fp16", "gemv_w8a16", "gemv_w4a16", "moe_ffn_w4a16", "softmax_stats"]
CASES = [(c, t) for f in FULL for c in checks.checks_of(f) for t in c.targets]
QUICK = [(c, "cpu") for f in ("gemm_fp16", "softmax_topk") for c in checks.checks_of(f, quick=True)
         if "cpu" in c.targets]


def run(queue, check, target):
    if check.native_xe2:
        pytest.skip("needs the real DPAS / 2D block IO built-ins of an Xe2 GPU; the CPU device has neither "
                    "(the same kernels run here through the software built-ins: the xe2emu cases)")
    skip_unless_host_runs(queue, check)
    result = check.run(queue, target)
    assert result.passed, f"{check} on {target}: {result.describe()}"


@pytest.mark.parametrize("check, target", CASES, ids=[f"{c}-{t}" for c, t in CASES])
def test_check(queue, check, target):
    run(queue, check, target)


@pytest.mark.parametrize("check, target", QUICK, ids=[f"{c}-{t}" for c, t in QUICK])
def test_quick_check(queue, check, target):
    run(queue, check, target)


def test_every_family_has_checks():
    """Every shipped op family has a checks module the selftest runs (a new family without one is not proven)."""
    have = set(checks.families())
    for family in ("gemv_fp16", "gemv_w8a16", "gemv_w4a16", "gemm_fp16", "softmax_topk", "moe_ffn_w4a16",
                   "decoder_small", "decode_attention", "prefill_attention", "gemm_w4a16", "builtins", "llm",
                   "softmax_stats"):
        assert family in have, family
        assert checks.checks_of(family, quick=True), family


def test_case_inputs_are_the_same_in_every_process():
    """A case's seed does not depend on the process: two interpreters with different PYTHONHASHSEED draw the same
    inputs (the seed took strings through hash() before, so every run, and the selftest, drew other inputs)."""
    import os
    import subprocess
    import sys
    code = "from xe2rt.checks._util import rng; print(rng('gemv_w4a16', 1, 4224, 128, False).integers(0, 1 << 30, 4))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout for seed in (1, 2)}
    assert len(outs) == 1, outs
