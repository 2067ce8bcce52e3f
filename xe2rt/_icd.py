"""Make the pip-installed Intel OpenCL CPU runtime visible to SYCL (TOOLCHAIN.md section 1).

The `intel-opencl-rt` wheel ships its ICD file with a placeholder path, so the OpenCL ICD loader finds no platform
and `opencl:cpu` does not exist. Pointing OCL_ICD_FILENAMES at the wheel's libintelocl.so fixes that, but only if it
happens before SYCL enumerates platforms, which is why `import xe2rt` does it before importing dpctl. It is done only
when OCL_ICD_FILENAMES is unset (a user's own setting always wins) and can be disabled with XE2RT_NO_ICD_SETUP=1.
"""
from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

from . import config


def pip_opencl_cpu_runtime() -> Path | None:
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


def setup() -> str | None:
    """Set OCL_ICD_FILENAMES when unset; returns the value in force."""
    if "OCL_ICD_FILENAMES" not in os.environ and config.icd_setup_enabled():
        runtime = pip_opencl_cpu_runtime()
        if runtime is not None:
            os.environ["OCL_ICD_FILENAMES"] = str(runtime)
    return os.environ.get("OCL_ICD_FILENAMES")
