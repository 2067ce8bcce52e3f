/* The decode-attention kernels for one head_dim, included by decode_attention.cl once per D (64, 128); the
 * decomposition is described there. Kernels: decode_attention_d<D> (one work-group per (kv head, split); the length
 * and chunk as arguments), decode_attention_at_d<D> (the same, the length read from device memory when it runs) and
 * decode_attention_reduce_d<D> (the merge of the S partials of each query head). */
#if BT != 16
#error "BT must be 16: a block of tokens is one sub-group (Xe2) or one float16 of scores (cpu)"
#endif

#if XE2RT_XE2
/* ---- Xe2: D across the 16 lanes, DV = D / 16 elements per lane in block-read order (lane i: i + 16 j) ---- */
#if D == 128
#define FV float8
#define BREAD_HALF(p) convert_float8(as_half8(intel_sub_group_block_read_us8((__global const ushort*)(p))))
#define BREAD_FLOAT(p) as_float8(intel_sub_group_block_read8((__global const uint*)(p)))
#define VDOT(a, b) vdot8(a, b)
#define FOR_LANE_ELEMENTS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#else
#define FV float4
#define BREAD_HALF(p) convert_float4(as_half4(intel_sub_group_block_read_us4((__global const ushort*)(p))))
#define BREAD_FLOAT(p) as_float4(intel_sub_group_block_read4((__global const uint*)(p)))
#define VDOT(a, b) vdot4(a, b)
#define FOR_LANE_ELEMENTS(X) X(0) X(1) X(2) X(3)
#endif

#ifndef DECODE_ATTENTION_XE2_HELPERS
#define DECODE_ATTENTION_XE2_HELPERS
INLINE float vdot8(float8 a, float8 b)
{
    const float8 p = a * b;
    const float4 s = p.lo + p.hi;
    return (s.s0 + s.s1) + (s.s2 + s.s3);
}
INLINE float vdot4(float4 a, float4 b)
{
    const float4 p = a * b;
    return (p.s0 + p.s1) + (p.s2 + p.s3);
}
#endif

