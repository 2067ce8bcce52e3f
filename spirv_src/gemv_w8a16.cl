/* W8A16 GEMV for LLM decode: y[N] = W[N, K] . x[K], W as int8 [N, K] with one fp16 scale per row, x and y fp16,
 * fp32 accumulation: y[n] = s[n] * sum_k q[n, k] x[k] (the scale applied once per row).
 *
 * Decomposition (seed 000): a work-group owns ROWS rows; each row's K is split into K_SPLIT slices whose partial sums
 * meet in SLM and are added by slice 0 after one barrier that every work-item reaches.
 *  - XE2: one SG-lane sub-group per (row, slice). A uchar16 block read gives lane byte i = k (i * SG + lane), the
 *    same lane layout as two ushort8 block reads of x, so lanes multiply matching elements without shuffles.
 *    A per-lane loop covers the K tail and rows that are not 16-byte aligned (K % 16 != 0).
 *  - CPU: one work-item per (RPT rows, slice); vload_half16 of x shared by the rows of a pass (RPT long rows, or
 *    RPT_SHORT short rows per pass), char16 -> float16 fma.
 */
#include "xe2rt.h"

#ifndef INTERLEAVE_MAX_ROW_BYTES
#define INTERLEAVE_MAX_ROW_BYTES 0
#endif

#define W8_PARAMS __global const half* x, __global const char* qweight, __global const half* scales, \
                  __global half* y, int N, int K, __local float* partial

#if XE2RT_XE2

#define BLOCK_K (SG * 16) /* k per uchar16 block read */

XE2RT_REQD_SUB_GROUP_SIZE(SG)
__kernel void gemv_w8a16(W8_PARAMS)
{
    const int sg = get_sub_group_id();
    const int lane = get_sub_group_local_id();
    const int row_in_group = sg / K_SPLIT;
    const int slice = sg % K_SPLIT;
    const int row = get_group_id(0) * ROWS + row_in_group;

    float sum = 0.0f;
    if (row < N) {
        __global const char* w_row = qweight + (size_t)row * K;
        const int chunks = K / VL;
        const int2 range = xe2rt_slice_range(chunks, slice, K_SPLIT);
        const int c_begin = range.s0, c_end = range.s1;
        float8 acc = 0.0f;
        if (XE2RT_BLOCK_ALIGNED(w_row) && XE2RT_BLOCK_ALIGNED(x)) {
            for (int c = c_begin; c < c_end; ++c) {
                for (int b = 0; b < VL / BLOCK_K; ++b) {
                    const int k = c * VL + b * BLOCK_K;
                    const char16 wv = as_char16(intel_sub_group_block_read_uc16((__global const uchar*)(w_row + k)));
                    const half8 x0 = as_half8(intel_sub_group_block_read_us8((__global const ushort*)(x + k)));
                    const half8 x1 = as_half8(intel_sub_group_block_read_us8((__global const ushort*)(x + k + 8 * SG)));
                    acc = fma(convert_float8(wv.lo), convert_float8(x0), acc);
                    acc = fma(convert_float8(wv.hi), convert_float8(x1), acc);
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
        y[row] = convert_half(total * (float)scales[row]);
    }
}

#else /* CPU shape */

/* sums[r] = sum over 16-element blocks [o_begin, o_end) of w_rows[r] . x, one float16 accumulator per row. */
static inline void w8_cpu_rows(__global const half* x, __global const char* const* w_rows, float* sums, const int rows,
                               const int o_begin, const int o_end)
{
    float16 acc[RPT];
    for (int r = 0; r < rows; ++r)
        acc[r] = 0.0f;
    for (int o = o_begin; o < o_end; ++o) {
        const float16 xv = vload_half16(o, x);
        for (int r = 0; r < rows; ++r)
            acc[r] = fma(convert_float16(vload16(o, w_rows[r])), xv, acc[r]);
    }
    for (int r = 0; r < rows; ++r) {
        const float8 a8 = acc[r].lo + acc[r].hi;
        const float4 a4 = a8.lo + a8.hi;
        sums[r] = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
    }
}

__kernel void gemv_w8a16(W8_PARAMS)
{
    const int lid = get_local_id(0);
    const int slice = lid % K_SPLIT;
    const int item_row = (lid / K_SPLIT) * RPT;
    const int row0 = get_group_id(0) * ROWS + item_row;

    /* Short rows (K <= INTERLEAVE_MAX_ROW_BYTES) run in RPT / RPT_SHORT passes, pass p as virtual item
     * v = item * RPT / RPT_SHORT + p of RPT_SHORT rows dealt out strided: v takes rows v, v + V, v + 2V, ... so the row
     * streams the hardware prefetcher has picked up run on into the next pass's rows (see gemv_w4a16.cl). Long rows:
     * RPT consecutive rows at once, sharing each x load. */
    const bool interleave = K <= INTERLEAVE_MAX_ROW_BYTES;
    const int n_virtual = (N + RPT_SHORT - 1) / RPT_SHORT;
    const int first_virtual = row0 / RPT_SHORT;
    int rows[RPT];
    bool valid[RPT];
    __global const char* w_rows[RPT];
    for (int r = 0; r < RPT; ++r) {
        const int v = first_virtual + r / RPT_SHORT;
        rows[r] = interleave ? v + (r % RPT_SHORT) * n_virtual : row0 + r;
        valid[r] = rows[r] < N && (!interleave || v < n_virtual);
        /* Rows past N read row N-1 again (branch-free inner loop) and are never stored. */
        w_rows[r] = qweight + (size_t)min(rows[r], N - 1) * K;
    }

    const int blocks = K / 16;
    const int2 range = xe2rt_slice_range(blocks, slice, K_SPLIT);
    float sums[RPT];
    if (interleave)
        for (int p = 0; p < RPT; p += RPT_SHORT)
            w8_cpu_rows(x, w_rows + p, sums + p, RPT_SHORT, range.s0, range.s1);
    else
        w8_cpu_rows(x, w_rows, sums, RPT, range.s0, range.s1);
    if (slice == K_SPLIT - 1)
        for (int k = blocks * 16; k < K; ++k) {
            const float xk = vload_half(k, x);
            for (int r = 0; r < RPT; ++r)
                sums[r] = fma((float)w_rows[r][k], xk, sums[r]);
        }
    for (int r = 0; r < RPT; ++r)
        partial[(item_row + r) * K_SPLIT + slice] = sums[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0)
        for (int r = 0; r < RPT; ++r) {
            const float total = xe2rt_sum_slices(partial, item_row + r, K_SPLIT);
            if (valid[r])
                vstore_half_rte(total * vload_half(rows[r], scales), rows[r], y);
        }
}

#endif
