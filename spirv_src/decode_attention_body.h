/* The decode-attention kernels for one head_dim, included by decode_attention.cl once per D (64, 128); the
 * decomposition is described there. Kernels: decode_attention_d<D> (one work-group per (kv head, split)) and
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

XE2RT_REQD_SUB_GROUP_SIZE(16)
__kernel void PASTE(decode_attention_d, D)(SPLIT_PARAMS)
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

#ifndef DECODE_ATTENTION_CPU_HELPERS
#define DECODE_ATTENTION_CPU_HELPERS
/* [a0+a1, a2+a3, ..., a14+a15, b0+b1, ..., b14+b15]: four levels of it turn 16 per-token float16 accumulators into
 * one float16 holding the 16 tokens' sums in token order. */
INLINE float16 pair_sum(float16 a, float16 b)
{
    return (float16)(a.even, b.even) + (float16)(a.odd, b.odd);
}
INLINE float hsum16(float16 v)
{
    const float8 a = v.lo + v.hi;
    const float4 b = a.lo + a.hi;
    return (b.s0 + b.s1) + (b.s2 + b.s3);
}
INLINE float hmax16(float16 v)
{
    const float8 a = fmax(v.lo, v.hi);
    const float4 b = fmax(a.lo, a.hi);
    return fmax(fmax(b.s0, b.s1), fmax(b.s2, b.s3));
}
#endif

__kernel void PASTE(decode_attention_d, D)(SPLIT_PARAMS)
{
    const int item = get_global_id(0);
    const int split = item % S, kvh = item / S;
    const int t0 = min(split * chunk, length), t1 = min(t0 + chunk, length);
    __global const half* kb = k_cache + (size_t)kvh * max_tokens * D;
    __global const half* vb = v_cache + (size_t)kvh * max_tokens * D;

    float16 qv[MAXG * NV], o[MAXG * NV];
    float m[MAXG];
    float16 l[MAXG]; /* per token slot; summed once at the end */
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
    float16 kf[BT * NV], vf[BT * NV];
    float pa[BT];
    for (int b = t0; b < t1; b += BT) {
        const int nb = min(BT, t1 - b);
        /* the block's rows converted once; rows past the end repeat the last one (in bounds): their scores are
         * masked and their V rows never used */
        for (int t = 0; t < BT; ++t) {
            const size_t row = (size_t)(b + min(t, nb - 1)) * D;
            UNROLL for (int c = 0; c < NV; ++c) {
                kf[t * NV + c] = vload_half16(c, kb + row);
                vf[t * NV + c] = vload_half16(c, vb + row);
            }
        }
        for (int g = 0; g < G; ++g) {
            float16 qr[NV];
            UNROLL for (int c = 0; c < NV; ++c)
                qr[c] = qv[g * NV + c];
            float16 acc[BT];
            for (int t = 0; t < BT; ++t) {
                float16 a = qr[0] * kf[t * NV];
                UNROLL for (int c = 1; c < NV; ++c)
                    a = fma(qr[c], kf[t * NV + c], a);
                acc[t] = a;
            }
            UNROLL for (int w = BT / 2; w >= 1; w >>= 1)
                UNROLL for (int i = 0; i < w; ++i)
                    acc[i] = pair_sum(acc[2 * i], acc[2 * i + 1]);
            const float16 s = select(acc[0], (float16)(-INFINITY), token >= (int16)nb);
            const float mn = fmax(m[g], hmax16(s));
            const float16 p = exp2(s - (float16)mn);
            float16 oa[NV];
            UNROLL for (int c = 0; c < NV; ++c)
                oa[c] = o[g * NV + c];
            if (mn > m[g]) { /* the running max rose: rescale (2^0 = 1 exactly otherwise, so the rest skip it) */
                const float alpha = exp2(m[g] - mn); /* 0 on the first block (m = -inf) */
                l[g] *= alpha;
                UNROLL for (int c = 0; c < NV; ++c)
                    oa[c] *= alpha;
                m[g] = mn;
            }
            l[g] += p;
            vstore16(p, 0, pa);
            if (nb == BT) {
                for (int t = 0; t < BT; ++t)
                    UNROLL for (int c = 0; c < NV; ++c)
                        oa[c] = fma((float16)pa[t], vf[t * NV + c], oa[c]);
            } else {
                for (int t = 0; t < nb; ++t)
                    UNROLL for (int c = 0; c < NV; ++c)
                        oa[c] = fma((float16)pa[t], vf[t * NV + c], oa[c]);
            }
            UNROLL for (int c = 0; c < NV; ++c)
                o[g * NV + c] = oa[c];
        }
    }
    for (int g = 0; g < G; ++g) {
        const int hq = kvh * G + g;
        const float lt = hsum16(l[g]);
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
#endif
