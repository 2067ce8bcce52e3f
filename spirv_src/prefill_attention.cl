/* Prefill attention (flash attention, online softmax): out[t, h, :] = softmax_t'(scale q[t, h] . k[t', g]) v[t', g]
 * with g = h / (Hq / Hkv) (GQA), t' <= t when causal, fp32 scores / running max / running sum / accumulators, one fp16
 * rounding at the store. q [T, Hq, D], k and v [T, Hkv, D] float16, C-contiguous: row t of head h starts at
 * (t Hq + h) D, so the rows of one head are a 2D region of pitch Hq D 2 bytes and width D 2 bytes. D = 64 or 128, one
 * kernel per D so every register array is indexed by constants. Scores are computed in base 2: scale_log2 = scale
 * log2(e) is folded in once, exp2 replaces exp.
 *
 * XE2_SHAPE = 1 (bmg, lnl): one 16-lane sub-group per (16 query rows, query head), a work-group of GROUP_HEADS
 * consecutive heads of one KV head (same query rows, so they walk the same K/V tiles through L1). Everything runs in
 * the swapped DPAS orientation, lane = query row:
 *   S^T = K Q^T   A = K tile (8 tokens x 16 d; plain 16-bit 2D block reads of 16 tokens x 32 d, four DPAS each),
 *                 B = Q^T (VNNI: lane n = query row, pairs of d; transposed 32-bit reads of Q, once, D/16 operands),
 *                 acc s[tb].s[m] of lane n = S[q0 + n][t0 + 8 tb + m].
 *   softmax       per lane: the 16 scores of a tile are the 16 components of the lane's s[0], s[1]; no cross-lane work.
 *   O^T += V^T P^T  A = V^T (lane k = token, components 8 consecutive d: one transposed 32-bit read of 16 tokens x
 *                 16 d gives two A operands), B = P^T (VNNI: lane n = query row, pairs of tokens: the fp16 weights of
 *                 the lane's 16 scores, packed in order), acc o[j].s[m] of lane n = O[q0 + n][8 j + m].
 * The KV walk is tiles of 16 tokens: the full tiles with no mask (the hot loop), then one masked tile (the causal
 * diagonal, or the tail past T). Causal work-groups are issued heaviest first. Out-of-bounds 2D reads return zeros, so
 * tails need no loads of their own. DPAS_EMU / BLOCK2D_EMU swap in the software built-ins (the xe2emu family).
 *
 * XE2_SHAPE = 0 (cpu, TOOLCHAIN.md 6): a first launch copies K and V to fp32, each KV head's rows contiguous
 * (prefill_attention_kv_f32). Then a work-group is one 16-wide packet, a work-item one query row of one head. Per chunk
 * of KB tokens each lane runs its KB scores over d (K rows read at addresses all lanes share: broadcast operands; q
 * from local memory [d][lane], a plain vector load), the online softmax, and o[d] = alpha o[d] + sum_j p_j v[j][d]
 * (o in local memory [d][lane], DU columns per pass). Chunks past the packet's last causal row are skipped.
 */
#include "gemm_fp16_dpas.h"
#include "block2d.h"

#define UNROLL _Pragma("unroll")

#if XE2_SHAPE

#define BN 16   /* tokens per KV tile */
#define DMAX 128

/* B operand Q^T for d = 16 c .. 16 c + 15 of query rows q0 .. q0 + 15 (VNNI: lane = row, pairs of d). */
INLINE int8 load_qT(__global const half* Qh, int T, int q_pitch, int q0, int c, const int D)
{
    uint qq[8];
    const int2 cq = (int2)(8 * c, q0);
    B2D_READ_TRANSPOSE_32B_16R8(Qh, 2 * D, T, q_pitch, cq, qq);
    return as_int8((uint8)(qq[0], qq[1], qq[2], qq[3], qq[4], qq[5], qq[6], qq[7]));
}

/* The software DPAS and 2D reads are calls on a GPU build, and a call with Q^T (64 GRF at D = 128) live beside the
 * accumulators spilled; the xe2emu binaries for bmg / lnl re-read Q^T per tile instead (same values, more sends) and
 * run one tile loop (below). NATIVE_STEP = 1 keeps the native kernel's Q^T registers and tile loops with the software
 * built-ins: the xe2emu build for the cpu target, so the native code runs and is checked on the CPU device too. */
