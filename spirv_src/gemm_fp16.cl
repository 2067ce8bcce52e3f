/* FP16 GEMM with fused epilogue: C[M, N] = act(A[M, K] . B + bias), B given as [K, N] ("kn") or [N, K] ("nk"),
 * fp32 accumulation, one fp16 rounding at the single store.
 *
 * Two code shapes from one source, chosen by the spec constant XE2_SHAPE:
 *  - XE2_SHAPE = 1 (seed 002): a work-group of SGS_M x SGS_N sub-groups (x K_SLICES) owns a (SGS_M SG_M) x (SGS_N SG_N)
 *    block of C; each 16-lane sub-group owns an SG_M x SG_N tile held as (SG_M / 8) x (SG_N / 16) DPAS accumulators
 *    (float8 each) and walks K 16 at a time: A rows by sub-group block reads, B in VNNI form from either layout
 *    (gemm_fp16_dpas.h). With K_SLICES > 1 (small grids) the sub-groups of one K range meet in SLM, slice 0 adds
 *    them up. The epilogue (bias, activation) is applied in registers before the single store. Kernels per tile
 *    height (8, 16, 32 rows) and B layout; the SG_N width comes from the spec. DPAS_EMU = 1 swaps in the software
 *    DPAS so the same kernels run on the CPU device.
 *  - XE2_SHAPE = 0 (CPU device, TOOLCHAIN.md 6). nk: one work-item per RM x RN register tile of k-octet dot products
 *    (both operands contiguous along K), vload_half8 -> float8 fma, reduced horizontally at the end. kn: shaped for
 *    the CPU runtime's packetizer (16 work-items = one AVX-512 packet): a work-group is one packet, lanes on adjacent
 *    columns, so a K row of B is plain vector loads and A is broadcast. kn blocks for cache: (KN_RB x KN_RM) rows x
 *    16 KN_NJ columns per packet, K in KN_KB chunks staged as fp32 in local memory; kn_w1/w2/w4 (M <= 4) stream B.
 */
#include "gemm_fp16_dpas.h"

#if XE2_SHAPE

#define MAX_MB 4
#define NB (SG_N / DPAS_SG)

/* One 16-wide K step of the sub-group tile. Fast: MB A operands by block reads, then per 16-column block one B operand
 * and MB DPAS. Careful (bounds-checked per lane): A reloaded per column block, so only one A and one B operand are
 * live beside the accumulators (the m32 tile spilled otherwise). */
INLINE void gemm_step(__global const half* A, __global const half* B, int M, int N, int K, int k0, int row0, int col0,
                      int lane, float8 acc[MAX_MB][NB], const int MB, const bool b_nk, const bool fast)
{
    if (!fast) {
        for (int nb = 0; nb < NB; ++nb) {
            const int c0 = col0 + nb * DPAS_SG;
            const int8 b = b_nk ? load_rows_vnni(B, K, c0, N, k0, K, lane, false)
                                : load_b_kn(B, N, c0, N, k0, K, lane, false);
            for (int mb = 0; mb < MB; ++mb)
                acc[mb][nb] = DPAS(load_a_rows(A, K, row0 + mb * DPAS_M, M, k0, K, lane, false), b, acc[mb][nb]);
        }
        return;
    }
    short8 a[MAX_MB];
    for (int mb = 0; mb < MB; ++mb)
        a[mb] = load_a_rows(A, K, row0 + mb * DPAS_M, M, k0, K, lane, true);
#if NB == 4
    if (!b_nk) {
        int8 b[4];
        load_b_kn_x4(B, N, col0, k0, b);
        for (int nb = 0; nb < NB; ++nb)
            for (int mb = 0; mb < MB; ++mb)
                acc[mb][nb] = DPAS(a[mb], b[nb], acc[mb][nb]);
        return;
    }
#endif
    for (int nb = 0; nb < NB; ++nb) {
        const int c0 = col0 + nb * DPAS_SG;
        const int8 b = b_nk ? load_rows_vnni(B, K, c0, N, k0, K, lane, true) : load_b_kn(B, N, c0, N, k0, K, lane, true);
        for (int mb = 0; mb < MB; ++mb)
            acc[mb][nb] = DPAS(a[mb], b, acc[mb][nb]);
    }
}

