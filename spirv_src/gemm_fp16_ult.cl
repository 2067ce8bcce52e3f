/* Unit tests of the DPAS register contract (seed 001's ULT in spirit), built with the software DPAS on every target so
 * they run on the CPU device. They use the very helpers the GEMM kernels use (gemm_fp16_dpas.h).
 *
 *  dpas_emulated_regs / dpas_spec_formula: the software built-in against a direct evaluation of the specification's
 *    formula, on raw per-lane register contents (a: short[16 lanes][8], b: int[16 lanes][8], acc: float[16 lanes][8]).
 *  ult_*: one sub-group per tile, K walked 16 at a time (block-read steps while aligned and full, then bounds-checked):
 *    usage 1 (acc = C):    A[M, K] -> a_tile, B[K, N] or B[N, K] -> b_tile (VNNI), 8 x 16 tile, direct store;
 *    usage 2 (acc = C^T):  B[N, K] or B[K, N] -> a_tile, A[M, K] -> b_tile (VNNI, M rows as lanes), 16 x 8 tile,
 *                          transposed write-back (each lane scatters its row).
 */
#include "gemm_fp16_dpas.h"

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void dpas_emulated_regs(__global const short* a_regs, __global const int* b_regs,
                                 __global const float* acc_regs, __global float* out_regs)
{
    const int lane = get_sub_group_local_id();
    const float8 r = DPAS(vload8(lane, a_regs), vload8(lane, b_regs), vload8(lane, acc_regs));
    vstore8(r, lane, out_regs);
}

/* One work-item per (m = get_global_id(1), n = get_global_id(0)), straight from the specification's wording: lane k
 * contributes A[m][k] as component m of a; lane n contributes column n of B, K values packed two per int; lane n holds
 * column n of acc. No sub-group operation is involved. */
XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void dpas_spec_formula(__global const short* a_regs, __global const int* b_regs,
                                __global const float* acc_regs, __global float* out_regs)
{
    const int n = get_global_id(0);
    const int m = get_global_id(1);
    float r = acc_regs[n * 8 + m];
    for (int k = 0; k < 16; ++k) {
        const float a_mk = vload_half(0, (__global const half*)&a_regs[k * 8 + m]);
        const float b_kn = vload_half(k % 2, (__global const half*)&b_regs[n * 8 + k / 2]);
        r = fma(a_mk, b_kn, r);
    }
    out_regs[n * 8 + m] = r;
}

INLINE bool rows_aligned(__global const half* p, int ld) { return XE2RT_BLOCK_ALIGNED(p) && ld % 8 == 0; }

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void ult_usage1_b_kn(__global const half* A, __global const half* B, __global half* C, int M, int N, int K)
{
    const int lane = get_sub_group_local_id();
    const int row0 = get_group_id(1) * DPAS_M;
    const int col0 = get_group_id(0) * DPAS_SG;
    const bool aligned = rows_aligned(A, K) && rows_aligned(B, N) && col0 + DPAS_SG <= N;
    float8 acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += DPAS_K) {
        const bool fast = aligned && k0 + DPAS_K <= K;
        acc = DPAS(load_a_rows(A, K, row0, M, k0, K, lane, fast), load_b_kn(B, N, col0, N, k0, K, lane, fast), acc);
    }
    store_tile(C, N, row0, M, col0, N, lane, acc, C, 0, ACT_NONE);
}

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void ult_usage1_b_nk(__global const half* A, __global const half* B, __global half* C, int M, int N, int K)
{
    const int lane = get_sub_group_local_id();
    const int row0 = get_group_id(1) * DPAS_M;
    const int col0 = get_group_id(0) * DPAS_SG;
    const bool aligned = rows_aligned(A, K) && (((ulong)B) & 3UL) == 0 && K % 2 == 0;
    float8 acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += DPAS_K) {
        const bool fast = aligned && k0 + DPAS_K <= K;
        acc = DPAS(load_a_rows(A, K, row0, M, k0, K, lane, fast), load_rows_vnni(B, K, col0, N, k0, K, lane, fast),
                   acc);
    }
    store_tile(C, N, row0, M, col0, N, lane, acc, C, 0, ACT_NONE);
}

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void ult_usage2_b_nk(__global const half* A, __global const half* B, __global half* C, int M, int N, int K)
{
    const int lane = get_sub_group_local_id();
    const int row0 = get_group_id(1) * DPAS_SG; /* 16 rows of C: the lanes */
    const int col0 = get_group_id(0) * DPAS_M;  /* 8 columns of C: the accumulator components */
    const bool aligned = rows_aligned(B, K) && (((ulong)A) & 3UL) == 0 && K % 2 == 0;
    float8 acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += DPAS_K) {
        const bool fast = aligned && k0 + DPAS_K <= K;
        acc = DPAS(load_a_rows(B, K, col0, N, k0, K, lane, fast), load_rows_vnni(A, K, row0, M, k0, K, lane, fast),
                   acc);
    }
    store_tile_transposed(C, N, row0, M, col0, N, lane, acc, C, 0, ACT_NONE);
}

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void ult_usage2_b_kn(__global const half* A, __global const half* B, __global half* C, int M, int N, int K)
{
    const int lane = get_sub_group_local_id();
    const int row0 = get_group_id(1) * DPAS_SG;
    const int col0 = get_group_id(0) * DPAS_M;
    const bool aligned = (((ulong)A) & 3UL) == 0 && K % 2 == 0;
    float8 acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += DPAS_K) {
        const bool fast = aligned && k0 + DPAS_K <= K;
        acc = DPAS(load_a_cols_of_kn(B, N, col0, N, k0, K, lane), load_rows_vnni(A, K, row0, M, k0, K, lane, fast),
                   acc);
    }
    store_tile_transposed(C, N, row0, M, col0, N, lane, acc, C, 0, ACT_NONE);
}

