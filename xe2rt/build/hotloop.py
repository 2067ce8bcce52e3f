"""Static hot-loop report of one kernel's Xe2 ISA, read from IGC's annotated shader dump.

The dump (`-igc_opts 'ShaderDumpEnable=1,DumpToCustomDir=DIR'`) writes one `*_simd16_entry_NNNN.asm` per kernel; its
first line is `//.kernel NAME`. A loop is a label `_0_NNN:` and a later branch (`goto`, `jmpi`, `while`) back to it.
The hot loop is picked among the innermost loops (loops that contain no other loop): the one with the most DPAS
(ties: the fewest instructions, i.e. the fast path of a fast/careful pair); in a kernel without DPAS, the one that
moves the most bytes by sends (ties: the most instructions). Every send that touches private memory (scratch) is
annotated `address space: private` (spill and fill sends address the scratch surface `ss[...]` without that note;
they count as private too); they are counted in the hot loop and in the whole kernel.

Bytes per send come from the LSC message shape: `dNN[uMM]xV[t]` moves NN/8 bytes x V per lane (x the execution size
unless transposed, `t`, which is one block for the whole sub-group); 2D block loads (`load_block2d`) move their
destination's GRFs (64 bytes each; a 2 KB block shows as 31, the largest response length, and counts as 32);
prefetches (`.ca.ca` block2d with a null destination, or `prefetch`) move nothing
into registers and are counted apart; legacy `send` messages take their `rd:`/`wr:` GRF counts. Gateway messages
(barrier, end of thread) are not sends here.

    python -m xe2rt.build.hotloop DIR     # print the report of every kernel dumped in DIR
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

GRF_BYTES = 64
LABEL = re.compile(r"^(_0_\d+|L\d+):")
BRANCH = re.compile(r"^\s*(?:\([^)]*\)\s*)?(goto|jmpi|while)(?:\.\w+)?\b(.*)$")
INSTRUCTION = re.compile(r"^\s*(?:\([^)]*\)\s*)?([a-z][a-z0-9_]*)(?:\.[\w.]+)?\s")
EXEC_SIZE = re.compile(r"\((\d+)\|M\d+\)")
LSC = re.compile(r"^\s*(?:\([^)]*\)\s*)?(load|store|prefetch|atomic\w*|load_block2d|store_block2d|prefetch_block2d)"
                 r"\.(ugm|slm|tgm|ugml)\.([^\s]+)\s+\((\d+)\|M\d+\)\s+(\S+)\s+(\S+)(?:\s+(\S+))?")
LSC_SHAPE = re.compile(r"^d(\d+)(?:u(\d+))?(?:x(\d+))?(t)?$")
LEGACY_SEND = re.compile(r"^\s*(?:\([^)]*\)\s*)?sends?c?\.(\w+)\s")
REGS = re.compile(r"r\d+(?:\.\d+)?:(\d+)")


def _kernel_name(text: str) -> str | None:
    match = re.match(r"//\.kernel\s+(\S+)", text)
    return match.group(1) if match else None


def _send_info(line: str) -> dict | None:
    """Kind and bytes of one send instruction, or None if the line is no memory send."""
    # Scratch (`ss[...]`) is private memory too: spill/fill sends carry no address-space note.
    private = "address space: private" in line or " ss[" in line
    m = LSC.match(line)
    if m:
        op, space, shape, exec_size, first, second, third = m.groups()
        parts = shape.split(".")
        is_block2d = op.endswith("block2d")
        if is_block2d:
            if op.startswith("store"):  # store_block2d [address] data
                regs = REGS.match(second or "")
                kind = "store"
            else:
                regs = None if first.startswith("null") else REGS.match(first)
                kind = "load" if regs else "prefetch"
            # A response length field holds at most 31 GRFs: a full 32-GRF block (2 KB) is encoded as 31.
            count = int(regs.group(1)) if regs else 0
            nbytes = (32 if count == 31 else count) * GRF_BYTES
            return {"kind": kind, "space": "private" if private else space, "bytes": nbytes, "block2d": True}
        data = next((p for p in parts if LSC_SHAPE.match(p)), None)
        nbytes = 0
        if data:
            bits, _, vec, transposed = LSC_SHAPE.match(data).groups()
            per = int(bits) // 8 * int(vec or 1)
            nbytes = per if transposed else per * int(exec_size)
        kind = "prefetch" if op == "prefetch" or (op == "load" and first.startswith("null")) else \
            ("store" if op == "store" else "load" if op == "load" else "atomic")
        return {"kind": kind, "space": "private" if private else space, "bytes": nbytes, "block2d": False}
    m = LEGACY_SEND.match(line)
    if m and m.group(1) != "gtwy":
        rd = re.search(r"rd:(\d+)", line)
        wr = re.search(r"wr:(\d+)\+(\d+)", line)
        nbytes = (int(rd.group(1)) if rd else 0) * GRF_BYTES
        if not nbytes and wr:
            nbytes = int(wr.group(2)) * GRF_BYTES
        return {"kind": "load" if rd and int(rd.group(1)) else "store", "space": "private" if private else m.group(1),
                "bytes": nbytes, "block2d": False}
    return None


def _is_instruction(line: str) -> bool:
    return bool(INSTRUCTION.match(line)) and not line.lstrip().startswith("//")


def summarize(lines: list[str]) -> dict:
    """Counts over a list of ISA lines (a loop body or a whole kernel)."""
    out = {"instructions": 0, "dpas": 0, "sends": 0, "send_bytes": 0, "load_bytes": 0, "global_load_bytes": 0,
           "store_bytes": 0, "slm_bytes": 0, "private_sends": 0, "prefetches": 0, "block2d_loads": 0}
    for line in lines:
        if not _is_instruction(line):
            continue
        out["instructions"] += 1
        if re.match(r"^\s*(?:\([^)]*\)\s*)?dpas\.", line):
            out["dpas"] += 1
        info = _send_info(line)
        if info is None:
            continue
        out["sends"] += 1
        if info["space"] == "private":
            out["private_sends"] += 1
        if info["kind"] == "prefetch":
            out["prefetches"] += 1
            continue
        out["send_bytes"] += info["bytes"]
        if info["space"] == "slm":
            out["slm_bytes"] += info["bytes"]
        if info["kind"] == "load":
            out["load_bytes"] += info["bytes"]
            if info["space"] == "ugm":
                out["global_load_bytes"] += info["bytes"]
                out["block2d_loads"] += int(info["block2d"])
        elif info["kind"] == "store":
            out["store_bytes"] += info["bytes"]
    return out


def loops(lines: list[str]) -> list[tuple[int, int]]:
    """(label line, branch line) of every backward branch."""
    labels = {}
    found = []
    for i, line in enumerate(lines):
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = i
            continue
        b = BRANCH.match(line)
        if b:
            targets = re.findall(r"\b(_0_\d+|L\d+)\b", b.group(2).split("//")[0])
            back = [labels[t] for t in targets if t in labels]
            if back:
                found.append((min(back), i))
    return sorted(set(found))


def hot_loop(lines: list[str]) -> dict | None:
    spans = loops(lines)
    innermost = [(s, e) for s, e in spans if not any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in spans)]
    best, best_key = None, None
    for s, e in innermost:
        stats = summarize(lines[s:e + 1])
        # DPAS loops: the fast path of a fast/careful pair does the same DPAS in fewer instructions.
        key = (stats["dpas"], -stats["instructions"]) if stats["dpas"] else \
            (0, stats["send_bytes"], stats["instructions"])
        if best_key is None or key > best_key:
            best, best_key = dict(stats, first_line=s + 1, last_line=e + 1), key
    return best


def report_file(path: Path) -> tuple[str | None, dict]:
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    whole = summarize(lines)
    return _kernel_name(text), {"hot_loop": hot_loop(lines), "kernel_private_sends": whole["private_sends"],
                                "kernel_instructions": whole["instructions"], "kernel_dpas": whole["dpas"]}


def report_dir(dump: Path) -> dict[str, dict]:
    """Report per kernel of every SIMD entry dumped in `dump`."""
    out = {}
    for path in sorted(Path(dump).glob("*_simd*_entry_*.asm")):
        name, rep = report_file(path)
        if name:
            out[name] = rep
    return out


if __name__ == "__main__":
    for d in sys.argv[1:]:
        print(json.dumps(report_dir(Path(d)), indent=1))
