/* 2D block reads (cl_intel_subgroup_2d_block_io; per-lane layout from SPV_INTEL_2d_block_io) for the Xe2 GEMM: the
 * built-ins on a GPU, or software versions written from the specification so the same kernel source runs on the CPU
 * device (BLOCK2D_EMU = 1 in the family spec, like DPAS_EMU).
 *
 * Region: a row-major 2D array at `base` of `height` rows, `width` bytes per row, `pitch` bytes between rows;
 * `coord` = (column in elements, row). Rules (else undefined; checked in Python before launch, xe2rt/ops/gemm_fp16.py):
 * sub-group 16, base 64-byte aligned, 64 <= width <= 2^24 and a multiple of 4, pitch >= width and a multiple of 16,
 * 0 < height <= 2^24, coord.x even for 16-bit data. Elements outside [0, width / size) x [0, height) read as zero.
 *
 * Per-lane destination (lane l, blocks of 16 columns side by side, block c's data after block c-1's):
 *   read_16b_Hr16xCc                 dst[c H + r]          = M16[y + r][x + 16 c + l]
 *   read_transform_16b_Hr16xCc       dst[c H/2 + i]        = M16[y + 2i][x + 16c + l] | M16[y + 2i + 1][...] << 16
 *   read_transpose_32b_16r8x1c       dst[r]                = M32[y + l][x + r]            (r < 8)
 * Not provided: read_transpose_32b_32r8x1c. By the spec's wording its 8 x 32 transposed block gives lane l source rows
 * 2l and 2l + 1; IGC 2.40 lowers it to two 16-row messages and feeds DPAS from each message directly, i.e. rows l and
 * 16 + l. Without a GPU to settle which is right, the kernels use only the 16-row form, whose mapping is unambiguous.
 * Prefetches only warm the cache; their software version does nothing.
 */
#ifndef XE2RT_BLOCK2D_H
#define XE2RT_BLOCK2D_H

#include "xe2rt.h"

#ifndef BLOCK2D_EMU
#define BLOCK2D_EMU 0
#endif

#if XE2RT_XE2 && !BLOCK2D_EMU

#define B2D_READ_16B(H, C, base, w, h, p, coord, dst) \
    intel_sub_group_2d_block_read_16b_##H##r16x##C##c((__global void*)(base), (w), (h), (p), (coord), (dst))
#define B2D_READ_TRANSFORM_16B(H, C, base, w, h, p, coord, dst) \
    intel_sub_group_2d_block_read_transform_16b_##H##r16x##C##c((__global void*)(base), (w), (h), (p), (coord), (dst))
#define B2D_READ_TRANSPOSE_32B_16R8(base, w, h, p, coord, dst) \
    intel_sub_group_2d_block_read_transpose_32b_16r8x1c((__global void*)(base), (w), (h), (p), (coord), (dst))
#define B2D_PREFETCH_16B(H, C, base, w, h, p, coord) \
    intel_sub_group_2d_block_prefetch_16b_##H##r16x##C##c((__global void*)(base), (w), (h), (p), (coord))

#else

/* One element of the region, zero when out of bounds. */
static inline uint xe2rt_emu_2d_element(__global const void* base, int width, int height, int pitch, int x, int y,
                                        int size)
{
    if (x < 0 || y < 0 || y >= height || x >= width / size)
        return 0;
    __global const uchar* p = (__global const uchar*)base + (size_t)y * (size_t)pitch + (size_t)x * (size_t)size;
    if (size == 2)
        return *(__global const ushort*)p;
    return *(__global const uint*)p;
}

/* The software reads in chunks of eight values returned by value from functions kept out of line: the callers then
 * copy them into the destination with constant indices, so on a GPU build (the xe2emu binaries are compiled for bmg /
 * lnl too) nothing goes through private memory, and the CPU runtime builds the unrolled tiles quickly. */
