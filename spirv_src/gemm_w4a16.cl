/* W4A16 GEMM for prompts: C[M, N] = act(A[M, K] . W^T + bias), W [N, K] as uint4 codes with per-group fp16 scales and
 * optional uint8 zero points (xe2rt/quant.py: packed uchar [N, K/2], low nibble = even k; scales half [N, K/G]; zeros
 * uchar [N, K/G]; W[n, k] = (q - z) s with z = 8 when symmetric). A and C fp16, fp32 accumulation, one fp16 rounding
 * per output. The weights are dequantized inside the K loop, a chunk at a time: no fp16 copy of W is ever made.
 * One kernel per symmetric / zero point: gemm_w4a16_{sym,zp}; the group size G (32, 64 or 128) is an argument. K is a
 * multiple of G, so every K chunk below is a whole number of 8-code words and of 32-k halves.
 *
 *  - XE2_SHAPE = 1 (bmg, lnl; seeds 001/002): a 16-lane sub-group owns a 32 x 64 tile of C as 4 x 4 DPAS accumulators
 *    (float8 each, lane = column), a work-group SGS_M x SGS_N sub-groups (x K slices reduced in SLM, as gemm_fp16).
 *    K advances 64 at a time. Per step: the packed codes of the tile's 64 columns by four transposed 32-bit 2D block
 *    reads (16 rows of W x 8 words: lane l gets 64 codes of row col0 + 16 nb + l, i.e. the DPAS B operand's lane =
 *    column layout already), per 16 k one 2D block read of A (32 rows x 16 k: the DPAS A operand of the four 8-row
 *    blocks), and per lane the scales (and zero points) of the step's groups. Codes become the VNNI B operand in
 *    registers (seed 004's magic number): a pair of adjacent codes (k, k + 1) is moved into the low 4 bits of the two
 *    halves of a 32-bit word and OR-ed with 0x6400 6400, which reads as the half2 (1024 + q_k, 1024 + q_k+1); one half2
 *    subtraction of 1024 + z makes q - z exactly, one half2 multiply by the scale rounds it once to fp16 (the weight
 *    DPAS multiplies). 16 DPAS per 16 k, 64 per step, against 4 code reads + 4 A reads + 8 scale loads (+ 8 zero
 *    point loads: per lane and 16-column block, the groups of the step's two 32-k halves).
 *    Tails: the 2D reads return zero outside A and W, so M, N and K tails need no code; scale / zero point indices
 *    are clamped in bounds (their columns are never stored, their k meet zero codes and zero A).
 *    DPAS_EMU / BLOCK2D_EMU swap in the software built-ins so the same kernels run on the CPU device.
 *  - XE2_SHAPE = 0 (CPU device, TOOLCHAIN.md 6): the packet shape of gemm_fp16's cpu kn kernel. A work-group is one
 *    16-lane packet (one AVX-512 vector) owning RB x RM rows x 16 NJ columns (lane = column); per chunk of KB k it
 *    dequantizes the chunk of W (16 NJ rows x KB k) to fp32 in local memory, lane = column (each lane reads its row's
 *    8-code words; codes become floats by the float magic number 2^23 + q, q - z and the multiply by s are exact in
 *    fp32), converts the A chunk to fp32 in local memory, and runs each RM-row block's RM x 16 NJ register tile over
 *    the chunk (NJ vector loads + RM broadcasts per k for RM NJ fmas). Each decoded chunk serves all RB RM rows of the
 *    work-group (132 at RB 22, RM 6): at M = 128 every weight is dequantized once in the whole launch.
 */
#include "gemm_fp16_dpas.h"
#include "block2d.h"

#ifndef VNNI_GEMM
#define VNNI_GEMM 0
#endif

#define K_STEP 64 /* Xe2: k per step (one transposed 8-word read per 16 columns) */

