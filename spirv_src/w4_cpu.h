/* CPU (AVX-512 shaped) pieces of the W4 wide step (128 k per step and row as one 64-byte load), shared by
 * gemv_w4a16.cl and moe_ffn_w4a16.cl: include in their CPU branch, after defining INLINE. */
#ifndef XE2RT_W4_CPU_H
#define XE2RT_W4_CPU_H

INLINE float hsum16(float16 v)
{
    const float8 a = v.lo + v.hi;
    const float4 b = a.lo + a.hi;
    return (b.s0 + b.s1) + (b.s2 + b.s3);
}

/* The wide path: 128 k per step and row, one 64-byte load as uint16, lane i = the 8 codes k0 + 8 i .. + 7 with code t
 * in bits 4t. A code in mantissa bits p .. p + 3 under the exponent of 1.0 reads as the float 1 + q 2^(p - 23): one
 * mask-and-OR (a single vpternlogd), no conversion instruction. One shift by 15 - 4t serves the pair (t, t + 1): code
 * t lands in bits 15..18 (1 + q / 256) and code t + 1 in bits 19..22 (1 + q / 16), so 4 shifts and 8 mask-ORs make 8
 * code vectors. Products with an fp16 x (at most 12 x 11 significant bits) are exact in fp32; the offset 1 is 256 or
 * 16 code units, against 1024 for the half magic 1024 + q, so the bias correction cancels fewer bits. */
#define PAIR_SHIFT(w, t) (4 * (t) <= 15 ? (w) << (15 - 4 * (t)) : (w) >> (4 * (t) - 15))
#define AS_CODE(v, mask) as_float16(((v) & (mask)) | 0x3F800000u)

/* x[k0 .. k0 + 127] as 8 phase vectors: X[t] lane i = x[k0 + 8 i + t] (three rounds of even / odd splits). */
INLINE void x_phases(__global const half* x, int k0, float16* X)
{
    /* each round: even / odd elements of the concatenation of two vectors, one two-source permute each */
    const uint16 EVEN = (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const uint16 ODD = EVEN + 1;
    float16 a[8], e1[4], o1[4], r2[8];
    for (int j = 0; j < 8; ++j)
        a[j] = vload_half16(0, x + k0 + 16 * j);
    for (int p = 0; p < 4; ++p) { /* x[32p + 2r], x[32p + 2r + 1] */
        e1[p] = shuffle2(a[2 * p], a[2 * p + 1], EVEN);
        o1[p] = shuffle2(a[2 * p], a[2 * p + 1], ODD);
    }
    /* r2[2c + q] = x[64q + 4r + c'] with c' = 0, 2, 1, 3 for c = 0, 1, 2, 3 */
    for (int q = 0; q < 2; ++q) {
        r2[q] = shuffle2(e1[2 * q], e1[2 * q + 1], EVEN);
        r2[2 + q] = shuffle2(e1[2 * q], e1[2 * q + 1], ODD);
        r2[4 + q] = shuffle2(o1[2 * q], o1[2 * q + 1], EVEN);
        r2[6 + q] = shuffle2(o1[2 * q], o1[2 * q + 1], ODD);
    }
    X[0] = shuffle2(r2[0], r2[1], EVEN);
    X[4] = shuffle2(r2[0], r2[1], ODD);
    X[2] = shuffle2(r2[2], r2[3], EVEN);
    X[6] = shuffle2(r2[2], r2[3], ODD);
    X[1] = shuffle2(r2[4], r2[5], EVEN);
    X[5] = shuffle2(r2[4], r2[5], ODD);
    X[3] = shuffle2(r2[6], r2[7], EVEN);
    X[7] = shuffle2(r2[6], r2[7], ODD);
}

/* Per-lane value of a per-group array (scales or zero points) over one step: lane i belongs to group g0 + 8 i / G. */
INLINE float16 lanes_half(__global const half* p, int g0, const int G)
{
    if (G == 32)
        return shuffle(vload_half4(0, p + g0), (uint16)(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    if (G == 64)
        return shuffle(vload_half2(0, p + g0), (uint16)(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    const ushort bits = ((__global const ushort*)p)[g0];
    return convert_float16(as_half16((ushort16)bits)); /* vpbroadcastw, vcvtph2ps */
}

INLINE float16 lanes_uchar(__global const uchar* p, int g0, const int G)
{
    if (G == 32)
        return shuffle(convert_float4(vload4(0, p + g0)), (uint16)(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    if (G == 64)
        return shuffle(convert_float2(vload2(0, p + g0)), (uint16)(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    return (float16)(float)p[g0];
}

#endif
