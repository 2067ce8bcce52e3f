"""Kernel signatures read from a SPIR-V binary: what a launcher needs to check and marshal arguments.

Per kernel (OpEntryPoint of the Kernel execution model), per parameter of its entry-point function:
- kind: "buffer" (a pointer to CrossWorkgroup or UniformConstant memory), "local" (a pointer to Workgroup memory,
  sized at launch), "scalar" (an int, float or vector by value) or "opaque" (image, sampler, event, struct by value);
- the storage class of a pointer (the OpenCL address space) and its pointee's type, a scalar's type: OpTypeFloat 16 /
  32 / 64 are half / float / double, OpTypeInt 8 / 16 / 32 / 64 are char / short / int / long;
- the argument name from OpName when the front end kept it (clang does with -cl-kernel-arg-info);
- the C type as written and its qualifiers from the OpStrings "kernel_arg_type.<kernel>.<t1>,<t2>,..." and
  "kernel_arg_type_qual.<kernel>...." that llvm-spirv writes with --preserve-ocl-kernel-arg-type-metadata-through-string.
  SPIR-V integers carry no sign (OpenCL kernels use signedness 0 throughout), so "uint" vs "int" is known only from
  that string; without it `signed` is None.
Per kernel: the required work-group size (execution mode LocalSize, from reqd_work_group_size) and the required
sub-group size (SubgroupSize, from intel_reqd_sub_group_size).

SPIR-V 1.x binary layout: a 5-word header, then instructions whose first word is word count << 16 | opcode; literal
strings are UTF-8, NUL-terminated, padded to whole words.
"""
from __future__ import annotations

import struct

MAGIC = 0x07230203
OP_NAME, OP_STRING, OP_ENTRY_POINT, OP_EXECUTION_MODE = 5, 7, 15, 16
OP_TYPE_VOID, OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR = 19, 20, 21, 22, 23
OP_TYPE_POINTER, OP_FUNCTION, OP_FUNCTION_PARAMETER, OP_DECORATE = 32, 54, 55, 71
OP_EXECUTION_MODE_ID = 331
EXECUTION_MODEL_KERNEL = 6
MODE_LOCAL_SIZE, MODE_LOCAL_SIZE_HINT, MODE_SUBGROUP_SIZE = 17, 18, 35
DECORATION_FUNC_PARAM_ATTR = 38
FUNC_PARAM_ATTR = {0: "zext", 1: "sext", 2: "byval", 3: "sret", 4: "noalias", 5: "nocapture", 6: "nowrite",
                   7: "noreadwrite"}
STORAGE_CLASS = {0: "UniformConstant", 1: "Input", 4: "Workgroup", 5: "CrossWorkgroup", 7: "Function", 8: "Generic"}
# OpenCL address space of a kernel pointer argument, by storage class.
ADDRESS_SPACE = {"CrossWorkgroup": "global", "Workgroup": "local", "UniformConstant": "constant"}
FLOAT_NAMES = {16: "half", 32: "float", 64: "double"}
INT_NAMES = {8: "char", 16: "short", 32: "int", 64: "long"}
VECTOR_SIZES = (2, 3, 4, 8, 16)


class SpirvError(ValueError):
    """The bytes are not a SPIR-V module this reader understands."""


def _words(spirv: bytes) -> tuple:
    if len(spirv) % 4 or len(spirv) < 20:
        raise SpirvError(f"not a SPIR-V module: {len(spirv)} bytes (a module is a whole number of 4-byte words, "
                         f"at least 5)")
    magic = struct.unpack_from("<I", spirv, 0)[0]
    if magic != MAGIC:
        raise SpirvError(f"not a little-endian SPIR-V module: magic 0x{magic:08x}, expected 0x{MAGIC:08x}")
    return struct.unpack(f"<{len(spirv) // 4}I", spirv)


def _string(words: tuple, start: int, end: int) -> tuple[str, int]:
    """(literal string beginning at word `start`, index of the word after it)."""
    raw = b"".join(struct.pack("<I", w) for w in words[start:end])
    text = raw.split(b"\0", 1)[0]
    return text.decode("utf-8"), start + len(text) // 4 + 1


