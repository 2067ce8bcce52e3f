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
    const float8 r = dpas_emulated(vload8(lane, a_regs), vload8(lane, b_regs), vload8(lane, acc_regs));
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
