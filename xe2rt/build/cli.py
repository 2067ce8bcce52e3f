"""python -m xe2rt build SOURCES... -o OUTDIR: per-target SPIR-V, validated, with a manifest (docs/build.md).

Everything is built in a temporary folder and moved into place at the end, so a failed build writes nothing and
leaves an earlier OUTDIR as it was.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import tempfile
from pathlib import Path

from ..errors import BuildError
from . import aot, builder, spec

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Build OpenCL C files (one module, named after the first source or --name), or ONE spec "
                          ".toml, into OUTDIR/<target>/<module>.spv and OUTDIR/manifest.json. See docs/build.md.")
    parser.add_argument("sources", nargs="*", metavar="SOURCE",
                        help="OpenCL C files, prebuilt .spv (used for every target), or one spec .toml")
    parser.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="output folder (replaced whole)")
    parser.add_argument("--targets", default=None,
                        help=f"comma-separated subset of {','.join(spec.TARGETS)} (default: every target declared)")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                        help="preprocessor define; an integer VALUE is also recorded as a constant in the manifest")
    parser.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                        help="include folder for #include \"...\"")
    parser.add_argument("--name", help="module name (default: the first source's stem); not with a spec")
    parser.add_argument("--spirv", action="append", default=[], metavar="TARGET=PATH",
                        help="prebuilt SPIR-V for one target (validated and reflected, not compiled)")
    parser.add_argument("--aot", action="store_true",
                        help="also compile bmg/lnl with ocloc and record its report (SIMD, GRF, spills, hot loop)")
    parser.add_argument("--no-fetch", action="store_true", help="with --aot: do not fetch ocloc if none is found")


def _parse_defines(items: list[str]) -> tuple[dict, dict]:
    """-D NAME=VALUE items -> (integer constants, other defines; "" for a bare -D NAME)."""
    constants, defines = {}, {}
    for item in items:
        name, eq, value = item.partition("=")
        if not IDENT.match(name):
            raise BuildError(f"-D {item!r}: NAME must be a C identifier")
        try:
            constants[name] = int(value, 0)
        except ValueError:
            defines[name] = value if eq else ""
    return constants, defines


def _parse_spirv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        target, eq, path = item.partition("=")
        if not eq or target not in spec.TARGETS or not path:
            raise BuildError(f"--spirv {item!r}: expected TARGET=PATH with TARGET one of {list(spec.TARGETS)}")
        out[target] = str(Path(path).resolve())
    return out


def _parse_targets(text: str | None) -> list[str] | None:
    if text is None:
        return None
    targets = list(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))  # as XE2RT_TARGET: any case
    bad = [t for t in targets if t not in spec.TARGETS]
    if bad or not targets:
        raise BuildError(f"--targets {text!r}: targets are a comma-separated subset of {','.join(spec.TARGETS)}")
    return targets


def modules_from_args(args) -> tuple[list[spec.Module], list[str]]:
    """The modules the command line asks for and the targets to build."""
    if not args.sources and not args.spirv:
        raise BuildError("nothing to build: give OpenCL C sources, one spec .toml, or --spirv TARGET=PATH")
    targets = _parse_targets(args.targets)
    constants, defines = _parse_defines(args.defines)
    spirv = _parse_spirv(args.spirv)
    includes = [str(Path(d).resolve()) for d in args.include_dirs]
    tomls = [s for s in args.sources if s.endswith(".toml")]
    if tomls:
        if len(args.sources) != 1:
            raise BuildError(f"a spec .toml is the only SOURCE when given; got {args.sources}")
        if args.name:
            raise BuildError("--name applies to OpenCL C sources; a spec names its module with `name`")
        modules = spec.load_spec(Path(tomls[0]))
        for m in modules:  # the command line adds to the spec
            m.include_dirs += [spec._existing(Path("/"), d, "-I", "command line", directory=True) for d in includes]
            for target, path in spirv.items():
                if target not in m.targets:
                    raise BuildError(f"--spirv {target}=...: module {m.name} does not declare target {target} "
                                     f"(it has {sorted(m.targets)})")
                m.targets[target].spirv = Path(path)
            for t in m.targets.values():
                t.constants.update(constants)
                t.defines.update(defines)
    else:
        c_sources = [s for s in args.sources if not s.endswith(".spv")]
        prebuilt = [s for s in args.sources if s.endswith(".spv")]
        if prebuilt and (c_sources or len(prebuilt) > 1):
            raise BuildError(f"a prebuilt .spv SOURCE is the module for every target, alone; got {args.sources} "
                             f"(use --spirv TARGET=PATH for one target)")
        chosen = targets or (list(spec.TARGETS) if c_sources or prebuilt else [t for t in spec.TARGETS if t in spirv])
        raw = {"sources": [str(Path(s).resolve()) for s in c_sources], "include_dirs": includes,
               "constants": constants, "defines": {k: (v if v else True) for k, v in defines.items()},
               "targets": {t: ({"spirv": spirv[t]} if t in spirv else
                               {"spirv": str(Path(prebuilt[0]).resolve())} if prebuilt else {}) for t in chosen}}
        first = (c_sources or prebuilt or [Path(p).name for p in spirv.values()])[0]
        name = args.name or Path(first).stem
        extra = sorted(set(spirv) - set(chosen))
        if extra:
            raise BuildError(f"--spirv given for {extra}, which --targets {args.targets!r} does not build")
        modules = [spec.resolve(raw, name, Path.cwd(), "command line")]
    if targets is None:
        targets = [t for t in spec.TARGETS if any(t in m.targets for m in modules)]
    for m in modules:
        missing = [t for t in targets if t not in m.targets]
        if missing and not m.restricted:  # a variant's build_targets leave the others out on purpose
            raise BuildError(f"{m.origin}: module {m.name} does not declare targets {missing} (it has "
                             f"{sorted(m.targets)}); add [targets.X] tables or drop them from --targets")
    return modules, targets


def rebuild_command(args) -> str:
    parts = ["python", "-m", "xe2rt", "build", *args.sources, "-o", args.output]
    if args.targets:
        parts += ["--targets", args.targets]
    for d in args.defines:
        parts += ["-D", d]
    for d in args.include_dirs:
        parts += ["-I", d]
    for s in args.spirv:
        parts += ["--spirv", s]
    if args.name:
        parts += ["--name", args.name]
    if args.aot:
        parts.append("--aot")
    return shlex.join(parts)


def _add_aot(manifest: dict, out: Path, args, log) -> None:
    from .ocloc import find_ocloc
    tool = find_ocloc(fetch=not args.no_fetch)
    version = tool.version()
    manifest["compilers"]["ocloc"] = version
    log(f"ocloc {version} ({tool.origin})")
    with tempfile.TemporaryDirectory(prefix="xe2rt-aot-") as work:
        for key, entry in sorted(manifest["artifacts"].items()):
            if entry["target"] not in aot.OCLOC_DEVICE:
                continue
            options = entry["aot_spec"].get("options", "")
            entry["aot"] = aot.report(tool, version, out / key, entry["target"], options, Path(work))
            for name, k in entry["aot"]["kernels"].items():
                log(aot.summary_line(key, name, k))
            for problem in aot.rule_violations(key, entry["aot"]["kernels"],
                                               bool(entry["aot_spec"].get("expect_dpas", False)), simd=None):
                # The shipped kernels' rules (no spills, no private sends; SIMD only against a declared sub-group
                # size) are advice for a user's kernel, not a failure.
                log(f"  note: {problem}")


def build_command(args, log=print) -> Path:
    out = Path(args.output).resolve()
    builder.check_output_folder(out, f"-o {args.output}")
    modules, targets = modules_from_args(args)
    with tempfile.TemporaryDirectory(prefix="xe2rt-out-") as tmp:
        staged = Path(tmp)
        manifest = builder.build(modules, targets, staged, log=log)
        if args.aot:
            _add_aot(manifest, staged, args, log)
        manifest["rebuild_command"] = rebuild_command(args)
        builder.write_json_atomic(staged / builder.MANIFEST, manifest)
        builder.replace_folder(staged, out, f"-o {args.output}")
    log(f"wrote {out / builder.MANIFEST} ({len(manifest['artifacts'])} binaries)")
    return out


def run(args) -> int:
    try:
        build_command(args)
    except BuildError as exc:  # the command's input (sources, options, folders): status 2, as every xe2rt command
        print(f"xe2rt build: error: {exc}", file=sys.stderr)
        return 2
    return 0
