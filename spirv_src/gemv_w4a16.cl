/* W4A16 GEMV for LLM decode: y[N] = W[N, K] . x[K], W as uint4 codes with per-group fp16 scales (and optional uint8
 * zero points), x and y fp16, fp32 accumulation.  W[n, k] = (q[n, k] - z[n, k / G]) * s[n, k / G].
 *
 * Layout (seed 000): packed uchar [N, K/2] (low nibble = even k), scales half [N, K/G], zeros uchar [N, K/G]. The
 * symmetric kernels (zero point 8) never read `zeros`.
 *
 * Dequant (seed 004). A code q becomes a float v = q + MAGIC_VALUE by one of two conversions (HALF_MAGIC):
 *    1  (q | 0x6400) read as half is exactly 1024 + q: one OR, no conversion instruction (Xe2 has native half, and
 *       mixed half x float mads);
 *    0  an integer-to-float convert, v = q (x86 converts 8 int32 per instruction, but has no half arithmetic: a
 *       magic half costs a vcvtph2ps there anyway).
 *  DEQUANT_MAGIC 1  bias correction: v goes straight into the fp32 products; (MAGIC_VALUE + z) * sum(x) is subtracted
 *                   once per group (CPU) or per 8-code word (Xe2), with sum(x) computed once for the RPT rows that
 *                   share it. Products (11-bit x 11-bit) are exact in fp32; the cancellation spans one group only.
 *  DEQUANT_MAGIC 0  plain: v - (MAGIC_VALUE + z) per element (exact), then the product.
 *
 * Decomposition (seed 000): a work-group owns ROWS rows; each row's K is split into K_SPLIT slices whose partial sums
 * meet in SLM and are added by slice 0 after one barrier that every work-item reaches.
 *  - XE2: one SG-lane sub-group per (RPT rows, slice). One uint4 block read per row gives 512 k: lane word i holds
 *    the 8 codes k = 8 (i SG + lane) .. + 7 (one group, as G >= 32), matched by a 16-byte load of x shared by the
 *    RPT rows; codes become halves two at a time by 32-bit mask / OR. A per-lane byte loop covers the K tail and
 *    unaligned rows.
 *  - CPU: one work-item per (RPT rows, slice), slices at group granularity. x of a group is loaded once, split into
 *    even / odd k (matching low / high nibbles, so the weights need no interleave) and shared by RPT rows; lane-wise
 *    float16 accumulators (TOOLCHAIN.md 6). WIDE_STEP 1 (bias correction only): 128 k per step as one uint16 per row,
 *    x split into 8 phase vectors (lane i, phase t = x[k0 + 8 i + t]) shared by the RPT rows, per-lane scales and zero
 *    points, so the per-group work is vector work too; groups past the last whole step take the per-group path.
 *    WIDE_STEP 2 (AVX512-VNNI hosts only, variant gemv_w4a16_vnni): the same 128-k steps as integer dot products.
 *    x of every whole step is made once per work-group into local memory (after the partial sums, XQ_STRIDE ints
 *    per step): 15-bit fixed point with a power-of-two scale per step (x_int8_parts in w4_cpu.h), as two signed
 *    bytes per element in the codes' byte order. Per row and step: two masks give the even / odd codes as unsigned
 *    bytes, four vpdpbusd (64 byte products each) the exact integer dot, the symmetric zero point enters as
 *    -8 sum(xi) in the accumulator's start, a zero point per lane as one fma, then one fma with scale x step scale.
 *    Making x once per work-group, not per work-item, is half the gain: per work-item it cost as much as the rows.
 *    Fused VNNI kernels (gemv_w4a16(..., norm=, silu_mul=) on the host), bit for bit the separate ops' halves:
 *      _norm       x = rms_norm(x [+ res]) * nw first: work-item 0 of each work-group sums the squares in
 *                  rms_norm_f16's order (work-group 0 also stores s = x + res), then each 128-k step is normalized
 *                  and rounded to fp16 where rms_norm stores, before its fixed point; K a multiple of 128.
 *      _silu       rows [gate; up] (N = 2 I, I even): with rows dealt out strided (row_step N / 4) a work-item's
 *                  rows r and r + 2 are gate and up of one output, so it stores silu(g) * u of their fp16 values.
 *      _norm_silu  both (a dense MLP's ln2, gate/up projection and SiLU-and-multiply in one launch).
 *    The Xe2 kernels have the same three forms (w4_xe2 with PRO / EPI): the norm as r (W (nw s)) at the end.
 * One kernel per (group size, symmetric / zero-point): gemv_w4a16_g{32,64,128}_{sym,zp}.
 *
 * Batched decode (gemv_w4a16_g{G}_{sym,zp}_m{2,4,8,16}): x [M, K] -> y [M, N] for M <= MB, the weights read and
 * dequantized once for all M rows: in a batch the dequant is shared by M rows, so each code becomes its exact weight
 * (q - z) s first (a 4-bit difference times an fp16 scale is exact in fp32) and every x row takes plain fmas; the
 * DEQUANT_MAGIC variants differ only in the single-row kernels. A thread owns BR = BATCH_RPT(MB) rows with MB
 * accumulators each (BR * MB <= max(BATCH_ACCS, MB), in registers); x rows m >= M are skipped by a uniform branch.
 *  - XE2: one sub-group per (BR rows, slice), 512 k per uint4 block read per row as above; per word 8 weights per
 *    row, then per x row one 16-byte x load shared by the BR rows.
 *  - CPU: one work-item per (BR consecutive rows, slice); per 32 k the 32 weights of a row are dequantized and put
 *    back in k order (two permutes), then per x row two vload_half16 shared by the BR rows.
 */
#include "xe2rt.h"

