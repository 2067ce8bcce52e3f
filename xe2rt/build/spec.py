"""Build specs: what to compile for which target (docs/build.md has the format).

A spec `.toml` declares one module and, under [variants.NAME], further modules that differ from it only by the
values they override (tables merge key by key, anything else replaces). The command line (`xe2rt build a.cl b.cl`)
makes the same thing out of its arguments, so shipped families and user kernels take one path.
"""
from __future__ import annotations

import copy
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (the `build` extra installs tomli there)
    import tomli as tomllib

from ..errors import BuildError

TARGETS = ("bmg", "lnl", "cpu")
XE2_TARGETS = ("bmg", "lnl")
TOP_KEYS = {"name", "source", "sources", "include_dirs", "options", "constants", "defines", "targets", "aot",
            "variants", "spirv_extensions"}
VARIANT_KEYS = (TOP_KEYS - {"name", "variants"}) | {"build_targets"}  # build_targets: the variant builds for these only
# Keys of a [targets.X] table that are not integer constants.
TARGET_KEYS = {"options", "defines", "spirv"}
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# SPIR-V extensions a module may ask llvm-spirv for beyond the fixed ones (toolchain.SPIRV_OPTIONS), and what each
# is for. SPV_INTEL_vector_compute: vectors of other lengths than 2-16 (VectorAnyINTEL), e.g. the 32-byte operands of
# AVX2's vpmaddubsw in cpu-only binaries; Intel's CPU runtime reads it, and spirv-val 2023.1 cannot check it.
SPIRV_EXTENSIONS = {"SPV_INTEL_vector_compute": "vectors of any length (VectorAnyINTEL)"}


@dataclass
class Target:
    constants: dict[str, int] = field(default_factory=dict)  # -DNAME=VALUE, recorded in the manifest
    defines: dict[str, str] = field(default_factory=dict)  # -DNAME=VALUE ("" value: -DNAME), build options only
    options: list[str] = field(default_factory=list)  # further clang options
    spirv: Path | None = None  # prebuilt SPIR-V instead of compiling the sources


@dataclass
class Module:
    name: str
    sources: list[Path]
    include_dirs: list[Path]
    targets: dict[str, Target]
    aot: dict
    origin: str  # where it was declared, for messages
    spirv_extensions: list[str] = field(default_factory=list)  # further llvm-spirv --spirv-ext (SPIRV_EXTENSIONS)
    restricted: bool = False  # a variant with build_targets: the targets it lacks are skipped, not errors


