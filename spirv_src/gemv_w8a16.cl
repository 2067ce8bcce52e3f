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
 *
 * Batched decode (gemv_w8a16_m{2,4,8,16}): x [M, K] -> y [M, N] for M <= MB, the weights read (and converted to
 * float) once for all M rows. A thread owns BR = BATCH_RPT(MB) rows with MB accumulators each (BR * MB <= BATCH_ACCS,
 * in registers); after each weight load it loops over the M rows of x, each x load shared by its BR rows. x rows
 * m >= M are skipped by a uniform branch. SLM: MB x ROWS x K_SPLIT floats. The scale is applied once per output.
 */
#include "xe2rt.h"

#define INLINE static inline __attribute__((always_inline))
#define BATCH_PARAMS __global const half* x, __global const char* qweight, __global const half* scales, \
                     __global half* y, int N, int K, int M, __local float* partial
#define BATCH_ARGS x, qweight, scales, y, N, K, M, partial
/* rows per thread of the MB kernel: BATCH_ACCS / MB, within [1, ROWS] */
#define BATCH_RPT(MB) (BATCH_ACCS / (MB) < 1 ? 1 : BATCH_ACCS / (MB) > ROWS ? ROWS : BATCH_ACCS / (MB))

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

/* Batched: one sub-group per (BR rows, slice); a uchar16 block read per row (converted once), then per x row two
 * ushort8 block reads shared by the BR rows and 16 fmas per row into that (row, x row) accumulator. */
INLINE void gemv_w8a16_batch(BATCH_PARAMS, const int MB)
{
    const int BR = BATCH_RPT(MB);
    const int sg = get_sub_group_id();
    const int lane = get_sub_group_local_id();
    const int item_row = (sg / K_SPLIT) * BR;
    const int slice = sg % K_SPLIT;
    const int row0 = get_group_id(0) * ROWS + item_row;
    const int chunks = K / VL;
    const int2 range = xe2rt_slice_range(chunks, slice, K_SPLIT);

    /* Rows past N read row N-1 again and are never stored. */
    __global const char* w_rows[ROWS];
    bool aligned = XE2RT_BLOCK_ALIGNED(x) && (K & 15) == 0; /* every x row and every W row 16-byte aligned */
    for (int r = 0; r < BR; ++r) {
        w_rows[r] = qweight + (size_t)min(row0 + r, N - 1) * K;
        aligned = aligned && XE2RT_BLOCK_ALIGNED(w_rows[r]);
    }
    float acc[BATCH_ACCS];
    for (int i = 0; i < BR * MB; ++i)
        acc[i] = 0.0f;
    if (aligned) {
        for (int c = range.s0; c < range.s1; ++c) {
            for (int b = 0; b < VL / BLOCK_K; ++b) {
                const int k = c * VL + b * BLOCK_K;
                float16 wv[ROWS];
                for (int r = 0; r < BR; ++r)
                    wv[r] = convert_float16(as_char16(
                        intel_sub_group_block_read_uc16((__global const uchar*)(w_rows[r] + k))));
                for (int m = 0; m < MB; ++m) {
                    if (m < M) {
                        __global const ushort* xm = (__global const ushort*)(x + (size_t)m * K + k);
                        const half8 x0 = as_half8(intel_sub_group_block_read_us8(xm));
                        const half8 x1 = as_half8(intel_sub_group_block_read_us8(xm + 8 * SG));
                        const float16 xv = (float16)(convert_float8(x0), convert_float8(x1));
                        for (int r = 0; r < BR; ++r) {
                            float a = acc[r * MB + m];
                            a = fma(wv[r].s0, xv.s0, a); a = fma(wv[r].s1, xv.s1, a);
                            a = fma(wv[r].s2, xv.s2, a); a = fma(wv[r].s3, xv.s3, a);
                            a = fma(wv[r].s4, xv.s4, a); a = fma(wv[r].s5, xv.s5, a);
                            a = fma(wv[r].s6, xv.s6, a); a = fma(wv[r].s7, xv.s7, a);
                            a = fma(wv[r].s8, xv.s8, a); a = fma(wv[r].s9, xv.s9, a);
                            a = fma(wv[r].sa, xv.sa, a); a = fma(wv[r].sb, xv.sb, a);
                            a = fma(wv[r].sc, xv.sc, a); a = fma(wv[r].sd, xv.sd, a);
                            a = fma(wv[r].se, xv.se, a); a = fma(wv[r].sf, xv.sf, a);
                            acc[r * MB + m] = a;
                        }
                    }
                }
            }
        }
    } else {
        for (int k = range.s0 * VL + lane; k < range.s1 * VL; k += SG)
            for (int m = 0; m < MB; ++m)
                if (m < M) {
                    const float xk = x[(size_t)m * K + k];
                    for (int r = 0; r < BR; ++r)
                        acc[r * MB + m] = fma((float)w_rows[r][k], xk, acc[r * MB + m]);
                }
    }
    if (slice == K_SPLIT - 1)
        for (int k = chunks * VL + lane; k < K; k += SG)
            for (int m = 0; m < MB; ++m)
                if (m < M) {
                    const float xk = x[(size_t)m * K + k];
                    for (int r = 0; r < BR; ++r)
                        acc[r * MB + m] = fma((float)w_rows[r][k], xk, acc[r * MB + m]);
                }
    xe2rt_batch_reduce_store(acc, BR, MB, partial, ROWS, item_row, K_SPLIT, slice, lane, row0, M, N, y, scales);
}

