/* FP16 GEMV for LLM decode: y[N] = W[N, K] . x[K], fp16 in and out, fp32 accumulation.
 *
 * Work decomposition (seed 000): a work-group owns ROWS consecutive rows; each row's K range is split into K_SPLIT
 * contiguous slices whose partial sums meet in SLM (ROWS * K_SPLIT floats) and are added by slice 0 after one
 * barrier. Every work-item reaches that barrier exactly once (no early return), or the GPU hangs.
 *
 * Two code shapes from one source, chosen by target:
 *  - XE2 (bmg, lnl): one sub-group of SG lanes per (row, slice); VL halves per iteration come in as ushort8 sub-group
 *    block reads of W and x in the same lane layout, so lanes multiply matching elements without shuffles.
 *  - CPU: one work-item per (RPT rows, slice), float8 fma over K. gemv_fp16_short (the op's choice for K <= SEQ_K_MAX
 *    halves) reads the rows one after another (one contiguous span per work-item, x from L1); gemv_fp16 reads them
 *    side by side, each vload_half8 of x shared by the RPT rows (TOOLCHAIN.md 6).
 *
 * Batched decode (gemv_fp16_m{2,4,8,16}): x [M, K] -> y [M, N] for M <= MB, the weights read once for all M rows.
 * A thread owns BATCH_RPT(MB) rows and keeps MB accumulators per row (BATCH_RPT * MB <= BATCH_ACCS, so the
 * accumulators stay in registers); after each weight load it loops over the M rows of x, whose loads are shared by
 * its rows (x rows come from cache: sharing them keeps x traffic per weight byte at MB / BATCH_RPT). x rows m >= M
 * are skipped by a uniform branch. The SLM reduction holds MB x ROWS x K_SPLIT floats.
 */
#include "xe2rt.h"

#define INLINE static inline __attribute__((always_inline))
#define BATCH_PARAMS __global const half* x, __global const half* w, __global half* y, int N, int K, int M, \
                     __local float* partial
#define BATCH_ARGS x, w, y, N, K, M, partial
/* rows per thread of the MB kernel: BATCH_ACCS / MB, within [1, ROWS] */
#define BATCH_RPT(MB) (BATCH_ACCS / (MB) < 1 ? 1 : BATCH_ACCS / (MB) > ROWS ? ROWS : BATCH_ACCS / (MB))

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

/* Batched: one sub-group per (BR = BATCH_RPT(MB) rows, slice); a weight block read per row, then per x row one
 * block read shared by the BR rows and 8 fmas per row into that (row, x row) accumulator. */
