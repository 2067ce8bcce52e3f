"""Paths of the shipped kernels; the build itself is xe2rt.build (in the package, so `python -m xe2rt build` works
from a wheel). Importing this module puts the repository first on sys.path, so the scripts use this checkout's xe2rt."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from xe2rt.build.aot import OCLOC_DEVICE  # noqa: E402,F401
from xe2rt.build.builder import MANIFEST, load_manifest, sha256_bytes, sha256_file, write_json_atomic  # noqa: E402,F401
from xe2rt.build.spec import TARGETS, XE2_TARGETS  # noqa: E402,F401

SRC_DIR = REPO / "spirv_src"
KERNEL_DIR = REPO / "xe2rt" / "kernels"
REBUILD_COMMAND = "python build_scripts/build_spirv.py && python build_scripts/aot.py"