INLINE void PASTE(split_xe2_d, D)(SPLIT_PARAMS)
{
    const int lane = get_sub_group_local_id();
    const int g0 = get_sub_group_id() * GH;
    const int nh = min(GH, G - g0); /* heads of this sub-group (>= 1: ceil(G / GH) sub-groups per work-group) */
    const int split = get_group_id(0) % S, kvh = get_group_id(0) / S;
    const int t0 = min(split * chunk, length), t1 = min(t0 + chunk, length);
    __global const half* kb = k_cache + (size_t)kvh * max_tokens * D;
    __global const half* vb = v_cache + (size_t)kvh * max_tokens * D;

    FV qv[GH], o[GH];
    float m[GH], l[GH], p[GH];
    UNROLL for (int h = 0; h < GH; ++h) {
        /* heads past nh repeat the last one (never stored): every index into these arrays stays a constant */
        qv[h] = BREAD_HALF(q + (size_t)(kvh * G + g0 + min(h, nh - 1)) * D) * qscale;
        o[h] = 0.0f;
        m[h] = -INFINITY;
        l[h] = 0.0f;
        p[h] = 0.0f;
    }
    for (int b = t0; b < t1; b += BT) {
        const int nb = min(BT, t1 - b);
        /* Q K^T. Tokens are visited in bit-reversed order so the transposing butterfly (see xe2_combine) runs as a
         * binary counter: a pair is combined as soon as both halves exist, and per head at most one pending value
         * per level (4) stays live instead of 16 partial dots. After token 15, lane t holds token b + t's score. */
        float pending[GH][4], s[GH];
        UNROLL for (int j = 0; j < BT; ++j) {
            const int t = ((j & 1) << 3) | ((j & 2) << 1) | ((j & 4) >> 1) | ((j & 8) >> 3);
            /* tokens past the split's end read its last row again (in bounds) and are masked below */
            const FV kr = BREAD_HALF(kb + (size_t)(b + min(t, nb - 1)) * D);
            UNROLL for (int h = 0; h < GH; ++h) {
                float v = VDOT(qv[h], kr);
                bool carry = true;
                UNROLL for (int level = 0; level < 4; ++level) {
                    if (carry) {
                        if ((j >> level) & 1) {
                            v = xe2_combine(pending[h][level], v, 8 >> level, lane);
                        } else {
                            pending[h][level] = v;
                            carry = false;
                        }
                    }
                }
                if (j == BT - 1)
                    s[h] = v;
            }
        }
        UNROLL for (int h = 0; h < GH; ++h) {
            if (h < nh) {
                const float sc = lane < nb ? s[h] : -INFINITY; /* log2 domain */
                const float mn = fmax(m[h], sub_group_reduce_max(sc));
                const float alpha = exp2(m[h] - mn); /* 0 on the first block (m = -inf) */
                p[h] = exp2(sc - mn);
                l[h] = fma(l[h], alpha, p[h]); /* per lane; summed across the sub-group at the end */
                o[h] *= alpha;
                m[h] = mn;
            }
        }
        /* P V: rows past the end are never read (their contents may be anything, NaN included); the uniform test
         * per token keeps this loop free of inner loops, so it is the kernel's one hot loop */
        UNROLL for (int t = 0; t < BT; ++t) {
            if (t < nb) {
                const FV vr = BREAD_HALF(vb + (size_t)(b + t) * D);
                UNROLL for (int h = 0; h < GH; ++h)
                    if (h < nh)
                        o[h] = fma((FV)intel_sub_group_shuffle(p[h], (uint)t), vr, o[h]);
            }
        }
    }
    UNROLL for (int h = 0; h < GH; ++h) {
        if (h < nh) {
            const int hq = kvh * G + g0 + h;
            const float lt = sub_group_reduce_add(l[h]);
            if (direct) {
                const FV r = o[h] / lt;
                __global half* dst = out + (size_t)hq * D;
#define STORE_OUT(j) dst[(j) * 16 + lane] = convert_half(r.s##j);
                FOR_LANE_ELEMENTS(STORE_OUT)
#undef STORE_OUT
            } else {
                __global float* dst = ws + ((size_t)split * Hq + hq) * D;
#define STORE_PARTIAL(j) dst[(j) * 16 + lane] = o[h].s##j;
                FOR_LANE_ELEMENTS(STORE_PARTIAL)
#undef STORE_PARTIAL
                if (lane == 0) {
                    __global float* ml = ws + (size_t)S * Hq * D + ((size_t)split * Hq + hq) * 2;
                    ml[0] = m[h];
                    ml[1] = lt;
                }
            }
        }
    }
}

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void PASTE(decode_attention_d, D)(SPLIT_PARAMS) { PASTE(split_xe2_d, D)(SPLIT_ARGS); }

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void PASTE(decode_attention_at_d, D)(SPLIT_AT_PARAMS) { SPLIT_AT_LENGTH; PASTE(split_xe2_d, D)(SPLIT_ARGS); }

/* One sub-group per query head. */
XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void PASTE(decode_attention_reduce_d, D)(REDUCE_PARAMS)
{
    const int hq = get_group_id(0);
    const int lane = get_sub_group_local_id();
    __global const float* ml = ws + (size_t)S * Hq * D;
    float mx = -INFINITY;
    for (int s = 0; s < S; ++s)
        mx = fmax(mx, ml[((size_t)s * Hq + hq) * 2]);
    float total = 0.0f;
    FV acc = 0.0f;
    for (int s = 0; s < S; ++s) {
        const size_t i = (size_t)s * Hq + hq;
        const float w = exp2(ml[i * 2] - mx); /* an empty split (m = -inf) weighs 0 */
        total = fma(ml[i * 2 + 1], w, total);
        acc = fma((FV)w, BREAD_FLOAT(ws + i * D), acc);
    }
    const FV r = acc / total;
    __global half* dst = out + (size_t)hq * D;
#define STORE_OUT(j) dst[(j) * 16 + lane] = convert_half(r.s##j);
    FOR_LANE_ELEMENTS(STORE_OUT)
#undef STORE_OUT
}

#undef FV
#undef BREAD_HALF
#undef BREAD_FLOAT
#undef VDOT
#undef FOR_LANE_ELEMENTS