#ifndef DEQUANT_MAGIC
#define DEQUANT_MAGIC 1
#endif
#ifndef HALF_MAGIC
#define HALF_MAGIC 1
#endif
#define MAGIC_BITS 0x6400     /* half 1024.0; (q | MAGIC_BITS) reads as 1024 + q for q < 1024 */
#if HALF_MAGIC
#define MAGIC_VALUE 1024.0f
#else
#define MAGIC_VALUE 0.0f
#endif
#define SYM_ZERO 8
#define ROUND16(v) ((float)convert_half_rte(v)) /* a float as the fp16 value a store of it holds */
#define XQ_STRIDE 96 /* ints of local memory per 128-k step of x (WIDE_STEP 2): 5 x 16 + the scale, 64-byte rows */
#ifndef WIDE_STEP
#define WIDE_STEP 0
#endif
#if WIDE_STEP == 1 && !DEQUANT_MAGIC
#error "the wide CPU path is written with bias correction only"
#endif
#if WIDE_STEP == 2 && (K_SPLIT != 1 || !DEQUANT_MAGIC)
#error "the VNNI path (WIDE_STEP 2) is written for K_SPLIT 1, with the per-group tail's bias correction"
#endif
#ifndef INTERLEAVE_MAX_ROW_BYTES
#define INTERLEAVE_MAX_ROW_BYTES 0
#endif

#define W4_PARAMS __global const half* x, __global const uchar* packed, __global const half* scales, \
                  __global const uchar* zeros, __global half* y, int N, int K, __local float* partial
#define W4_ARGS x, packed, scales, zeros, y, N, K, partial
/* what the fused VNNI kernels add: the x prologue PRO_NORM (w4_prologue_step) and the output epilogue EPI_SILU
 * (w4_cpu's store) */
#define FUSED_PARAMS __global const half* res, __global const half* nw, __global half* s_out, float eps, int has_res
#define FUSED_ARGS res, nw, s_out, eps, has_res
#define PRO_NONE 0
#define PRO_NORM 1
#define EPI_NONE 0
#define EPI_SILU 1

#define INLINE static inline __attribute__((always_inline))

#define BATCH_PARAMS __global const half* x, __global const uchar* packed, __global const half* scales, \
                     __global const uchar* zeros, __global half* y, int N, int K, int M, __local float* partial
#define BATCH_ARGS x, packed, scales, zeros, y, N, K, M, partial
/* rows per thread of the MB kernel: BATCH_ACCS / MB, within [1, ROWS]; accumulator slots BR * MB */
#define BATCH_RPT(MB) (BATCH_ACCS / (MB) < 1 ? 1 : BATCH_ACCS / (MB) > ROWS ? ROWS : BATCH_ACCS / (MB))
#define BATCH_SLOTS (BATCH_ACCS > 16 ? BATCH_ACCS : 16)

#if XE2RT_XE2

#if SG != 16
#error "the Xe2 W4 shape is written for SG = 16"
#endif
#if RPT % 2
#error "the Xe2 silu_mul epilogue pairs RPT / 2 gate rows with RPT / 2 up rows"
#endif
#define BLOCK_K (SG * 32) /* k per uint4 block read: lane word i holds k = 8 (i SG + lane) .. + 7 */

/* One packed byte (k = 2 j, 2 j + 1) of a row, with exact per-element dequant; for tails and unaligned rows. */
INLINE float w4_byte(__global const half* x, __global const uchar* prow, __global const half* srow,
                     __global const uchar* zrow, int j, const int G, const int ZP)
{
    const int g = 2 * j / G;
    const uchar b = prow[j];
    const float z = ZP ? (float)zrow[g] : (float)SYM_ZERO;
    const float d = fma((float)(b & 15) - z, (float)x[2 * j], ((float)(b >> 4) - z) * (float)x[2 * j + 1]);
    return d * (float)srow[g];
}

/* The 8 codes of one packed word (k0 .. k0 + 7, nibble t in bits 4t) as floats q + MAGIC_VALUE, in k order. With
 * HALF_MAGIC, masking two nibbles into the low bits of both halves of a word and OR-ing 0x6400 in each yields two
 * halves 1024 + q at once: codes (t, t + 4) come from (word >> 4t) & 0x000F000F. */
INLINE float8 w4_codes(uint word)
{
#if HALF_MAGIC
    const float2 v04 = convert_float2(as_half2((word & 0x000F000Fu) | 0x64006400u));
    const float2 v15 = convert_float2(as_half2(((word >> 4) & 0x000F000Fu) | 0x64006400u));
    const float2 v26 = convert_float2(as_half2(((word >> 8) & 0x000F000Fu) | 0x64006400u));
    const float2 v37 = convert_float2(as_half2(((word >> 12) & 0x000F000Fu) | 0x64006400u));
    return (float8)(v04.s0, v15.s0, v26.s0, v37.s0, v04.s1, v15.s1, v26.s1, v37.s1);
#else
    return convert_float8((uint8)(word, word >> 4, word >> 8, word >> 12, word >> 16, word >> 20, word >> 24,
                                  word >> 28) & 15u);
#endif
}

/* sum_t (q_t - z) x_t of one word: bias correction subtracts bias * xsum (xsum shared by the RPT rows), plain
 * subtracts per element. */
INLINE float w4_word_dot(uint word, float8 xf, float xsum, float bias)
{
    const float8 v = w4_codes(word);
#if DEQUANT_MAGIC
    const float4 p4 = v.lo * xf.lo + v.hi * xf.hi;
    return fma(-bias, xsum, (p4.s0 + p4.s1) + (p4.s2 + p4.s3));
#else
    const float4 p4 = (v.lo - bias) * xf.lo + (v.hi - bias) * xf.hi;
    return (p4.s0 + p4.s1) + (p4.s2 + p4.s3);
#endif
}

