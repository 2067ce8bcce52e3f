"""Make the pip-installed Intel OpenCL CPU runtime visible to SYCL (TOOLCHAIN.md section 1).

The `intel-opencl-rt` wheel ships its ICD file with a placeholder path, so the OpenCL ICD loader finds no platform
and `opencl:cpu` does not exist. Pointing OCL_ICD_FILENAMES at the wheel's libintelocl.so fixes that, but only if it
happens before SYCL enumerates platforms: the SYCL runtime lists platforms once per process, at the first device
query, and never again. Two places do it, both only when OCL_ICD_FILENAMES is unset (a user's own setting always wins)
and both disabled by XE2RT_NO_ICD_SETUP=1:
- the start-up hook `xe2rt_icd.pth` that installing xe2rt puts in site-packages (setup.py), which Python runs before
  any script, so `import dpnp` / `import dpctl` first works too;
- `import xe2rt` itself (setup below), for environments where the hook is missing (e.g. the package on PYTHONPATH).
When neither ran before the first device query, the CPU device is missing for the rest of the process; setup() then
says so with the fix instead of leaving dpctl's "Default device is unavailable" unexplained.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from . import config


def pip_opencl_cpu_runtime() -> Path | None:
    from importlib import metadata  # here, not at import: 50-70 ms that `import xe2rt` needs only without the hook
    try:
        files = metadata.files("intel-opencl-rt") or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "libintelocl.so":
            path = Path(f.locate()).resolve()
            if path.exists():
                return path
    fallback = Path(sys.prefix) / "lib" / "libintelocl.so"
    return fallback if fallback.exists() else None


def fix_text(runtime: Path) -> str:
    return (f"reinstall xe2rt so that its start-up hook xe2rt_icd.pth is in site-packages "
            f"(`pip install --force-reinstall --no-deps xe2rt`, or `pip install -e .` in a clone), "
            f"or `export OCL_ICD_FILENAMES={runtime}` before starting Python, or import xe2rt before dpnp or dpctl")


def setup() -> str | None:
    """Set OCL_ICD_FILENAMES when unset; returns the value in force. Warns (or raises, when SYCL then has no device at
    all) if dpctl was already loaded and SYCL listed its devices without the CPU runtime."""
    if "OCL_ICD_FILENAMES" not in os.environ and config.icd_setup_enabled():
        runtime = pip_opencl_cpu_runtime()
        if runtime is not None:
            os.environ["OCL_ICD_FILENAMES"] = str(runtime)
            if "dpctl" in sys.modules:  # dpnp or dpctl came first: did SYCL list devices already?
                _check_late(runtime)
    return os.environ.get("OCL_ICD_FILENAMES")


def _check_late(runtime: Path) -> None:
    import dpctl
    devices = dpctl.get_devices()  # the first query lists platforms now (with the variable set) or returns the cache
    if any(d.backend.name == "opencl" and d.is_cpu for d in devices):
        return
    message = (f"the Intel OpenCL CPU runtime ({runtime}) was not visible when SYCL first listed devices in this "
               f"process (dpnp or dpctl queried a device before `import xe2rt`), so opencl:cpu is missing until "
               f"Python restarts; fix: {fix_text(runtime)}")
    if not devices:
        from .errors import TargetError
        raise TargetError(f"no SYCL device: {message}")
    import warnings
    warnings.warn(f"xe2rt: {message}", RuntimeWarning, stacklevel=3)