#define BATCH_KERNEL(MB) \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void gemv_w8a16_m##MB(BATCH_PARAMS) { gemv_w8a16_batch(BATCH_ARGS, MB); }

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

/* Batched: one work-item per (BR rows, slice); per 16 k a converted weight vector per row, then per x row one
 * vload_half16 shared by the BR rows and one float16 fma per row. Rows are consecutive (x loads are shared by rows,
 * not passes). */
INLINE void gemv_w8a16_batch(BATCH_PARAMS, const int MB)
{
    const int BR = BATCH_RPT(MB);
    const int lid = get_local_id(0);
    const int slice = lid % K_SPLIT;
    const int item_row = (lid / K_SPLIT) * BR;
    const int row0 = get_group_id(0) * ROWS + item_row;

    /* Rows past N read row N-1 again (branch-free inner loop) and are never stored. */
    __global const char* w_rows[ROWS];
    for (int r = 0; r < BR; ++r)
        w_rows[r] = qweight + (size_t)min(row0 + r, N - 1) * K;
    const int blocks = K / 16;
    const int2 range = xe2rt_slice_range(blocks, slice, K_SPLIT);
    float16 acc[BATCH_ACCS];
    for (int i = 0; i < BR * MB; ++i)
        acc[i] = 0.0f;
    for (int o = range.s0; o < range.s1; ++o) {
        float16 wv[ROWS];
        for (int r = 0; r < BR; ++r)
            wv[r] = convert_float16(vload16(o, w_rows[r]));
        for (int m = 0; m < MB; ++m)
            if (m < M) {
                const float16 xv = vload_half16(o, x + (size_t)m * K);
                for (int r = 0; r < BR; ++r)
                    acc[r * MB + m] = fma(wv[r], xv, acc[r * MB + m]);
            }
    }
    float sums[BATCH_ACCS];
    for (int i = 0; i < BR * MB; ++i) {
        const float8 a8 = acc[i].lo + acc[i].hi;
        const float4 a4 = a8.lo + a8.hi;
        sums[i] = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
    }
    if (slice == K_SPLIT - 1)
        for (int k = blocks * 16; k < K; ++k)
            for (int m = 0; m < MB; ++m)
                if (m < M) {
                    const float xk = vload_half(k, x + (size_t)m * K);
                    for (int r = 0; r < BR; ++r)
                        sums[r * MB + m] = fma((float)w_rows[r][k], xk, sums[r * MB + m]);
                }
    for (int r = 0; r < BR; ++r)
        for (int m = 0; m < MB; ++m)
            partial[(m * ROWS + item_row + r) * K_SPLIT + slice] = sums[r * MB + m];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0)
        for (int r = 0; r < BR; ++r)
            for (int m = 0; m < MB; ++m)
                if (m < M && row0 + r < N) {
                    const float total = xe2rt_sum_slices(partial, m * ROWS + item_row + r, K_SPLIT);
                    vstore_half_rte(total * vload_half(row0 + r, scales), (size_t)m * N + row0 + r, y);
                }
}

#define BATCH_KERNEL(MB) \
    __kernel void gemv_w8a16_m##MB(BATCH_PARAMS) { gemv_w8a16_batch(BATCH_ARGS, MB); }

#endif

BATCH_KERNEL(2)
BATCH_KERNEL(4)
BATCH_KERNEL(8)
BATCH_KERNEL(16)