#else
/* ---- cpu: one work-item per (kv head, split), rows as float16 vectors, NV = D / 16 per row ---- */
#define NV (D / 16)
#define NOUNROLL _Pragma("unroll 1")

#ifndef DECODE_ATTENTION_CPU_HELPERS
#define DECODE_ATTENTION_CPU_HELPERS
/* The reduction of 16 per-token float16 dot accumulators to one float16 of 16 scores in token order, by shuffles that
 * x86 does in one instruction each: hadd4(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3] in every 128-bit lane (two vshufps
 * and an add); hadd4(hadd4(a, b), hadd4(c, d)) has, in each 128-bit lane j, the four tokens' sums over that lane;
 * fold(x, y) = [x.L0+x.L1, x.L2+x.L3, y.L0+y.L1, y.L2+y.L3] over 128-bit lanes L (two vshuff32x4 and an add), and
 * fold(fold(v0, v1), fold(v2, v3)) puts tokens 4i..4i+3 of v_i, summed over all lanes, in lanes 4i..4i+3.
 * 45 vector instructions for 16 tokens. */
INLINE float16 hadd4(float16 a, float16 b)
{
    return (float16)(a.s02, b.s02, a.s46, b.s46, a.s8a, b.s8a, a.sce, b.sce) +
           (float16)(a.s13, b.s13, a.s57, b.s57, a.s9b, b.s9b, a.sdf, b.sdf);
}
INLINE float16 fold(float16 x, float16 y)
{
    return (float16)(x.s0123, x.s89ab, y.s0123, y.s89ab) + (float16)(x.s4567, x.scdef, y.s4567, y.scdef);
}
INLINE float hsum16(float16 v)
{
    const float8 a = v.lo + v.hi;
    const float4 b = a.lo + a.hi;
    return (b.s0 + b.s1) + (b.s2 + b.s3);
}
/* Compare-and-select maxima (one vmaxps each; fmax's NaN handling would only cost instructions: a NaN score makes
 * the output NaN either way, through exp2_nonpos). */
INLINE float hmax16(float16 v)
{
    const float8 a = v.lo > v.hi ? v.lo : v.hi;
    const float4 b = a.lo > a.hi ? a.lo : a.hi;
    const float2 c = b.lo > b.hi ? b.lo : b.hi;
    return c.s0 > c.s1 ? c.s0 : c.s1;
}
#include "exp2_cpu.h"
#endif

#if CPU256
#ifndef PREFETCH
#define PREFETCH 0
#endif
#ifndef DECODE_ATTENTION_CPU256_HELPERS
#define DECODE_ATTENTION_CPU256_HELPERS
/* One x86 prefetcht0 per 64-byte line of n halves at p. OpenCL's prefetch() built-in is a call into the CPU runtime's
 * library (__lprefetch, with a vzeroupper before it) on every use; LLVM's prefetch intrinsic, declared by its name,
 * reaches the runtime as an imported function (llvm-spirv passes it on: toolchain.SPIRV_OPTIONS allows llvm.prefetch)
 * and becomes the instruction itself. Arguments: read, locality 3 (all cache levels), data cache. */
void xe2rt_prefetch_line(const __global void* p, int rw, int locality, int cache) __asm__("llvm.prefetch.p1i8");
#define PREFETCH_HALFS(p, n) UNROLL for (int pf_i = 0; pf_i < (n); pf_i += 32) xe2rt_prefetch_line((p) + pf_i, 0, 3, 1)
/* Eight float8 partial dots (one per token) -> one float8 of their lane sums in token order, with the shuffles AVX2
 * does in one cheap instruction each (vunpcklps / vunpckhps, vunpcklpd / vunpckhpd, vperm2f128; vhaddps is several):
 * pairs of tokens, then quads, each 128-bit lane summed within itself, then the two 128-bit lanes added. 21 vector
 * instructions for 8 tokens. */