/* ---- 2D block reads (block2d.h), software versions: one sub-group reads one shape from a region described by
 * (width, height, pitch) at (x, y); lane l writes its destination to out[l * n + e], n values per lane. ---- */
#include "block2d.h"

#if XE2RT_XE2 && !BLOCK2D_EMU
/* The real built-ins the read kernels below name and xe2rt.h does not declare (the GEMM uses only a few shapes). */
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_1r16x1c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_2r16x1c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_4r16x1c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_8r16x1c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_16r16x1c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_1r16x2c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_2r16x2c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_4r16x2c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_transform_16b_16r16x1c, uint)
XE2RT_2D_READ(intel_sub_group_2d_block_read_transform_16b_32r16x1c, uint)
#endif

#define ULT_READ_16B(H, C)                                                                                           \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void ult_b2d_read_16b_##H##r16x##C##c(__global const ushort* base, int width, int height, int pitch,   \
                                                   int x, int y, __global ushort* out)                             \
    {                                                                                                              \
        ushort d[(H) * (C)];                                                                                       \
        const int2 coord = (int2)(x, y);                                                                           \
        B2D_READ_16B(H, C, base, width, height, pitch, coord, d);                                                  \
        for (int e = 0; e < (H) * (C); ++e)                                                                        \
            out[get_sub_group_local_id() * (H) * (C) + e] = d[e];                                                  \
    }

#define ULT_READ_TRANSFORM_16B(H, C)                                                                                 \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void ult_b2d_read_transform_16b_##H##r16x##C##c(__global const ushort* base, int width, int height,    \
                                                             int pitch, int x, int y, __global uint* out)          \
    {                                                                                                              \
        uint d[(H) / 2 * (C)];                                                                                     \
        const int2 coord = (int2)(x, y);                                                                           \
        B2D_READ_TRANSFORM_16B(H, C, base, width, height, pitch, coord, d);                                        \
        for (int e = 0; e < (H) / 2 * (C); ++e)                                                                    \
            out[get_sub_group_local_id() * (H) / 2 * (C) + e] = d[e];                                              \
    }

ULT_READ_16B(1, 1) ULT_READ_16B(2, 1) ULT_READ_16B(4, 1) ULT_READ_16B(8, 1) ULT_READ_16B(16, 1) ULT_READ_16B(32, 1)
ULT_READ_16B(1, 2) ULT_READ_16B(2, 2) ULT_READ_16B(4, 2) ULT_READ_16B(8, 2) ULT_READ_16B(16, 2) ULT_READ_16B(32, 2)
ULT_READ_TRANSFORM_16B(16, 1) ULT_READ_TRANSFORM_16B(16, 2) ULT_READ_TRANSFORM_16B(32, 1) ULT_READ_TRANSFORM_16B(32, 2)

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void ult_b2d_read_transpose_32b_16r8x1c(__global const uint* base, int width, int height, int pitch, int x,
                                                 int y, __global uint* out)
{
    uint d[8];
    const int2 coord = (int2)(x, y);
    B2D_READ_TRANSPOSE_32B_16R8(base, width, height, pitch, coord, d);
    for (int e = 0; e < 8; ++e)
        out[get_sub_group_local_id() * 8 + e] = d[e];
}
