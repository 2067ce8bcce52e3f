/* FP16 GEMM with fused epilogue: C[M, N] = act(A[M, K] . B + bias), B given as [K, N] ("kn") or [N, K] ("nk"),
 * fp32 accumulation, one fp16 rounding at the single store.
 *
 * Two code shapes from one source, chosen by the spec constant XE2_SHAPE:
 *  - XE2_SHAPE = 1 (seed 002): a work-group of SGS_M x SGS_N sub-groups (x K_SLICES) owns a (SGS_M SG_M) x (SGS_N SG_N)
 *    block of C; each 16-lane sub-group owns an SG_M x SG_N tile held in registers as (SG_M / 8) x (SG_N / 16) DPAS
 *    accumulators (float8 each). The *_2d kernels walk K 32 at a time with 2D block loads (block2d.h): A as plain
 *    16-bit blocks, B (kn) through the VNNI transform, B (nk) by transposed 32-bit reads, 16/32-row nk tiles in the
 *    swapped orientation; they prefetch PF_STEPS steps ahead. The fallback kernels (operands that break the 2D block
 *    rules; tiles up to 16 rows) walk K 16 at a time: A rows by sub-group block reads, B in VNNI form from either
 *    layout (gemm_fp16_dpas.h), per-lane bounds-checked loads for tails and unaligned rows. With K_SLICES > 1 (small
 *    grids) the sub-groups of one K range meet in SLM, slice 0 adds them up. The epilogue (bias, activation) is
 *    applied in registers before the single store. DPAS_EMU = 1 and BLOCK2D_EMU = 1 swap in the software built-ins so
 *    the same kernels run on the CPU device.
 *  - XE2_SHAPE = 0 (CPU device, TOOLCHAIN.md 6). nk: one work-item per RM x RN register tile of k-octet dot products
 *    (both operands contiguous along K), vload_half8 -> float8 fma, reduced horizontally at the end. kn: shaped for
 *    the CPU runtime's packetizer (16 work-items = one AVX-512 packet): a work-group is one packet, lanes on adjacent
 *    columns, so a K row of B is plain vector loads and A is broadcast. kn blocks for cache: (KN_RB x KN_RM) rows x
 *    16 KN_NJ columns per packet, K in KN_KB chunks staged as fp32 in local memory; kn_w1/w2/w4 (M <= 4) stream B.
 */
#include "gemm_fp16_dpas.h"
#include "block2d.h"

#if XE2_SHAPE

#if SG_N != 64
#error "the Xe2 GEMM tiles are 64 columns wide (4 DPAS column blocks)"
#endif
#define MAX_MB 4
#define NB 4
#define K2D 32 /* K per step of the 2D-block kernels: two DPAS K blocks per load */
#ifndef PF_STEPS
#define PF_STEPS 2 /* how many K steps ahead the 2D-block kernels prefetch */
#endif

/* Accumulators stay in registers only if every index into them is a constant after unrolling (a runtime index, or a
 * loop IGC does not unroll, sends the whole tile to private memory: 16 KB of scratch traffic per 16 DPAS on m32).
 * Hence fixed-size arrays, loops over MAX_MB / NB with `unroll`, and `mb < MB` tests that fold per kernel. */
#define UNROLL _Pragma("unroll")

INLINE int8 gather8(const uint* v, int first, int stride)
{
    return as_int8((uint8)(v[first], v[first + stride], v[first + 2 * stride], v[first + 3 * stride],
                           v[first + 4 * stride], v[first + 5 * stride], v[first + 6 * stride], v[first + 7 * stride]));
}