INLINE float8 token_sums8(const float8* x)
{
    const uint8 LO = (uint8)(0, 8, 1, 9, 4, 12, 5, 13), HI = (uint8)(2, 10, 3, 11, 6, 14, 7, 15);
    const uint8 LO2 = (uint8)(0, 1, 8, 9, 4, 5, 12, 13), HI2 = (uint8)(2, 3, 10, 11, 6, 7, 14, 15);
    float8 a[4], b[2];
    UNROLL for (int i = 0; i < 4; ++i) /* [t 2i, t 2i + 1] lanes (0 + 2, 1 + 3) of each 128-bit lane */
        a[i] = shuffle2(x[2 * i], x[2 * i + 1], LO) + shuffle2(x[2 * i], x[2 * i + 1], HI);
    UNROLL for (int i = 0; i < 2; ++i) /* tokens 4i .. 4i + 3, each 128-bit lane's sum */
        b[i] = shuffle2(a[2 * i], a[2 * i + 1], LO2) + shuffle2(a[2 * i], a[2 * i + 1], HI2);
    return shuffle2(b[0], b[1], (uint8)(0, 1, 2, 3, 8, 9, 10, 11)) + shuffle2(b[0], b[1], (uint8)(4, 5, 6, 7, 12, 13, 14, 15));
}
#endif

/* CPU256 (variant decode_attention_cpu256, hosts with 16 vector registers of 8 floats): every head group reads the
 * block's K and V rows from the cache (in L1 after the prefetch), converting 8 or 16 halves per load. Sessions 36-39
 * converted each block once into a private float array that the groups read instead (stage_d); with the prefetch an
 * instruction, that copy cost more than the repeated conversions at G 4 and G 8 (session 40, docs/attention.md). */
/* Q K^T (CPU256) for `ch` heads over the block at kblk: two tokens at a time, each 8-element K piece converted and
 * fma'd into the ch heads' float8 accumulators (2 ch ymm), q as memory operands read once for both tokens; the
 * partial dots go to a small array and token_sums8 reduces each head's 16 to one float16 of scores, stored at
 * s4[h * 4]. Rows past the end repeat the last valid one: their scores are masked. pf (or 0): the rows to prefetch,
 * two per pass. */
INLINE void PASTE(scores_heads_d, D)(float16* s4, const float16* qv, __global const half* kblk, int nb, const int ch,
                                       int zero, __global const half* pf)
{
    float8 x[4 * BT];
    NOUNROLL for (int t = 0; t < BT; t += 2) {
        if (pf)
            PREFETCH_HALFS(pf + (size_t)t * D, 2 * D);
        const float8* qu = (const float8*)qv + (t & zero);
        __global const half* kr0 = kblk + (size_t)min(t, nb - 1) * D;
        __global const half* kr1 = kblk + (size_t)min(t + 1, nb - 1) * D;
        float8 a0[4], a1[4];
        {
            const float8 k0 = vload_half8(0, kr0), k1 = vload_half8(0, kr1);
            UNROLL for (int h = 0; h < ch; ++h) {
                const float8 qc = qu[h * 2 * NV];
                a0[h] = qc * k0;
                a1[h] = qc * k1;
            }
        }
        UNROLL for (int c = 1; c < 2 * NV; ++c) {
            const float8 k0 = vload_half8(c, kr0), k1 = vload_half8(c, kr1);
            UNROLL for (int h = 0; h < ch; ++h) {
                const float8 qc = qu[h * 2 * NV + c];
                a0[h] = fma(qc, k0, a0[h]);
                a1[h] = fma(qc, k1, a1[h]);
            }
        }
        UNROLL for (int h = 0; h < ch; ++h) {
            x[h * BT + t] = a0[h];
            x[h * BT + t + 1] = a1[h];
        }
    }
    UNROLL for (int h = 0; h < ch; ++h)
        s4[h * 4] = (float16)(token_sums8(x + h * BT), token_sums8(x + h * BT + 8));
}

/* Q K^T (CPU256, G a multiple of 8) for 8 heads straight from the fp16 cache: one token per pass, each 8-element K
 * piece converted once and fma'd into the 8 heads' accumulators, q as memory operands (9 instructions per 8 fmas
 * against 14 for scores_heads_d). token_sums8 then reduces the 8 heads' partial dots, in registers, to st[t]: token
 * t's scores of the 8 heads, one float8, the layout the softmax after it works in. Each score is the same products
 * summed in the same order as scores_heads_d's. pf (or 0): one row to prefetch per pass. */