def merge(base: dict, override: dict) -> dict:
    """`base` with `override` on top: tables merge key by key, every other value replaces."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _str_list(value, what: str, origin: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BuildError(f"{origin}: {what} must be a string or a list of strings, got {value!r}")
    return value


def _constants(table, what: str, origin: str) -> dict[str, int]:
    if not isinstance(table, dict):
        raise BuildError(f"{origin}: {what} must be a table of NAME = integer, got {table!r}")
    out = {}
    for key, value in table.items():
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int):
            raise BuildError(f"{origin}: {what}.{key} = {value!r}: constants are integers (they are passed as "
                             f"-D{key}=VALUE and read back by the launch code); put other values under `defines`")
        out[key] = value
    return out


def _defines(table, what: str, origin: str) -> dict[str, str]:
    if not isinstance(table, dict):
        raise BuildError(f"{origin}: {what} must be a table of NAME = value, got {table!r}")
    return {k: ("" if v is True else str(v)) for k, v in table.items() if v is not False}


def _existing(base: Path, name: str, what: str, origin: str, directory: bool = False) -> Path:
    path = (base / name).resolve()
    if not (path.is_dir() if directory else path.is_file()):
        kind = "folder" if directory else "file"
        state = f"a {'file' if directory else 'folder'}, not a {kind}" if path.exists() else f"a missing {kind}"
        raise BuildError(f"{origin}: {what} {name!r} names {state} ({path})")
    if what == "source" and path.suffix != ".cl":  # clang takes any other name for a linker input, not OpenCL C
        raise BuildError(f"{origin}: source {name!r} must be an OpenCL C file ending in .cl (got {path.suffix or 'no'} "
                         f"suffix); .spv binaries go in --spirv / targets.X.spirv, specs in a .toml")
    return path


def apply_variant(base: dict, variant: dict) -> dict:
    """The base spec with a variant's overrides. A variant's `constants` / `defines` override the base's value for
    every target, its [targets.X] tables override those again: base < base.targets.X < variant < variant.targets.X."""
    rest = {k: v for k, v in variant.items() if k not in ("constants", "defines", "targets")}
    out = merge(base, rest)
    tables = out.setdefault("targets", {t: {} for t in TARGETS})
    every = {**variant.get("constants", {}), **({"defines": variant["defines"]} if "defines" in variant else {})}
    for target in set(tables) | set(variant.get("targets", {})):
        tables[target] = merge(merge(tables.get(target, {}), every), variant.get("targets", {}).get(target, {}))
    return out


def resolve(raw: dict, name: str, base: Path, origin: str, keys: set = TOP_KEYS) -> Module:
    """One module out of a raw spec table whose relative paths are relative to `base`."""
    unknown = set(raw) - keys
    if unknown:
        raise BuildError(f"{origin}: unknown keys {sorted(unknown)}; a spec has {sorted(keys)}")
    if not NAME_RE.match(name):
        raise BuildError(f"{origin}: module name {name!r} must be a file name of letters, digits, _ . - "
                         f"(it names <target>/{name}.spv)")
    if "source" in raw and "sources" in raw:
        raise BuildError(f"{origin}: give `source` or `sources`, not both")
    source_names = _str_list(raw.get("sources", raw.get("source", [])), "sources", origin)
    sources = [_existing(base, s, "source", origin) for s in source_names]
    include_dirs = [_existing(base, d, "include_dirs entry", origin, directory=True)
                    for d in _str_list(raw.get("include_dirs", []), "include_dirs", origin)]
    options = _str_list(raw.get("options", []), "options", origin)
    constants = _constants(raw.get("constants", {}), "constants", origin)
    defines = _defines(raw.get("defines", {}), "defines", origin)
    tables = raw.get("targets", {name: {} for name in TARGETS})
    if not isinstance(tables, dict) or not tables:
        raise BuildError(f"{origin}: `targets` must be tables [targets.X] for X in {TARGETS}, got {tables!r}")
    bad = set(tables) - set(TARGETS)
    if bad:
        raise BuildError(f"{origin}: unknown targets {sorted(bad)}; the targets are {list(TARGETS)}")
    targets = {}
    for target in TARGETS:
        if target not in tables:
            continue
        table = tables[target]
        if not isinstance(table, dict):
            raise BuildError(f"{origin}: [targets.{target}] must be a table, got {table!r}")
        spirv = table.get("spirv")
        targets[target] = Target(
            constants={**constants, **_constants({k: v for k, v in table.items() if k not in TARGET_KEYS},
                                                 f"targets.{target}", origin)},
            defines={**defines, **_defines(table.get("defines", {}), f"targets.{target}.defines", origin)},
            options=options + _str_list(table.get("options", []), f"targets.{target}.options", origin),
            spirv=_existing(base, spirv, f"targets.{target}.spirv", origin) if spirv is not None else None)
        if not sources and targets[target].spirv is None:
            raise BuildError(f"{origin}: target {target} has neither OpenCL C sources (`source`/`sources`) nor a "
                             f"prebuilt `spirv`")
    aot = raw.get("aot", {})
    if not isinstance(aot, dict) or set(aot) - {"options", "expect_dpas"}:
        raise BuildError(f"{origin}: [aot] takes `options` (a string) and `expect_dpas` (a bool), got {aot!r}")
    extensions = _str_list(raw.get("spirv_extensions", []), "spirv_extensions", origin)
    unknown_ext = [e for e in extensions if e not in SPIRV_EXTENSIONS]
    if unknown_ext:
        raise BuildError(f"{origin}: spirv_extensions {unknown_ext} not supported; a module may ask for "
                         f"{sorted(SPIRV_EXTENSIONS)} ({'; '.join(f'{k}: {v}' for k, v in SPIRV_EXTENSIONS.items())})")
    return Module(name=name, sources=sources, include_dirs=include_dirs, targets=targets, aot=aot, origin=origin,
                  spirv_extensions=extensions)


def read_spec(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise BuildError(f"spec {path} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path}: not valid TOML: {exc}") from None


def modules_of(raw: dict, path: Path, override: dict | None = None) -> list[Module]:
    """The spec's module and one per [variants.NAME], each merged over the base (and `override` over all)."""
    path = Path(path).resolve()
    origin = str(path)
    base = {k: v for k, v in raw.items() if k not in ("variants", "name")}
    variants = raw.get("variants", {})
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise BuildError(f"{origin}: [variants.NAME] must be tables of overrides, got {variants!r}")
    name = raw.get("name", path.stem)
    if not isinstance(name, str):
        raise BuildError(f"{origin}: `name` must be a string, got {name!r}")
    modules = [resolve(merge(base, override or {}), name, path.parent, origin)]
    for variant, table in variants.items():
        unknown = set(table) - VARIANT_KEYS
        if unknown:
            raise BuildError(f"{origin}: [variants.{variant}] has unknown keys {sorted(unknown)}; a variant "
                             f"overrides {sorted(VARIANT_KEYS)}")
        if variant == name:
            raise BuildError(f"{origin}: variant {variant!r} has the name of the spec's own module")
        only = table.get("build_targets")
        if only is not None and (not isinstance(only, list) or not only or set(only) - set(TARGETS)):
            raise BuildError(f"{origin}: [variants.{variant}] build_targets must be a non-empty list of targets from "
                             f"{list(TARGETS)}, got {only!r}")
        merged = merge(apply_variant(base, {k: v for k, v in table.items() if k != "build_targets"}), override or {})
        if only is not None:
            merged["targets"] = {t: v for t, v in merged.get("targets", {t: {} for t in TARGETS}).items() if t in only}
        module = resolve(merged, variant, path.parent, f"{origin} [variants.{variant}]")
        module.restricted = only is not None
        modules.append(module)
    return modules


def load_spec(path: Path, override: dict | None = None) -> list[Module]:
    return modules_of(read_spec(path), path, override)