INLINE void gemv_fp16_batch(BATCH_PARAMS, const int MB)
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
    __global const half* w_rows[ROWS];
    bool aligned = XE2RT_BLOCK_ALIGNED(x) && (K & 7) == 0; /* every x row and every W row 16-byte aligned */
    for (int r = 0; r < BR; ++r) {
        w_rows[r] = w + (size_t)min(row0 + r, N - 1) * K;
        aligned = aligned && XE2RT_BLOCK_ALIGNED(w_rows[r]);
    }
    float acc[BATCH_ACCS];
    for (int i = 0; i < BR * MB; ++i)
        acc[i] = 0.0f;
    if (aligned) {
        for (int c = range.s0; c < range.s1; ++c) {
            for (int b = 0; b < VL / BLOCK; ++b) {
                const int k = c * VL + b * BLOCK;
                float8 wv[ROWS];
                for (int r = 0; r < BR; ++r)
                    wv[r] = convert_float8(as_half8(
                        intel_sub_group_block_read_us8((__global const ushort*)(w_rows[r] + k))));
                for (int m = 0; m < MB; ++m) {
                    if (m < M) {
                        const float8 xv = convert_float8(as_half8(
                            intel_sub_group_block_read_us8((__global const ushort*)(x + (size_t)m * K + k))));
                        for (int r = 0; r < BR; ++r) {
                            float a = acc[r * MB + m];
                            a = fma(wv[r].s0, xv.s0, a); a = fma(wv[r].s1, xv.s1, a);
                            a = fma(wv[r].s2, xv.s2, a); a = fma(wv[r].s3, xv.s3, a);
                            a = fma(wv[r].s4, xv.s4, a); a = fma(wv[r].s5, xv.s5, a);
                            a = fma(wv[r].s6, xv.s6, a); a = fma(wv[r].s7, xv.s7, a);
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
    xe2rt_batch_reduce_store(acc, BR, MB, partial, ROWS, item_row, K_SPLIT, slice, lane, row0, M, N, y, 0);
}

#define BATCH_KERNEL(MB) \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void gemv_fp16_m##MB(BATCH_PARAMS) { gemv_fp16_batch(BATCH_ARGS, MB); }

#else /* CPU shape */

/* short_rows (a compile-time constant per kernel): read the RPT rows one after another (gemv_fp16_short, for
 * K <= SEQ_K_MAX; the op chooses) instead of side by side (gemv_fp16). Two kernels, so that a first call builds only
 * the path it runs. */
INLINE void gemv_fp16_cpu(__global const half* x, __global const half* w, __global half* y, int N, int K,
                          __local float* partial, const bool short_rows)
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
    float sums[RPT];
    if (short_rows) {
        /* Short rows: the RPT rows one after another, so that a work-item reads one contiguous span (its rows follow
         * one another in memory) and x stays in L1. Not unrolled over rows: the loop body is the whole row. */
        __attribute__((opencl_unroll_hint(1)))
        for (int r = 0; r < RPT; ++r) {
            float8 a0 = 0.0f, a1 = 0.0f;
            int o = o_begin;
            for (; o + 2 <= o_end; o += 2) {
                a0 = fma(vload_half8(o, w_rows[r]), vload_half8(o, x), a0);
                a1 = fma(vload_half8(o + 1, w_rows[r]), vload_half8(o + 1, x), a1);
            }
            if (o < o_end)
                a0 = fma(vload_half8(o, w_rows[r]), vload_half8(o, x), a0);
            const float8 a8 = a0 + a1;
            const float4 a4 = a8.lo + a8.hi;
            sums[r] = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
        }
    } else {
        /* Long rows: the RPT rows side by side, each x load shared by them. */
        float8 acc[RPT];
        for (int r = 0; r < RPT; ++r)
            acc[r] = 0.0f;
        for (int o = o_begin; o < o_end; ++o) {
            const float8 xv = vload_half8(o, x);
            for (int r = 0; r < RPT; ++r)
                acc[r] = fma(vload_half8(o, w_rows[r]), xv, acc[r]);
        }
        for (int r = 0; r < RPT; ++r) {
            float4 a4 = acc[r].lo + acc[r].hi;
            sums[r] = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
        }
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

__kernel void gemv_fp16(__global const half* x, __global const half* w, __global half* y, int N, int K,
                        __local float* partial)
{
    gemv_fp16_cpu(x, w, y, N, K, partial, false);
}

__kernel void gemv_fp16_short(__global const half* x, __global const half* w, __global half* y, int N, int K,
                              __local float* partial)
{
    gemv_fp16_cpu(x, w, y, N, K, partial, true);
}

/* Batched: one work-item per (BR = BATCH_RPT(MB) rows, slice); per 16 k a weight vector per row, then per x row one
 * vload_half16 shared by the BR rows and one float16 fma per row. */
INLINE void gemv_fp16_batch(BATCH_PARAMS, const int MB)
{
    const int BR = BATCH_RPT(MB);
    const int lid = get_local_id(0);
    const int slice = lid % K_SPLIT;
    const int item_row = (lid / K_SPLIT) * BR;
    const int row0 = get_group_id(0) * ROWS + item_row;

    /* Rows past N read row N-1 again (branch-free inner loop) and are never stored. */
    __global const half* w_rows[ROWS];
    for (int r = 0; r < BR; ++r)
        w_rows[r] = w + (size_t)min(row0 + r, N - 1) * K;
    const int blocks = K / 16;
    const int2 range = xe2rt_slice_range(blocks, slice, K_SPLIT);
    float16 acc[BATCH_ACCS];
    for (int i = 0; i < BR * MB; ++i)
        acc[i] = 0.0f;
    for (int o = range.s0; o < range.s1; ++o) {
        float16 wv[ROWS];
        for (int r = 0; r < BR; ++r)
            wv[r] = vload_half16(o, w_rows[r]);
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
                        sums[r * MB + m] = fma(vload_half(k, w_rows[r]), xk, sums[r * MB + m]);
                }
    for (int r = 0; r < BR; ++r)
        for (int m = 0; m < MB; ++m)
            partial[(m * ROWS + item_row + r) * K_SPLIT + slice] = sums[r * MB + m];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0)
        for (int r = 0; r < BR; ++r)
            for (int m = 0; m < MB; ++m)
                if (m < M && row0 + r < N)
                    vstore_half_rte(xe2rt_sum_slices(partial, m * ROWS + item_row + r, K_SPLIT),
                                    (size_t)m * N + row0 + r, y);
}

#define BATCH_KERNEL(MB) \
    __kernel void gemv_fp16_m##MB(BATCH_PARAMS) { gemv_fp16_batch(BATCH_ARGS, MB); }

#endif

BATCH_KERNEL(2)
BATCH_KERNEL(4)
BATCH_KERNEL(8)
BATCH_KERNEL(16)
