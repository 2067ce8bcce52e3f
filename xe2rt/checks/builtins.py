"""The Xe2 built-ins the kernels rely on (2D block reads: plain, transform/VNNI, transposed; DPAS operand layouts),
run as unit-test kernels and compared element by element with the numpy reading of the specifications
(xe2rt.reference.gemm.block2d_read and dpas_spec), naming every lane and component that differs.

The same comparisons serve two families of kernels:
- gemm_fp16_ult: the software versions (what the xe2emu kernels run), on any device: they must match the reading.
- gemm_fp16_ult_native: the REAL built-ins on bmg/lnl. Only an Xe2 GPU runs them (python -m xe2rt selftest); a
  difference there means the hardware disagrees with the specification reading that the software versions follow.
"""
from __future__ import annotations

import numpy as np

from . import Check, Result
from ._util import dev, host, rng

SOFTWARE = "gemm_fp16_ult"
NATIVE = "gemm_fp16_ult_native"
# Region: 40 rows x 48 16-bit elements (96 bytes used) in rows of 112 bytes (pitch, multiple of 16).
ROWS, WIDTH_BYTES, PITCH = 40, 96, 112
# (x, y) in elements: inside, across the right edge, across the bottom edge, before the start (out of bounds -> 0).
COORDS_16 = [(0, 0), (16, 3), (40, 30), (-4, -2)]
COORDS_32 = [(0, 0), (4, 20), (20, 30), (-2, -3)]
READS_16B = [(h, c) for c in (1, 2) for h in (1, 2, 4, 8, 16, 32)]
TRANSFORMS_16B = [(16, 1), (16, 2), (32, 1), (32, 2)]


def lane_report(got: np.ndarray, want: np.ndarray, unit: str) -> Result:
    """got/want [16 lanes, n components]: the error is the number of differing (lane, component) pairs; the detail
    names the lanes and their first differing components."""
    if got.shape != want.shape:
        return Result(float("inf"), 0.0, f"{unit} differing", "bit-exact", f"shape {got.shape} vs {want.shape}")
    bad = got != want
    if not bad.any():
        return Result(0.0, 0.0, f"{unit} differing", "bit-exact")
    lanes = np.nonzero(bad.any(axis=1))[0]
    parts = [f"lane {int(l)} components {np.nonzero(bad[l])[0][:6].tolist()}" for l in lanes[:8]]
    more = f" (+{len(lanes) - 8} more lanes)" if len(lanes) > 8 else ""
    return Result(float(bad.sum()), 0.0, f"{unit} differing", "bit-exact",
                  f"lanes {lanes.tolist()} differ: " + "; ".join(parts) + more)


def _program(queue, target, family):
    from .. import artifacts
    return artifacts.load(queue, target, family)


def _run_read(queue, target, family, kernel, data, coord, out_dtype, per_lane):
    import dpnp
    from .. import launch
    out = dpnp.zeros(16 * per_lane, dtype=out_dtype, sycl_queue=queue)
    launch.launch(_program(queue, target, family).kernel(kernel),
                  [dev(data, queue), WIDTH_BYTES, ROWS, PITCH, coord[0], coord[1], out], 16, 16, queue).wait()
    return host(out).view(np.uint8).reshape(16, -1)