/* A sub-group owns RPT consecutive rows of one K slice, so each x load, its conversion and (bias correction) its
 * sum serve RPT rows. Rows past N read row N-1 again and are never stored.
 * The fused forms (PRO / EPI; gemv_w4a16(..., norm=, silu_mul=)): K a multiple of BLOCK_K and x, res, nw, s_out and
 * the packed rows 16-byte aligned (host-checked), so they take the block-read path only.
 *  PRO_NORM: each sub-group reads its K slice of s = fp16(x + res) (or x) once, keeps a per-lane sum of squares and
 *            multiplies the codes with nw s in fp32; the slices' sums meet in SLM (after the partial row sums) and
 *            r = rsqrt(sum / K + eps) scales each row's total at the end: y = r (W (nw s)). The separate ops round
 *            s r and nw (s r) to fp16 first, so this is not their halves bit for bit; the float64 check's bound
 *            (checks.gemv_w4a16.FUSED_RULE) covers those two roundings. Work-group 0 stores s.
 *  EPI_SILU: rows [gate; up], I = N / 2 outputs, RPT / 2 per sub-group: its rows are gate rows o .. o + RPT/2 - 1
 *            and up rows I + o .. (o its first output), stored as fp16(g / (1 + exp(-g)) u) of the fp16 g and u, as
 *            silu_mul_f16 computes it from the GEMV's stores. */
INLINE void w4_xe2(W4_PARAMS, FUSED_PARAMS, const int G, const int ZP, const int PRO, const int EPI)
{
    const int sg = get_sub_group_id();
    const int lane = get_sub_group_local_id();
    const int group_row = sg / K_SPLIT; /* the sub-group's row group in the work-group */
    const int item_row = group_row * RPT;
    const int slice = sg % K_SPLIT;
    const int row0 = get_group_id(0) * ROWS + item_row;
    const int half_n = N / 2, out0 = row0 / 2; /* EPI_SILU: outputs out0 .. out0 + RPT / 2 - 1 */
    const int groups_per_row = K / G;

    __global const uchar* prow[RPT];
    __global const half* srow[RPT];
    __global const uchar* zrow[RPT];
    bool aligned = XE2RT_BLOCK_ALIGNED(x);
    for (int r = 0; r < RPT; ++r) {
        const int row = EPI == EPI_SILU ? (r < RPT / 2 ? 0 : half_n) + min(out0 + r % (RPT / 2), half_n - 1)
                                        : min(row0 + r, N - 1);
        prow[r] = packed + (size_t)row * (K / 2);
        srow[r] = scales + (size_t)row * groups_per_row;
        zrow[r] = zeros + (size_t)row * groups_per_row;
        aligned = aligned && XE2RT_BLOCK_ALIGNED(prow[r]);
    }
    const int chunks = K / BLOCK_K;
    const int per_slice = (chunks + K_SPLIT - 1) / K_SPLIT;
    const int c_begin = min(slice * per_slice, chunks);
    const int c_end = min(c_begin + per_slice, chunks);
    const int tail_begin = slice == K_SPLIT - 1 ? chunks * (BLOCK_K / 2) : K / 2;
    const bool write_s = PRO == PRO_NORM && has_res && get_group_id(0) == 0 && group_row == 0;

    float acc[RPT];
    for (int r = 0; r < RPT; ++r)
        acc[r] = 0.0f;
    float sq = 0.0f;
    if (aligned) {
        for (int c = c_begin; c < c_end; ++c) {
            const int kb = c * BLOCK_K;
            uint words[RPT][4];
            for (int r = 0; r < RPT; ++r)
                vstore4(intel_sub_group_block_read4((__global const uint*)(prow[r] + kb / 2)), 0, words[r]);
            __attribute__((opencl_unroll_hint))
            for (int i = 0; i < 4; ++i) {
                /* word i of this lane: 8 codes, k0 .. k0 + 7, all in one group (G >= 32) */
                const int k0 = kb + 8 * (i * SG + lane);
                const int g = k0 / G;
                float8 xf = convert_float8(as_half8(vload4(0, (__global const uint*)(x + k0))));
                if (PRO == PRO_NORM) {
                    if (has_res) {
                        const half8 s8 = convert_half8_rte(xf + convert_float8(as_half8(vload4(0,
                                                                              (__global const uint*)(res + k0)))));
                        if (write_s)
                            vstore4(as_uint4(s8), 0, (__global uint*)(s_out + k0));
                        xf = convert_float8(s8);
                    }
                    const float4 q4 = xf.lo * xf.lo + xf.hi * xf.hi;
                    sq += (q4.s0 + q4.s1) + (q4.s2 + q4.s3);
                    xf *= convert_float8(as_half8(vload4(0, (__global const uint*)(nw + k0))));
                }
                const float4 s4 = xf.lo + xf.hi;
                const float xsum = (s4.s0 + s4.s1) + (s4.s2 + s4.s3);
                for (int r = 0; r < RPT; ++r) {
                    const float bias = MAGIC_VALUE + (ZP ? (float)zrow[r][g] : (float)SYM_ZERO);
                    acc[r] = fma(w4_word_dot(words[r][i], xf, xsum, bias), (float)srow[r][g], acc[r]);
                }
            }
        }
    } else {
        for (int j = c_begin * (BLOCK_K / 2) + lane; j < c_end * (BLOCK_K / 2); j += SG)
            for (int r = 0; r < RPT; ++r)
                acc[r] += w4_byte(x, prow[r], srow[r], zrow[r], j, G, ZP);
    }
    for (int j = tail_begin + lane; j < K / 2; j += SG)
        for (int r = 0; r < RPT; ++r)
            acc[r] += w4_byte(x, prow[r], srow[r], zrow[r], j, G, ZP);
    for (int r = 0; r < RPT; ++r) {
        const float total = sub_group_reduce_add(acc[r]);
        if (lane == 0)
            partial[(item_row + r) * K_SPLIT + slice] = total;
    }
    __local float* sq_partial = partial + ROWS * K_SPLIT; /* PRO_NORM: per row group and slice */
    if (PRO == PRO_NORM) {
        const float total = sub_group_reduce_add(sq);
        if (lane == 0)
            sq_partial[group_row * K_SPLIT + slice] = total;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice != 0 || lane != 0)
        return;
    const float scale = PRO == PRO_NORM ? rsqrt(xe2rt_sum_slices(sq_partial, group_row, K_SPLIT) / (float)K + eps)
                                        : 1.0f;
    if (EPI == EPI_SILU) {
        for (int r = 0; r < RPT / 2; ++r)
            if (out0 + r < half_n) {
                const float gv = ROUND16(scale * xe2rt_sum_slices(partial, item_row + r, K_SPLIT));
                const float uv = ROUND16(scale * xe2rt_sum_slices(partial, item_row + r + RPT / 2, K_SPLIT));
                y[out0 + r] = convert_half_rte(gv / (1.0f + exp(-gv)) * uv);
            }
    } else {
        for (int r = 0; r < RPT; ++r)
            if (row0 + r < N)
                y[row0 + r] = convert_half_rte(scale * xe2rt_sum_slices(partial, item_row + r, K_SPLIT));
    }
}

