"""Paths and manifest I/O shared by the SPIR-V build and the ahead-of-time (ocloc) check."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC_DIR = REPO / "spirv_src"
KERNEL_DIR = REPO / "xe2rt" / "kernels"
MANIFEST = "manifest.json"
TARGETS = ("bmg", "lnl", "cpu")
XE2_TARGETS = ("bmg", "lnl")
OCLOC_DEVICE = {"bmg": "bmg", "lnl": "lnl-m"}
REBUILD_COMMAND = "python build_scripts/build_spirv.py && python build_scripts/aot.py"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(Path(path).read_bytes())


def load_manifest(kernel_dir: Path = KERNEL_DIR) -> dict:
    path = kernel_dir / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write_json_atomic(path: Path, data: dict) -> None:
    """Write to a temporary name and move it into place, so a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
