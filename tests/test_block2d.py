"""The software 2D block reads (spirv_src/block2d.h, what the xe2emu GEMM runs) against the SPV_INTEL_2d_block_io
mapping written out in numpy (xe2rt.reference.gemm.block2d_read): every lane's destination must be bit-identical, for
plain 16-bit reads of heights 1..32 and one or two blocks, the transform (VNNI) reads, the transposed 32-bit read
(16 rows; the 32-row form is not used, see block2d.h),
with blocks inside the region, across its right and bottom edges and starting before it (out-of-bounds elements read
as zero). Also the spec's rules as the GEMM op checks them before launch."""
import numpy as np
import pytest

from xe2rt.ops import gemm_fp16 as G
from xe2rt.checks import builtins
from xe2rt.reference import gemm as R
from conftest import TARGETS

# The comparisons the selftest runs natively on an Xe2 GPU (xe2rt.checks.builtins), here on the software versions:
# every lane's bytes must equal the specification reading, at every coordinate.
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("height", [1, 2, 4, 8, 16, 32])
def test_read_16b(queue, target, height, count):
    r = builtins.read_check(queue, target, builtins.SOFTWARE, "plain", height, count)
    assert r.passed, r.describe()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("height, count", builtins.TRANSFORMS_16B)
def test_read_transform_16b(queue, target, height, count):
    r = builtins.read_check(queue, target, builtins.SOFTWARE, "transform", height, count)
    assert r.passed, r.describe()


@pytest.mark.parametrize("target", TARGETS)
def test_read_transpose_32b(queue, target):
    r = builtins.read_check(queue, target, builtins.SOFTWARE, "transpose", 16, 1)
    assert r.passed, r.describe()


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