def _instructions(words: tuple, wanted: frozenset | None = None):
    """(opcode, operands) of every instruction, or of those whose opcode is in `wanted` (the others are stepped
    over without copying their operands: function bodies are most of a module)."""
    i, n = 5, len(words)
    while i < n:
        word = words[i]
        count, opcode = word >> 16, word & 0xFFFF
        if count == 0 or i + count > n:
            raise SpirvError(f"malformed SPIR-V: instruction at word {i} has word count {count}")
        if wanted is None or opcode in wanted:
            yield opcode, words[i + 1:i + count]
        i += count


def _scalar_name(types: dict, tid: int) -> tuple[str, int | None, int]:
    """(SPIR-V-derived C name, bits of the element, vector size) of a type id; ("opaque", None, 1) otherwise."""
    t = types.get(tid)
    if t is None:
        return "opaque", None, 1
    if t[0] == "float":
        return FLOAT_NAMES.get(t[1], f"float{t[1]}"), t[1], 1
    if t[0] == "int":
        return INT_NAMES.get(t[1], f"int{t[1]}"), t[1], 1
    if t[0] == "bool":
        return "bool", None, 1
    if t[0] == "vector":
        name, bits, _ = _scalar_name(types, t[1])
        return f"{name}{t[2]}", bits, t[2]
    return "opaque", None, 1


def _c_type_matches(c_type: str, spirv_name: str) -> bool:
    """Whether an OpenCL C type name (as the front end wrote it) names the SPIR-V type: 'uint' and 'int' are both
    OpTypeInt 32; a typedef ('real') is not a name this reader can check, so the SPIR-V name stays."""
    base = c_type[1:] if c_type.startswith("u") and c_type[1:].rstrip("0123456789") in INT_NAMES.values() else c_type
    return base == spirv_name


def _split_list(text: str, count: int) -> list[str] | None:
    items = text.split(",")
    if items and items[-1] == "":
        items = items[:-1]
    return items if len(items) == count else None


_REFLECTED = frozenset((OP_NAME, OP_STRING, OP_ENTRY_POINT, OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID, OP_TYPE_INT,
                        OP_TYPE_FLOAT, OP_TYPE_BOOL, OP_TYPE_VECTOR, OP_TYPE_POINTER, OP_DECORATE, OP_FUNCTION,
                        OP_FUNCTION_PARAMETER))


def reflect(spirv: bytes) -> dict:
    """{"kernels": {name: [param, ...]}, "kernel_attrs": {name: {...}}} of a SPIR-V module (see the module doc)."""
    words = _words(spirv)
    names, strings, types, decorations = {}, [], {}, {}
    entries, modes, params, current = [], {}, {}, None
    for opcode, ops in _instructions(words, _REFLECTED):
        if opcode == OP_NAME:
            names[ops[0]] = _string(ops, 1, len(ops))[0]
        elif opcode == OP_STRING:
            strings.append(_string(ops, 1, len(ops))[0])
        elif opcode == OP_ENTRY_POINT and ops[0] == EXECUTION_MODEL_KERNEL:
            entries.append((_string(ops, 2, len(ops))[0], ops[1]))
        elif opcode in (OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID):
            modes.setdefault(ops[0], {})[ops[1]] = list(ops[2:])
        elif opcode == OP_TYPE_INT:
            types[ops[0]] = ("int", ops[1])
        elif opcode == OP_TYPE_FLOAT:
            types[ops[0]] = ("float", ops[1])
        elif opcode == OP_TYPE_BOOL:
            types[ops[0]] = ("bool",)
        elif opcode == OP_TYPE_VECTOR:
            types[ops[0]] = ("vector", ops[1], ops[2])
        elif opcode == OP_TYPE_POINTER:
            types[ops[0]] = ("pointer", STORAGE_CLASS.get(ops[1], f"StorageClass{ops[1]}"), ops[2])
        elif opcode == OP_DECORATE and len(ops) >= 3 and ops[1] == DECORATION_FUNC_PARAM_ATTR:
            decorations.setdefault(ops[0], set()).add(FUNC_PARAM_ATTR.get(ops[2], str(ops[2])))
        elif opcode == OP_FUNCTION:
            current = ops[1]
            params[current] = []
        elif opcode == OP_FUNCTION_PARAMETER and current is not None:
            params[current].append((ops[0], ops[1]))  # (type id, parameter id)
    arg_types = {s[len("kernel_arg_type."):].split(".", 1)[0]: s.split(".", 2)[2]
                 for s in strings if s.startswith("kernel_arg_type.") and s.count(".") >= 2}
    arg_quals = {s[len("kernel_arg_type_qual."):].split(".", 1)[0]: s.split(".", 2)[2]
                 for s in strings if s.startswith("kernel_arg_type_qual.") and s.count(".") >= 2}
    kernels, attrs = {}, {}
    for kernel, fid in entries:
        plist = params.get(fid, [])
        c_types = _split_list(arg_types[kernel], len(plist)) if kernel in arg_types else None
        c_quals = _split_list(arg_quals[kernel], len(plist)) if kernel in arg_quals else None
        signature = []
        for index, (type_id, param_id) in enumerate(plist):
            signature.append(_param(index, types, type_id, names.get(param_id), decorations.get(param_id, set()),
                                    c_types[index] if c_types else None, c_quals[index] if c_quals else None))
        kernels[kernel] = signature
        m = modes.get(fid, {})
        attrs[kernel] = {
            "reqd_work_group_size": m.get(MODE_LOCAL_SIZE),
            "work_group_size_hint": m.get(MODE_LOCAL_SIZE_HINT),
            "reqd_sub_group_size": m[MODE_SUBGROUP_SIZE][0] if MODE_SUBGROUP_SIZE in m else None,
        }
    return {"kernels": kernels, "kernel_attrs": attrs}