/* One K step of 32 with 2D block loads, in `parts` pieces of K (2 for 32-row tiles: a 32 x 64 x 32 step's operands
 * are 96 registers beside the 128 of the accumulators, and the software-DPAS build of the same kernel then spilled;
 * halves keep 48). A: one read of TM rows x 32 / parts k: a[kh TM + r] is row r, k = kp + 16 kh + lane, i.e.
 * component r % 8 of the DPAS A operand of row block r / 8. B (kn): transform reads give VNNI pairs directly: per 32
 * columns, 32 / parts k rows; b[16 nb / parts + 8 kh + t] = (B[kp + 16 kh + 2t][c], B[.. + 1][c]). B (nk, 8-row
 * tiles): transposed 32-bit reads of 16 B rows x 16 k (8 pairs), lane l = row col0 + 16 nb + l, b[8 (2 nb + kh) + t]
 * (the 32-row transposed read is avoided, see block2d.h). Out-of-bounds elements read as zero, so M, N and K tails
 * need no code. Then prefetch this sub-group's A rows and one half of its B tile PF_STEPS steps ahead (the other half
 * is taken by the neighbouring sub-group row of the work-group). */
INLINE void step_2d(__global const half* A, __global const half* B, int M, int N, int K, int k0, int row0, int col0,
                    float8 acc[MAX_MB][NB], const int MB, const bool b_nk, int pf_half)
{
    const int tm = MB * DPAS_M;
    const int parts = MB == 4 ? 2 : 1;
    UNROLL for (int p = 0; p < 2; ++p) if (p < parts) {
        const int kp = k0 + p * DPAS_K;
        const int khs = 2 / parts; /* 16-wide K blocks in this part */
        ushort a[MAX_MB * DPAS_M * 2];
        uint b[64];
        const int2 ca = (int2)(kp, row0);
        if (MB == 1)
            B2D_READ_16B(8, 2, A, 2 * K, M, 2 * K, ca, a);
        else if (MB == 2)
            B2D_READ_16B(16, 2, A, 2 * K, M, 2 * K, ca, a);
        else
            B2D_READ_16B(32, 1, A, 2 * K, M, 2 * K, ca, a);
        if (!b_nk) {
            const int2 c0 = (int2)(col0, kp);
            const int2 c1 = (int2)(col0 + 32, kp);
            if (parts == 1) {
                B2D_READ_TRANSFORM_16B(32, 2, B, 2 * N, K, 2 * N, c0, b);
                B2D_READ_TRANSFORM_16B(32, 2, B, 2 * N, K, 2 * N, c1, (b + 32));
            } else {
                B2D_READ_TRANSFORM_16B(16, 2, B, 2 * N, K, 2 * N, c0, b);
                B2D_READ_TRANSFORM_16B(16, 2, B, 2 * N, K, 2 * N, c1, (b + 16));
            }
        } else {
            UNROLL for (int nb = 0; nb < NB; ++nb) UNROLL for (int kh = 0; kh < 2; ++kh) {
                const int2 c = (int2)((k0 + DPAS_K * kh) / 2, col0 + DPAS_SG * nb);
                B2D_READ_TRANSPOSE_32B_16R8(B, 2 * K, N, 2 * K, c, (b + DPAS_M * (2 * nb + kh)));
            }
        }
        UNROLL for (int kh = 0; kh < 2; ++kh) if (kh < khs) UNROLL for (int nb = 0; nb < NB; ++nb) {
            const int8 bv = gather8(b, b_nk ? DPAS_M * (2 * nb + kh) : 16 / parts * nb + 8 * kh, 1);
            UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB) {
                const int r = kh * tm + DPAS_M * mb;
                const short8 av = as_short8((ushort8)(a[r], a[r + 1], a[r + 2], a[r + 3], a[r + 4], a[r + 5],
                                                      a[r + 6], a[r + 7]));
                acc[mb][nb] = DPAS(av, bv, acc[mb][nb]);
            }
        }
    }
    const int kf = k0 + PF_STEPS * K2D;
    const int2 pa = (int2)(kf, row0);
    if (MB == 1)
        B2D_PREFETCH_16B(8, 2, A, 2 * K, M, 2 * K, pa);
    else if (MB == 2)
        B2D_PREFETCH_16B(16, 2, A, 2 * K, M, 2 * K, pa);
    else
        B2D_PREFETCH_16B(32, 2, A, 2 * K, M, 2 * K, pa);
    const int2 pb = b_nk ? (int2)(kf, col0 + 32 * pf_half) : (int2)(col0 + 32 * pf_half, kf);
    B2D_PREFETCH_16B(32, 2, B, b_nk ? 2 * K : 2 * N, b_nk ? N : K, b_nk ? 2 * K : 2 * N, pb);
}

