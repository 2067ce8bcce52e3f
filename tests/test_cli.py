"""The README's commands: `python -m xe2rt info` and `python -m xe2rt bench` (quick mode checks the machinery;
real figures come from the full run, never from tests)."""
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "xe2rt", *args], capture_output=True, text=True, timeout=600)


def test_info_lists_device_target_and_aot():
    proc = run("info", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    cpu = [d for d in data["devices"] if d["type"] == "cpu"]
    assert cpu and cpu[0]["target"] == "cpu"
    assert data["binaries"]["bmg/gemv_fp16.spv"]["aot"]["kernels"]["gemv_fp16"]["simd_size"] == 16


def test_bench_quick_writes_rows(tmp_path):
    """The command's plumbing on two families (every family's quick rows: .ci/run's bench step, which checks its JSON
    with xe2rt.bench.report.check_complete)."""
    out = tmp_path / "bench.json"
    proc = run("bench", "--quick", "--device", "opencl:cpu", "--families", "gemv_fp16", "decode_attention",
               "--json", str(out), "--plot", str(tmp_path / "r"))  # no suffix: .png is added
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["read_gbps"] > 0 and report["device"]
    assert {r["family"] for r in report["rows"]} == {"gemv_fp16", "decode_attention"}
    for row in report["rows"]:
        assert row["seconds"] > 0 and row["wall_seconds"] > 0
    assert (tmp_path / "r.png").stat().st_size > 0 and f"wrote {tmp_path / 'r.png'}" in proc.stderr
    assert "device read bandwidth (stream_read)" in proc.stdout


def test_report_completeness_check(tmp_path):
    from xe2rt.bench import FAMILIES, report
    path = tmp_path / "r.json"
    rows = [{"family": f, "seconds": 1e-3, "wall_seconds": 2e-3} for f in FAMILIES]
    path.write_text(json.dumps({"rows": rows}))
    report.check_complete(path)
    path.write_text(json.dumps({"rows": rows[1:]}))
    with pytest.raises(SystemExit, match=list(FAMILIES)[0]):
        report.check_complete(path)


def test_bench_decode_layers_variable(monkeypatch):
    """XE2RT_BENCH_DECODE_LAYERS is read in xe2rt.config like every variable: a bad value is a ConfigError naming it
    (a bare int() gave a ValueError traceback from the bench)."""
    from xe2rt import config
    from xe2rt.errors import ConfigError
    monkeypatch.delenv("XE2RT_BENCH_DECODE_LAYERS", raising=False)
    assert config.bench_decode_layers(4) == 4
    monkeypatch.setenv("XE2RT_BENCH_DECODE_LAYERS", " 2 ")
    assert config.bench_decode_layers(4) == 2
    for bad in ("abc", "0", "-1", "1.5"):
        monkeypatch.setenv("XE2RT_BENCH_DECODE_LAYERS", bad)
        with pytest.raises(ConfigError, match=f"XE2RT_BENCH_DECODE_LAYERS={bad!r} must be a positive integer"):
            config.bench_decode_layers(4)


@pytest.mark.parametrize("args", [["bench", "--families", "gemv_fp61"], ["bench", "--iters", "ten"],
                                  ["info", "--bogus"], ["generate"]])
def test_bad_command_line_is_one_line(args, capsys):
    """argparse's own errors are one line and status 2 like every other mistake (its usage block listed the 14
    bench families three times)."""
    from xe2rt.__main__ import main
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "error: " in err, err


def test_row_peak_brackets_keep_the_runs_fma_peak():
    """time_rounds measures fma_peak around each window for the row's roofline; the run's figure (the JSON's
    fma_gflops, the roof compute-bound rows are quoted against) stays the one measured at the start."""
    import dpnp
    import numpy as np
    from xe2rt.bench.harness import BenchContext
    from xe2rt.ops import gemv_fp16
    ctx = BenchContext(device="opencl:cpu", quick=True)
    start = ctx.measure_fma_peak(10000)
    assert ctx.fma_gflops == start > 0
    x = dpnp.ones(64, dtype=np.float16, sycl_queue=ctx.queue)
    w = dpnp.ones((64, 64), dtype=np.float16, sycl_queue=ctx.queue)
    (seconds, _, _, roof), = ctx.time_rounds([lambda i: gemv_fp16.run(x, w)[1]], [w.nbytes], rounds=1, flops=[8192])
    assert seconds > 0 and roof and ctx.fma_gflops == start


def test_softmax_stats_row_is_its_own_family():
    """The softmax_stats row the routing bench adds is labelled softmax_stats, so the selftest no longer quotes it
    against the published softmax + top-K figure and the softmax_topk estimate (it was filed as softmax_topk)."""
    import numpy as np
    from xe2rt import selftest
    from xe2rt.bench import routing
    from xe2rt.bench.harness import BenchContext
    ctx = BenchContext(device="opencl:cpu", quick=True)
    row = routing._stats_row(ctx, np.random.default_rng(0), vocab=1024)
    assert row.family == "softmax_stats" and row.family not in selftest.SEED_FIGURES
