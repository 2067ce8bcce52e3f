"""python -m xe2rt selftest: the report, failures named, the native-vs-spec comparison (on the software built-ins
here: it must find no difference, and name the lanes of a deliberately wrong emulation), and bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xe2rt import artifacts, selftest
from xe2rt.checks import builtins

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "xe2rt", "selftest", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.mark.parametrize("target", [None, "bmg"])
def test_report_passes_and_is_complete(tmp_path, target):
    out = tmp_path / "report.json"
    env = {"XE2RT_TARGET": target} if target else {}
    proc = run_cli("--quick", "--families", "gemv_w8a16", "softmax_topk", "--no-bench", "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(out.read_text())
    assert report["passed"] is True and report["versions"]["dpctl"] and report["binaries"]
    dev = report["devices"][0]
    assert dev["device"]["target"] == (target or "cpu") and dev["device"]["driver"]
    assert {c["family"] for c in dev["checks"]} == {"gemv_w8a16", "softmax_topk"}
    for c in dev["checks"]:
        assert c["passed"] and c["error"] <= c["bound"] and c["bound_rule"], c
    assert dev["native_builtins"]["skipped"]  # the CPU device has no native 2D block IO / DPAS
    assert "result: PASS" in proc.stdout and str(out) in proc.stdout


def test_corrupted_reference_fails_and_names_the_case(queue, monkeypatch):
    from xe2rt.reference import quant
    real = quant.gemv_w8
    monkeypatch.setattr(quant, "gemv_w8", lambda x, qw: real(x, qw) * 1.01)
    records = selftest.run_checks(queue, "cpu", ["gemv_w8a16"], quick=True)
    assert records and all(not r["passed"] for r in records)
    assert all(r["error"] > r["bound"] and r["case"].startswith("N=") for r in records)
    text = selftest.summary({"versions": {}, "quick": True, "passed": False, "devices": [{
        "device": {"name": "x", "type": "cpu", "driver": "d", "target": "cpu"}, "checks": records,
        "native_builtins": {"skipped": "n/a", "records": []}}]})
    assert f"FAIL gemv_w8a16[{records[0]['case']}]" in text


def test_corrupted_binary_fails_and_names_the_case(tmp_path, queue, monkeypatch):
    kernels = tmp_path / "kernels"
    src = Path(artifacts.__file__).parent / "kernels"
    (kernels / "cpu").mkdir(parents=True)
    (kernels / "manifest.json").write_bytes((src / "manifest.json").read_bytes())
    data = bytearray((src / "cpu" / "gemv_w8a16.spv").read_bytes())
    data[100] ^= 0xFF
    (kernels / "cpu" / "gemv_w8a16.spv").write_bytes(bytes(data))
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(kernels))
    artifacts.clear_caches()
    try:
        records = selftest.run_checks(queue, "cpu", ["gemv_w8a16"], quick=True)
    finally:
        monkeypatch.delenv("XE2RT_KERNEL_DIR")
        artifacts.clear_caches()
    assert records and all(not r["passed"] for r in records)
    assert all("does not match its manifest" in r["detail"] for r in records)


def test_nothing_checked_is_not_a_pass(tmp_path, monkeypatch, capsys):
    """Families with no check for the device's target ran nothing and said PASS: now a FAIL naming why (here a
    family whose checks are all for another target)."""
    from xe2rt import checks as C
    from xe2rt.__main__ import main
    real = C.checks_of
    monkeypatch.setattr(C, "checks_of", lambda family, quick: [c for c in real(family, quick) if c.targets == ("bmg",)])
    out = tmp_path / "r.json"
    assert main(["selftest", "--quick", "--no-bench", "--families", "gemv_fp16", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "no check of the families ['gemv_fp16'] applies to target cpu" in text and "result: FAIL" in text
    assert json.loads(out.read_text())["passed"] is False


def test_report_hashes_the_binaries_as_they_are(tmp_path, monkeypatch):
    """The report's sha256 are those of the files present (it copied the manifest's), and the folder is named; a
    damaged binary a bench family loads makes the run a FAIL with its report (it exited 2 with no report)."""
    kernels = tmp_path / "kernels"
    src = Path(artifacts.__file__).parent / "kernels"
    import shutil
    shutil.copytree(src, kernels)
    data = bytearray((kernels / "cpu" / "gemv_w4a16.spv").read_bytes())
    data[100] ^= 0xFF
    (kernels / "cpu" / "gemv_w4a16.spv").write_bytes(bytes(data))
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(kernels))
    hashes = selftest.binary_hashes()
    import hashlib
    assert hashes["cpu/gemv_w4a16.spv"] == hashlib.sha256(bytes(data)).hexdigest()
    out = tmp_path / "r.json"
    proc = run_cli("--quick", "--families", "gemv_w4a16", "--json", str(out), env={"XE2RT_KERNEL_DIR": str(kernels)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["kernel_dir"] == str(kernels) and not report["passed"]
    assert any(c["family"] == "bench" and "does not match its manifest" in c["detail"]
               for c in report["devices"][0]["checks"])


# The no-difference half runs in tests/test_block2d.py and test_gemm_fp16_ult.py (the same comparisons, every target).
SUBSET = ("read 16b 1r16x1c", "read 16b 8r16x2c", "read transform 16b 16r16x1c", "dpas A/B/C layouts and numerics")


def test_native_comparison_names_the_lanes_of_a_wrong_emulation(tmp_path, queue, monkeypatch):
    """Build the unit-test kernels with a fault injected into the software 2D read (lane 5 reads lane 4's column),
    load them as the 'native' family, and the comparison must name lane 5 and no other."""
    import argparse
    from xe2rt.build import cli as build_cli
    src = REPO / "spirv_src"
    parser = argparse.ArgumentParser()
    build_cli.add_arguments(parser)
    args = parser.parse_args([str(src / "gemm_fp16_ult.cl"), "-I", str(src), "-o", str(tmp_path / "k"),
                              "--targets", "cpu", "--name", builtins.NATIVE, "-D", "DPAS_EMU=1", "-D",
                              "BLOCK2D_EMU=1", "-D", "BLOCK2D_EMU_FAULT_LANE=5"])
    assert build_cli.run(args) == 0
    tmp_path = tmp_path / "k"
    monkeypatch.setenv("XE2RT_KERNEL_DIR", str(tmp_path))
    artifacts.clear_caches()
    try:
        results = {name: run(queue, "cpu") for name, run in builtins.comparisons(builtins.NATIVE) if name in SUBSET}
    finally:
        monkeypatch.delenv("XE2RT_KERNEL_DIR")
        artifacts.clear_caches()
    plain = [r for name, r in results.items() if name.startswith("read 16b")]
    assert plain and all(not r.passed for r in plain)
    for r in plain:
        assert "lanes [5] differ" in r.detail and "lane 5 components" in r.detail, r.detail
    # the transform and transposed reads and DPAS do not go through the faulty macro
    assert all(r.passed for name, r in results.items() if not name.startswith("read 16b")), results


@pytest.mark.parametrize("args, message", [
    (["--device", "level_zero:gpu:7"], "matches no SYCL device"),
    (["--json", "/proc/xe2rt-no/report.json"], "cannot write the report"),
    # a folder that refuses new files, though os.access says yes to root: refused before the run, not after it
    (["--json", "/sys/xe2rt-report.json"], "cannot write the report to /sys/xe2rt-report.json: the folder /sys is "
                                           "not writable"),
    (["--families", "nope"], "unknown check families"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, message):
    if "--json" not in args:
        args = [*args, "--json", str(tmp_path / "report.json")]
    proc = run_cli(*args, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_existing_report_is_kept_unless_overwrite(tmp_path):
    """--json naming an existing file is refused before the run unless --overwrite, as bench's --json (an earlier
    report was replaced silently)."""
    out = tmp_path / "r.json"
    out.write_text("earlier")
    proc = run_cli("--json", str(out), "--families", "gemv_fp16", "--quick", "--no-bench", timeout=300)
    assert proc.returncode == 2 and "exists; pass --overwrite" in proc.stderr and out.read_text() == "earlier"
    proc = run_cli("--json", str(out), "--families", "gemv_fp16", "--quick", "--no-bench", "--overwrite", timeout=300)
    assert proc.returncode == 0 and out.read_text() != "earlier", proc.stderr[-1000:]


def test_a_refused_run_creates_no_folder(tmp_path):
    """A run refused as a usage error leaves nothing behind: the --json path is checked without creating its folders
    (they were created before the device was looked at)."""
    proc = run_cli("--device", "nonsense", "--json", str(tmp_path / "made" / "a" / "r.json"), timeout=120)
    assert proc.returncode == 2 and "matches no SYCL device" in proc.stderr, proc.stderr
    assert not (tmp_path / "made").exists()


def test_device_without_target_is_a_usage_error(monkeypatch):
    from xe2rt import targets
    from xe2rt.errors import TargetError

    def no_target(device, target=None):
        raise TargetError("not an Intel GPU nor a CPU")
    monkeypatch.setattr(targets, "resolve", no_target)
    with pytest.raises(selftest.UsageError, match="has no usable kernel target"):
        selftest._run(type("A", (), {"families": ["gemv_w8a16"], "json": os.devnull, "device": None,
                                     "quick": True, "no_bench": True})())


def test_summary_names_each_bench_rows_variant():
    """Rows of one case run on several variants (the cpu gemv_w4a16 paths) are told apart in the printed table as in
    the JSON."""
    from xe2rt import selftest
    rows = [{"family": "gemv_w4a16", "case": "256x1024 g128", "variant": v, "seconds": 2e-5, "gbps": 8.0}
            for v in ("cpu:magic", "cpu:plain", "cpu:vnni")]
    report = {"versions": {"xe2rt": "x"}, "quick": True, "passed": True,
              "devices": [{"device": {"name": "d", "type": "cpu", "driver": "1", "target": "cpu"}, "checks": [],
                           "native_builtins": {"skipped": "no"}, "bench": rows}]}
    lines = [line for line in selftest.summary(report).splitlines() if line.strip().startswith("bench ")]
    assert len(lines) == 3 and all(v in line for v, line in zip(("cpu:magic", "cpu:plain", "cpu:vnni"), lines))