#define W4_KERNEL(NAME, G, ZP)                                                                                     \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void NAME(W4_PARAMS)                                                    \
    { w4_xe2(W4_ARGS, x, x, y, 0.0f, 0, G, ZP, PRO_NONE, EPI_NONE); }

#define W4_FUSED_KERNELS(NAME, G, ZP)                                                                              \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void NAME##_norm(W4_PARAMS, FUSED_PARAMS)                               \
    { w4_xe2(W4_ARGS, FUSED_ARGS, G, ZP, PRO_NORM, EPI_NONE); }                                              \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void NAME##_silu(W4_PARAMS, FUSED_PARAMS)                               \
    { w4_xe2(W4_ARGS, FUSED_ARGS, G, ZP, PRO_NONE, EPI_SILU); }                                              \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void NAME##_norm_silu(W4_PARAMS, FUSED_PARAMS)                          \
    { w4_xe2(W4_ARGS, FUSED_ARGS, G, ZP, PRO_NORM, EPI_SILU); }

/* Batched, Xe2 (see the header): per packed word 8 exact weights per row, then per x row one 16-byte x load shared
 * by the BR rows; each 8-term dot goes into that (row, x row) accumulator. */
INLINE void w4_xe2_batch(BATCH_PARAMS, const int G, const int ZP, const int MB)
{
    const int BR = BATCH_RPT(MB);
    const int sg = get_sub_group_id();
    const int lane = get_sub_group_local_id();
    const int item_row = (sg / K_SPLIT) * BR;
    const int slice = sg % K_SPLIT;
    const int row0 = get_group_id(0) * ROWS + item_row;
    const int groups_per_row = K / G;

    __global const uchar* prow[ROWS];
    __global const half* srow[ROWS];
    __global const uchar* zrow[ROWS];
    bool aligned = XE2RT_BLOCK_ALIGNED(x); /* K is a multiple of 32: every x row is aligned with the first */
    for (int r = 0; r < BR; ++r) {
        const size_t row = (size_t)min(row0 + r, N - 1);
        prow[r] = packed + row * (K / 2);
        srow[r] = scales + row * groups_per_row;
        zrow[r] = zeros + row * groups_per_row;
        aligned = aligned && XE2RT_BLOCK_ALIGNED(prow[r]);
    }
    const int chunks = K / BLOCK_K;
    const int2 range = xe2rt_slice_range(chunks, slice, K_SPLIT);
    const int tail_begin = slice == K_SPLIT - 1 ? chunks * (BLOCK_K / 2) : K / 2;

    float acc[BATCH_SLOTS];
    for (int i = 0; i < BR * MB; ++i)
        acc[i] = 0.0f;
    if (aligned) {
        for (int c = range.s0; c < range.s1; ++c) {
            const int kb = c * BLOCK_K;
            uint words[ROWS][4];
            for (int r = 0; r < BR; ++r)
                vstore4(intel_sub_group_block_read4((__global const uint*)(prow[r] + kb / 2)), 0, words[r]);
            __attribute__((opencl_unroll_hint))
            for (int i = 0; i < 4; ++i) {
                const int k0 = kb + 8 * (i * SG + lane);
                const int g = k0 / G;
                float8 wf[ROWS];
                for (int r = 0; r < BR; ++r) {
                    const float s = (float)srow[r][g];
                    const float bias = MAGIC_VALUE + (ZP ? (float)zrow[r][g] : (float)SYM_ZERO);
                    wf[r] = fma(w4_codes(words[r][i]), (float8)s, (float8)(-bias * s)); /* exact (q - z) s */
                }
                for (int m = 0; m < MB; ++m) {
                    if (m < M) {
                        __global const uint* xm = (__global const uint*)(x + (size_t)m * K + k0);
                        const float8 xf = convert_float8(as_half8(vload4(0, xm)));
                        for (int r = 0; r < BR; ++r) {
                            float4 p4 = wf[r].lo * xf.lo;
                            p4 = fma(wf[r].hi, xf.hi, p4);
                            acc[r * MB + m] += (p4.s0 + p4.s1) + (p4.s2 + p4.s3);
                        }
                    }
                }
            }
        }
    }
    /* per-lane bytes: the unaligned main range, then the K tail */
    const int j_end = aligned ? 0 : range.s1 * (BLOCK_K / 2);
    for (int pass = 0; pass < 2; ++pass) {
        const int j0 = pass ? tail_begin : range.s0 * (BLOCK_K / 2), j1 = pass ? K / 2 : j_end;
        for (int j = j0 + lane; j < j1; j += SG)
            for (int r = 0; r < BR; ++r) {
                const int g = 2 * j / G;
                const uchar b = prow[r][j];
                const float s = (float)srow[r][g];
                const float z = ZP ? (float)zrow[r][g] : (float)SYM_ZERO;
                const float w0 = ((float)(b & 15) - z) * s, w1 = ((float)(b >> 4) - z) * s;
                for (int m = 0; m < MB; ++m)
                    if (m < M)
                        acc[r * MB + m] += fma(w0, (float)x[(size_t)m * K + 2 * j],
                                               w1 * (float)x[(size_t)m * K + 2 * j + 1]);
            }
    }
    xe2rt_batch_reduce_store(acc, BR, MB, partial, ROWS, item_row, K_SPLIT, slice, lane, row0, M, N, y, 0);
}

