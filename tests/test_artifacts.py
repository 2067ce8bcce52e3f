"""Shipped binaries: manifest verification at load, program reuse, and the recorded ahead-of-time report."""
import shutil

import numpy as np
import pytest

import xe2rt
from xe2rt import artifacts, config

from conftest import to_device

KERNEL_DIR = config.kernel_dir()
MANIFEST = artifacts.manifest(KERNEL_DIR)


@pytest.fixture
def kernel_copy(tmp_path, monkeypatch):
    """A private copy of the shipped kernels, selected through XE2RT_KERNEL_DIR."""
    copy = tmp_path / "kernels"
    shutil.copytree(KERNEL_DIR, copy)
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(copy))
    artifacts.clear_caches()
    yield copy
    artifacts.clear_caches()


def run_gemv(queue):
    return xe2rt.gemv_fp16(to_device(np.ones(64, np.float16), queue), to_device(np.ones((4, 64), np.float16), queue),
                           target="cpu")


def test_flipped_byte_is_refused(queue, kernel_copy):
    path = kernel_copy / "cpu" / "gemv_fp16.spv"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(xe2rt.ArtifactError, match=r"gemv_fp16\.spv does not match its manifest.*rebuild with: "
                                                  r"python build_scripts/build_spirv\.py"):
        run_gemv(queue)


def test_missing_binary_is_refused(queue, kernel_copy):
    (kernel_copy / "cpu" / "gemv_fp16.spv").unlink()
    with pytest.raises(xe2rt.ArtifactError, match=r"missing kernel binary .*cpu/gemv_fp16\.spv; rebuild with"):
        run_gemv(queue)


def test_intact_copy_loads(queue, kernel_copy):
    assert float(run_gemv(queue)[0]) == 64.0


def test_program_built_once_and_kernels_reused(queue):
    first = artifacts.load(queue, "cpu", "gemv_fp16")
    run_gemv(queue)
    assert artifacts.load(queue, "cpu", "gemv_fp16") is first
    assert first.kernel() is first.kernel("gemv_fp16")


def test_every_binary_listed_and_hashed():
    import hashlib
    for key, entry in MANIFEST["artifacts"].items():
        data = (KERNEL_DIR / key).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], key
        assert entry["sources_sha256"] and entry["kernels"] and "constants" in entry


@pytest.mark.parametrize("key", sorted(k for k, e in MANIFEST["artifacts"].items() if e["target"] in ("bmg", "lnl")))
def test_xe2_binaries_have_a_clean_aot_report(key):
    """The offline compiler's report recorded by build_scripts/aot.py: SIMD16, no spills, for this exact SPIR-V."""
    entry = MANIFEST["artifacts"][key]
    aot = entry.get("aot")
    assert aot, f"{key}: no AOT report; run python build_scripts/aot.py"
    assert aot["spirv_sha256"] == entry["sha256"]
    assert aot["device"] == {"bmg": "bmg", "lnl": "lnl-m"}[entry["target"]]
    assert set(aot["kernels"]) == set(entry["kernels"])
    for name, k in aot["kernels"].items():
        assert k["simd_size"] == 16, (key, name)
        assert k["spill_size"] == 0, (key, name)
        if entry["aot_spec"].get("expect_dpas"):
            assert k["has_dpas"] and k["dpas_instructions"] > 0, (key, name)