INLINE void gemm_xe2(__global const half* A, __global const half* B, __global const half* bias, __global half* C,
                     int M, int N, int K, int has_bias, int act, __local float* partial, const int MB, const bool b_nk)
{
    const int lane = get_sub_group_local_id();
    const int sg_n = get_local_id(0) / DPAS_SG;
    const int sg_m = get_local_id(1);
    const int slice = get_local_id(2);
    const int sgs_n = get_local_size(0) / DPAS_SG;
    const int sgs_m = get_local_size(1);
    const int slices = get_local_size(2);
    const int tile_m = MB * DPAS_M;
    const int row0 = (get_group_id(1) * sgs_m + sg_m) * tile_m;
    const int col0 = (get_group_id(0) * sgs_n + sg_n) * SG_N;

    float8 acc[MAX_MB][NB];
    for (int mb = 0; mb < MB; ++mb)
        for (int nb = 0; nb < NB; ++nb)
            acc[mb][nb] = 0.0f;

    /* This slice's range of 16-wide K steps; the last (partial) step always takes the bounds-checked loads. */
    const int steps = (K + DPAS_K - 1) / DPAS_K;
    const int per_slice = (steps + slices - 1) / slices;
    const int s_begin = min(slice * per_slice, steps);
    const int s_end = min(s_begin + per_slice, steps);
    const int full_end = min(s_end, K / DPAS_K);
    const bool a_ok = XE2RT_BLOCK_ALIGNED(A) && (K % 8 == 0);
    const bool b_ok = b_nk ? ((((ulong)B) & 3UL) == 0 && (K % 2 == 0))
                           : (XE2RT_BLOCK_ALIGNED(B) && (N % 8 == 0) && (col0 + SG_N <= N));
    const bool fast = a_ok && b_ok;

    if (row0 < M && col0 < N) {
        /* Block-read steps first, then the bounds-checked ones (K tail, unaligned operands, N edge of kn). Two loops
         * rather than a per-step choice keep one set of loads live at a time. */
        const int fast_end = fast ? max(full_end, s_begin) : s_begin;
        for (int s = s_begin; s < fast_end; ++s)
            gemm_step(A, B, M, N, K, s * DPAS_K, row0, col0, lane, acc, MB, b_nk, true);
        for (int s = fast_end; s < s_end; ++s)
            gemm_step(A, B, M, N, K, s * DPAS_K, row0, col0, lane, acc, MB, b_nk, false);
    }

    if (slices > 1) {
        /* Slices 1.. park their tiles in SLM, slice 0 adds them in slice order. Every work-item reaches the barrier. */
        const int tile = tile_m * SG_N;
        const int sg_linear = sg_m * sgs_n + sg_n;
        if (slice > 0) {
            __local float* dst = partial + ((slice - 1) * sgs_m * sgs_n + sg_linear) * tile;
            for (int mb = 0; mb < MB; ++mb)
                for (int nb = 0; nb < NB; ++nb)
                    for (int i = 0; i < DPAS_M; ++i)
                        dst[((mb * NB + nb) * DPAS_M + i) * DPAS_SG + lane] = ((float*)&acc[mb][nb])[i];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (slice == 0)
            for (int s = 1; s < slices; ++s) {
                __local const float* src = partial + ((s - 1) * sgs_m * sgs_n + sg_linear) * tile;
                for (int mb = 0; mb < MB; ++mb)
                    for (int nb = 0; nb < NB; ++nb)
                        for (int i = 0; i < DPAS_M; ++i)
                            ((float*)&acc[mb][nb])[i] += src[((mb * NB + nb) * DPAS_M + i) * DPAS_SG + lane];
            }
    }
    if (slice == 0 && row0 < M && col0 < N)
        for (int mb = 0; mb < MB; ++mb)
            for (int nb = 0; nb < NB; ++nb)
                store_tile(C, N, row0 + mb * DPAS_M, M, col0 + nb * DPAS_SG, N, lane, acc[mb][nb], bias, has_bias, act);
}

#define GEMM_XE2_KERNEL(NAME, MB, B_NK)                                                                              \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void NAME(__global const half* A, __global const half* B, __global const half* bias, __global half* C, \
                       int M, int N, int K, int has_bias, int act, __local float* partial)                          \
    {                                                                                                              \
        gemm_xe2(A, B, bias, C, M, N, K, has_bias, act, partial, MB, B_NK);                                       \
    }

