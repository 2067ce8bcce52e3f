"""A one-kernel view of a multi-kernel SPIR-V module, so the first call of an op builds only the kernel it launches.

The shipped binary (whose sha256 the manifest pins and which ocloc compiled ahead of time) holds every kernel of a
family. Device compilers build every exported function of a module, so a family of 24 kernels costs 24 kernels' build
time on the first call. `single_kernel` keeps the module as it is except for three kinds of instruction that make
the other kernels reachable: their OpEntryPoint, their OpExecutionMode(Id), and the LinkageAttributes Export
decoration of their functions. What remains is the same code; the other kernels become unreferenced internal
functions, which the compilers drop before code generation. (SPIR-V 1.x binary layout: a 5-word header, then
instructions whose first word is word count << 16 | opcode; literal strings are UTF-8, NUL-terminated, padded to
whole words.)
"""
from __future__ import annotations

import struct

MAGIC = 0x07230203
OP_ENTRY_POINT, OP_EXECUTION_MODE, OP_DECORATE, OP_EXECUTION_MODE_ID = 15, 16, 71, 331
DECORATION_LINKAGE_ATTRIBUTES = 41
LINKAGE_EXPORT = 0


def _literal_string(words: tuple[int, ...], start: int) -> tuple[str, int]:
    """(string, words it occupies) of the literal string beginning at words[start]."""
    raw = struct.pack(f"<{len(words) - start}I", *words[start:])
    text = raw.split(b"\0", 1)[0]
    return text.decode("utf-8"), len(text) // 4 + 1


def _instructions(words: tuple[int, ...]):
    i = 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise ValueError(f"malformed SPIR-V: instruction at word {i} has word count {count}")
        yield opcode, i, count
        i += count


def entry_points(spirv: bytes) -> dict[str, int]:
    """Kernel name -> id of its entry-point function."""
    words = _words(spirv)
    found = {}
    for opcode, i, _ in _instructions(words):
        if opcode == OP_ENTRY_POINT:
            name, _ = _literal_string(words, i + 3)
            found[name] = words[i + 2]
    return found


def _words(spirv: bytes) -> tuple[int, ...]:
    if len(spirv) % 4 or len(spirv) < 20:
        raise ValueError(f"not a SPIR-V module: {len(spirv)} bytes")
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    if words[0] != MAGIC:
        raise ValueError(f"not a little-endian SPIR-V module: magic 0x{words[0]:08x}")
    return words


def single_kernel(spirv: bytes, kernel: str) -> bytes:
    """The module with `kernel` as its only entry point and exported kernel function."""
    words = _words(spirv)
    entries = entry_points(spirv)
    if kernel not in entries:
        raise KeyError(f"SPIR-V module has no kernel {kernel!r}; it has {sorted(entries)}")
    dropped_entries = {fid for name, fid in entries.items() if name != kernel}
    dropped_exports = set(entries) - {kernel}
    kept = list(words[:5])
    for opcode, i, count in _instructions(words):
        if opcode == OP_ENTRY_POINT and words[i + 2] in dropped_entries:
            continue
        if opcode in (OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID) and words[i + 1] in dropped_entries:
            continue
        if opcode == OP_DECORATE and words[i + 2] == DECORATION_LINKAGE_ATTRIBUTES:
            name, used = _literal_string(words[:i + count], i + 3)
            if words[i + 3 + used] == LINKAGE_EXPORT and name in dropped_exports:
                continue
        kept.extend(words[i:i + count])
    return struct.pack(f"<{len(kept)}I", *kept)
