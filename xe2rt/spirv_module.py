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
OP_ENTRY_POINT, OP_EXECUTION_MODE, OP_DECORATE, OP_FUNCTION, OP_EXECUTION_MODE_ID = 15, 16, 71, 54, 331
DECORATION_LINKAGE_ATTRIBUTES = 41
LINKAGE_EXPORT = 0


def _check(spirv: bytes) -> None:
    if len(spirv) % 4 or len(spirv) < 20:
        raise ValueError(f"not a SPIR-V module: {len(spirv)} bytes")
    magic = struct.unpack_from("<I", spirv, 0)[0]
    if magic != MAGIC:
        raise ValueError(f"not a little-endian SPIR-V module: magic 0x{magic:08x}")


def _literal_string(spirv: bytes, word: int) -> tuple[str, int]:
    """(string, words it occupies) of the literal string beginning at word index `word`."""
    end = spirv.index(b"\0", 4 * word)
    return spirv[4 * word:end].decode("utf-8"), (end - 4 * word) // 4 + 1


def _preamble(spirv: bytes):
    """(opcode, first word, word count) of every instruction before the first function: entry points, execution
    modes and decorations all live there (SPIR-V's logical layout), so the function bodies are never walked."""
    i, n = 5, len(spirv) // 4
    while i < n:
        head = struct.unpack_from("<I", spirv, 4 * i)[0]
        count, opcode = head >> 16, head & 0xFFFF
        if count == 0 or i + count > n:
            raise ValueError(f"malformed SPIR-V: instruction at word {i} has word count {count}")
        if opcode == OP_FUNCTION:
            return
        yield opcode, i, count
        i += count


def _word(spirv: bytes, index: int) -> int:
    return struct.unpack_from("<I", spirv, 4 * index)[0]


def entry_points(spirv: bytes) -> dict[str, int]:
    """Kernel name -> id of its entry-point function."""
    _check(spirv)
    return {_literal_string(spirv, i + 3)[0]: _word(spirv, i + 2)
            for opcode, i, _ in _preamble(spirv) if opcode == OP_ENTRY_POINT}


def single_kernel(spirv: bytes, kernel: str) -> bytes:
    """The module with `kernel` as its only entry point and exported kernel function."""
    entries = entry_points(spirv)
    if kernel not in entries:
        raise KeyError(f"SPIR-V module has no kernel {kernel!r}; it has {sorted(entries)}")
    dropped_entries = {fid for name, fid in entries.items() if name != kernel}
    dropped_exports = set(entries) - {kernel}
    pieces, kept_from = [], 0
    for opcode, i, count in _preamble(spirv):
        drop = False
        if opcode == OP_ENTRY_POINT:
            drop = _word(spirv, i + 2) in dropped_entries
        elif opcode in (OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID):
            drop = _word(spirv, i + 1) in dropped_entries
        elif opcode == OP_DECORATE and _word(spirv, i + 2) == DECORATION_LINKAGE_ATTRIBUTES:
            name, used = _literal_string(spirv, i + 3)
            drop = name in dropped_exports and _word(spirv, i + 3 + used) == LINKAGE_EXPORT
        if drop:
            pieces.append(spirv[kept_from:4 * i])
            kept_from = 4 * (i + count)
    pieces.append(spirv[kept_from:])
    return b"".join(pieces)