#ifndef NATIVE_STEP
#define NATIVE_STEP (!DPAS_EMU)
#endif
#if !NATIVE_STEP
#define QT(i) load_qT(Qh, T, q_pitch, q0, (i), D)
#else
#define QT(i) qT[i]
#endif

/* One KV tile: t0 .. t0 + 15. masked: tokens past `lim` (this lane's last visible token) get no weight. */
INLINE void attn_tile(__global const half* Qh, int q_pitch, int q0, __global const half* Kh, __global const half* Vh,
                      int T, int kv_pitch, int t0, const int D,
                      const int8 qT[DMAX / 16], float8 o[DMAX / 8], float* m, float* l, float scale_log2,
                      const bool masked, int lim, const bool prefetch)
{
    float8 s[2];
    s[0] = 0.0f;
    s[1] = 0.0f;
    UNROLL for (int c2 = 0; c2 < DMAX / 32; ++c2) if (c2 < D / 32) {
        ushort kk[32];
        const int2 ck = (int2)(32 * c2, t0);
        B2D_READ_16B(16, 2, Kh, 2 * D, T, kv_pitch, ck, kk);
        UNROLL for (int c = 0; c < 2; ++c) UNROLL for (int tb = 0; tb < 2; ++tb) {
            const int r = 16 * c + 8 * tb;
            const short8 a = as_short8((ushort8)(kk[r], kk[r + 1], kk[r + 2], kk[r + 3], kk[r + 4], kk[r + 5],
                                                 kk[r + 6], kk[r + 7]));
            s[tb] = DPAS(a, QT(2 * c2 + c), s[tb]);
        }
    }
    float x[BN];
    UNROLL for (int i = 0; i < 8; ++i) {
        x[i] = ((const float*)&s[0])[i] * scale_log2;
        x[8 + i] = ((const float*)&s[1])[i] * scale_log2;
    }
    if (masked)
        UNROLL for (int i = 0; i < BN; ++i) x[i] = t0 + i <= lim ? x[i] : -INFINITY;
    float mt = x[0];
    UNROLL for (int i = 1; i < BN; ++i) mt = fmax(mt, x[i]);
    const float m_new = fmax(*m, mt); /* finite: every lane's first tile holds its token 0 */
    const float alpha = exp2(*m - m_new);
    half ph[BN];
    float sum = 0.0f;
    UNROLL for (int i = 0; i < BN; ++i) {
        /* The weights are rounded to fp16 for DPAS; the sum adds the rounded ones, so numerator and denominator use
         * the same weights and the output stays a convex combination of V rows. */
        ph[i] = convert_half(exp2(x[i] - m_new));
        sum += (float)ph[i];
    }
    *l = *l * alpha + sum;
    *m = m_new;
    UNROLL for (int j = 0; j < DMAX / 8; ++j) if (j < D / 8) o[j] *= alpha;
    const int8 pT = as_int8((half16)(ph[0], ph[1], ph[2], ph[3], ph[4], ph[5], ph[6], ph[7], ph[8], ph[9], ph[10],
                                     ph[11], ph[12], ph[13], ph[14], ph[15]));
    UNROLL for (int c = 0; c < DMAX / 16; ++c) if (c < D / 16) {
        uint vv[8];
        const int2 cv = (int2)(8 * c, t0);
        B2D_READ_TRANSPOSE_32B_16R8(Vh, 2 * D, T, kv_pitch, cv, vv);
        const short8 a0 = as_short8((uint4)(vv[0], vv[1], vv[2], vv[3]));
        const short8 a1 = as_short8((uint4)(vv[4], vv[5], vv[6], vv[7]));
        o[2 * c] = DPAS(a0, pT, o[2 * c]);
        o[2 * c + 1] = DPAS(a1, pT, o[2 * c + 1]);
    }
    /* K and V of the tile pair PF_PAIRS pairs ahead into the cache, 32 tokens x 32 d per message: even tiles
     * prefetch K, odd tiles V (the base is picked at run time, one code path), so each tile adds D / 32 prefetches
     * and the hot loop keeps 2 DPAS per send with prefetches counted as sends. */
    if (prefetch) {
        __global const half* base = (t0 & BN) ? Vh : Kh;
        UNROLL for (int c2 = 0; c2 < DMAX / 32; ++c2) if (c2 < D / 32) {
            const int2 pf = (int2)(32 * c2, (t0 & ~(2 * BN - 1)) + PF_PAIRS * 2 * BN);
            B2D_PREFETCH_16B(32, 2, base, 2 * D, T, kv_pitch, pf);
        }
    }
}

