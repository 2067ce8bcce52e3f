"""The OpenCL C -> SPIR-V toolchain every xe2rt binary goes through: clang-15, llvm-link-15 (several sources only),
llvm-spirv-15, spirv-val. The options are those of the shipped kernels; changing them changes every binary."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..errors import BuildError

CLANG = "clang-15"
LLVM_LINK = "llvm-link-15"
LLVM_SPIRV = "llvm-spirv-15"
SPIRV_VAL = "spirv-val"
# -disable-llvm-passes: llvm-spirv-15 cannot translate what clang-15's -O2 pipeline emits for some kernels (`freeze`,
# unstructured merge blocks); both the Intel CPU runtime and IGC optimize the SPIR-V themselves.
CLANG_OPTIONS = ["-cl-std=CL2.0", "-target", "spir64", "-O2", "-Xclang", "-disable-llvm-passes",
                 "-Xclang", "-no-opaque-pointers", "-emit-llvm"]
SPIRV_OPTIONS = ["--spirv-ext=+SPV_INTEL_subgroups", "--spirv-allow-unknown-intrinsics=llvm.x86,llvm.prefetch"]
# The reflection build (xe2rt.build.reflect reads argument names and C types from it): clang keeps the names only
# with -cl-kernel-arg-info, llvm-spirv keeps the C types as OpStrings only when asked. Both add to the module, so the
# shipped binary is built without them and the reflection build must agree with it on everything else.
ARG_INFO_CLANG_OPTIONS = ["-cl-kernel-arg-info"]
ARG_INFO_SPIRV_OPTIONS = ["--preserve-ocl-kernel-arg-type-metadata-through-string"]
FP16_PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"
# clang-15's messages for half used without that pragma
_HALF_DISABLED = re.compile(r"of type '[^']*\bhalf' is not allowed|requires cl_khr_fp16|"
                            r"half precision constant requires|type 'half' requires")
INSTALL_HINT = "apt-get install -y clang-15 llvm-15 llvm-spirv-15 spirv-tools"


def tool_version(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True)
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


def compilers() -> dict:
    """Versions of the tools that made the shipped binaries (llvm-link is used only for several sources)."""
    return {name: tool_version(name) for name in (CLANG, LLVM_SPIRV, SPIRV_VAL)}


def require_tools(tools=(CLANG, LLVM_SPIRV, SPIRV_VAL)) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise BuildError(f"the SPIR-V build needs {', '.join(missing)}, not found on PATH: {INSTALL_HINT}")


def run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    """Run a tool; on failure raise BuildError with its own message (clang's names file:line:column)."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        where = f" (in {cwd})" if cwd else ""
        raise BuildError(f"{what} failed (exit {proc.returncode}){where}:\n{proc.stdout}{proc.stderr}".rstrip()
                         + f"\ncommand: {' '.join(cmd)}")
    return proc.stdout


def spirv_options(extensions=()) -> list[str]:
    """llvm-spirv's options for a module that asks for further SPIR-V `extensions` (spec.SPIRV_EXTENSIONS)."""
    return [*SPIRV_OPTIONS, *(f"--spirv-ext=+{e}" for e in extensions)]


def compile_spirv(sources: list[Path], clang_args: list[str], out: Path, work: Path, what: str,
                  arg_info: bool = False, extensions=()) -> str:
    """Compile OpenCL C `sources` (one module) to validated SPIR-V at `out`.

    Each source compiles in its own folder, named by its file name, with `-I .` first: the command line the shipped
    kernels have always had (so their binaries stay byte-identical). Several sources are linked with llvm-link."""
    extra_clang = ARG_INFO_CLANG_OPTIONS if arg_info else []
    bitcode = []
    for n, source in enumerate(sources):
        bc = work / f"{n}_{source.stem}.bc"
        try:
            run([CLANG, *CLANG_OPTIONS, *extra_clang, *clang_args, "-c", source.name, "-o", str(bc)],
                f"{CLANG} compiling {source.name} for {what}", cwd=source.parent)
        except BuildError as exc:
            if _HALF_DISABLED.search(str(exc)):
                raise BuildError(f"{exc}\nhint: OpenCL C 2.0 allows half scalars and half arithmetic only after "
                                 f"'{FP16_PRAGMA}' (put it at the top of {source.name})") from None
            raise
        bitcode.append(bc)
    if len(bitcode) > 1:
        require_tools((LLVM_LINK,))
        linked = work / "linked.bc"
        run([LLVM_LINK, *map(str, bitcode), "-o", str(linked)], f"{LLVM_LINK} linking {what}")
        bitcode = [linked]
    run([LLVM_SPIRV, str(bitcode[0]), "-o", str(out), *spirv_options(extensions),
         *(ARG_INFO_SPIRV_OPTIONS if arg_info else [])], f"{LLVM_SPIRV} translating {what}")
    return validate(out, what)


# spirv-val 2023.1 (Debian's) knows the capability VectorAnyINTEL but still rejects a vector of more than 16 components
# with this message, and stops there.
_ANY_LENGTH = re.compile(r"Illegal number of components \((\d+)\) for TypeVector")


def validate(spv: Path, what: str) -> str:
    """spirv-val on `spv`; returns "spirv-val" when it passed, or what was checked instead: a module declaring
    VectorAnyINTEL whose only complaint is a vector length other than 2-16 passes as "spirv-val up to VectorAnyINTEL"
    (spirv-val stops at its first error, so the rest of that module is checked by the runtime that loads it)."""
    proc = subprocess.run([SPIRV_VAL, str(spv)], capture_output=True, text=True)
    if proc.returncode == 0:
        return "spirv-val"
    message = proc.stdout + proc.stderr
    if _ANY_LENGTH.search(message) and b"SPV_INTEL_vector_compute" in Path(spv).read_bytes():
        return "spirv-val up to VectorAnyINTEL (vectors of any length, which spirv-val 2023.1 rejects)"
    raise BuildError(f"{SPIRV_VAL} validating {what} failed (exit {proc.returncode}):\n{message}".rstrip()
                     + f"\ncommand: {SPIRV_VAL} {spv}")
