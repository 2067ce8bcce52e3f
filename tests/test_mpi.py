"""xe2rt.parallel.mpi under a real `mpiexec` (Intel MPI from the impi-rt wheel): correctness on 2 and 4 ranks, device
pointers forced, a bad rank raising on every rank, a crashing rank ending all, and the tp bench under mpiexec.
Skipped, with the reason, only when MPI cannot start here."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WORKER = HERE / "mpi_worker.py"
TIMEOUT = 180  # seconds; a hang shows up as a timeout, not a stuck test run


def _mpiexec():
    beside = Path(sys.executable).parent / "mpiexec"  # the impi-rt wheel installs it next to python
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                               if p])
    return env


def run(ranks, *args, timeout=TIMEOUT):
    return subprocess.run([_mpiexec(), "-n", str(ranks), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=_env(), cwd=HERE.parent)


@pytest.fixture(scope="module")
def mpi_ok():
    try:
        import mpi4py  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"mpi4py is not installed ({exc}); pip install -e '.[test]' brings it with impi-rt")
    if _mpiexec() is None:
        pytest.skip("no mpiexec found (the impi-rt wheel installs one beside python); pip install impi-rt")
    probe = run(2, sys.executable, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()", timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"mpiexec -n 2 cannot start MPI here (exit {probe.returncode}): {probe.stderr[-500:]}")


def _ok_lines(out, ranks):
    for kind in ("w4g128", "w4g32zp", "w8", "fp16"):
        assert len(re.findall(rf"\] ok {kind}:", out)) == ranks, out


@pytest.mark.parametrize("mode", ["check", "check-pointers"])
def test_two_ranks_match_reference(mpi_ok, mode):
    done = run(2, sys.executable, str(WORKER), mode)
    assert done.returncode == 0, done.stdout + done.stderr
    _ok_lines(done.stdout, 2)
    expected = "device pointers (forced)" if mode == "check-pointers" else "host staging (auto)"
    assert f"transport: {expected}" in done.stdout, done.stdout


def test_four_ranks_match_reference(mpi_ok):
    """4 ranks on 2 cores (two per core): slow, but the same bounds hold."""
    done = run(4, sys.executable, str(WORKER), "check")
    assert done.returncode == 0, done.stdout + done.stderr
    _ok_lines(done.stdout, 4)


@pytest.mark.parametrize("mode,rule", [("bad-input", r"rank 1: InputError: MpiMLP: x has K = 383"),
                                       ("bad-shard", r"ranks hold different shards: rank 0: .*g128.*rank 1: .*g32"),
                                       # failures that are not xe2rt errors reach the agreement too (both hung)
                                       ("bad-weight", r"rank 1: InputTypeError: .*got MemoryUSMDevice"),
                                       ("bad-device", r"RankGroup: failed on 1 of 2 ranks.*rank 1: "
                                                      r"SyclDeviceCreationError")])
def test_bad_rank_raises_on_every_rank(mpi_ok, mode, rule):
    done = run(2, sys.executable, str(WORKER), mode, timeout=120)
    assert done.returncode != 0
    assert len(re.findall(r"raised RankError", done.stdout)) == 2, done.stdout + done.stderr
    assert re.search(rule, done.stdout), done.stdout


def test_crashing_rank_aborts_all(mpi_ok):
    done = run(2, sys.executable, str(WORKER), "crash", timeout=120)  # a hang would raise TimeoutExpired
    assert done.returncode != 0
    assert "aborting every rank" in done.stderr and "MPI_Abort" in done.stderr, done.stderr
    assert "returned" not in done.stdout


def test_bench_tp_under_mpiexec(mpi_ok, tmp_path):
    out = tmp_path / "tp.json"
    done = run(2, sys.executable, "-m", "xe2rt", "bench", "--families", "tp", "--quick", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("allreduce transport: host staging") == 1  # only rank 0 prints
    report = json.loads(out.read_text())
    assert report["mpi_ranks"] == 2
    assert [r["variant"] for r in report["rows"]] == ["mpi x1 (rank 0)", "mpi x2"]
    assert all(r["seconds"] > 0 for r in report["rows"])
    refused = run(2, sys.executable, "-m", "xe2rt", "bench", "--families", "gemv_fp16", "--quick", "--json",
                  str(tmp_path / "x.json"))
    assert refused.returncode != 0 and "only the tp family runs" in refused.stderr