INLINE void prefill_xe2(__global const half* q, __global const half* k, __global const half* v, __global half* out,
                        int T, int Hq, int Hkv, int causal, float scale_log2, const int D)
{
    const int lane = get_sub_group_local_id();
    const int h = get_global_id(1);
    const int g = h / (Hq / Hkv);
    const int blocks = get_num_groups(0);
    const int qb = causal ? blocks - 1 - get_group_id(0) : get_group_id(0); /* causal: longest rows first */
    const int q0 = qb * BN;
    const int q_pitch = 2 * Hq * D, kv_pitch = 2 * Hkv * D;
    __global const half* Qh = q + h * D;
    __global const half* Kh = k + g * D;
    __global const half* Vh = v + g * D;

    int8 qT[DMAX / 16];
#if NATIVE_STEP
    UNROLL for (int c = 0; c < DMAX / 16; ++c) if (c < D / 16)
        qT[c] = load_qT(Qh, T, q_pitch, q0, c, D);
#endif
    float8 o[DMAX / 8];
    UNROLL for (int j = 0; j < DMAX / 8; ++j) o[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int row = q0 + lane;
    const int lim = causal ? min(row, T - 1) : T - 1;
    /* Full tiles: every token visible to every row of the block (causal: before the diagonal tile). */
    const int full = causal ? qb : T / BN;
    const int tiles = (causal ? q0 + BN : T + BN - 1) / BN; /* the last one is masked unless T % 16 == 0 (full) */
#if !NATIVE_STEP
    /* One inlined tile with the mask chosen at run time: half the code for the CPU runtime to build (the unrolled
     * software DPAS takes it tens of seconds per copy); same loads, DPAS and softmax as the native kernels. */
    for (int t = 0; t < tiles; ++t)
        attn_tile(Qh, q_pitch, q0, Kh, Vh, T, kv_pitch, t * BN, D, qT, o, &m, &l, scale_log2, true,
                  t < full ? T : lim, t < full);
#else
    for (int t = 0; t < full; ++t)
        attn_tile(Qh, q_pitch, q0, Kh, Vh, T, kv_pitch, t * BN, D, qT, o, &m, &l, scale_log2, false, 0, true);
    if (full < tiles) /* causal: the diagonal tile; else the tail past the last full tile */
        attn_tile(Qh, q_pitch, q0, Kh, Vh, T, kv_pitch, full * BN, D, qT, o, &m, &l, scale_log2, true, lim, false);
#endif

    if (row < T) {
        const float inv = 1.0f / l;
        __global half* dst = out + ((size_t)row * Hq + h) * D;
        UNROLL for (int j = 0; j < DMAX / 8; ++j) if (j < D / 8) vstore_half8_rte(o[j] * inv, j, dst);
    }
}

#define PREFILL_XE2_KERNEL(DV)                                                                                      \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void prefill_attention_d##DV(__global const half* q, __global const half* k, __global const half* v,  \
                                          __global half* out, int T, int Hq, int Hkv, int causal, float scale_log2) \
    {                                                                                                              \
        prefill_xe2(q, k, v, out, T, Hq, Hkv, causal, scale_log2, DV);                                            \
    }

PREFILL_XE2_KERNEL(64)
PREFILL_XE2_KERNEL(128)

#else /* CPU shape */

#define PACKET 16

/* K and V to fp32, per KV head contiguous: kv32[(g T + t) D + d] (k32 and v32 one after the other in `kv32`: k32 at
 * 0, v32 at (Hkv T + KB) D), and KB zero rows after each, so the attention kernel's last chunk reads finite values
 * (weight 0) without a bounds test. One work-item per 8 elements. */
__kernel void prefill_attention_kv_f32(__global const half* k, __global const half* v, __global float* kv32, int T,
                                       int Hkv, int D)
{
    const size_t i = get_global_id(0);
    const size_t n = (size_t)T * Hkv * D / 8;
    const size_t half_size = ((size_t)Hkv * T + KB) * D;
    if (i < n) {
        const size_t e = 8 * i;
        const size_t t = e / ((size_t)Hkv * D), g = (e / D) % Hkv, d = e % D;
        const size_t dst = ((size_t)g * T + t) * D + d;
        vstore8(vload_half8(i, k), 0, kv32 + dst);
        vstore8(vload_half8(i, v), 0, kv32 + half_size + dst);
    } else if (i < n + KB * D / 8) {
        const size_t dst = (size_t)Hkv * T * D + 8 * (i - n);
        vstore8((float8)0.0f, 0, kv32 + dst);
        vstore8((float8)0.0f, 0, kv32 + half_size + dst);
    }
}

