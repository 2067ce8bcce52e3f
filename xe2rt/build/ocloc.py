"""Locate Intel's offline compiler (ocloc) that knows Xe2, fetching Debian unstable's build when needed.

Debian 12 ships ocloc 22.43, which predates Xe2. Debian unstable has an ocloc that compiles for `bmg` and
`lnl-m`, but its binaries need a newer glibc than Debian 12's, so they run under their own dynamic loader from a
private root (TOOLCHAIN.md section 4). Nothing is installed system-wide.

    python -m xe2rt.build.ocloc     # find or fetch it, print where and which version
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import BuildError

PACKAGES = ["intel-ocloc", "libigc2", "libigdfcl2", "libigdgmm12", "libc6", "libstdc++6", "libgcc-s1", "zlib1g"]
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xe2rt" / "ocloc-sid"


class Ocloc:
    """A runnable ocloc: `argv_prefix` is prepended to every ocloc command line."""

    def __init__(self, argv_prefix: list[str], origin: str):
        self.argv_prefix = argv_prefix
        self.origin = origin

    def run(self, args: list[str], cwd: str | Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv_prefix + args, cwd=cwd, capture_output=True, text=True)

    def version(self) -> str:
        out = self.run(["--version"])
        text = (out.stdout + out.stderr).strip()
        match = re.search(r"(\d+\.\d+\.\d+(\.\d+)?)", text)
        return match.group(1) if match else text.splitlines()[0] if text else "unknown"


def _debian_archive_url() -> str:
    """The archive URL of this machine's own Debian sources (never a hard-coded host)."""
    candidates: list[str] = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for block in Path(path).read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in block.splitlines() if ":" in line and not line.startswith("#")
            )
            uris = fields.get("URIs", "").split()
            suites = fields.get("Suites", "")
            if uris and "security" not in suites and "security" not in uris[0]:
                candidates.append(uris[0])
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        if os.path.exists(path):
            for line in Path(path).read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "deb" and "security" not in line:
                    url = parts[2] if parts[1].startswith("[") else parts[1]
                    candidates.append(url)
    if not candidates:
        raise BuildError("no Debian archive found in /etc/apt sources; cannot fetch ocloc from Debian unstable")
    return candidates[0]


def _fetch_into(root: Path) -> None:
    missing = [tool for tool in ("apt-get", "dpkg") if shutil.which(tool) is None]
    if missing:  # subprocess would say only "No such file or directory: 'apt-get'"
        raise BuildError(f"no Xe2-capable ocloc on PATH or in {root}, and it cannot be fetched here: fetching takes "
                         f"Debian's apt-get and dpkg ({', '.join(missing)} not found); install Intel's ocloc (package "
                         f"intel-ocloc, with bmg support) on PATH")
    work = Path(tempfile.mkdtemp(prefix="xe2rt-ocloc-"))
    src_list = work / "sid.list"
    src_list.write_text(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {_debian_archive_url()} sid main\n")
    (work / "lists" / "partial").mkdir(parents=True)
    opts = [
        f"-oDir::Etc::SourceList={src_list}", "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={work / 'lists'}", f"-oDir::Cache={work / 'cache'}",
    ]
    (work / "cache" / "archives" / "partial").mkdir(parents=True)
    print(f"[ocloc] fetching Debian unstable packages: {' '.join(PACKAGES)}", file=sys.stderr)
    subprocess.run(["apt-get", *opts, "update", "-qq"], check=True)
    debs = work / "debs"
    debs.mkdir()
    subprocess.run(["apt-get", *opts, "download", "-qq", *PACKAGES], check=True, cwd=debs)
    staging = Path(str(root) + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(staging)], check=True)
    lib = staging / "usr/lib/x86_64-linux-gnu"
    iga = sorted(lib.glob("libiga64.so.*"))
    if iga and not (lib / "libiga64.so").exists():
        (lib / "libiga64.so").symlink_to(iga[0].name)  # `ocloc disasm` dlopens the unversioned name
    shutil.rmtree(root, ignore_errors=True)
    os.replace(staging, root)
    shutil.rmtree(work, ignore_errors=True)


def _private_ocloc(root: Path) -> Ocloc | None:
    lib = root / "usr/lib/x86_64-linux-gnu"
    binaries = sorted((root / "usr/bin").glob("ocloc-*"))
    loader = lib / "ld-linux-x86-64.so.2"
    if not binaries or not loader.exists():
        return None
    return Ocloc([str(loader), "--library-path", str(lib), str(binaries[-1])], origin=f"Debian unstable in {root}")


def find_ocloc(cache: Path = DEFAULT_CACHE, fetch: bool = True) -> Ocloc:
    """ocloc from PATH if it knows bmg, else the cached Debian-unstable one, else fetch it (when allowed)."""
    on_path = shutil.which("ocloc")
    if on_path:
        candidate = Ocloc([on_path], origin=on_path)
        probe = candidate.run(["compile", "--help"])
        if "bmg" in (probe.stdout + probe.stderr):
            return candidate
    found = _private_ocloc(cache)
    if found is None and fetch:
        _fetch_into(cache)
        found = _private_ocloc(cache)
    if found is None:
        raise BuildError(f"no Xe2-capable ocloc on PATH or in {cache}; run `python -m xe2rt.build.ocloc` to fetch one")
    return found


if __name__ == "__main__":
    tool = find_ocloc()
    print(tool.origin, tool.version())