/* NATIVE_STEP: the step's native body (what bmg / lnl run), also under DPAS_EMU. The xe2emu builds for bmg / lnl use
 * the emulation's own step (below: IGC spilled the native body with software built-ins); the xe2emu build for the
 * cpu target sets NATIVE_STEP = 1, so the native body runs and is checked on the CPU device too. */
#ifndef NATIVE_STEP
#define NATIVE_STEP (!DPAS_EMU)
#endif

#if XE2_SHAPE

#define UNROLL _Pragma("unroll")
#define MB 4  /* 8-row DPAS blocks per sub-group tile: 32 rows */
#define NB 4  /* 16-column DPAS blocks: 64 columns */
#define TILE_M (MB * DPAS_M)
#define TILE_N (NB * DPAS_SG)

/* Four VNNI pairs of one 8-code word (codes k0 .. k0 + 7 in bits 4t, k order) as half2 (1024 + q_2i, 1024 + q_2i+1),
 * lower k in the low half: c0 = q0 | q2 << 8 | q1 << 16 | q3 << 24 (bits 0-3 / 8-11 / 16-19 / 24-27), c1 likewise for
 * q4 .. q7; masking 0x000F000F of c and c >> 8 leaves one pair each. */
#define MAGIC2 0x64006400u
INLINE void word_pairs(uint w, uint* p)
{
    const uint c0 = (w & 0xFFFFu) | ((w << 12) & 0xFFFF0000u);
    const uint c1 = (w >> 16) | ((w >> 4) & 0xFFFF0000u);
    p[0] = (c0 & 0x000F000Fu) | MAGIC2;
    p[1] = ((c0 >> 8) & 0x000F000Fu) | MAGIC2;
    p[2] = (c1 & 0x000F000Fu) | MAGIC2;
    p[3] = ((c1 >> 8) & 0x000F000Fu) | MAGIC2;
}

/* The DPAS B operand (16 k x this lane's column) from two code words: ((1024 + q) - (1024 + z)) * s per half, the
 * subtraction exact, the product rounded once to fp16. */