/* No barriers: the K/V rows are read straight from the fp32 copy at addresses every lane shares (broadcast memory
 * operands). A barrier inside the chunk loop made the CPU runtime mask every vector operation of the loop (an extra
 * and per fma, seen in its assembly). q_st / o_st are per-lane slices ([d][lane]) of local memory. */
INLINE void prefill_cpu(__global const half* q, __global const float* kv32, __global half* out, int T, int Hq, int Hkv,
                        int causal, float scale_log2, const int D, __local float* q_st, __local float* o_st)
{
    const size_t lane = get_local_id(0);
    const int blocks = get_num_groups(0);
    const int qb = causal ? blocks - 1 - (int)get_group_id(0) : (int)get_group_id(0);
    const int h = get_group_id(1);
    const int g = h / (Hq / Hkv);
    const int q0 = qb * PACKET;
    const int row = q0 + (int)lane;
    const int row_c = row < T ? row : T - 1;
    __global const float* kh = kv32 + (size_t)g * T * D;
    __global const float* vh = kv32 + ((size_t)Hkv * T + KB) * D + (size_t)g * T * D;

    __global const half* qr = q + ((size_t)row_c * Hq + h) * D;
    for (int d = 0; d < D; ++d) {
        (q_st + d * PACKET)[lane] = vload_half(d, qr) * scale_log2;
        (o_st + d * PACKET)[lane] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int last = causal ? min(q0 + PACKET, T) : T; /* tokens [0, last) matter to some row of the packet */
    for (int t0 = 0; t0 < last; t0 += KB) {
        __global const float* kc = kh + (size_t)t0 * D;
        __global const float* vc = vh + (size_t)t0 * D;
        float s[KB];
        UNROLL for (int j = 0; j < KB; ++j) s[j] = 0.0f;
        for (int d = 0; d < D; ++d) {
            const float qd = (q_st + d * PACKET)[lane];
            UNROLL for (int j = 0; j < KB; ++j) s[j] = fma(qd, kc[j * D + d], s[j]);
        }
        float mt = -INFINITY;
        UNROLL for (int j = 0; j < KB; ++j) {
            const int t = t0 + j;
            const bool visible = t < T && (!causal || t <= row);
            s[j] = visible ? s[j] : -INFINITY;
            mt = fmax(mt, s[j]);
        }
        const float m_new = fmax(m, mt); /* finite: every row sees token 0 in the first chunk */
        const float alpha = exp2(m - m_new);
        float sum = 0.0f;
        UNROLL for (int j = 0; j < KB; ++j) {
            s[j] = exp2(s[j] - m_new);
            sum += s[j];
        }
        l = l * alpha + sum;
        m = m_new;
        /* DU columns at a time: DU independent fma chains (one chain would wait on the fma latency KB times). */
        for (int d = 0; d < D; d += DU) {
            float acc[DU];
            UNROLL for (int u = 0; u < DU; ++u) acc[u] = (o_st + (d + u) * PACKET)[lane] * alpha;
            UNROLL for (int j = 0; j < KB; ++j) UNROLL for (int u = 0; u < DU; ++u)
                acc[u] = fma(s[j], vc[j * D + d + u], acc[u]);
            UNROLL for (int u = 0; u < DU; ++u) (o_st + (d + u) * PACKET)[lane] = acc[u];
        }
    }
    if (row < T) {
        const float inv = 1.0f / l;
        __global half* dst = out + ((size_t)row * Hq + h) * D;
        for (int d = 0; d < D; ++d)
            vstore_half_rte((o_st + d * PACKET)[lane] * inv, d, dst);
    }
}

#define PREFILL_CPU_KERNEL(DV)                                                                                      \
    XE2RT_REQD_SUB_GROUP_SIZE(16)                                                                                  \
    __kernel void prefill_attention_d##DV(__global const half* q, __global const float* kv32, __global half* out,  \
                                          int T, int Hq, int Hkv, int causal, float scale_log2)                    \
    {                                                                                                              \
        __local float q_st[DV * PACKET], o_st[DV * PACKET];                                                        \
        prefill_cpu(q, kv32, out, T, Hq, Hkv, causal, scale_log2, DV, q_st, o_st);                                 \
    }

PREFILL_CPU_KERNEL(64)
PREFILL_CPU_KERNEL(128)

#endif