static __attribute__((noinline)) ushort8 xe2rt_emu_2d_col8(__global const void* base, int width, int height,
                                                           int pitch, int x, int y)
{
    ushort v[8];
    for (int r = 0; r < 8; ++r)
        v[r] = (ushort)xe2rt_emu_2d_element(base, width, height, pitch, x, y + r, 2);
    return (ushort8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

static __attribute__((noinline)) uint8 xe2rt_emu_2d_vnni8(__global const void* base, int width, int height,
                                                          int pitch, int x, int y)
{
    uint v[8];
    for (int i = 0; i < 8; ++i)
        v[i] = xe2rt_emu_2d_element(base, width, height, pitch, x, y + 2 * i, 2) |
               xe2rt_emu_2d_element(base, width, height, pitch, x, y + 2 * i + 1, 2) << 16;
    return (uint8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

static __attribute__((noinline)) uint8 xe2rt_emu_2d_row8(__global const void* base, int width, int height,
                                                         int pitch, int x, int y)
{
    uint v[8];
    for (int i = 0; i < 8; ++i)
        v[i] = xe2rt_emu_2d_element(base, width, height, pitch, x + i, y, 4);
    return (uint8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

#define XE2RT_EMU_COPY8(dst, at, v)                                                                                  \
    do {                                                                                                             \
        (dst)[(at)] = (v).s0; (dst)[(at) + 1] = (v).s1; (dst)[(at) + 2] = (v).s2; (dst)[(at) + 3] = (v).s3;          \
        (dst)[(at) + 4] = (v).s4; (dst)[(at) + 5] = (v).s5; (dst)[(at) + 6] = (v).s6; (dst)[(at) + 7] = (v).s7;      \
    } while (0)

/* A deliberately wrong emulation for the selftest's own test (never in a shipped binary): with
 * BLOCK2D_EMU_FAULT_LANE = L, lane L of the plain 16-bit reads reads its neighbour's column (L ^ 1). */
#ifdef BLOCK2D_EMU_FAULT_LANE
#define XE2RT_EMU_LANE() ((int)get_sub_group_local_id() ^ ((int)get_sub_group_local_id() == BLOCK2D_EMU_FAULT_LANE))
#else
#define XE2RT_EMU_LANE() get_sub_group_local_id()
#endif

/* Heights below 8 (the unit tests' 1, 2, 4) take the element-wise loop. */
#define B2D_READ_16B(H, C, base, w, h, p, coord, dst)                                                                \
    do {                                                                                                             \
        const int l_ = XE2RT_EMU_LANE();                                                                             \
        _Pragma("unroll") for (int c_ = 0; c_ < (C); ++c_) {                                                         \
            if ((H) >= 8) {                                                                                          \
                _Pragma("unroll") for (int r_ = 0; r_ < (H); r_ += 8) {                                              \
                    const ushort8 v_ = xe2rt_emu_2d_col8((base), (w), (h), (p), (coord).x + 16 * c_ + l_,            \
                                                         (coord).y + r_);                                            \
                    XE2RT_EMU_COPY8((dst), c_ * (H) + r_, v_);                                                       \
                }                                                                                                    \
            } else {                                                                                                 \
                _Pragma("unroll") for (int r_ = 0; r_ < (H); ++r_)                                                   \
                    (dst)[c_ * (H) + r_] = (ushort)xe2rt_emu_2d_element((base), (w), (h), (p),                       \
                                                                        (coord).x + 16 * c_ + l_, (coord).y + r_, 2); \
            }                                                                                                        \
        }                                                                                                            \
    } while (0)

#define B2D_READ_TRANSFORM_16B(H, C, base, w, h, p, coord, dst)                                                      \
    do {                                                                                                             \
        const int l_ = get_sub_group_local_id();                                                                     \
        _Pragma("unroll") for (int c_ = 0; c_ < (C); ++c_) _Pragma("unroll") for (int i_ = 0; i_ < (H) / 2; i_ += 8) { \
            const uint8 v_ = xe2rt_emu_2d_vnni8((base), (w), (h), (p), (coord).x + 16 * c_ + l_, (coord).y + 2 * i_); \
            XE2RT_EMU_COPY8((dst), c_ * ((H) / 2) + i_, v_);                                                         \
        }                                                                                                            \
    } while (0)

#define B2D_READ_TRANSPOSE_32B_16R8(base, w, h, p, coord, dst)                                                       \
    do {                                                                                                             \
        const uint8 v_ = xe2rt_emu_2d_row8((base), (w), (h), (p), (coord).x, (coord).y + get_sub_group_local_id());  \
        XE2RT_EMU_COPY8((dst), 0, v_);                                                                               \
    } while (0)

#define B2D_PREFETCH_16B(H, C, base, w, h, p, coord) ((void)0)

#endif

#endif