INLINE int8 vnni_weights(uint w0, uint w1, half2 zb, half2 s)
{
    uint p[8];
    word_pairs(w0, p);
    word_pairs(w1, p + 4);
    int r[8];
    UNROLL for (int i = 0; i < 8; ++i)
        r[i] = as_int((as_half2(p[i]) - zb) * s);
    return (int8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

/* The codes of 16 columns x 64 k (one transposed 2D read: lane l gets 8 words of row col0 + l) and, per lane, the
 * scale and 1024 + zero point of the groups g0 and g1 of the step's two 32-k halves (equal for G >= 64; g1 clamped
 * into the row on a last half step). Columns past N: the read gives zero codes, the scale index is clamped. */
INLINE void load_codes(__global const uchar* packed, __global const half* scales, __global const uchar* zeros, int N,
                       int K, int KG, int k0, int g0, int g1, int col0, int lane, __private uint* codes, half2* s,
                       half2* zb, const int ZP)
{
    B2D_READ_TRANSPOSE_32B_16R8(packed, K / 2, N, K / 2, ((int2)(k0 / 8, col0)), codes);
    const size_t col = (size_t)min(col0 + lane, N - 1);
    s[0] = (half2)scales[col * KG + g0];
    s[1] = (half2)scales[col * KG + g1];
    zb[0] = (half2)(half)(1024 + (ZP ? (int)zeros[col * KG + g0] : 8));
    zb[1] = (half2)(half)(1024 + (ZP ? (int)zeros[col * KG + g1] : 8));
}

#if !NATIVE_STEP
/* The B operand of 16 k at k x 16 columns at col0, by the same loads and conversion as the native step (a transposed
 * read starting at k, words 0 and 1 of it; the scale and zero point of k's group). */
static __attribute__((noinline)) int8 emu_weights(__global const uchar* packed, __global const half* scales,
                                                  __global const uchar* zeros, int N, int K, int g_shift, int k,
                                                  int col0, const int ZP)
{
    const int KG = K >> g_shift;
    uint codes[8];
    half2 s[2], zb[2];
    const int g = min(k >> g_shift, KG - 1);
    load_codes(packed, scales, zeros, N, K, KG, k, g, g, col0, get_sub_group_local_id(), codes, s, zb, ZP);
    return vnni_weights(codes[0], codes[1], zb[0], s[0]);
}

/* The DPAS A operand of 8 rows at row x 16 k at k: the native step's 2D read, 8 rows at a time. */
static __attribute__((noinline)) short8 emu_a_block(__global const half* A, int M, int K, int k, int row)
{
    ushort a[DPAS_M];
    B2D_READ_16B(8, 1, A, 2 * K, M, 2 * K, ((int2)(k, row)), a);
    return as_short8((ushort8)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
}
#endif

/* One 64-k step of the 32 x 64 tile (see the header); G = 1 << g_shift. */
INLINE void step_w4(__global const half* A, __global const uchar* packed, __global const half* scales,
                    __global const uchar* zeros, int M, int N, int K, int KG, int g_shift, int k0, int row0, int col0,
                    int lane, float8 acc[MB][NB], const int ZP)
{
    const int g0 = k0 >> g_shift;
    const int g1 = min((k0 + 32) >> g_shift, KG - 1);
#if !NATIVE_STEP
    /* Emulation only (the software built-ins are calls, and the step's code registers, scales, zero points, their
     * per-lane addresses and a 32-row A block, live across them beside the 128 registers of the accumulators, made
     * IGC spill the xe2emu build): each 16 k x 16 column B operand is made by one out-of-line call from uniform
     * arguments (emu_weights), A is read in 8-row blocks at each use with a height of M + nb * (K >> 31), M at run
     * time (K >= 0) but distinct per column block to the compiler, which would otherwise merge the repeated reads and
     * keep the block live. Same values, same DPAS order as the native step below. */
    UNROLL for (int kb = 0; kb < 4; ++kb) UNROLL for (int nb = 0; nb < NB; ++nb) {
        const int k = k0 + DPAS_K * kb;
        const int8 b = emu_weights(packed, scales, zeros, N, K, g_shift, k, col0 + DPAS_SG * nb, ZP);
        UNROLL for (int mb = 0; mb < MB; ++mb)
            acc[mb][nb] = DPAS(emu_a_block(A, M + nb * (K >> 31), K, k, row0 + DPAS_M * mb), b, acc[mb][nb]);
    }
#else
    uint codes[NB][8];
    half2 s[NB][2], zb[NB][2];
    UNROLL for (int nb = 0; nb < NB; ++nb)
        load_codes(packed, scales, zeros, N, K, KG, k0, g0, g1, col0 + DPAS_SG * nb, lane, codes[nb], s[nb], zb[nb],
                   ZP);
    UNROLL for (int kb = 0; kb < 4; ++kb) {
        ushort a[TILE_M];
        B2D_READ_16B(32, 1, A, 2 * K, M, 2 * K, ((int2)(k0 + DPAS_K * kb, row0)), a);
        UNROLL for (int nb = 0; nb < NB; ++nb) {
            const int8 b = vnni_weights(codes[nb][2 * kb], codes[nb][2 * kb + 1], zb[nb][kb / 2], s[nb][kb / 2]);
            UNROLL for (int mb = 0; mb < MB; ++mb) {
                const int r = DPAS_M * mb;
                const short8 av = as_short8((ushort8)(a[r], a[r + 1], a[r + 2], a[r + 3], a[r + 4], a[r + 5],
                                                      a[r + 6], a[r + 7]));
                acc[mb][nb] = DPAS(av, b, acc[mb][nb]);
            }
        }
    }
#endif
}

INLINE void gemm_w4_xe2(__global const half* A, __global const uchar* packed, __global const half* scales,
                        __global const uchar* zeros, __global const half* bias, __global half* C, int M, int N, int K,
                        int G, int has_bias, int act, __local float* partial, const int ZP)
{
    const int KG = K / G;
    const int g_shift = 31 - clz(G);
    const int lane = get_sub_group_local_id();
    /* The sub-group's place from its uniform id (linear id order: dimension 0 fastest), not from the per-lane local
     * ids, which would stay live in registers across the K loop. */
    const int sgs_n = get_local_size(0) / DPAS_SG;
    const int sgs_m = get_local_size(1);
    const int slices = get_local_size(2);
    const int sg_id = get_sub_group_id();
    const int sg_n = sg_id % sgs_n;
    const int sg_m = sg_id / sgs_n % sgs_m;
    const int slice = sg_id / (sgs_n * sgs_m);
    const int row0 = (get_group_id(1) * sgs_m + sg_m) * TILE_M;
    const int col0 = (get_group_id(0) * sgs_n + sg_n) * TILE_N;

    float8 acc[MB][NB];
    UNROLL for (int mb = 0; mb < MB; ++mb) UNROLL for (int nb = 0; nb < NB; ++nb)
        acc[mb][nb] = 0.0f;
    const int2 range = xe2rt_slice_range((K + K_STEP - 1) / K_STEP, slice, slices);
    if (row0 < M && col0 < N)
        for (int s = range.s0; s < range.s1; ++s)
            step_w4(A, packed, scales, zeros, M, N, K, KG, g_shift, s * K_STEP, row0, col0, lane, acc, ZP);

    if (slices > 1) {
        /* as gemm_fp16: slices 1.. park their tiles in SLM, slice 0 adds them in slice order */
        const int tile_vecs = MB * NB * DPAS_SG;
        const int sg_linear = sg_m * sgs_n + sg_n;
        if (slice > 0) {
            __local float* dst = partial + ((slice - 1) * sgs_m * sgs_n + sg_linear) * tile_vecs * DPAS_M;
            UNROLL for (int mb = 0; mb < MB; ++mb) UNROLL for (int nb = 0; nb < NB; ++nb)
                vstore8(acc[mb][nb], (mb * NB + nb) * DPAS_SG + lane, dst);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (slice == 0)
            for (int sl = 1; sl < slices; ++sl) {
                __local const float* src = partial + ((sl - 1) * sgs_m * sgs_n + sg_linear) * tile_vecs * DPAS_M;
                UNROLL for (int mb = 0; mb < MB; ++mb) UNROLL for (int nb = 0; nb < NB; ++nb)
                    acc[mb][nb] += vload8((mb * NB + nb) * DPAS_SG + lane, src);
            }
    }
    if (slice == 0 && row0 < M && col0 < N)
        UNROLL for (int mb = 0; mb < MB; ++mb) UNROLL for (int nb = 0; nb < NB; ++nb)
            store_tile_at(C, N, row0 + mb * DPAS_M, M, col0 + DPAS_SG * nb + lane, N, acc[mb][nb], bias, has_bias,
                          act);
}

#define W4_GEMM_KERNEL(NAME, ZP)                                                                                     \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void NAME(__global const half* A, __global const uchar* packed, __global const half* scales,         \
                       __global const uchar* zeros, __global const half* bias, __global half* C, int M, int N,    \
                       int K, int G, int has_bias, int act, __local float* partial)                               \
    {                                                                                                              \
        gemm_w4_xe2(A, packed, scales, zeros, bias, C, M, N, K, G, has_bias, act, partial, ZP);                   \
    }

#elif VNNI_GEMM /* CPU shape for hosts with AVX512-VNNI (variant gemm_w4a16_vnni) */

#include "w4_cpu.h" /* fixed_point_exponent, fixed_point */

#if CPU_AVX2
/* The same per-lane sum on hosts with AVX2 only (variant gemm_w4a16_avx2): two vpmaddwd and two adds, the same
 * integers (w4_cpu.h's avx2_pmaddwd). */
INLINE int16 vnni_dpwssd(int16 acc, int16 a, int16 b)
{
    return acc + (int16)(avx2_pmaddwd(as_short16(a.lo), as_short16(b.lo)),
                         avx2_pmaddwd(as_short16(a.hi), as_short16(b.hi)));
}
#else
/* AVX512-VNNI vpdpwssd: per 32-bit lane, acc + a.lo16 b.lo16 + a.hi16 b.hi16 (signed). Declared by its LLVM
 * intrinsic name (see w4_cpu.h's vnni_dpbusd): only binaries for hosts with AVX512-VNNI may call it. */
int16 vnni_dpwssd(int16 acc, int16 a, int16 b) __asm__("llvm.x86.avx512.vpdpwssd.512");
#endif

#define TILE_ROWS (RB * RM)
#define TILE_COLS 64 /* four 16-lane column vectors */
#define KC 128       /* k per chunk: one x scale per row and chunk, whole groups (G <= 128) */
#define PAIRS (KC / 2)

/* 16 x 16 ints transposed in registers (r[i] lane e -> r[e] lane i): four butterfly rounds of two-source permutes. */
INLINE void transpose16(int16* r)
{
#define TR_ROUND(D, MA, MB)                                                                                     \
    for (int i = 0; i < 16; ++i)                                                                                \
        if (!(i & (D))) {                                                                                       \
            const int16 a = r[i], b = r[i + (D)];                                                               \
            r[i] = shuffle2(a, b, (uint16)MA);                                                                  \
            r[i + (D)] = shuffle2(a, b, (uint16)MB);                                                            \
        }
    TR_ROUND(1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
             (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
    TR_ROUND(2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
             (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
    TR_ROUND(4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
             (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
    TR_ROUND(8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
             (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
#undef TR_ROUND
}

/* One work-item per (TILE_ROWS rows, 64 columns), explicit AVX-512 vectors, lane = column. Per chunk of KC k:
 * 1. the 64 x KC codes become int16 pairs (q_k - z, q_k+1 - z), one int per k pair and column, in local memory
 *    (bq[pair][column]): per 16 columns x 16 pairs, 16 row loads of 16 bytes and a register transpose;
 * 2. x comes as 15-bit fixed point pairs (xi_k, xi_k+1) with a power-of-two scale per row and chunk, made once per
 *    call by gemm_w4a16_quantize_x (below; made per work-item it cost a third of the kernel's time at M = 128);
 * 3. per RM-row block a RM x 64 register tile: per k pair 4 column vectors and RM broadcasts for 4 RM vpdpwssd (32
 *    exact products each); per group the int32 sums are scaled by (group scale of the column) x sx of the row into
 *    fp32 accumulators, kept in registers over the chunk and in local memory between chunks. */
INLINE void gemm_w4_vnni(__global const int* xq, __global const uchar* packed, __global const half* scales,
                         __global const uchar* zeros, __global const half* bias, __global half* C, int M, int N,
                         int K, int G, int has_bias, int act, __local int* bq, __local float* ws,
                         __local float* acc_st, const int ZP)
{
    const int chunks = (K + KC - 1) / KC;
    __global const float* xscale = (__global const float*)(xq + (size_t)M * (K / 2));
    const int row0 = get_group_id(0) * TILE_ROWS;
    const int col0 = get_group_id(1) * TILE_COLS;
    const int rows = min(M - row0, TILE_ROWS);
    const int rbs = (rows + RM - 1) / RM;
    const int KG = K / G;
    const size_t row_bytes = (size_t)(K / 2);
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = min(KC, K - k0); /* a multiple of 32 (G divides K) */
        const int gpc = kc / G;         /* groups in this chunk */
        /* 1. codes -> bq: columns past N repeat column N - 1 (never stored) */
        for (int jc = 0; jc < 4; ++jc) {
            for (int pb = 0; pb < kc / 32; ++pb) {
                int16 r[16];
                for (int c = 0; c < 16; ++c) {
                    const size_t n = (size_t)min(col0 + 16 * jc + c, N - 1);
                    const int g = (k0 + 32 * pb) / G;
                    const int z = ZP ? (int)zeros[n * KG + g] : 8;
                    const int16 v = convert_int16(vload16(0, packed + n * row_bytes + k0 / 2 + 16 * pb));
                    r[c] = (((v & 15) - z) & 0xFFFF) | (((v >> 4) - z) << 16);
                }
                transpose16(r);
                for (int p = 0; p < 16; ++p)
                    vstore16(r[p], 0, bq + (16 * pb + p) * TILE_COLS + 16 * jc);
            }
            for (int g = 0; g < gpc; ++g)
                for (int c = 0; c < 16; ++c) {
                    const size_t n = (size_t)min(col0 + 16 * jc + c, N - 1);
                    ws[g * TILE_COLS + 16 * jc + c] = vload_half(n * KG + k0 / G + g, scales);
                }
        }
        /* 3. RM x 64 tiles */
        for (int rb = 0; rb < rbs; ++rb) {
            /* the rows' x pairs of this chunk (rows past M read row M - 1; never stored) */
            __global const int* xrow[RM];
            for (int r = 0; r < RM; ++r)
                xrow[r] = xq + (size_t)min(row0 + rb * RM + r, M - 1) * (K / 2) + k0 / 2;
            float16 acc[RM][4]; /* this chunk's sum over its groups of scale x dot, in units of sx */
            for (int r = 0; r < RM; ++r)
                for (int j = 0; j < 4; ++j)
                    acc[r][j] = 0.0f;
            for (int g = 0; g < gpc; ++g) {
                int16 dot[RM][4];
                for (int r = 0; r < RM; ++r)
                    for (int j = 0; j < 4; ++j)
                        dot[r][j] = 0;
                for (int p = g * (G / 2); p < (g + 1) * (G / 2); ++p) {
                    int16 b[4];
                    for (int j = 0; j < 4; ++j)
                        b[j] = vload16(j, bq + p * TILE_COLS);
                    for (int r = 0; r < RM; ++r) {
                        const int16 x = (int16)xrow[r][p];
                        for (int j = 0; j < 4; ++j)
                            dot[r][j] = vnni_dpwssd(dot[r][j], b[j], x);
                    }
                }
                float16 wsv[4];
                for (int j = 0; j < 4; ++j)
                    wsv[j] = vload16(j, ws + g * TILE_COLS);
                for (int r = 0; r < RM; ++r)
                    for (int j = 0; j < 4; ++j)
                        acc[r][j] = fma(convert_float16(dot[r][j]), wsv[j], acc[r][j]);
            }
            for (int r = 0; r < RM; ++r) {
                const float sx = xscale[(size_t)min(row0 + rb * RM + r, M - 1) * chunks + k0 / KC];
                __local float* dst = acc_st + (rb * RM + r) * TILE_COLS;
                for (int j = 0; j < 4; ++j)
                    vstore16(k0 ? fma(acc[r][j], (float16)sx, vload16(j, dst)) : acc[r][j] * sx, j, dst);
            }
        }
    }
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < TILE_COLS; ++c) {
            const int col = col0 + c;
            if (col < N)
                vstore_half_rte(epilogue(K ? acc_st[r * TILE_COLS + c] : 0.0f, has_bias ? vload_half(col, bias) : 0.0f,
                                         act), (size_t)(row0 + r) * N + col, C);
        }
}

/* x [M, K] as the GEMM's fixed point, once per call (launch 1): one work-item per (row, KC-k chunk), global
 * (M, ceil(K / KC)), local (1, 1). xq: M x K/2 ints, (xi_k & 0xFFFF) | xi_k+1 << 16 for k pairs, then M x chunks
 * float scales sx (w4_cpu.h's fixed_point, as gemv_w4a16's VNNI step). */
__kernel void gemm_w4a16_quantize_x(__global const half* A, __global int* xq, int M, int K)
{
    const int row = get_global_id(0), chunk = get_global_id(1);
    const int k0 = chunk * KC, kc = min(KC, K - k0); /* a multiple of 32 */
    const int chunks = (K + KC - 1) / KC;
    const uint16 EVEN = (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const uint16 ODD = EVEN + 1;
    __global const half* ar = A + (size_t)row * K + k0;
    float16 xv[KC / 16];
    float16 a = 0.0f, z = 0.0f;
    for (int j = 0; j < kc / 16; ++j) {
        xv[j] = vload_half16(j, ar);
        a = fmax(a, fabs(xv[j]));
        z = fma(xv[j], 0.0f, z);
    }
    const int e = fixed_point_exponent(a);
    ((__global float*)(xq + (size_t)M * (K / 2)))[(size_t)row * chunks + chunk] =
        as_float((127 + e) << 23) + nonfinite_nan(z); /* NaN for a chunk with a non-finite x */
    __global int* dst = xq + (size_t)row * (K / 2) + k0 / 2;
    for (int j = 0; j < kc / 16; j += 2) {
        const int16 x0 = fixed_point(xv[j], e), x1 = fixed_point(xv[j + 1], e);
        vstore16((shuffle2(x0, x1, EVEN) & 0xFFFF) | (shuffle2(x0, x1, ODD) << 16), j / 2, dst);
    }
}

#define W4_GEMM_KERNEL(NAME, ZP)                                                                                     \
    __kernel void NAME(__global const int* xq, __global const uchar* packed, __global const half* scales,         \
                       __global const uchar* zeros, __global const half* bias, __global half* C, int M, int N,    \
                       int K, int G, int has_bias, int act)                                                       \
    {                                                                                                              \
        __local int bq[PAIRS * TILE_COLS];                                                                         \
        __local float ws[(KC / 32) * TILE_COLS];                                                                   \
        __local float acc_st[TILE_ROWS * TILE_COLS];                                                               \
        gemm_w4_vnni(xq, packed, scales, zeros, bias, C, M, N, K, G, has_bias, act, bq, ws, acc_st, ZP);           \
    }

#else /* CPU shape */

#define FLOAT_MAGIC 0x4B000000u /* float 2^23: (q | FLOAT_MAGIC) reads as 2^23 + q */
#define TILE_ROWS (RB * RM)
#define TILE_COLS (16 * NJ)

/* Packet-shaped (see the header): local = (16, 1), group (row block, column block). Packetizer habits as in
 * gemm_fp16.cl's kn kernels: size_t lane, uniform pointers with the lane added last, ternary clamps. */
INLINE void gemm_w4_cpu(__global const half* A, __global const uchar* packed, __global const half* scales,
                        __global const uchar* zeros, __global const half* bias, __global half* C, int M, int N, int K,
                        int G, int has_bias, int act, __local float* b_st, __local float* a_st, __local float* acc_st,
                        const int ZP)
{
    const size_t lane = get_local_id(0);
    const int row0 = get_group_id(0) * TILE_ROWS;
    const int colb = get_group_id(1) * TILE_COLS;
    const int rows = M - row0 < TILE_ROWS ? M - row0 : TILE_ROWS;
    const int rbs = (rows + RM - 1) / RM;
    const int KG = K / G;
    const size_t row_bytes = (size_t)(K / 2);
    for (int i = 0; i < TILE_ROWS * NJ; ++i)
        (acc_st + i * 16)[lane] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KB) {
        const int kn = K - k0 < KB ? K - k0 : KB; /* a multiple of 32 */
        barrier(CLK_LOCAL_MEM_FENCE);
        /* W chunk -> b_st[k][16 j + lane] = W[colb + 16 j + lane][k0 + k]; columns past N repeat column N - 1 */
        for (int j = 0; j < NJ; ++j) {
            const int c = colb + j * 16 + (int)lane;
            const size_t col = (size_t)(c < N ? c : N - 1);
            __global const uint* words = (__global const uint*)(packed + col * row_bytes + k0 / 2);
            for (int g = 0; g < kn / G; ++g) {
                const int gk = k0 / G + g;
                const float s = vload_half(col * KG + gk, scales);
                const float zb = (float)(1 << 23) + (ZP ? (float)zeros[col * KG + gk] : 8.0f);
                for (int w = g * (G / 8); w < (g + 1) * (G / 8); ++w) {
                    const uint word = words[w];
                    _Pragma("unroll") for (int t = 0; t < 8; ++t)
                        (b_st + (8 * w + t) * TILE_COLS + j * 16)[lane] =
                            (as_float(((word >> (4 * t)) & 15u) | FLOAT_MAGIC) - zb) * s;
                }
            }
        }
        for (int r = 0; r < rbs * RM; ++r) {
            __global const half* ar = A + (size_t)(r < rows ? row0 + r : M - 1) * K + k0;
            for (int i = 0; i < kn; i += 16)
                (a_st + r * KB + i)[lane] = (float)(ar + i)[lane];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int rb = 0; rb < rbs; ++rb) {
            __local float* as = a_st + rb * RM * KB;
            __local float* cs = acc_st + rb * RM * TILE_COLS;
            float acc[RM][NJ];
            _Pragma("unroll") for (int r = 0; r < RM; ++r) _Pragma("unroll") for (int j = 0; j < NJ; ++j)
                acc[r][j] = (cs + (r * NJ + j) * 16)[lane];
            for (int k = 0; k < kn; ++k) {
                float bv[NJ];
                _Pragma("unroll") for (int j = 0; j < NJ; ++j) bv[j] = (b_st + k * TILE_COLS + j * 16)[lane];
                _Pragma("unroll") for (int r = 0; r < RM; ++r) {
                    const float a = as[r * KB + k];
                    _Pragma("unroll") for (int j = 0; j < NJ; ++j) acc[r][j] = fma(a, bv[j], acc[r][j]);
                }
            }
            _Pragma("unroll") for (int r = 0; r < RM; ++r) _Pragma("unroll") for (int j = 0; j < NJ; ++j)
                (cs + (r * NJ + j) * 16)[lane] = acc[r][j];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    _Pragma("unroll") for (int j = 0; j < NJ; ++j) {
        const int col = colb + (int)lane + j * 16;
        if (col < N) {
            const float bs = has_bias ? vload_half(col, bias) : 0.0f;
            for (int r = 0; r < rows; ++r)
                vstore_half_rte(epilogue((acc_st + (r * NJ + j) * 16)[lane], bs, act), (size_t)(row0 + r) * N + col,
                                C);
        }
    }
}

#define W4_GEMM_KERNEL(NAME, ZP)                                                                                     \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void NAME(__global const half* A, __global const uchar* packed, __global const half* scales,         \
                       __global const uchar* zeros, __global const half* bias, __global half* C, int M, int N,    \
                       int K, int G, int has_bias, int act)                                                       \
    {                                                                                                              \
        __local float b_st[KB * TILE_COLS];                                                                        \
        __local float a_st[TILE_ROWS * KB];                                                                        \
        __local float acc_st[TILE_ROWS * TILE_COLS];                                                               \
        gemm_w4_cpu(A, packed, scales, zeros, bias, C, M, N, K, G, has_bias, act, b_st, a_st, acc_st, ZP);        \
    }

#endif

W4_GEMM_KERNEL(gemm_w4a16_sym, 0)
W4_GEMM_KERNEL(gemm_w4a16_zp, 1)
