"""What a new user meets in the first hour: import order, the command line's errors, the notebooks as committed, the
README's shape. Subprocesses run from the repository root, so they import this checkout's xe2rt."""
import ast
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RUNTIME = Path(sys.prefix) / "lib" / "libintelocl.so"


def python(code: str, env_update: dict | None = None, drop=("OCL_ICD_FILENAMES",), timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("XE2RT_")}
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def cli(*args, env_update=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XE2RT_")}
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-m", "xe2rt", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


# --- import order -------------------------------------------------------------------------------------------------

def test_hook_line_points_at_the_pip_runtime():
    """The one line of xe2rt_icd.pth, run as site.py runs it, sets OCL_ICD_FILENAMES only when it is unset. The
    process starts with XE2RT_NO_ICD_SETUP=1 so that an installed copy of the hook cannot be what sets it."""
    line = (ROOT / "xe2rt_icd.pth").read_text().strip()
    assert "\n" not in line and line.startswith("import ")  # site.py executes only lines starting with import
    assert RUNTIME.exists(), "the intel-opencl-rt wheel's libintelocl.so is a dependency"
    show = (f"import os; before = os.environ.get('OCL_ICD_FILENAMES'); os.environ.pop('XE2RT_NO_ICD_SETUP', None); "
            f"exec({line!r}); print(before, os.environ.get('OCL_ICD_FILENAMES'))")
    off = {"XE2RT_NO_ICD_SETUP": "1"}
    assert python(show, off).stdout.split() == ["None", str(RUNTIME)]
    assert python(show, {**off, "OCL_ICD_FILENAMES": "/mine.so"}, drop=()).stdout.split() == ["/mine.so", "/mine.so"]
    keep_off = show.replace("os.environ.pop('XE2RT_NO_ICD_SETUP', None); ", "")
    assert python(keep_off, off).stdout.split() == ["None", "None"]


def test_hook_is_installed_with_the_package():
    """The install (wheel or editable) put the hook beside the package; if this fails, reinstall: pip install -e ."""
    files = [str(f) for f in metadata.files("xe2rt") or []]
    assert "xe2rt_icd.pth" in files, f"xe2rt_icd.pth not in the installed xe2rt's RECORD; reinstall ({files[:5]})"
    installed = next(f for f in metadata.files("xe2rt") if str(f) == "xe2rt_icd.pth").locate()
    assert Path(installed).read_text() == (ROOT / "xe2rt_icd.pth").read_text()


def test_dpnp_first_script_works():
    """A script that uses dpnp before it imports xe2rt, started with no OCL_ICD_FILENAMES in its environment."""
    done = python("import dpnp\nx = dpnp.ones(4, dtype='float16')\nimport numpy as np, xe2rt\n"
                  "w = dpnp.asarray(np.eye(4, dtype=np.float16), sycl_queue=x.sycl_queue)\n"
                  "print(dpnp.asnumpy(xe2rt.gemv_fp16(x, w)).tolist(), x.sycl_device.filter_string)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1.0,", "1.0,", "1.0,", "1.0]", "opencl:cpu:0"]


def test_late_import_says_what_to_do():
    """When SYCL listed its devices before the runtime was visible (the hook missing), importing xe2rt says so, with
    the fix, instead of leaving dpctl's 'Default device is unavailable' unexplained."""
    done = python("import os\nos.environ.pop('OCL_ICD_FILENAMES', None)  # as if the start-up hook were missing\n"
                  "import dpctl\ndpctl.get_devices()\nimport xe2rt")
    message = done.stderr
    assert "was not visible when SYCL first listed devices" in message, message
    assert f"export OCL_ICD_FILENAMES={RUNTIME}" in message and "xe2rt_icd.pth" in message
    if done.returncode != 0:  # no device at all: an error, one Python traceback ending in xe2rt's TargetError
        assert "TargetError: no SYCL device" in message


def test_target_checked_at_import_in_any_case():
    bad = python("import xe2rt", {"XE2RT_TARGET": "gpu"})
    assert bad.returncode != 0 and "ConfigError: XE2RT_TARGET='gpu' is not a known target" in bad.stderr
    good = python("import xe2rt; from xe2rt import config; print(config.forced_target())", {"XE2RT_TARGET": " CPU"})
    assert good.returncode == 0 and good.stdout.strip() == "cpu", good.stderr


# --- command line ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, env, says", [
    (("info",), {"XE2RT_TARGET": "gpu"}, "XE2RT_TARGET='gpu' is not a known target"),
    (("info", "--device", "level_zero:gpu"), {}, "device filter 'level_zero:gpu' matches no SYCL device"),
    (("bench", "--quick", "--device", "opencl:accelerator"), {}, "devices here: opencl:cpu:0"),
    (("info",), {"XE2RT_NO_ICD_SETUP": "yes"}, "XE2RT_NO_ICD_SETUP='yes'"),
    (("bench", "--families", "decode", "--peer", "llamacpp=/tmp"), {}, "unknown peer 'llamacpp'; supported: llama.cpp"),
    (("bench", "--families", "decode", "--peer", "llama.cpp=/tmp"), {}, "/tmp has no llama-bench, llama-quantize"),
])
def test_user_errors_are_one_line_exit_2(args, env, says):
    done = cli(*args, env_update=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_debug_shows_the_traceback():
    for args in (("--debug", "info"), ("info", "--debug")):
        done = cli(*args, env_update={"XE2RT_TARGET": "gpu"})
        assert done.returncode != 0 and "Traceback" in done.stderr and "ConfigError" in done.stderr, done.stderr


def test_bench_refuses_to_overwrite_before_measuring(tmp_path):
    out = tmp_path / "old.json"
    out.write_text("{}")
    done = cli("bench", "--quick", "--json", str(out))
    assert done.returncode == 2 and "--overwrite" in done.stderr and out.read_text() == "{}"
    assert "[0] measuring" not in done.stderr  # refused before anything ran
    # a folder as the report file: refused before measuring, not after the run with a traceback
    done = cli("bench", "--quick", "--json", str(tmp_path), "--overwrite")
    assert done.returncode == 2 and "it is a folder, not a file" in done.stderr and "Traceback" not in done.stderr
    assert "[0] measuring" not in done.stderr


def test_bench_default_json_gets_a_free_name(tmp_path, monkeypatch):
    from xe2rt.bench import report
    monkeypatch.chdir(tmp_path)
    assert report.output_path(None, False) == report.DEFAULT_JSON
    report.DEFAULT_JSON.parent.mkdir()
    report.DEFAULT_JSON.write_text("{}")
    assert report.output_path(None, False) == report.DEFAULT_JSON.with_name("bench-2.json")
    assert report.output_path(None, True) == report.DEFAULT_JSON


def test_info_is_one_screen_and_isa_adds_the_hot_loops():
    short, full = cli("info"), cli("info", "--isa")
    assert short.returncode == 0 and full.returncode == 0, short.stderr + full.stderr
    assert len(short.stdout.splitlines()) <= 30 and "-> target cpu" in short.stdout
    assert "hot loop" not in short.stdout.lower().replace("hot loops: python -m xe2rt info --isa", "")
    assert "gemv_fp16" in full.stdout and len(full.stdout.splitlines()) > 100
    assert json.loads(cli("info", "--json").stdout)["hot_loops"]


# --- messages -------------------------------------------------------------------------------------------------------

def test_two_queues_of_one_device_told_apart():
    import dpctl
    import dpnp
    import numpy as np
    import xe2rt
    device = dpctl.SyclDevice("opencl:cpu")
    q1, q2 = dpctl.SyclQueue(device), dpctl.SyclQueue(device)
    x = dpnp.ones(64, dtype=np.float16, sycl_queue=q1)
    qw = xe2rt.quantize_w4(np.ones((16, 64), np.float16), group_size=32).to_device(q2)
    with pytest.raises(xe2rt.InputError) as err:
        xe2rt.gemv_w4a16(x, qw)
    text = str(err.value)
    addresses = re.findall(r"queue (0x[0-9a-f]+)", text)
    assert len(set(addresses)) == 2 and "opencl:cpu:0" in text and "qw = qw.to_device(x.sycl_queue)" in text


# --- notebooks and README -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_committed_with_outputs_and_inline_plots(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not any(re.search(r"matplotlib\.use\(|%matplotlib (?!inline)", c.source) for c in code), \
        "plots must show inline: no matplotlib.use(...) in a notebook"
    missing = [i for i, c in enumerate(code) if c.source.strip() and c.execution_count is None]
    assert not missing, f"code cells {missing} were not executed: run the README's notebook command"
    assert all(o.output_type != "error" for c in code for o in c.outputs)
    if any("plt." in c.source or "fig" in c.source for c in code):
        assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "a plot cell shows no figure"


def test_readme_shape():
    text = (ROOT / "README.md").read_text()
    long = [(i + 1, len(line)) for i, line in enumerate(text.splitlines()) if len(line) > 120]
    assert not long, f"README lines over 120 characters: {long}"
    assert "../" not in text, "the README refers only to files inside the repository"
    for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", text):
        assert (ROOT / target).exists(), f"README links to a missing file: {target}"
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = re.search(r"```bash\n(python -m pytest[^\n]*)\n```", text).group(1)
    assert test_command in ci, f".ci/run must call the README's test command {test_command!r}"


def test_bench_package_has_no_import_cycle():
    """Every import between bench modules, function-level ones included, points one way."""
    bench = ROOT / "xe2rt" / "bench"
    graph = {}
    for path in bench.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                deps |= {n.split(".")[0] for n in names if (bench / f"{n.split('.')[0]}.py").exists()}
        graph[path.stem] = deps - {path.stem}
    state = {}

    def visit(name, stack):
        assert state.get(name) != "open", f"import cycle: {' -> '.join(stack + [name])}"
        if state.get(name) is None:
            state[name] = "open"
            for dep in graph.get(name, ()):
                visit(dep, stack + [name])
            state[name] = "done"
    for name in graph:
        visit(name, [])


def test_readme_quick_start_runs():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S).group(1)
    done = python(block)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] in ("bmg", "lnl", "cpu")