#define W4_BATCH_KERNEL(NAME, G, ZP, MB) \
    XE2RT_REQD_SUB_GROUP_SIZE(SG) __kernel void NAME##_m##MB(BATCH_PARAMS) { w4_xe2_batch(BATCH_ARGS, G, ZP, MB); }

#else /* CPU shape */

/* The 32 codes of 16 packed bytes as floats q + MAGIC_VALUE (see HALF_MAGIC): lo = even k, hi = odd k. */
INLINE void codes32(uchar16 bytes, float16* lo, float16* hi)
{
#if HALF_MAGIC
    *lo = convert_float16(as_half16(convert_ushort16(bytes & (uchar16)15) | (ushort16)MAGIC_BITS));
    *hi = convert_float16(as_half16(convert_ushort16(bytes >> (uchar16)4) | (ushort16)MAGIC_BITS));
#else
    /* widen first: one vpmovzxbd per 16 bytes, then mask and shift on 32-bit lanes (x86 has no byte shift) */
    const uint16 w = convert_uint16(bytes);
    *lo = convert_float16(w & 15u);
    *hi = convert_float16(w >> 4);
#endif
}

#include "w4_cpu.h"

#if WIDE_STEP == 2
#include "decoder_cpu.h"

/* PRO_NORM: the 128 GEMV inputs of the step at k0 in k order (a[j] lane i: k = k0 + 16 j + i) as rms_norm_f16
 * stores them: fp16(nw * fp16(s r)), s = fp16(x + res) or x. */
INLINE void w4_norm_step(__global const half* x, __global const half* res, __global const half* nw, float r,
                         int has_res, int k0, float16* a)
{
    for (int j = 0; j < 8; ++j) {
        const int k = k0 + 16 * j;
        float16 v = vload_half16(0, x + k);
        if (has_res)
            v = convert_float16(convert_half16_rte(v + vload_half16(0, res + k)));
        a[j] = convert_float16(convert_half16_rte(vload_half16(0, nw + k) * convert_float16(convert_half16_rte(v * r))));
    }
}
#endif

