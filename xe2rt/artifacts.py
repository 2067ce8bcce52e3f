"""The shipped kernel families: the package's kernel folder (or XE2RT_KERNEL_DIR) loaded through the public loader,
xe2rt.module, like any user's build folder. A family is one module of that folder."""
from __future__ import annotations

from pathlib import Path

import dpctl

from . import config, module
from .errors import ArtifactError

REBUILD_HINT = "rebuild with: python build_scripts/build_spirv.py && python build_scripts/aot.py (see README)"
clear_caches = module.clear


def manifest(kernel_dir: Path | None = None) -> dict:
    kernel_dir = (kernel_dir or config.kernel_dir()).resolve()
    if not (kernel_dir / "manifest.json").is_file():
        raise ArtifactError(f"missing {kernel_dir / 'manifest.json'}; {REBUILD_HINT}")
    return module.read_manifest(kernel_dir)


def load(queue: dpctl.SyclQueue, target: str, family: str) -> module.Module:
    """The family's module for this queue's context and device: binary read and verified once, kernels built on
    first use and then reused."""
    return module.load(config.kernel_dir(), queue=queue, target=target, module=family)