GEMM_XE2_KERNEL(gemm_fp16_kn_m8, 1, false)
GEMM_XE2_KERNEL(gemm_fp16_kn_m16, 2, false)
GEMM_XE2_KERNEL(gemm_fp16_kn_m32, 4, false)
GEMM_XE2_KERNEL(gemm_fp16_nk_m8, 1, true)
GEMM_XE2_KERNEL(gemm_fp16_nk_m16, 2, true)
GEMM_XE2_KERNEL(gemm_fp16_nk_m32, 4, true)

#else /* CPU shape */

INLINE void store_row(__global half* C, int N, int row, int col0, int cols, const float* v, __global const half* bias,
                      int has_bias, int act)
{
    for (int c = 0; c < cols; ++c)
        vstore_half_rte(epilogue(v[c], has_bias ? vload_half(col0 + c, bias) : 0.0f, act), (size_t)row * N + col0 + c,
                        C);
}

/* kn_w1/w2/w4 (M <= 4), packet-shaped: the CPU runtime runs the 16 work-items of a sub-group as one AVX-512 packet, so a
 * work-item owns ONE column per 16-column block and the packet's lanes read 16 adjacent halves of a B row as one vector
 * load. A work-group is exactly one packet (local = (16, 1)), so group ids are uniform and the full/edge branch costs
 * no masking. Packet tile RM_ x 16 NJ (RM_ x NJ zmm accumulators); per K row NJ vector loads of B (32 NJ contiguous
 * bytes) and RM_ broadcasts of A. Instantiated per tile shape so the accumulators are fixed-size, fully
 * unrolled scalars the packetizer keeps in registers (runtime-bounded loops left them in private memory).
 * Packetizer traps seen in the CPU runtime's asm (CL_CONFIG_DUMP_ASM): an int lane index, an array of row pointers
 * and min() each turned a contiguous or uniform load into a per-lane gather; hence size_t lanes, uniform pointer
 * arithmetic with the lane added last, ternary clamps. */
#define KN_K_LOOP(RM_, NJ, LOAD)                                                                                    \
    for (int k = 0; k < K; ++k) {                                                                                  \
        __global const half* b = B + (size_t)k * N + colb;                                                         \
        float bv[NJ];                                                                                              \
        _Pragma("unroll") for (int j = 0; j < NJ; ++j) bv[j] = LOAD;                                               \
        _Pragma("unroll") for (int r = 0; r < RM_; ++r) {                                                          \
            const float a = (float)A[(size_t)(row0 + r < M ? row0 + r : M - 1) * K + k];                          \
            _Pragma("unroll") for (int j = 0; j < NJ; ++j) acc[r][j] = fma(a, bv[j], acc[r][j]);                   \
        }                                                                                                          \
    }