/* nk with 16 or 32 rows, swapped orientation (seed 001 usage 2): C^T = B^T A^T, so the weights b[N, K] are the DPAS
 * A operand, read as plain 16-bit blocks (per 32 rows h of b: w[32 c + r] = b[col0 + 32 h + r][kp + 16 c + lane]),
 * and A is the VNNI operand with lane = row, from transposed 32-bit reads (16 rows x 8 k pairs each). The
 * accumulator for (16-row block mh, 8-column block n8) holds, in lane l, C[row0 + 16 mh + l][col0 + 8 n8 + i] as
 * component i; it is stored at acc[mb][nb] with 4 mb + nb = 8 mh + n8. Per 32 k: 2 (4 for 32 rows, K in halves as in
 * step_2d) + MB reads for 8 MB DPAS, where the usual orientation needs 8 transposed B messages (IGC splits each
 * 32-row transposed read in two). */
INLINE void step_2d_nk_swapped(__global const half* A, __global const half* B, int M, int N, int K, int k0, int row0,
                               int col0, float8 acc[MAX_MB][NB], const int MB, int pf_half)
{
    const int parts = MB == 4 ? 2 : 1;
    UNROLL for (int p = 0; p < 2; ++p) if (p < parts) {
        const int kp = k0 + p * DPAS_K;
        const int khs = 2 / parts;
        ushort w[128];
        uint x[4][8];
        const int2 cw0 = (int2)(kp, col0);
        const int2 cw1 = (int2)(kp, col0 + 32);
        if (parts == 1) {
            B2D_READ_16B(32, 2, B, 2 * K, N, 2 * K, cw0, w);
            B2D_READ_16B(32, 2, B, 2 * K, N, 2 * K, cw1, (w + 64));
        } else {
            B2D_READ_16B(32, 1, B, 2 * K, N, 2 * K, cw0, w);
            B2D_READ_16B(32, 1, B, 2 * K, N, 2 * K, cw1, (w + 32));
        }
        UNROLL for (int mh = 0; mh < 2; ++mh) if (2 * mh < MB) UNROLL for (int kh = 0; kh < 2; ++kh) if (kh < khs) {
            const int2 c = (int2)((kp + DPAS_K * kh) / 2, row0 + 16 * mh);
            B2D_READ_TRANSPOSE_32B_16R8(A, 2 * K, M, 2 * K, c, x[2 * mh + kh]);
        }
        UNROLL for (int kh = 0; kh < 2; ++kh) if (kh < khs) UNROLL for (int n8 = 0; n8 < 8; ++n8) {
            const int r = 64 / parts * (n8 >> 2) + 32 * kh + DPAS_M * (n8 & 3);
            const short8 wv = as_short8((ushort8)(w[r], w[r + 1], w[r + 2], w[r + 3], w[r + 4], w[r + 5], w[r + 6],
                                                  w[r + 7]));
            UNROLL for (int mh = 0; mh < 2; ++mh) if (2 * mh < MB) {
                const int e = 8 * mh + n8;
                acc[e >> 2][e & 3] = DPAS(wv, as_int8(vload8(0, x[2 * mh + kh])), acc[e >> 2][e & 3]);
            }
        }
    }
    const int kf = k0 + PF_STEPS * K2D;
    const int2 pa = (int2)(kf, row0);
    if (MB == 2)
        B2D_PREFETCH_16B(16, 2, A, 2 * K, M, 2 * K, pa);
    else
        B2D_PREFETCH_16B(32, 2, A, 2 * K, M, 2 * K, pa);
    const int2 pb = (int2)(kf, col0 + 32 * pf_half);
    B2D_PREFETCH_16B(32, 2, B, 2 * K, N, 2 * K, pb);
}

