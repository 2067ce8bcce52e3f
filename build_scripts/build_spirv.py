"""Compile every kernel family in spirv_src/ for every target into xe2rt/kernels/<target>/<module>.spv.

The build is xe2rt.build, the same one `python -m xe2rt build` runs for users (docs/build.md has the spec format).
Each family is a spec `spirv_src/<family>.toml` with a [targets.X] table for each of bmg, lnl and cpu; its
[variants.NAME] tables are further modules built from the same sources with some values overridden (a variant may
name fewer targets with `build_targets`).

    python build_scripts/build_spirv.py            # rebuild and rewrite the manifest
    python build_scripts/build_spirv.py --check    # rebuild into a temporary folder; fail if anything differs
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import KERNEL_DIR, MANIFEST, REBUILD_COMMAND, SRC_DIR, TARGETS, load_manifest, write_json_atomic

from xe2rt.build import builder, spec
from xe2rt.errors import BuildError


def family_modules() -> list[spec.Module]:
    modules = []
    for path in sorted(SRC_DIR.glob("*.toml")):
        for module in spec.load_spec(path):
            missing = set(TARGETS) - set(module.targets)
            if module.restricted:  # a variant may build for fewer targets (build_targets)
                missing = set()
            if missing or not module.sources:
                raise BuildError(f"{module.origin}: a shipped family needs sources and [targets.X] for each of "
                                 f"{TARGETS} (missing: {sorted(missing)})")
            modules.append(module)
    return modules


def build_all(out_dir: Path, previous: dict) -> dict:
    manifest = builder.build(family_modules(), TARGETS, out_dir, previous)
    manifest["rebuild_command"] = REBUILD_COMMAND
    return manifest


def without_aot(manifest: dict) -> dict:
    return {**manifest, "artifacts": {k: {f: v for f, v in a.items() if f != "aot"}
                                      for k, a in manifest.get("artifacts", {}).items()}}


def check(committed_dir: Path) -> int:
    committed = load_manifest(committed_dir)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = build_all(Path(tmp), committed)
        problems = []
        for key, entry in fresh["artifacts"].items():
            path = committed_dir / key
            if not path.exists():
                problems.append(f"{key}: not committed")
            elif path.read_bytes() != (Path(tmp) / key).read_bytes():
                problems.append(f"{key}: committed binary differs from a fresh build")
        stale = set(committed.get("artifacts", {})) - set(fresh["artifacts"])
        problems += [f"{key}: in the manifest but no longer built" for key in sorted(stale)]
        if without_aot(fresh) != without_aot(committed):
            for key in sorted(set(fresh["artifacts"]) & set(committed.get("artifacts", {}))):
                a, b = without_aot(fresh)["artifacts"][key], without_aot(committed)["artifacts"][key]
                problems += [f"{key}: manifest field {f!r} differs" for f in sorted(set(a) | set(b)) if a.get(f) != b.get(f)]
            if fresh["compilers"] != committed.get("compilers"):
                problems.append(f"compiler versions differ: {fresh['compilers']} vs {committed.get('compilers')}")
    for p in problems:
        print("MISMATCH", p)
    if problems:
        print(f"{len(problems)} mismatches; rebuild with: {REBUILD_COMMAND}")
        return 1
    print(f"check passed: {len(fresh['artifacts'])} binaries match their sources and the manifest")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rebuild into a temporary folder and compare")
    args = parser.parse_args()
    try:
        if args.check:
            return check(KERNEL_DIR)
        previous = load_manifest(KERNEL_DIR)
        manifest = build_all(KERNEL_DIR, previous)
    except BuildError as exc:
        sys.exit(f"build failed: {exc}")
    for stale in set(previous.get("artifacts", {})) - set(manifest["artifacts"]):
        (KERNEL_DIR / stale).unlink(missing_ok=True)
    write_json_atomic(KERNEL_DIR / MANIFEST, manifest)
    print(f"wrote {KERNEL_DIR / MANIFEST} ({len(manifest['artifacts'])} binaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