INLINE void PASTE(scores8_d, D)(float8* st, const float16* qv, __global const half* kblk, int nb, int zero,
                                 __global const half* pf)
{
    NOUNROLL for (int t = 0; t < BT; ++t) {
        if (pf)
            PREFETCH_HALFS(pf + (size_t)t * D, D);
        const float8* qu = (const float8*)qv + (t & zero);
        __global const half* kr = kblk + (size_t)min(t, nb - 1) * D;
        float8 a[8];
        const float8 k0 = vload_half8(0, kr);
        UNROLL for (int h = 0; h < 8; ++h)
            a[h] = qu[h * 2 * NV] * k0;
        UNROLL for (int c = 1; c < 2 * NV; ++c) {
            const float8 kc = vload_half8(c, kr);
            UNROLL for (int h = 0; h < 8; ++h)
                a[h] = fma(qu[h * 2 * NV + c], kc, a[h]);
        }
        st[t] = token_sums8(a);
    }
}

/* P V (CPU256) for `ch` heads over the block at vblk: one float16 of each V row per pass, converted (4 heads x 2 ymm
 * accumulators), the token loop unrolled PV_UNROLL times. pf (or 0): the rows to prefetch, BT / NV per pass. */
INLINE void PASTE(pv_heads_d, D)(float16* o, const float* pa, __global const half* vblk, int nb, const int ch,
                                   __global const half* pf, const int hs, const int ts)
{
    UNROLL for (int part = 0; part < NV; ++part) {
        if (pf)
            PREFETCH_HALFS(pf + (size_t)part * (BT / NV) * D, (BT / NV) * D);
        float16 acc[4];
        UNROLL for (int h = 0; h < ch; ++h)
            acc[h] = o[h * NV + part];
        PV_TOKEN_UNROLL for (int t = 0; t < nb; ++t) {
            const float16 v = vload_half16(part, vblk + (size_t)t * D);
            UNROLL for (int h = 0; h < ch; ++h)
                acc[h] = fma((float16)pa[h * hs + t * ts], v, acc[h]);
        }
        UNROLL for (int h = 0; h < ch; ++h)
            o[h * NV + part] = acc[h];
    }
}
#else
/* Q K^T for `ch` heads (qv and s4 at their first head) over the block at kblk: each K row is converted once and
 * used by all ch heads from registers. Tokens two at a time: each q vector is read once (a memory operand) for both
 * tokens' fmas, half the q reads of one token at a time (Q K^T was bound by its loads: a 64-byte q operand per fma).
 * s4[h * 4 + u] = hadd4(hadd4(t0, t1), hadd4(t2, t3)) of tokens 4u..4u+3 (see hadd4; the two fold levels follow in
 * the caller). Rows past the end repeat the last valid one (in bounds): their scores are masked. */
INLINE void PASTE(scores_heads_d, D)(float16* s4, const float16* qv, __global const half* kblk, int nb, const int ch,
                                       int zero)
{
    NOUNROLL for (int u = 0; u < 4; ++u) {
        float16 pair[4];
        UNROLL for (int i = 0; i < 4; i += 2) {
            /* q through a pointer the compiler cannot prove the same for two token pairs (zero is 0): otherwise it
             * keeps the ch x NV q vectors in registers, spilled and reloaded; this way every q read is a memory
             * operand, used by the two tokens' fmas */
            const float16* qu = qv + ((4 * u + i) & zero);
            __global const half* kr0 = kblk + (size_t)min(4 * u + i, nb - 1) * D;
            __global const half* kr1 = kblk + (size_t)min(4 * u + i + 1, nb - 1) * D;
            float16 k0[NV], k1[NV];
            UNROLL for (int c = 0; c < NV; ++c) {
                k0[c] = vload_half16(c, kr0);
                k1[c] = vload_half16(c, kr1);
            }
            UNROLL for (int h = 0; h < ch; ++h) {
                const float16 q0 = qu[h * NV];
                float16 x0 = q0 * k0[0], x1 = q0 * k1[0];
                UNROLL for (int c = 1; c < NV; ++c) {
                    const float16 qc = qu[h * NV + c];
                    x0 = fma(qc, k0[c], x0);
                    x1 = fma(qc, k1[c], x1);
                }
                if (i == 0)
                    pair[h] = hadd4(x0, x1);
                else
                    s4[h * 4 + u] = hadd4(pair[h], hadd4(x0, x1));
            }
        }
    }
}

