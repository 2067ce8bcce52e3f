"""Building kernels: OpenCL C (or prebuilt SPIR-V) -> per-target SPIR-V with a manifest of signatures, and optionally
ocloc's ahead-of-time report for bmg/lnl. One mechanism for the shipped families (build_scripts/ wraps it) and for
users (`python -m xe2rt build`, docs/build.md).

- spec: the .toml format (sources, per-target constants / defines / options, variants as override tables)
- toolchain: clang-15 / llvm-spirv-15 / spirv-val with the shipped options
- reflect: kernel signatures and attributes read from SPIR-V
- builder: modules -> binaries + manifest entries
- aot, ocloc, hotloop: the ahead-of-time compile and its ISA report
- cli: the `build` subcommand
Nothing here imports dpctl.
"""
from .builder import MANIFEST, build, load_manifest, write_json_atomic  # noqa: F401
from . import reflect  # noqa: F401  (reflect.reflect(spirv_bytes) -> signatures)
from .spec import TARGETS, XE2_TARGETS, Module, Target, load_spec  # noqa: F401