/* One 16-wide K step of the fallback kernels (operands that break the 2D block rules). Fast: sub-group block reads
 * (16-byte aligned rows, full step, and for kn the 64 columns in bounds); careful: per-lane bounds-checked loads with
 * zero fill. */
INLINE void step_1d(__global const half* A, __global const half* B, int M, int N, int K, int k0, int row0, int col0,
                    int lane, float8 acc[MAX_MB][NB], const int MB, const bool b_nk, const bool fast)
{
    short8 a[MAX_MB];
    if (!fast) {
        /* A once, then one B operand at a time beside the accumulators. */
        UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB)
            a[mb] = load_a_rows(A, K, row0 + mb * DPAS_M, M, k0, K, lane, false);
        UNROLL for (int nb = 0; nb < NB; ++nb) {
            const int c0 = col0 + nb * DPAS_SG;
            const int8 b = b_nk ? load_rows_vnni(B, K, c0, N, k0, K, lane, false)
                                : load_b_kn(B, N, c0, N, k0, K, lane, false);
            UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB)
                acc[mb][nb] = DPAS(a[mb], b, acc[mb][nb]);
        }
        return;
    }
    int8 b[NB];
    UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB)
        a[mb] = load_a_rows(A, K, row0 + mb * DPAS_M, M, k0, K, lane, true);
    if (!b_nk) {
        load_b_kn_x4(B, N, col0, k0, b);
    } else {
        UNROLL for (int nb = 0; nb < NB; ++nb)
            b[nb] = load_rows_vnni(B, K, col0 + nb * DPAS_SG, N, k0, K, lane, true);
    }
    UNROLL for (int nb = 0; nb < NB; ++nb) UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB)
        acc[mb][nb] = DPAS(a[mb], b[nb], acc[mb][nb]);
}