/* P V for `ch` heads (o and pa at their first head): each V row is converted once per 4-vector part and used by
 * all ch heads from registers (4 ch accumulators), the probability of (head, token) a broadcast load. */
INLINE void PASTE(pv_heads_d, D)(float16* o, const float* pa, __global const half* vblk, int nb, const int ch)
{
    UNROLL for (int part = 0; part < NV / PV_VECS; ++part) {
        float16 acc[4][PV_VECS];
        UNROLL for (int h = 0; h < ch; ++h)
            UNROLL for (int c = 0; c < PV_VECS; ++c)
                acc[h][c] = o[h * NV + part * PV_VECS + c];
        PV_TOKEN_UNROLL for (int t = 0; t < nb; ++t) {
            float16 v[PV_VECS];
            UNROLL for (int c = 0; c < PV_VECS; ++c)
                v[c] = vload_half16(part * PV_VECS + c, vblk + (size_t)t * D);
            UNROLL for (int h = 0; h < ch; ++h) {
                const float16 pt = (float16)pa[h * BT + t];
                UNROLL for (int c = 0; c < PV_VECS; ++c)
                    acc[h][c] = fma(pt, v[c], acc[h][c]);
            }
        }
        UNROLL for (int h = 0; h < ch; ++h)
            UNROLL for (int c = 0; c < PV_VECS; ++c)
                o[h * NV + part * PV_VECS + c] = acc[h][c];
    }
}
#endif

