/* FP16 GEMV for LLM decode: y[N] = W[N, K] . x[K], fp16 in and out, fp32 accumulation.
 *
 * Work decomposition (seed 000): a work-group owns ROWS consecutive rows; each row's K range is split into K_SPLIT
 * contiguous slices whose partial sums meet in SLM (ROWS * K_SPLIT floats) and are added by slice 0 after one
 * barrier. Every work-item reaches that barrier exactly once (no early return), or the GPU hangs.
 *
 * Two code shapes from one source, chosen by target:
 *  - XE2 (bmg, lnl): one sub-group of SG lanes per (row, slice); VL halves per iteration come in as ushort8 sub-group
 *    block reads of W and x in the same lane layout, so lanes multiply matching elements without shuffles.
 *  - CPU: one work-item per (RPT rows, slice); vload_half8 of x shared by RPT rows, float8 fma (TOOLCHAIN.md 6).
 */
#include "xe2rt.h"

#if XE2RT_XE2

#define BLOCK (SG * 8) /* halves per ushort8 block read */

XE2RT_REQD_SUB_GROUP_SIZE(SG)
__kernel void gemv_fp16(__global const half* x, __global const half* w, __global half* y, int N, int K,
                        __local float* partial)
{
    const int sg = get_sub_group_id();
    const int lane = get_sub_group_local_id();
    const int row_in_group = sg / K_SPLIT;
    const int slice = sg % K_SPLIT;
    const int row = get_group_id(0) * ROWS + row_in_group;

    float sum = 0.0f;
    if (row < N) {
        __global const half* w_row = w + (size_t)row * K;
        const int chunks = K / VL;
        const int2 range = xe2rt_slice_range(chunks, slice, K_SPLIT);
        const int c_begin = range.s0, c_end = range.s1;
        float8 acc = 0.0f;
        if (XE2RT_BLOCK_ALIGNED(w_row) && XE2RT_BLOCK_ALIGNED(x)) {
            for (int c = c_begin; c < c_end; ++c) {
                for (int b = 0; b < VL / BLOCK; ++b) {
                    const int k = c * VL + b * BLOCK;
                    half8 wv = as_half8(intel_sub_group_block_read_us8((__global const ushort*)(w_row + k)));
                    half8 xv = as_half8(intel_sub_group_block_read_us8((__global const ushort*)(x + k)));
                    acc = fma(convert_float8(wv), convert_float8(xv), acc);
                }
            }
        } else {
            for (int k = c_begin * VL + lane; k < c_end * VL; k += SG)
                acc.s0 = fma((float)w_row[k], (float)x[k], acc.s0);
        }
        if (slice == K_SPLIT - 1)
            for (int k = chunks * VL + lane; k < K; k += SG)
                acc.s1 = fma((float)w_row[k], (float)x[k], acc.s1);
        const float4 a4 = acc.lo + acc.hi;
        sum = sub_group_reduce_add((a4.s0 + a4.s1) + (a4.s2 + a4.s3));
    }
    if (lane == 0)
        partial[sg] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0 && lane == 0 && row < N) {
        const float total = xe2rt_sum_slices(partial, row_in_group, K_SPLIT);
        y[row] = convert_half(total);
    }
}

#else /* CPU shape */

__kernel void gemv_fp16(__global const half* x, __global const half* w, __global half* y, int N, int K,
                        __local float* partial)
{
    const int lid = get_local_id(0);
    const int slice = lid % K_SPLIT;
    const int item_row = (lid / K_SPLIT) * RPT;
    const int row0 = get_group_id(0) * ROWS + item_row;

    /* Rows past N read row N-1 again (branch-free inner loop) and are never stored. */
    __global const half* w_rows[RPT];
    for (int r = 0; r < RPT; ++r)
        w_rows[r] = w + (size_t)min(row0 + r, N - 1) * K;

    const int octets = K / 8;
    const int2 range = xe2rt_slice_range(octets, slice, K_SPLIT);
    const int o_begin = range.s0, o_end = range.s1;
    float8 acc[RPT];
    for (int r = 0; r < RPT; ++r)
        acc[r] = 0.0f;
    for (int o = o_begin; o < o_end; ++o) {
        const float8 xv = vload_half8(o, x);
        for (int r = 0; r < RPT; ++r)
            acc[r] = fma(vload_half8(o, w_rows[r]), xv, acc[r]);
    }
    float sums[RPT];
    for (int r = 0; r < RPT; ++r) {
        float4 a4 = acc[r].lo + acc[r].hi;
        sums[r] = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
    }
    if (slice == K_SPLIT - 1)
        for (int k = octets * 8; k < K; ++k) {
            const float xk = vload_half(k, x);
            for (int r = 0; r < RPT; ++r)
                sums[r] = fma(vload_half(k, w_rows[r]), xk, sums[r]);
        }
    for (int r = 0; r < RPT; ++r)
        partial[(item_row + r) * K_SPLIT + slice] = sums[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0)
        for (int r = 0; r < RPT; ++r) {
            const float total = xe2rt_sum_slices(partial, item_row + r, K_SPLIT);
            if (row0 + r < N)
                vstore_half_rte(total, row0 + r, y);
        }
}

#endif