def read_check(queue, target, family, kind: str, height: int, count: int) -> Result:
    """One read shape at every coordinate (inside, across edges, before the start), lane by lane."""
    from ..reference import gemm as R
    data = rng("block2d", kind, height, count).integers(0, 2**16, (ROWS, PITCH // 2), dtype=np.uint16)
    raw = data.view(np.uint8).reshape(-1)
    worst = Result(0.0, 0.0, "bytes differing", "bit-exact")
    for coord in (COORDS_32 if kind == "transpose" else COORDS_16):
        if kind == "plain":
            kernel = f"ult_b2d_read_16b_{height}r16x{count}c"
            got = _run_read(queue, target, family, kernel, data, coord, np.uint16, height * count)
            want = R.block2d_read(raw, width=WIDTH_BYTES, height=ROWS, pitch=PITCH, coord=coord, elem=2,
                                  block_w=16, block_h=height, count=count)
        elif kind == "transform":
            kernel = f"ult_b2d_read_transform_16b_{height}r16x{count}c"
            got = _run_read(queue, target, family, kernel, data, coord, np.uint32, height // 2 * count)
            want = R.block2d_read(raw, width=WIDTH_BYTES, height=ROWS, pitch=PITCH, coord=coord, elem=2,
                                  block_w=16, block_h=height, count=count, transform=True)
        else:
            kernel = f"ult_b2d_read_transpose_32b_{height}r8x1c"
            got = _run_read(queue, target, family, kernel, data.view(np.uint32), coord, np.uint32, height // 2)
            want = R.block2d_read(raw, width=WIDTH_BYTES, height=ROWS, pitch=PITCH, coord=coord, elem=4,
                                  block_w=8, block_h=height, transpose=True)
        r = lane_report(got, want, "bytes")
        if not r.passed:
            r.detail = f"{kernel} at (x, y) = {coord}: {r.detail}"
            return r
    return worst


def dpas_layout_check(queue, target, family) -> Result:
    """DPAS A/B/C layouts pinned one element at a time, then random registers against the spec formula.

    A single 1 in A at (m, k) and a single 2 in B at (k, n) must give C[m][n] = 2 in lane n, component m, and zero
    everywhere else; every (m, k, n) on a diagonal sweep covers every lane and component of all three operands."""
    import dpnp
    from .. import launch
    from ..reference import gemm as R
    kernel = _program(queue, target, family).kernel("dpas_emulated_regs")
    out = dpnp.zeros((16, 8), dtype=np.float32, sycl_queue=queue)
    zeros = np.zeros((16, 8), np.float32)
    for m in range(8):
        for k in range(16):
            n = (m + 3 * k) % 16
            a_regs = np.zeros((16, 8), np.float16)  # lane k holds A[m][k] as component m
            a_regs[k, m] = 1
            b_half = np.zeros((16, 16), np.float16)  # lane n holds B[k][n] in int k // 2, half k % 2
            b_half[n, k] = 2
            launch.launch(kernel, [dev(a_regs.view(np.int16), queue), dev(b_half.view(np.int32), queue),
                                   dev(zeros, queue), out], 16, 16, queue).wait()
            expected = np.zeros((16, 8), np.float32)
            expected[n, m] = 2  # C[m][n] lives in lane n, component m
            r = lane_report(host(out).view(np.int32), expected.view(np.int32), "C components")
            if not r.passed:
                r.detail = f"A[{m}][{k}] = 1, B[{k}][{n}] = 2: {r.detail}"
                return r
    g = rng("dpas_random")
    v = g.uniform(-2, 2, (16, 8)) * 2.0 ** g.integers(-8, 4, (16, 8))
    a_regs = v.astype(np.float16).view(np.int16)
    b_regs = (g.uniform(-2, 2, (16, 16)).astype(np.float16)).view(np.int32)
    acc = g.uniform(-4, 4, (16, 8)).astype(np.float32)
    launch.launch(kernel, [dev(a_regs, queue), dev(b_regs, queue), dev(acc, queue), out], 16, 16, queue).wait()
    got = host(out).astype(np.float64)
    exact = R.dpas_spec(a_regs, b_regs, acc)
    a_mat = np.abs(a_regs.view(np.float16).astype(np.float64).T)
    b_mat = np.abs(b_regs.view(np.float16).astype(np.float64).T)
    bound = 16 * float(np.finfo(np.float32).eps) * ((a_mat @ b_mat).T + np.abs(acc))  # DPAS numerics are
    err = np.abs(got - exact)  # implementation-defined: within 16 fp32 roundings of the exact sum
    ratio = err / np.maximum(bound, 1e-30)
    lane, comp = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return Result(float(ratio.max()), 1.0, "max |C - exact| / bound", "16 eps32 (sum|a b| + |acc|)",
                  f"worst lane {lane} component {comp}")


def comparisons(family: str) -> list[tuple[str, object]]:
    """(name, run(queue, target) -> Result) for every comparison, on the given unit-test family."""
    out = [(f"read 16b {h}r16x{c}c", lambda q, t, h=h, c=c: read_check(q, t, family, "plain", h, c))
           for h, c in READS_16B]
    out += [(f"read transform 16b {h}r16x{c}c", lambda q, t, h=h, c=c: read_check(q, t, family, "transform", h, c))
            for h, c in TRANSFORMS_16B]
    out += [("read transpose 32b 16r8x1c", lambda q, t: read_check(q, t, family, "transpose", 16, 1))]
    out += [("dpas A/B/C layouts and numerics", lambda q, t: dpas_layout_check(q, t, family))]
    return out


def checks(quick: bool = False) -> list[Check]:
    """The software built-ins against the specification reading (every target; they run anywhere)."""
    chosen = comparisons(SOFTWARE)
    if quick:
        chosen = [c for c in chosen if c[0] in ("read 16b 8r16x2c", "read transform 16b 32r16x2c",
                                                 "read transpose 32b 16r8x1c", "dpas A/B/C layouts and numerics")]
    return [Check("builtins", name, run) for name, run in chosen]