INLINE void gemm_xe2(__global const half* A, __global const half* B, __global const half* bias, __global half* C,
                     int M, int N, int K, int has_bias, int act, __local float* partial, const int MB, const bool b_nk,
                     const bool use_2d)
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
    UNROLL for (int mb = 0; mb < MAX_MB; ++mb) UNROLL for (int nb = 0; nb < NB; ++nb)
        acc[mb][nb] = 0.0f;

    /* This slice's range of K steps (32 wide with 2D loads, else 16). */
    const int kstep = use_2d ? K2D : DPAS_K;
    const int steps = (K + kstep - 1) / kstep;
    const int2 range = xe2rt_slice_range(steps, slice, slices);
    if (row0 < M && col0 < N) {
        if (use_2d) {
            if (b_nk && MB > 1)
                for (int s = range.s0; s < range.s1; ++s)
                    step_2d_nk_swapped(A, B, M, N, K, s * K2D, row0, col0, acc, MB, sg_m & 1);
            else
                for (int s = range.s0; s < range.s1; ++s)
                    step_2d(A, B, M, N, K, s * K2D, row0, col0, acc, MB, b_nk, sg_m & 1);
        } else {
            /* Block-read steps first, then the bounds-checked ones (K tail, unaligned operands, N edge of kn). Two
             * loops rather than a per-step choice keep one set of loads live at a time. */
            const bool a_ok = XE2RT_BLOCK_ALIGNED(A) && (K % 8 == 0);
            const bool b_ok = b_nk ? ((((ulong)B) & 3UL) == 0 && (K % 2 == 0))
                                   : (XE2RT_BLOCK_ALIGNED(B) && (N % 8 == 0) && (col0 + SG_N <= N));
            const int full_end = min(range.s1, K / DPAS_K);
            const int fast_end = (a_ok && b_ok) ? max(full_end, range.s0) : range.s0;
            for (int s = range.s0; s < fast_end; ++s)
                step_1d(A, B, M, N, K, s * DPAS_K, row0, col0, lane, acc, MB, b_nk, true);
            for (int s = fast_end; s < range.s1; ++s)
                step_1d(A, B, M, N, K, s * DPAS_K, row0, col0, lane, acc, MB, b_nk, false);
        }
    }

    if (slices > 1) {
        /* Slices 1.. park their tiles in SLM (one float8 per lane and accumulator), slice 0 adds them in slice order.
         * Every work-item reaches the barrier. */
        const int tile_vecs = MB * NB * DPAS_SG;
        const int sg_linear = sg_m * sgs_n + sg_n;
        if (slice > 0) {
            __local float* dst = partial + ((slice - 1) * sgs_m * sgs_n + sg_linear) * tile_vecs * DPAS_M;
            UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB) UNROLL for (int nb = 0; nb < NB; ++nb)
                vstore8(acc[mb][nb], (mb * NB + nb) * DPAS_SG + lane, dst);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (slice == 0)
            for (int s = 1; s < slices; ++s) {
                __local const float* src = partial + ((s - 1) * sgs_m * sgs_n + sg_linear) * tile_vecs * DPAS_M;
                UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB) UNROLL for (int nb = 0; nb < NB; ++nb)
                    acc[mb][nb] += vload8((mb * NB + nb) * DPAS_SG + lane, src);
            }
    }
    if (slice == 0 && row0 < M && col0 < N) {
        if (use_2d && b_nk && MB > 1) { /* swapped: lane = row, component = column */
            UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB) UNROLL for (int nb = 0; nb < NB; ++nb)
                store_row_at(C, N, row0 + 16 * (mb >> 1) + lane, M, col0 + DPAS_M * (4 * (mb & 1) + nb), N,
                             acc[mb][nb], bias, has_bias, act);
        } else {
            UNROLL for (int mb = 0; mb < MAX_MB; ++mb) if (mb < MB) UNROLL for (int nb = 0; nb < NB; ++nb)
                store_tile_at(C, N, row0 + mb * DPAS_M, M, col0 + DPAS_SG * nb + lane, N, acc[mb][nb], bias,
                              has_bias, act);
        }
    }
}

#define GEMM_XE2_KERNEL(NAME, MB, B_NK, USE_2D)                                                                      \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void NAME(__global const half* A, __global const half* B, __global const half* bias, __global half* C, \
                       int M, int N, int K, int has_bias, int act, __local float* partial)                          \
    {                                                                                                              \
        gemm_xe2(A, B, bias, C, M, N, K, has_bias, act, partial, MB, B_NK, USE_2D);                               \
    }

/* 2D block loads: operands that meet the rules of block2d.h. */
GEMM_XE2_KERNEL(gemm_fp16_kn_m8_2d, 1, false, true)
GEMM_XE2_KERNEL(gemm_fp16_kn_m16_2d, 2, false, true)
GEMM_XE2_KERNEL(gemm_fp16_kn_m32_2d, 4, false, true)
GEMM_XE2_KERNEL(gemm_fp16_nk_m8_2d, 1, true, true)
GEMM_XE2_KERNEL(gemm_fp16_nk_m16_2d, 2, true, true)
GEMM_XE2_KERNEL(gemm_fp16_nk_m32_2d, 4, true, true)
/* Fallback: sub-group block reads and per-lane loads, any alignment; tiles up to 16 rows (a 32-row tile's per-lane
 * row addresses do not fit beside its accumulators: the kn m32 fallback spilled). */
GEMM_XE2_KERNEL(gemm_fp16_kn_m8, 1, false, false)
GEMM_XE2_KERNEL(gemm_fp16_kn_m16, 2, false, false)
GEMM_XE2_KERNEL(gemm_fp16_nk_m8, 1, true, false)
GEMM_XE2_KERNEL(gemm_fp16_nk_m16, 2, true, false)

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
