/* DPAS register contract (seed 001) for the fp16 GEMM family: the built-in or its software version, and the operand
 * load / write-back patterns, shared by the GEMM kernels (gemm_fp16.cl) and their unit tests (gemm_fp16_ult.cl).
 *
 * float8 intel_sub_group_f16_f16_matrix_mad_k16(short8 a, int8 b, float8 acc), sub-group size 16, M = 8, K = 16, N = 16
 * (cl_intel_subgroup_matrix_multiply_accumulate, "devices where the minimum subgroup size is 16"):
 *   a   : each work item contributes 16 bits per row, K = 16 columns  -> A[m][k] = as_half(a.s[m] of lane k)
 *   b   : each work item contributes one column, K values packed in int8 -> B[k][n] = as_half2(b.s[k / 2] of lane n)[k % 2]
 *         (two consecutive K values per int, the lower K in the low 16 bits: VNNI)
 *   acc : each work item holds one column                              -> C[m][n] = acc.s[m] of lane n
 *   result.s[m] of lane n = acc.s[m] + sum_k A[m][k] * B[k][n]
 *
 * DPAS_EMU (from the family spec) selects the software version; an Xe2 target without it calls the real built-in, which
 * only an Xe2 GPU driver provides. The software version accumulates k = 0..15 in order with fp32 fma; each fp16 x fp16
 * product is exact in fp32 (11 + 11 significant bits), so every step rounds once.
 */
#ifndef GEMM_FP16_DPAS_H
#define GEMM_FP16_DPAS_H

#include "xe2rt.h"

#ifndef DPAS_EMU
#define DPAS_EMU 0
#endif

#define DPAS_SG 16 /* sub-group size = N of one DPAS */
#define DPAS_M 8
#define DPAS_K 16

#define INLINE static inline __attribute__((always_inline))
/* Helpers inlined on the GPU; with the software DPAS (a CPU-device test path) kept as calls, which halves the CPU
 * runtime's build time of the unrolled tiles and costs little there. */
#if DPAS_EMU
#define EMU_CALL static __attribute__((noinline))
#else
#define EMU_CALL INLINE
#endif

