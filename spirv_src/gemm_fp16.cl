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
 *    the CPU runtime's packetizer (16 work-items = one AVX-512 packet): a work-group is one packet owning a
 *    KN_RM x (16 KN_NJ) tile, lanes on adjacent columns, so each K row of B is KN_NJ plain vector loads and A
 *    broadcasts; kn_wide is the same kernel with one row (M <= 4).
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

/* kn, packet-shaped: the CPU runtime runs 16 work-items of a sub-group as one AVX-512 packet, so a work-item owns
 * ONE column per 16-column block and the packet's 16 lanes read 16 adjacent halves of a B row as one vector load.
 * Work-item tile: RM rows x NJ columns (stride 16); packet tile: RM x 16 NJ, held as RM x NJ zmm accumulators; per
 * K row NJ vector loads of B, RM uniform (broadcast) loads of A, RM NJ fma. A work-group is exactly one packet
 * (local = (16, 1)), so the group ids are uniform and the full/edge branch costs no masking. Dimension 0 of the
 * groups walks row blocks, dimension 1 column strips: consecutive groups reuse one K x 16 NJ strip of B from L2. */
/* Instantiated per tile shape so the accumulators are fixed-size, fully unrolled scalars the packetizer keeps in zmm
 * registers (a shared function with runtime-bounded loops left them in private memory). */
/* acc[r][j] += A[row0 + r][k] * B[k][colb + 16 j + lane] for k in [k0, k0 + kn); b (uniform row pointer, lane added last
 * so the packetizer sees consecutive addresses) and j are in scope of LOAD. A_AT(r, k) reads A from uniform indices
 * only (an array of row pointers, or min(), made the packetizer gather A per lane). */
#define KN_K_LOOP(RM_, NJ, A_AT, LOAD)                                                                              \
    for (int k = 0; k < kn; ++k) {                                                                                 \
        __global const half* b = B + (size_t)(k0 + k) * N + colb;                                                  \
        float bv[NJ];                                                                                              \
        _Pragma("unroll") for (int j = 0; j < NJ; ++j) bv[j] = LOAD;                                               \
        _Pragma("unroll") for (int r = 0; r < RM_; ++r) {                                                          \
            const float a = A_AT(r, k);                                                                            \
            _Pragma("unroll") for (int j = 0; j < NJ; ++j) acc[r][j] = fma(a, bv[j], acc[r][j]);                   \
        }                                                                                                          \
    }

/* Two whole loops rather than a per-k choice: the packetizer then keeps plain vector loads in the full one. */
#define KN_K_LOOPS(RM_, NJ, A_AT)                                                                                   \
    if (colb + 16 * NJ <= N)                                                                                       \
        KN_K_LOOP(RM_, NJ, A_AT, (float)(b + j * 16)[lane])                                                        \
    else                                                                                                           \
        KN_K_LOOP(RM_, NJ, A_AT, colb + (int)lane + j * 16 < N ? (float)(b + j * 16)[lane] : 0.0f)

#define KN_A_GLOBAL(r, k) ((float)A[(size_t)(row0 + (r) < M ? row0 + (r) : M - 1) * K + k0 + (k)])
#define KN_A_LOCAL(r, k) (a_stage[(r) * a_ld + (k)])

/* KC > 0: A's RM_ x KC block is converted to fp32 in local memory once per K chunk, 16 values per vector
 * instruction, so the K loop broadcasts fp32 straight from memory instead of converting one half per row and k. */
#define KN_PACKET_KERNEL(NAME, RM_, NJ, KC)                                                                        \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void NAME(__global const half* A, __global const half* B, __global const half* bias, __global half* C, \
                       int M, int N, int K, int has_bias, int act)                                                  \
    {                                                                                                              \
        const size_t lane = get_local_id(0); /* size_t: an int index loses the consecutive-address proof */       \
        const int row0 = get_group_id(0) * RM_;                                                                    \
        const int colb = get_group_id(1) * 16 * NJ;                                                                \
        __local float a_stage[RM_ * (KC > 0 ? KC : 1)];                                                            \
        const int a_ld = KC;                                                                                       \
        float acc[RM_][NJ];                                                                                        \
        _Pragma("unroll") for (int r = 0; r < RM_; ++r) _Pragma("unroll") for (int j = 0; j < NJ; ++j)             \
            acc[r][j] = 0.0f;                                                                                      \
        if (KC == 0) {                                                                                             \
            const int k0 = 0, kn = K;                                                                              \
            KN_K_LOOPS(RM_, NJ, KN_A_GLOBAL)                                                                       \
        } else {                                                                                                   \
            for (int k0 = 0; k0 < K; k0 += KC) {                                                                   \
                const int kn = K - k0 < KC ? K - k0 : KC;                                                          \
                barrier(CLK_LOCAL_MEM_FENCE);                                                                      \
                for (int r = 0; r < RM_; ++r) {                                                                    \
                    __global const half* ar = A + (size_t)(row0 + r < M ? row0 + r : M - 1) * K + k0;             \
                    for (int i = 0; i < kn; i += 16)                                                               \
                        if (i + (int)lane < kn)                                                                    \
                            (a_stage + r * KC + i)[lane] = (float)(ar + i)[lane];                                  \
                }                                                                                                  \
                barrier(CLK_LOCAL_MEM_FENCE);                                                                      \
                KN_K_LOOPS(RM_, NJ, KN_A_LOCAL)                                                                    \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("unroll") for (int j = 0; j < NJ; ++j) {                                                           \
            const int col = colb + (int)lane + j * 16;                                                             \
            if (col < N) {                                                                                         \
                const float bs = has_bias ? vload_half(col, bias) : 0.0f;                                          \
                _Pragma("unroll") for (int r = 0; r < RM_; ++r) if (row0 + r < M)                                  \
                    vstore_half_rte(epilogue(acc[r][j], bs, act), (size_t)(row0 + r) * N + col, C);                \
            }                                                                                                      \
        }                                                                                                          \
    }

KN_PACKET_KERNEL(gemm_fp16_kn, KN_RM, KN_NJ, KN_KC)
KN_PACKET_KERNEL(gemm_fp16_kn_wide, 1, KN_WIDE_NJ, 0)

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