INLINE void PASTE(split_cpu_d, D)(SPLIT_PARAMS, const bool qk8)
{
    const int item = get_global_id(0);
    const int split = item % S, kvh = item / S;
    const int t0 = min(split * chunk, length), t1 = min(t0 + chunk, length);
    __global const half* kb = k_cache + (size_t)kvh * max_tokens * D;
    __global const half* vb = v_cache + (size_t)kvh * max_tokens * D;

    float16 qv[MAXG * NV], o[MAXG * NV];
    float m[MAXG];
    float16 l[MAXG]; /* per token slot; summed once at the end */
#if CPU256
    float8 m8[MAXG / 8], l8[MAXG / 8]; /* the g8 kernels: running max and sum, 8 heads per vector */
    float l8f[MAXG];                    /* their per-head sums at the end */
    for (int i = 0; i < MAXG / 8; ++i) {
        m8[i] = -INFINITY;
        l8[i] = 0.0f;
    }
#endif
    for (int g = 0; g < G; ++g) {
        __global const half* qrow = q + (size_t)(kvh * G + g) * D;
        UNROLL for (int c = 0; c < NV; ++c) {
            qv[g * NV + c] = vload_half16(c, qrow) * qscale;
            o[g * NV + c] = 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    const int16 token = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    float16 s4[MAXG * 4];
    float pa[MAXG * BT];
    const int zero = G >> 5; /* 0 (G <= 16), opaque to the compiler */
    for (int b = t0; b < t1; b += BT) {
        const int nb = min(BT, t1 - b);
        __global const half* kblk = kb + (size_t)b * D;
        /* Q K^T, heads 8 at a time when G is a multiple of 8 (CPU256), else 4 (then 2, then 1) at a time */
#if CPU256
        /* PREFETCH: the next block's K rows are prefetched while the first head group's Q K^T runs, its V rows
         * while the first group's P V runs, a few lines per pass (a burst of the whole block at once gained nothing),
         * so that the loads find them in cache: without it the core stalled on each block's loads, then computed,
         * with little overlap. A partial next block prefetches whole rows past t1, which x86 prefetches allow. */
        __global const half* next = PREFETCH && b + BT < t1 ? kblk + BT * D : 0;
#define PF_ARG(first) , (first) ? next : 0
#define PV_PA_STRIDES , BT, 1
#else
#define PV_PA_STRIDES
#define PF_ARG(first)
#endif
        int g = 0;
#if CPU256
        if (qk8) {
            for (int g8 = 0; g8 < G; g8 += 8) {
                float8 st[BT];
                PASTE(scores8_d, D)(st, qv + g8 * NV, kblk, nb, zero, g8 == 0 ? next : 0);
                /* online softmax of the 8 heads at once (one float8 per token; m8, l8: the heads' running max and
                 * sum in the lanes), the probabilities stored token-major (pa[g8 BT + t 8 + h]) for P V's
                 * broadcasts; rows past the end masked. NaN and +inf scores give NaN as in the per-head path. */
                UNROLL for (int t = 1; t < BT; ++t)
                    st[t] = t < nb ? st[t] : (float8)(-INFINITY);
                float8 mx = st[0];
                UNROLL for (int t = 1; t < BT; ++t)
                    mx = st[t] > mx ? st[t] : mx;
                const float8 mo = m8[g8 / 8], mn = fmax(mo, mx);
                float8 lsum = 0.0f;
                UNROLL for (int t = 0; t < BT; t += 2) {
                    const float16 p2 = exp2_nonpos((float16)(st[t], st[t + 1]) - (float16)(mn, mn));
                    vstore16(p2, t / 2, pa + g8 * BT); /* pa[g8 BT + t 8 + h] */
                    lsum += p2.lo + p2.hi;
                }
                const int8 rose = mn > mo;
                if (any(rose)) { /* rescale the heads whose running max rose (0 on the first block: m = -inf) */
                    const float8 alpha = select((float8)1.0f, exp2_nonpos((float16)(mo - mn, mo - mn)).lo, rose);
                    float af[8];
                    vstore8(alpha, 0, af);
                    l8[g8 / 8] *= alpha;
                    UNROLL for (int h = 0; h < 8; ++h)
                        UNROLL for (int c = 0; c < NV; ++c)
                            o[(g8 + h) * NV + c] *= af[h];
                    m8[g8 / 8] = mn;
                }
                l8[g8 / 8] += lsum;
            }
            g = G;
        }
#endif
        for (; g + 4 <= G; g += 4)
            PASTE(scores_heads_d, D)(s4 + g * 4, qv + g * NV, kblk, nb, 4, zero PF_ARG(g == 0));
        if (g + 2 <= G) {
            PASTE(scores_heads_d, D)(s4 + g * 4, qv + g * NV, kblk, nb, 2, zero PF_ARG(g == 0));
            g += 2;
        }
        if (g < G)
            PASTE(scores_heads_d, D)(s4 + g * 4, qv + g * NV, kblk, nb, 1, zero PF_ARG(g == 0));
        /* online softmax per head */
        for (g = 0; g < (qk8 ? 0 : G); ++g) {
            const float16* sg = s4 + g * 4;
#if CPU256
            const float16 s = select(sg[0], (float16)(-INFINITY), token >= (int16)nb);
#else
            const float16 s = select(fold(fold(sg[0], sg[1]), fold(sg[2], sg[3])), (float16)(-INFINITY),
                                     token >= (int16)nb);
#endif
            const float mn = fmax(m[g], hmax16(s));
            const float16 p = exp2_nonpos(s - (float16)mn);
            if (mn > m[g]) { /* the running max rose: rescale (2^0 = 1 exactly otherwise, so the rest skip it) */
                const float alpha = exp2_nonpos((float16)(m[g] - mn)).s0; /* 0 on the first block (m = -inf) */
                l[g] *= alpha;
                UNROLL for (int c = 0; c < NV; ++c)
                    o[g * NV + c] *= alpha;
                m[g] = mn;
            }
            l[g] += p;
            vstore16(p, g, pa);
        }
        /* P V, heads 4 (then 2, then 1) at a time; rows past the end are never read */
        __global const half* vsrc = vb + (size_t)b * D;
#if CPU256
        next = PREFETCH && b + BT < t1 ? vb + (size_t)(b + BT) * D : 0;
        if (qk8) {
            for (g = 0; g < G; g += 4) /* pa in the lane layout: head h, token t at pa[(h & ~7) BT + t 8 + (h & 7)] */
                PASTE(pv_heads_d, D)(o + g * NV, pa + (g & ~7) * BT + (g & 7), vsrc, nb, 4, g == 0 ? next : 0, 1, 8);
        }
#endif
        for (g = qk8 ? G : 0; g + 4 <= G; g += 4)
            PASTE(pv_heads_d, D)(o + g * NV, pa + g * BT, vsrc, nb, 4 PF_ARG(g == 0) PV_PA_STRIDES);
        if (g + 2 <= G) {
            PASTE(pv_heads_d, D)(o + g * NV, pa + g * BT, vsrc, nb, 2 PF_ARG(g == 0) PV_PA_STRIDES);
            g += 2;
        }
        if (g < G)
            PASTE(pv_heads_d, D)(o + g * NV, pa + g * BT, vsrc, nb, 1 PF_ARG(g == 0) PV_PA_STRIDES);
#undef PF_ARG
#undef PV_PA_STRIDES
    }
#if CPU256
    if (qk8)
        for (int i = 0; i < G / 8; ++i) {
            vstore8(m8[i], i, m);
            vstore8(l8[i], i, l8f);
        }
#endif
    for (int g = 0; g < G; ++g) {
        const int hq = kvh * G + g;
#if CPU256
        const float lt = qk8 ? l8f[g] : hsum16(l[g]);
#else
        const float lt = hsum16(l[g]);
#endif
        if (direct) {
            const float inv = 1.0f / lt;
            UNROLL for (int c = 0; c < NV; ++c)
                vstore_half16_rte(o[g * NV + c] * inv, c, out + (size_t)hq * D);
        } else {
            __global float* dst = ws + ((size_t)split * Hq + hq) * D;
            UNROLL for (int c = 0; c < NV; ++c)
                vstore16(o[g * NV + c], c, dst);
            __global float* ml = ws + (size_t)S * Hq * D + ((size_t)split * Hq + hq) * 2;
            ml[0] = m[g];
            ml[1] = lt;
        }
    }
}

__kernel void PASTE(decode_attention_d, D)(SPLIT_PARAMS) { PASTE(split_cpu_d, D)(SPLIT_ARGS, false); }

__kernel void PASTE(decode_attention_at_d, D)(SPLIT_AT_PARAMS)
{
    SPLIT_AT_LENGTH;
    PASTE(split_cpu_d, D)(SPLIT_ARGS, false);
}

#if CPU256
/* G a multiple of 8 (xe2rt.ops.decode_attention.kernel_names takes these then): Q K^T and the online softmax 8 heads
 * at a time with the heads in the lanes (scores8_d). Separate kernels, so that each JIT compiles one of the two
 * paths (both in one kernel doubled its CPU-runtime compile time, to 6 s at D 128). */
__kernel void PASTE(decode_attention_g8_d, D)(SPLIT_PARAMS) { PASTE(split_cpu_d, D)(SPLIT_ARGS, true); }

__kernel void PASTE(decode_attention_at_g8_d, D)(SPLIT_AT_PARAMS)
{
    SPLIT_AT_LENGTH;
    PASTE(split_cpu_d, D)(SPLIT_ARGS, true);
}
#endif

/* One work-item per query head. */
__kernel void PASTE(decode_attention_reduce_d, D)(REDUCE_PARAMS)
{
    const int hq = get_global_id(0);
    __global const float* ml = ws + (size_t)S * Hq * D;
    float mx = -INFINITY;
    for (int s = 0; s < S; ++s)
        mx = fmax(mx, ml[((size_t)s * Hq + hq) * 2]);
    float total = 0.0f;
    float16 acc[NV];
    UNROLL for (int c = 0; c < NV; ++c)
        acc[c] = 0.0f;
    for (int s = 0; s < S; ++s) {
        const size_t i = (size_t)s * Hq + hq;
        const float w = exp2(ml[i * 2] - mx); /* an empty split (m = -inf) weighs 0 */
        total = fma(ml[i * 2 + 1], w, total);
        UNROLL for (int c = 0; c < NV; ++c)
            acc[c] = fma((float16)w, vload16(c, ws + i * D), acc[c]);
    }
    const float inv = 1.0f / total;
    UNROLL for (int c = 0; c < NV; ++c)
        vstore_half16_rte(acc[c] * inv, c, out + (size_t)hq * D);
}

#undef NV
#undef NOUNROLL
#endif