EMU_CALL float8 dpas_emulated(short8 a, int8 b, float8 acc)
{
    const int8 bv = b;
    float bk[DPAS_K];
    for (int i = 0; i < DPAS_K / 2; ++i) {
        const half2 pair = as_half2(((const int*)&bv)[i]);
        bk[2 * i] = vload_half(0, (const half*)&pair);
        bk[2 * i + 1] = vload_half(1, (const half*)&pair);
    }
    const short8 av = a;
    float am[DPAS_M];
    for (int m = 0; m < DPAS_M; ++m) {
        const short s = ((const short*)&av)[m];
        am[m] = vload_half(0, (const half*)&s);
    }
    float r[DPAS_M];
    for (int m = 0; m < DPAS_M; ++m)
        r[m] = ((const float*)&acc)[m];
    for (int k = 0; k < DPAS_K; ++k)
        for (int m = 0; m < DPAS_M; ++m)
            r[m] = fma(sub_group_broadcast(am[m], (uint)k), bk[k], r[m]);
    return (float8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

#if XE2RT_XE2 && !DPAS_EMU
#define DPAS(a, b, acc) intel_sub_group_f16_f16_matrix_mad_k16((a), (b), (acc))
#else
#define DPAS(a, b, acc) dpas_emulated((a), (b), (acc))
#endif

/* ---- operand loads. `fast` paths use sub-group block reads and need 16-byte aligned rows and a full K step; the
 * careful paths load per lane with bounds checks and zero-fill (a zero in both operands keeps tails exact). ---- */

#define US(p) ((__global const ushort*)(p))

/* a_tile <- A[M, K] row-major (pattern 1): a.s[i] of lane k = A[row0 + i][k0 + k]. Rows past M repeat row M - 1 (read,
 * never stored), so the block read address stays uniform and in bounds. */
INLINE short8 load_a_rows(__global const half* A, int lda, int row0, int M, int k0, int K, int lane, bool fast)
{
    short r[DPAS_M];
    for (int i = 0; i < DPAS_M; ++i) {
        __global const half* p = A + (size_t)min(row0 + i, M - 1) * lda + k0;
        if (fast)
            r[i] = as_short(intel_sub_group_block_read_us(US(p)));
        else
            r[i] = (k0 + lane < K) ? as_short(US(p)[lane]) : (short)0;
    }
    return (short8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

INLINE int pack_vnni(ushort lo, ushort hi) { return as_int((ushort2)(lo, hi)); }

/* b_tile <- B[K, N] row-major (pattern 2): two K rows per int, lane = column. Fast: one block read per K row; needs the
 * 16 columns in bounds. */
INLINE int8 load_b_kn(__global const half* B, int ldb, int col0, int N, int k0, int K, int lane, bool fast)
{
    int r[DPAS_K / 2];
    const int col = col0 + lane;
    for (int i = 0; i < DPAS_K / 2; ++i) {
        const int k = k0 + 2 * i;
        ushort lo, hi;
        if (fast) {
            lo = intel_sub_group_block_read_us(US(B + (size_t)k * ldb + col0));
            hi = intel_sub_group_block_read_us(US(B + (size_t)(k + 1) * ldb + col0));
        } else {
            lo = (k < K && col < N) ? US(B)[(size_t)k * ldb + col] : (ushort)0;
            hi = (k + 1 < K && col < N) ? US(B)[(size_t)(k + 1) * ldb + col] : (ushort)0;
        }
        r[i] = pack_vnni(lo, hi);
    }
    return (int8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

/* Four adjacent b_tiles (64 columns) <- B[K, N] with one 64-column block read per K row: a quarter of the messages of
 * four load_b_kn calls. Needs 64 columns in bounds, 16-byte aligned rows and a full K step. */
INLINE void load_b_kn_x4(__global const half* B, int ldb, int col0, int k0, int8 b[4])
{
    int r[4][DPAS_K / 2];
    for (int i = 0; i < DPAS_K / 2; ++i) {
        const ushort4 lo = intel_sub_group_block_read_us4(US(B + (size_t)(k0 + 2 * i) * ldb + col0));
        const ushort4 hi = intel_sub_group_block_read_us4(US(B + (size_t)(k0 + 2 * i + 1) * ldb + col0));
        r[0][i] = pack_vnni(lo.s0, hi.s0);
        r[1][i] = pack_vnni(lo.s1, hi.s1);
        r[2][i] = pack_vnni(lo.s2, hi.s2);
        r[3][i] = pack_vnni(lo.s3, hi.s3);
    }
    for (int j = 0; j < 4; ++j)
        b[j] = (int8)(r[j][0], r[j][1], r[j][2], r[j][3], r[j][4], r[j][5], r[j][6], r[j][7]);
}

/* b_tile <- B[N, K] row-major (pattern 3): lane n reads 16 consecutive K values of its row as eight 32-bit words, which
 * is the VNNI pair layout already. Rows past N repeat row N - 1. Fast needs 4-byte aligned rows and a full K step.
 * The same load gives the swapped orientation's b_tile from A[M, K] (lane = row of A). */
INLINE int8 load_rows_vnni(__global const half* P, int ld, int row0, int rows, int k0, int K, int lane, bool fast)
{
    __global const half* p = P + (size_t)min(row0 + lane, rows - 1) * ld + k0;
    if (fast)
        return as_int8(vload8(0, (__global const uint*)p));
    int r[DPAS_K / 2];
    for (int i = 0; i < DPAS_K / 2; ++i) {
        const ushort lo = (k0 + 2 * i < K) ? US(p)[2 * i] : (ushort)0;
        const ushort hi = (k0 + 2 * i + 1 < K) ? US(p)[2 * i + 1] : (ushort)0;
        r[i] = pack_vnni(lo, hi);
    }
    return (int8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

/* a_tile <- B[K, N] read as B^T (pattern 4, swapped orientation): a.s[i] of lane k = B[k0 + k][col0 + i], lane k
 * reading 8 consecutive columns of its K row. */
INLINE short8 load_a_cols_of_kn(__global const half* B, int ldb, int col0, int N, int k0, int K, int lane)
{
    short r[DPAS_M];
    const int k = k0 + lane;
    for (int i = 0; i < DPAS_M; ++i)
        r[i] = (k < K && col0 + i < N) ? as_short(US(B)[(size_t)k * ldb + col0 + i]) : (short)0;
    return (short8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

/* ---- epilogue and write-back ---- */

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_GELU_TANH 2
#define ACT_GELU_ERF 3

/* Applied in registers to the fp32 accumulator before the single store. GELU comes in two forms: the tanh
 * approximation 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) ("gelu") and the exact erf form
 * 0.5 x (1 + erf(x / sqrt(2))) that BERT-family models use ("gelu_erf"). */
/* The GELU forms out of line: a 32 x 64 tile stores 128 values per lane, and inlining tanh / erf at each of them made
 * the GEMM binary take ~10 s of ocloc time per target. A scalar call keeps its arguments in registers. */
static __attribute__((noinline)) float gelu(float v, int act)
{
    if (act == ACT_GELU_TANH)
        return 0.5f * v * (1.0f + tanh(0.7978845608028654f * fma(0.044715f * v, v * v, v)));
    return 0.5f * v * (1.0f + erf(v * 0.7071067811865476f));
}

INLINE float epilogue(float v, float bias, int act)
{
    v += bias;
    if (act == ACT_RELU)
        v = v < 0.0f ? 0.0f : v; /* NaN stays NaN, as torch.relu and numpy's maximum keep it (fmax would give 0) */
    else if (act == ACT_GELU_TANH || act == ACT_GELU_ERF)
        v = gelu(v, act);
    return v;
}

/* Usage 1 write-back: acc.s[i] of this lane is C[row0 + i][col]. Rows unrolled with constant components, so an
 * accumulator held in registers stays there. */
EMU_CALL void store_tile_at(__global half* C, int ldc, int row0, int M, int col, int N, float8 acc,
                            __global const half* bias, int has_bias, int act)
{
    if (col >= N)
        return;
    const float b = has_bias ? vload_half(col, bias) : 0.0f;
#define STORE_ROW(i, v)                                                                                               \
    if (row0 + (i) < M)                                                                                               \
        vstore_half_rte(epilogue((v), b, act), (size_t)(row0 + (i)) * ldc + col, C);
    STORE_ROW(0, acc.s0) STORE_ROW(1, acc.s1) STORE_ROW(2, acc.s2) STORE_ROW(3, acc.s3)
    STORE_ROW(4, acc.s4) STORE_ROW(5, acc.s5) STORE_ROW(6, acc.s6) STORE_ROW(7, acc.s7)
#undef STORE_ROW
}

/* Usage 2 (swapped) write-back: acc.s[i] of this lane is C[row][col0 + i]. */
EMU_CALL void store_row_at(__global half* C, int ldc, int row, int M, int col0, int N, float8 acc,
                           __global const half* bias, int has_bias, int act)
{
    if (row >= M)
        return;
#define STORE_COL(i, v)                                                                                               \
    if (col0 + (i) < N)                                                                                               \
        vstore_half_rte(epilogue((v), has_bias ? vload_half(col0 + (i), bias) : 0.0f, act),                           \
                        (size_t)row * ldc + col0 + (i), C);
    STORE_COL(0, acc.s0) STORE_COL(1, acc.s1) STORE_COL(2, acc.s2) STORE_COL(3, acc.s3)
    STORE_COL(4, acc.s4) STORE_COL(5, acc.s5) STORE_COL(6, acc.s6) STORE_COL(7, acc.s7)
#undef STORE_COL
}

/* Usage 1 write-back with lane n holding column col0 + n. */
EMU_CALL void store_tile(__global half* C, int ldc, int row0, int M, int col0, int N, int lane, float8 acc,
                       __global const half* bias, int has_bias, int act)
{
    store_tile_at(C, ldc, row0, M, col0 + lane, N, acc, bias, has_bias, act);
}

/* Usage 2 (swapped) write-back: the accumulator is C transposed, acc.s[i] of lane m is C[row0 + m][col0 + i]; each
 * lane scatters 8 consecutive columns of its own row. */
EMU_CALL void store_tile_transposed(__global half* C, int ldc, int row0, int M, int col0, int N, int lane, float8 acc,
                                  __global const half* bias, int has_bias, int act)
{
    const int row = row0 + lane;
    const float8 v = acc;
    for (int i = 0; i < DPAS_M; ++i) {
        const int col = col0 + i;
        if (row < M && col < N)
            vstore_half_rte(epilogue(((const float*)&v)[i], has_bias ? vload_half(col, bias) : 0.0f, act),
                            (size_t)row * ldc + col, C);
    }
}

#endif
