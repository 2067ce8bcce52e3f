"""The software 2D block reads (spirv_src/block2d.h, what the xe2emu GEMM runs) against the SPV_INTEL_2d_block_io
mapping written out in numpy (xe2rt.reference.gemm.block2d_read): every lane's destination must be bit-identical, for
plain 16-bit reads of heights 1..32 and one or two blocks, the transform (VNNI) reads, the transposed 32-bit read
(16 rows; the 32-row form is not used, see block2d.h),
with blocks inside the region, across its right and bottom edges and starting before it (out-of-bounds elements read
as zero). Also the spec's rules as the GEMM op checks them before launch."""
import numpy as np
import pytest

import dpnp

from xe2rt import artifacts, launch
from xe2rt.ops import gemm_fp16 as G
from xe2rt.reference import gemm as R
from conftest import TARGETS, to_device

# Region: 40 rows x 48 16-bit elements (96 bytes used) in rows of 112 bytes (pitch, multiple of 16).
ROWS, WIDTH_BYTES, PITCH = 40, 96, 112
# (x, y) in elements: inside, across the right edge, across the bottom edge, before the start (negative coordinates).
COORDS_16 = [(0, 0), (16, 3), (40, 30), (-4, -2)]
COORDS_32 = [(0, 0), (4, 20), (20, 30), (-2, -3)]


def region(rng):
    data = rng.integers(0, 2**16, (ROWS, PITCH // 2), dtype=np.uint16)
    return data, data.view(np.uint8).reshape(-1)


def run_read(queue, target, kernel, data, coord, out_dtype, per_lane):
    program = artifacts.load(queue, target, "gemm_fp16_ult")
    out = dpnp.zeros(16 * per_lane, dtype=out_dtype, sycl_queue=queue)
    launch.launch(program.kernel(kernel), [to_device(data, queue), WIDTH_BYTES, ROWS, PITCH, coord[0], coord[1], out],
                  16, 16, queue).wait()
    return dpnp.asnumpy(out).view(np.uint8).reshape(16, -1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("height", [1, 2, 4, 8, 16, 32])
def test_read_16b(queue, rng, target, height, count):
    data, raw = region(rng)
    for coord in COORDS_16:
        got = run_read(queue, target, f"ult_b2d_read_16b_{height}r16x{count}c", data, coord, np.uint16,
                       height * count)
        want = R.block2d_read(raw, width=WIDTH_BYTES, height=ROWS, pitch=PITCH, coord=coord, elem=2, block_w=16,
                              block_h=height, count=count)
        assert np.array_equal(got, want), f"{height}r16x{count}c at {coord}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("height, count", [(16, 1), (16, 2), (32, 1), (32, 2)])
def test_read_transform_16b(queue, rng, target, height, count):
    data, raw = region(rng)
    for coord in COORDS_16:
        got = run_read(queue, target, f"ult_b2d_read_transform_16b_{height}r16x{count}c", data, coord, np.uint32,
                       height // 2 * count)
        want = R.block2d_read(raw, width=WIDTH_BYTES, height=ROWS, pitch=PITCH, coord=coord, elem=2, block_w=16,
                              block_h=height, count=count, transform=True)
        assert np.array_equal(got, want), f"transform {height}r16x{count}c at {coord}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("height", [16])
def test_read_transpose_32b(queue, rng, target, height):
    data, raw = region(rng)
    for coord in COORDS_32:
        got = run_read(queue, target, f"ult_b2d_read_transpose_32b_{height}r8x1c", data.view(np.uint32), coord,
                       np.uint32, height // 2)
        want = R.block2d_read(raw, width=WIDTH_BYTES, height=ROWS, pitch=PITCH, coord=coord, elem=4, block_w=8,
                              block_h=height, transpose=True)
        assert np.array_equal(got, want), f"transpose {height}r8x1c at {coord}"


def test_reference_layout_pinned_by_hand():
    """The numpy mapping itself, on a 4 x 64 region of 16-bit values v = 1000 row + column (no kernel involved)."""
    vals = np.array([[1000 * r + c for c in range(64)] for r in range(4)], np.uint16)
    raw = vals.view(np.uint8).reshape(-1)
    plain = R.block2d_read(raw, width=128, height=4, pitch=128, coord=(2, 1), elem=2, block_w=16, block_h=4,
                           count=2).view(np.uint16)
    assert plain[5, 0] == 1007 and plain[5, 3] == 0 and plain[5, 4] == 1023  # block 1 starts at column 18
    vnni = R.block2d_read(raw, width=128, height=4, pitch=128, coord=(0, 0), elem=2, block_w=16, block_h=16,
                          transform=True).view(np.uint32)
    assert vnni[3, 0] == 3 | (1003 << 16) and vnni[3, 2] == 0  # rows 4.. are out of bounds
    vals32 = vals.view(np.uint32)  # 4 rows x 32 pairs
    t = R.block2d_read(vals32.view(np.uint8).reshape(-1), width=128, height=4, pitch=128, coord=(1, 0), elem=4,
                       block_w=8, block_h=32, transpose=True).view(np.uint32)
    assert t[1, 2 * 3 + 0] == vals32[2, 4] and t[1, 2 * 3 + 1] == vals32[3, 4] and t[2, 0] == 0


@pytest.mark.parametrize("address, row_bytes, rows, pitch, broken", [
    (0x1000, 64, 1, 64, None),
    (0x1010, 64, 1, 64, "not 64-byte aligned"),
    (0x1000, 60, 1, 64, "outside \\[64, 2\\^24\\]"),
    (0x1000, 66, 1, 80, "not a multiple of 4"),
    (0x1000, 200, 3, 200, "pitch is 200 bytes, not a multiple of 16"),
    (0x1000, 2**25, 3, 2**25, "outside \\[64, 2\\^24\\]"),
    (0x1000, 64, 2**24 + 1, 64, "rows, outside \\[1, 2\\^24\\]"),
])
def test_rules(address, row_bytes, rows, pitch, broken):
    breaks = G.block2d_rule_breaks("x", address, row_bytes, rows, pitch)
    if broken is None:
        assert breaks == []
    else:
        assert len(breaks) == 1 and __import__("re").search(broken, breaks[0]), breaks