def _param(index: int, types: dict, type_id: int, name: str | None, attrs: set, c_type: str | None,
           c_qual: str | None) -> dict:
    t = types.get(type_id, ("opaque",))
    storage_class = None
    if t[0] == "pointer":
        storage_class = t[1]
        type_name, bits, vector = _scalar_name(types, t[2])
        space = ADDRESS_SPACE.get(storage_class)
        kind = {"global": "buffer", "constant": "buffer", "local": "local"}.get(space, "opaque")
        if "byval" in attrs:  # a struct passed by value is a pointer to Function memory in SPIR-V
            kind, space = "opaque", "scalar"
        space = space or "scalar"
    else:
        type_name, bits, vector = _scalar_name(types, type_id)
        kind = "opaque" if type_name == "opaque" else "scalar"
        space = "scalar"
    signed = None
    written = c_type.replace("*", "").strip() if c_type else None
    if written:
        written = written.removeprefix("const ").removeprefix("volatile ").strip()
        if type_name == "opaque":  # image2d_t, sampler_t, a struct: the C name is all there is
            type_name = written
        elif _c_type_matches(written, type_name):
            type_name = written
            if type_name.rstrip("0123456789").removeprefix("u") in INT_NAMES.values():
                signed = not type_name.startswith("u")
    quals = c_qual.split() if c_qual else []
    return {
        "name": name if name else f"arg{index}",
        "named": bool(name),
        "type": type_name,
        "space": space,
        "const": "const" in quals,
        "kind": kind,
        "storage_class": storage_class,
        "bits": bits,
        "vector": vector,
        "signed": signed,
        "c_type": c_type,
        "qualifiers": quals,
    }


def structure(reflected: dict) -> dict:
    """What two compiles of the same source must agree on: kernels, per parameter kind / storage class / SPIR-V type
    (names, C types and qualifiers may be present in one and absent in the other), and the kernel attributes."""
    def spirv_type(p):
        if p["kind"] == "opaque" or p["bits"] is None:  # no scalar type (an opaque value, or a pointer to a struct):
            return (p["kind"], p["storage_class"])        # its name comes from the C type string, in one build only
        return (p["kind"], p["storage_class"], p["bits"], p["vector"],
                p["type"].removeprefix("u") if p["signed"] is not None else p["type"])
    return {k: ([spirv_type(p) for p in params], reflected["kernel_attrs"][k])
            for k, params in reflected["kernels"].items()}