#define KN_PACKET_KERNEL(NAME, RM_, NJ)                                                                            \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void NAME(__global const half* A, __global const half* B, __global const half* bias, __global half* C, \
                       int M, int N, int K, int has_bias, int act)                                                  \
    {                                                                                                              \
        const size_t lane = get_local_id(0);                                                                       \
        const int row0 = get_group_id(0) * RM_;                                                                    \
        const int colb = get_group_id(1) * 16 * NJ;                                                                \
        float acc[RM_][NJ];                                                                                        \
        _Pragma("unroll") for (int r = 0; r < RM_; ++r) _Pragma("unroll") for (int j = 0; j < NJ; ++j)             \
            acc[r][j] = 0.0f;                                                                                      \
        /* Two whole loops rather than a per-k choice: the full one then keeps plain vector loads. */              \
        if (colb + 16 * NJ <= N)                                                                                   \
            KN_K_LOOP(RM_, NJ, (float)(b + j * 16)[lane])                                                          \
        else                                                                                                       \
            KN_K_LOOP(RM_, NJ, colb + (int)lane + j * 16 < N ? (float)(b + j * 16)[lane] : 0.0f)                   \
        _Pragma("unroll") for (int j = 0; j < NJ; ++j) {                                                           \
            const int col = colb + (int)lane + j * 16;                                                             \
            if (col < N) {                                                                                         \
                const float bs = has_bias ? vload_half(col, bias) : 0.0f;                                          \
                _Pragma("unroll") for (int r = 0; r < RM_; ++r) if (row0 + r < M)                                  \
                    vstore_half_rte(epilogue(acc[r][j], bs, act), (size_t)(row0 + r) * N + col, C);                \
            }                                                                                                      \
        }                                                                                                          \
    }

/* All M rows in one packet so B streams once: 1 x 256, 2 x 192, 4 x 96 columns (16-24 accumulators each). */
KN_PACKET_KERNEL(gemm_fp16_kn_w1, 1, KN_W1_NJ)
KN_PACKET_KERNEL(gemm_fp16_kn_w2, 2, KN_W2_NJ)
KN_PACKET_KERNEL(gemm_fp16_kn_w4, 4, KN_W4_NJ)

/* kn (M > 4), cache-blocked, same packet shape: one packet owns KN_RB x KN_RM rows x 16 KN_NJ columns. Per chunk of
 * KN_KB k it converts the B chunk (KN_KB x 64) and the A chunk to fp32 in local memory, then runs each KN_RM-row
 * sub-block's KN_RM x 64 register tile over the chunk (fp32 loads and broadcasts only, no conversion in the k loop),
 * parking accumulators in local memory between chunks (131 KB of local memory at 22 x 6 rows, KB = 128; the CPU
 * device has 256 KB). Why: B's rows are N halves apart, so a 64-column strip of B sits at one page offset in every
 * row and falls into a handful of cache sets, thrashing L1/L2 however small it is (measured: the strided kernel ran
 * no faster with B resident in L3 than streamed from DRAM); the local copy is contiguous, so a chunk is read once and
 * reused from L1 by every sub-block. */
XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void gemm_fp16_kn(__global const half* A, __global const half* B, __global const half* bias, __global half* C,
                           int M, int N, int K, int has_bias, int act)
{
    __local float b_st[KN_KB * 16 * KN_NJ];
    __local float a_st[KN_RB * KN_RM * KN_KB];
    __local float acc_st[KN_RB * KN_RM * KN_NJ * 16];
    const size_t lane = get_local_id(0);
    const int row0 = get_group_id(0) * (KN_RB * KN_RM);
    const int colb = get_group_id(1) * 16 * KN_NJ;
    const int rows = M - row0 < KN_RB * KN_RM ? M - row0 : KN_RB * KN_RM;
    const int rbs = (rows + KN_RM - 1) / KN_RM;
    const bool full = colb + 16 * KN_NJ <= N;
    for (int i = 0; i < KN_RB * KN_RM * KN_NJ; ++i)
        (acc_st + i * 16)[lane] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KN_KB) {
        const int kn = K - k0 < KN_KB ? K - k0 : KN_KB;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (full) {
            for (int k = 0; k < kn; ++k) {
                __global const half* b = B + (size_t)(k0 + k) * N + colb;
                _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j)
                    (b_st + k * 16 * KN_NJ + j * 16)[lane] = (float)(b + j * 16)[lane];
            }
        } else {
            for (int k = 0; k < kn; ++k) {
                __global const half* b = B + (size_t)(k0 + k) * N + colb;
                _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j)
                    (b_st + k * 16 * KN_NJ + j * 16)[lane] =
                        colb + (int)lane + j * 16 < N ? (float)(b + j * 16)[lane] : 0.0f;
            }
        }
        for (int r = 0; r < rbs * KN_RM; ++r) {
            __global const half* ar = A + (size_t)(r < rows ? row0 + r : M - 1) * K + k0;
            for (int i = 0; i < kn; i += 16)
                if (i + (int)lane < kn)
                    (a_st + r * KN_KB + i)[lane] = (float)(ar + i)[lane];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int rb = 0; rb < rbs; ++rb) {
            __local float* as = a_st + rb * KN_RM * KN_KB;
            __local float* cs = acc_st + rb * KN_RM * KN_NJ * 16;
            float acc[KN_RM][KN_NJ];
            _Pragma("unroll") for (int r = 0; r < KN_RM; ++r) _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j)
                acc[r][j] = (cs + (r * KN_NJ + j) * 16)[lane];
            for (int k = 0; k < kn; ++k) {
                float bv[KN_NJ];
                _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j) bv[j] = (b_st + k * 16 * KN_NJ + j * 16)[lane];
                _Pragma("unroll") for (int r = 0; r < KN_RM; ++r) {
                    const float a = as[r * KN_KB + k];
                    _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j) acc[r][j] = fma(a, bv[j], acc[r][j]);
                }
            }
            _Pragma("unroll") for (int r = 0; r < KN_RM; ++r) _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j)
                (cs + (r * KN_NJ + j) * 16)[lane] = acc[r][j];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    _Pragma("unroll") for (int j = 0; j < KN_NJ; ++j) {
        const int col = colb + (int)lane + j * 16;
        if (col < N) {
            const float bs = has_bias ? vload_half(col, bias) : 0.0f;
            for (int r = 0; r < rows; ++r)
                vstore_half_rte(epilogue((acc_st + (r * KN_NJ + j) * 16)[lane], bs, act), (size_t)(row0 + r) * N + col,
                                C);
        }
    }
}

__kernel void gemm_fp16_nk(__global const half* A, __global const half* B, __global const half* bias, __global half* C,
                           int M, int N, int K, int has_bias, int act)
{
    const int col0 = get_global_id(0) * RN;
    const int row0 = get_global_id(1) * RM;
    if (col0 >= N || row0 >= M)
        return;
    __global const half* a_rows[RM];
    __global const half* b_rows[RN];
    for (int r = 0; r < RM; ++r)
        a_rows[r] = A + (size_t)min(row0 + r, M - 1) * K;
    for (int c = 0; c < RN; ++c)
        b_rows[c] = B + (size_t)min(col0 + c, N - 1) * K;
    float8 acc[RM][RN];
    for (int r = 0; r < RM; ++r)
        for (int c = 0; c < RN; ++c)
            acc[r][c] = 0.0f;
    const int octets = K / 8;
    for (int o = 0; o < octets; ++o) {
        float8 bv[RN];
        for (int c = 0; c < RN; ++c)
            bv[c] = vload_half8(o, b_rows[c]);
        for (int r = 0; r < RM; ++r) {
            const float8 av = vload_half8(o, a_rows[r]);
            for (int c = 0; c < RN; ++c)
                acc[r][c] = fma(av, bv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < RM && row0 + r < M; ++r) {
        float v[RN];
        for (int c = 0; c < RN; ++c) {
            const float4 s4 = acc[r][c].lo + acc[r][c].hi;
            float s = (s4.s0 + s4.s1) + (s4.s2 + s4.s3);
            for (int k = octets * 8; k < K; ++k)
                s = fma(vload_half(k, a_rows[r]), vload_half(k, b_rows[c]), s);
            v[c] = s;
        }
        store_row(C, N, row0 + r, col0, min(RN, N - col0), v, bias, has_bias, act);
    }
}

#endif