INLINE void w4_cpu(W4_PARAMS, FUSED_PARAMS, const int G, const int ZP, const int PRO, const int EPI)
{
    const int lid = get_local_id(0);
    const int slice = lid % K_SPLIT;
    const int item_row = (lid / K_SPLIT) * RPT;
    const int row0 = get_group_id(0) * ROWS + item_row;
    const int groups_per_row = K / G;
#if WIDE_STEP == 2
    /* x of every whole 128-k step, once per work-group (the work-items share the steps); the fused kernels make it
     * from their prologue's halves (PRO_NORM: after one work-item has summed the squares, into SLM after xq) */
    __local int* xq = (__local int*)(partial + ROWS * K_SPLIT);
    float r = 0.0f;
    if (PRO == PRO_NORM) {
        __local float* rs = (__local float*)(xq + (K / 128) * XQ_STRIDE);
        if (lid == 0)
            /* rsqrt(mean(s^2) + eps), the sum in rms_norm_f16's order (decoder_cpu.h): its halves bit for bit;
             * K is a multiple of 128 (checked on the host); work-group 0 also stores s */
            rs[0] = rsqrt(rms_sumsq32(x, res, s_out, K / 32, has_res, get_group_id(0) == 0) / (float)K + eps);
        barrier(CLK_LOCAL_MEM_FENCE);
        r = rs[0];
    }
    for (int st = lid; st < K / 128; st += get_local_size(0)) {
        if (PRO == PRO_NONE) {
            x_int8_parts(x, st * 128, xq + st * XQ_STRIDE);
        } else {
            float16 a[8], X[8];
            w4_norm_step(x, res, nw, r, has_res, st * 128, a);
            phases_of(a, X);
            int8_parts_of(X, xq + st * XQ_STRIDE);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    const int chunks = G / 32; /* 32 k = 16 bytes per chunk */

    /* Short rows (K / 2 <= INTERLEAVE_MAX_ROW_BYTES): work-item w takes rows w, w + W, w + 2W, ... (W work-items
     * with rows), so consecutive work-items read adjacent rows and every row stream the hardware prefetcher has
     * picked up runs on into the next work-item's rows; with contiguous row blocks each work-item restarts RPT cold
     * streams, which costs more than the short rows take to read. Long rows keep contiguous blocks. */
    const int n_items = (N + RPT - 1) / RPT;
    const bool interleave = K / 2 <= INTERLEAVE_MAX_ROW_BYTES;
    const int item = row0 / RPT;
    const int row_step = interleave ? n_items : 1;
    const int first_row = interleave ? item : row0;
    const bool has_rows = interleave ? item < n_items : row0 < N;

    /* Rows past N read row N-1 again (branch-free inner loop) and are never stored. */
    __global const uchar* prow[RPT];
    __global const half* srow[RPT];
    __global const uchar* zrow[RPT];
    for (int r = 0; r < RPT; ++r) {
        const size_t row = (size_t)min(first_row + r * row_step, N - 1);
        prow[r] = packed + row * (K / 2);
        srow[r] = scales + row * groups_per_row;
        zrow[r] = zeros + row * groups_per_row;
    }
    const int per_slice = (groups_per_row + K_SPLIT - 1) / K_SPLIT;
    const int g_begin = min(slice * per_slice, groups_per_row);
    const int g_end = min(g_begin + per_slice, groups_per_row);

    float16 acc[RPT];
    for (int r = 0; r < RPT; ++r)
        acc[r] = 0.0f;
#if WIDE_STEP == 2
#if CPU_AVX2
    const int k_opaque = K >> 30; /* 0: a row holds far fewer than 2^30 codes */
#endif
    /* Whole 128-k steps as integer dot products; groups past the last whole step take the per-group path below. */
    const int groups_per_step = 128 / G;
    const int steps = (g_end - g_begin) / groups_per_step;
    for (int s = 0; s < steps; ++s) {
        const int gs = g_begin + s * groups_per_step;
        const int k0 = gs * G;
        __local const int* xs = xq + (k0 / 128) * XQ_STRIDE;
#if CPU_AVX2
        __local const short* xw = (__local const short*)xs; /* short16 4 j + t, lane i: xi at k0 + 64 j + 4 i + t */
#else
        const int16 xeh = vload16(0, xs), xoh = vload16(1, xs), xel = vload16(2, xs), xol = vload16(3, xs);
#endif
        const int16 xsum = vload16(4, xs);
#if X_Q8
        const float16 sx = as_float16(vload16(2, xs)); /* per lane: the d of its 32 k */
#else
        const float sx = as_float(xs[80]);
#endif
        const int16 start = ZP ? (int16)0 : xsum * -SYM_ZERO; /* sum (q - 8) xi = sum q xi - 8 sum xi */
        const float16 neg_xsum = -convert_float16(xsum);
        __attribute__((opencl_unroll_hint(RPT)))
        for (int r = 0; r < RPT; ++r) {
#if CPU_AVX2
            /* the row's 64 bytes as two ushort16: lane i of half j holds the codes k0 + 64 j + 4 i + t in bits 4t;
             * vpmaddwd of code vector t with x vector 4 j + t sums k pairs, so int lane m of half j covers k0 + 64 j +
             * 8 m .. + 7: lane 8 j + m of the VNNI path's dot, the same integer */
            /* x through an address the compiler cannot hoist out of the row loop (k_opaque is 0), so that vpmaddwd
             * reads it as a memory operand: held in registers, the 8 x vectors and the 4 rows' 8 accumulators did
             * not fit AVX2's 16 and were spilled and reloaded every row (session 37: same results bit for bit;
             * speed within the rounds' spread, docs/llm.md) */
            __local const short* xr = xw + (r & k_opaque);
            int8 d[2];
#if X_Q8
            /* X_Q8: the row's 64 bytes as two 32-byte halves; the low nibbles (even k) and high nibbles (odd k) as
             * unsigned bytes, vpmaddubsw with x's even / odd bytes sums k pairs into 16 bits (|sum| <= 3810), the two
             * added (|sum| <= 7620) and vpmaddwd by 1 widens lane pairs: int lane m of half j covers k0 + 64 j + 8 m
             * .. + 7, as on the path below */
            __local const char* xb = (__local const char*)xr;
            for (int j = 0; j < 2; ++j) {
                __global const uchar* wp = prow[r] + k0 / 2 + 32 * j;
                const uchar32 w = CAT32(vload16(0, wp), vload16(1, wp));
                const short16 s2 = avx2_pmaddubsw(w & (uchar)15, *(__local const char32*)(xb + 64 * j))
                                 + avx2_pmaddubsw(w >> (uchar)4, *(__local const char32*)(xb + 64 * j + 32));
                d[j] = avx2_pmaddwd(s2, (short16)1);
            }
#else
            for (int j = 0; j < 2; ++j) {
                const ushort16 w = vload16(j, (__global const ushort*)(prow[r] + k0 / 2));
                d[j] = (avx2_pmaddwd(as_short16(w & (ushort)15), vload16(4 * j, xr))
                        + avx2_pmaddwd(as_short16((w >> (ushort)4) & (ushort)15), vload16(4 * j + 1, xr)))
                     + (avx2_pmaddwd(as_short16((w >> (ushort)8) & (ushort)15), vload16(4 * j + 2, xr))
                        + avx2_pmaddwd(as_short16(w >> (ushort)12), vload16(4 * j + 3, xr)));
            }
#endif
            float16 u = convert_float16((int16)(d[0], d[1]) + start); /* exact: |dot| < 2^22 */
#else
            const uint16 w = vload16(0, (__global const uint*)(prow[r] + k0 / 2));
            const uint16 even = w & 0x0F0F0F0Fu, odd = (w >> 4) & 0x0F0F0F0Fu; /* byte j: k 8 lane + 2 j (+ 1) */
            const int16 hi = vnni_dpbusd(vnni_dpbusd((int16)0, even, xeh), odd, xoh);
            const int16 lo = vnni_dpbusd(vnni_dpbusd(start, even, xel), odd, xol);
            float16 u = convert_float16((hi << 8) + lo); /* exact: |dot| < 2^22 */
#endif
            if (ZP)
                u = fma(lanes_uchar(zrow[r], gs, G), neg_xsum, u);
            acc[r] = fma(u, lanes_half(srow[r], gs, G) * sx, acc[r]);
        }
    }
    for (int g = g_begin + steps * groups_per_step; g < g_end; ++g) {
#elif WIDE_STEP
    /* Whole 128-k steps take the wide path; groups past the last whole step take the per-group path below. */
    const int groups_per_step = 128 / G;
    const int steps = (g_end - g_begin) / groups_per_step;
    for (int s = 0; s < steps; ++s) {
        const int gs = g_begin + s * groups_per_step;
        const int k0 = gs * G;
        float16 X[8];
        x_phases(x, k0, X);
        /* With the even phases scaled by 256 and the odd by 16 (exact), d_even = sum_even t (256 + q) x and
         * d_odd = sum_odd t (16 + q) x, so sum_t (q - z) x = d_even + d_odd - 256 xs_even - 16 xs_odd - z xs. */
        const float16 xs_even = (X[0] + X[2]) + (X[4] + X[6]), xs_odd = (X[1] + X[3]) + (X[5] + X[7]);
        const float16 neg_xs = -(xs_even + xs_odd);
        const float16 base = ZP ? fma(xs_even, 256.0f, 16.0f * xs_odd) : fma(xs_even, 264.0f, 24.0f * xs_odd);
        for (int t = 0; t < 8; t += 2) {
            X[t] *= 256.0f;
            X[t + 1] *= 16.0f;
        }
        __attribute__((opencl_unroll_hint(RPT)))
        for (int r = 0; r < RPT; ++r) {
            const uint16 w = vload16(0, (__global const uint*)(prow[r] + k0 / 2));
            float16 d_even, d_odd;
            for (int t = 0; t < 8; t += 2) {
                const uint16 v = PAIR_SHIFT(w, t);
                d_even = t ? fma(AS_CODE(v, 0x00078000u), X[t], d_even) : AS_CODE(v, 0x00078000u) * X[t];
                d_odd = t ? fma(AS_CODE(v, 0x00780000u), X[t + 1], d_odd) : AS_CODE(v, 0x00780000u) * X[t + 1];
            }
            float16 u = (d_even + d_odd) - base;
            if (ZP)
                u = fma(lanes_uchar(zrow[r], gs, G), neg_xs, u);
            acc[r] = fma(u, lanes_half(srow[r], gs, G), acc[r]);
        }
    }
    for (int g = g_begin + steps * groups_per_step; g < g_end; ++g) {
#else
    for (int g = g_begin; g < g_end; ++g) {
#endif
        float16 xe[4], xo[4]; /* chunks <= 4 */
#if DEQUANT_MAGIC
        float16 xs = 0.0f;
#endif
        for (int c = 0; c < chunks; ++c) {
            const float16 a = vload_half16(2 * (g * chunks + c), x);
            const float16 b = vload_half16(2 * (g * chunks + c) + 1, x);
            xe[c] = (float16)(a.even, b.even);
            xo[c] = (float16)(a.odd, b.odd);
#if DEQUANT_MAGIC
            xs += xe[c] + xo[c];
#endif
        }
        for (int r = 0; r < RPT; ++r) {
            const float bias = MAGIC_VALUE + (ZP ? (float)zrow[r][g] : (float)SYM_ZERO);
            float16 dot = 0.0f, dot_odd = 0.0f; /* two fma chains: half the latency per row */
            for (int c = 0; c < chunks; ++c) {
                float16 lo, hi;
                codes32(vload16(g * chunks + c, prow[r]), &lo, &hi);
#if !DEQUANT_MAGIC
                lo -= bias;
                hi -= bias;
#endif
                dot = fma(lo, xe[c], dot);
                dot_odd = fma(hi, xo[c], dot_odd);
            }
            dot += dot_odd;
#if DEQUANT_MAGIC
            dot = fma((float16)(-bias), xs, dot);
#endif
            acc[r] = fma(dot, (float16)vload_half(g, srow[r]), acc[r]);
        }
    }
    for (int r = 0; r < RPT; ++r)
        partial[(item_row + r) * K_SPLIT + slice] = hsum16(acc[r]);
    barrier(CLK_LOCAL_MEM_FENCE);
#if WIDE_STEP == 2 && RPT == 4
    /* EPI_SILU: the rows are [gate; up], N = 2 I with I even (host-checked), and the rows are dealt out strided
     * (row_step = N / 4), so this work-item's rows r and r + 2 are gate and up of one output, first_row + r row_step:
     * y = fp16(g / (1 + exp(-g)) * u) of the fp16 rounded g and u, as silu_mul_f16 computes it from their stores. */
    if (EPI == EPI_SILU) {
        if (has_rows)
            for (int r = 0; r < 2; ++r) {
                const int row = first_row + r * row_step;
                if (row < N / 2) {
                    const float8 g = (float8)ROUND16(partial[item_row + r]);
                    const float u = ROUND16(partial[item_row + r + 2]);
                    vstore_half_rte((g / (1.0f + exp2_neg_log2e(g)) * u).s0, row, y);
                }
            }
        return;
    }
#endif
    if (slice == 0)
        for (int r = 0; r < RPT; ++r) {
            const float total = xe2rt_sum_slices(partial, item_row + r, K_SPLIT);
            if (has_rows && first_row + r * row_step < N)
                vstore_half_rte(total, first_row + r * row_step, y);
        }
}

#define W4_KERNEL(NAME, G, ZP) \
    __kernel void NAME(W4_PARAMS) { w4_cpu(W4_ARGS, x, x, y, 0.0f, 0, G, ZP, PRO_NONE, EPI_NONE); }
/* the fused VNNI kernels: NAME_norm (x = rms_norm(x [+ res]) * nw first, s = x + res stored by work-group 0),
 * NAME_silu (y [I] = silu(gate . x) * (up . x) of rows [gate; up]), NAME_norm_silu (both) */
#define W4_FUSED_KERNELS(NAME, G, ZP)                                                                              \
    __kernel void NAME##_norm(W4_PARAMS, FUSED_PARAMS)                                                             \
    { w4_cpu(W4_ARGS, FUSED_ARGS, G, ZP, PRO_NORM, EPI_NONE); }                                                    \
    __kernel void NAME##_silu(W4_PARAMS, FUSED_PARAMS)                                                             \
    { w4_cpu(W4_ARGS, FUSED_ARGS, G, ZP, PRO_NONE, EPI_SILU); }                                                    \
    __kernel void NAME##_norm_silu(W4_PARAMS, FUSED_PARAMS)                                                        \
    { w4_cpu(W4_ARGS, FUSED_ARGS, G, ZP, PRO_NORM, EPI_SILU); }

/* Batched, CPU (see the header): per 32 k and row, 32 exact weights in k order (wa: k 0..15, wb: k 16..31), then per
 * x row two vload_half16 shared by the BR rows and wa a + wb b into that (row, x row) accumulator. */
INLINE void w4_cpu_batch(BATCH_PARAMS, const int G, const int ZP, const int MB)
{
    const int BR = BATCH_RPT(MB);
    const int lid = get_local_id(0);
    const int slice = lid % K_SPLIT;
    const int item_row = (lid / K_SPLIT) * BR;
    const int row0 = get_group_id(0) * ROWS + item_row;
    const int groups_per_row = K / G;
    const int chunks = G / 32;
    /* codes32 gives even k (lo) and odd k (hi); these put them back in k order */
    const uint16 K_LO = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const uint16 K_HI = K_LO + 8;

    /* Rows past N read row N-1 again (branch-free inner loop) and are never stored. */
    __global const uchar* prow[ROWS];
    __global const half* srow[ROWS];
    __global const uchar* zrow[ROWS];
    for (int r = 0; r < BR; ++r) {
        const size_t row = (size_t)min(row0 + r, N - 1);
        prow[r] = packed + row * (K / 2);
        srow[r] = scales + row * groups_per_row;
        zrow[r] = zeros + row * groups_per_row;
    }
    const int2 range = xe2rt_slice_range(groups_per_row, slice, K_SPLIT);
    float16 acc[BATCH_SLOTS];
    for (int i = 0; i < BR * MB; ++i)
        acc[i] = 0.0f;
    for (int g = range.s0; g < range.s1; ++g) {
        for (int c = 0; c < chunks; ++c) {
            const int o = g * chunks + c; /* 32-k chunk index */
            float16 wa[ROWS], wb[ROWS];
            for (int r = 0; r < BR; ++r) {
                const float s = vload_half(g, srow[r]);
                const float bias = MAGIC_VALUE + (ZP ? (float)zrow[r][g] : (float)SYM_ZERO);
                float16 lo, hi;
                codes32(vload16(o, prow[r]), &lo, &hi);
                lo = (lo - bias) * s; /* exact: (q - z) s */
                hi = (hi - bias) * s;
                wa[r] = shuffle2(lo, hi, K_LO);
                wb[r] = shuffle2(lo, hi, K_HI);
            }
            for (int m = 0; m < MB; ++m)
                if (m < M) {
                    const float16 a = vload_half16(2 * o, x + (size_t)m * K);
                    const float16 b = vload_half16(2 * o + 1, x + (size_t)m * K);
                    for (int r = 0; r < BR; ++r)
                        acc[r * MB + m] += fma(wb[r], b, wa[r] * a);
                }
        }
    }
    for (int r = 0; r < BR; ++r)
        for (int m = 0; m < MB; ++m)
            partial[(m * ROWS + item_row + r) * K_SPLIT + slice] = hsum16(acc[r * MB + m]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0)
        for (int r = 0; r < BR; ++r)
            for (int m = 0; m < MB; ++m)
                if (m < M && row0 + r < N)
                    vstore_half_rte(xe2rt_sum_slices(partial, m * ROWS + item_row + r, K_SPLIT),
                                    (size_t)m * N + row0 + r, y);
}

#define W4_BATCH_KERNEL(NAME, G, ZP, MB) \
    __kernel void NAME##_m##MB(BATCH_PARAMS) { w4_cpu_batch(BATCH_ARGS, G, ZP, MB); }

#endif


/* every (group size, symmetric / zero-point) pair: M(name, G, ZP) */
#define W4_FOR_ALL(M) M(gemv_w4a16_g32_sym, 32, 0) M(gemv_w4a16_g64_sym, 64, 0) M(gemv_w4a16_g128_sym, 128, 0) \
                      M(gemv_w4a16_g32_zp, 32, 1) M(gemv_w4a16_g64_zp, 64, 1) M(gemv_w4a16_g128_zp, 128, 1)
W4_FOR_ALL(W4_KERNEL)
#if XE2RT_XE2 || (WIDE_STEP == 2 && RPT == 4)
W4_FOR_ALL(W4_FUSED_KERNELS)
#endif
#if WIDE_STEP != 2 /* the VNNI variant serves M = 1 only: batched calls load the default family */
W4_BATCH_KERNEL(gemv_w4a16_g32_sym, 32, 0, 2)
W4_BATCH_KERNEL(gemv_w4a16_g32_sym, 32, 0, 4)
W4_BATCH_KERNEL(gemv_w4a16_g32_sym, 32, 0, 8)
W4_BATCH_KERNEL(gemv_w4a16_g32_sym, 32, 0, 16)
W4_BATCH_KERNEL(gemv_w4a16_g64_sym, 64, 0, 2)
W4_BATCH_KERNEL(gemv_w4a16_g64_sym, 64, 0, 4)
W4_BATCH_KERNEL(gemv_w4a16_g64_sym, 64, 0, 8)
W4_BATCH_KERNEL(gemv_w4a16_g64_sym, 64, 0, 16)
W4_BATCH_KERNEL(gemv_w4a16_g128_sym, 128, 0, 2)
W4_BATCH_KERNEL(gemv_w4a16_g128_sym, 128, 0, 4)
W4_BATCH_KERNEL(gemv_w4a16_g128_sym, 128, 0, 8)
W4_BATCH_KERNEL(gemv_w4a16_g128_sym, 128, 0, 16)
W4_BATCH_KERNEL(gemv_w4a16_g32_zp, 32, 1, 2)
W4_BATCH_KERNEL(gemv_w4a16_g32_zp, 32, 1, 4)
W4_BATCH_KERNEL(gemv_w4a16_g32_zp, 32, 1, 8)
W4_BATCH_KERNEL(gemv_w4a16_g32_zp, 32, 1, 16)
W4_BATCH_KERNEL(gemv_w4a16_g64_zp, 64, 1, 2)
W4_BATCH_KERNEL(gemv_w4a16_g64_zp, 64, 1, 4)
W4_BATCH_KERNEL(gemv_w4a16_g64_zp, 64, 1, 8)
W4_BATCH_KERNEL(gemv_w4a16_g64_zp, 64, 1, 16)
W4_BATCH_KERNEL(gemv_w4a16_g128_zp, 128, 1, 2)
W4_BATCH_KERNEL(gemv_w4a16_g128_zp, 128, 1, 4)
W4_BATCH_KERNEL(gemv_w4a16_g128_zp, 128, 1, 8)
W4_BATCH_KERNEL(gemv_w4a16_g128_zp, 128, 1, 16)
#endif
