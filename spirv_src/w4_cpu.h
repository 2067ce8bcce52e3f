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

/* 128 values in k order (a[j] lane i = value 16 j + i) as 8 phase vectors: X[t] lane i = value 8 i + t (three
 * rounds of even / odd splits). */
INLINE void phases_of(const float16* a, float16* X)
{
    /* each round: even / odd elements of the concatenation of two vectors, one two-source permute each */
    const uint16 EVEN = (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const uint16 ODD = EVEN + 1;
    float16 e1[4], o1[4], r2[8];
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

/* x[k0 .. k0 + 127] as 8 phase vectors: X[t] lane i = x[k0 + 8 i + t]. */
INLINE void x_phases(__global const half* x, int k0, float16* X)
{
    float16 a[8];
    for (int j = 0; j < 8; ++j)
        a[j] = vload_half16(0, x + k0 + 16 * j);
    phases_of(a, X);
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

/* AVX512-VNNI vpdpbusd: per 32-bit lane, acc + the sum of the products of a's 4 unsigned bytes and b's 4 signed bytes.
 * Declared by its LLVM intrinsic name: llvm-spirv passes it on as an imported function (--spirv-allow-unknown-
 * intrinsics=llvm.x86) and the CPU runtime's compiler reads it back as the instruction. Only binaries for hosts with
 * AVX512-VNNI may call it (variant gemv_w4a16_vnni; xe2rt.targets.cpu_has_avx512_vnni): elsewhere the CPU runtime
 * could not compile them. */
int16 vnni_dpbusd(int16 acc, uint16 a, int16 b) __asm__("llvm.x86.avx512.vpdpbusd.512");

/* AVX2 vpmaddwd (ymm): per 32-bit lane i, a[2i] b[2i] + a[2i + 1] b[2i + 1] of signed 16-bit lanes. The integer-dot
 * path of hosts with AVX2 but no AVX512-VNNI (CPU_AVX2, variant gemv_w4a16_avx2): the codes widened to 16 bits,
 * x as the same 15-bit fixed point, so the same exact integer dot as vnni_dpbusd's (bit for bit the same result).
 * AVX2's byte form (vpmaddubsw ymm) takes 32 x i8 vectors, which SPIR-V cannot express. Declared like vnni_dpbusd;
 * only binaries for hosts with AVX2 may call it (xe2rt.targets.cpu_has_avx2). */
int8 avx2_pmaddwd(short16 a, short16 b) __asm__("llvm.x86.avx2.pmadd.wd");
#ifndef CPU_AVX2
#define CPU_AVX2 0
#endif
#ifndef X_Q8
#define X_Q8 0
#endif
#if X_Q8
#if !CPU_AVX2
#error "X_Q8 (x as 8-bit integers for vpmaddubsw) is written for the AVX2 path"
#endif
/* AVX2 vpmaddubsw (ymm): per 16-bit lane i, a[2i] b[2i] + a[2i + 1] b[2i + 1] of unsigned bytes a and signed bytes b,
 * saturated to 16 bits (never here: 4-bit codes times |xi| <= 127 sum to at most 3810). Its operands are 32-byte
 * vectors, which SPIR-V has only with SPV_INTEL_vector_compute's VectorAnyINTEL (the variant's spirv_extensions, read
 * by Intel's CPU runtime); clang spells them as ext_vector_type(32). Only binaries for hosts with AVX2 call it. */
typedef char char32 __attribute__((ext_vector_type(32)));
typedef uchar uchar32 __attribute__((ext_vector_type(32)));
short16 avx2_pmaddubsw(uchar32 a, char32 b) __asm__("llvm.x86.avx2.pmadd.ub.sw");
#define CAT32(a, b) __builtin_shufflevector((a), (b), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, \
    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31)
#endif

/* The VNNI kernels' fixed point for x (gemv_w4a16_vnni here, gemm_w4a16_vnni's launch 1): sx = 2^s, s = e - 13 with e
 * the exponent of the chunk's largest |x| (the largest lane of absmax), at least -24 (fp16's smallest), so every
 * |x / sx| < 2^14 and every element within 2^3 of the largest is a multiple of sx. */
INLINE int fixed_point_exponent(float16 absmax)
{
    const float8 a8 = fmax(absmax.lo, absmax.hi);
    const float4 a4 = fmax(a8.lo, a8.hi);
    const float2 a2 = fmax(a4.lo, a4.hi);
    return max((as_int(fmax(a2.s0, a2.s1)) >> 23) - 127, -24) - 13;
}

/* The lane sum of z, a sum of x * 0 terms: 0, or NaN when some x was not finite (inf * 0 and NaN * 0 are NaN). Added
 * to a fixed-point scale sx, it makes sx NaN for a chunk holding a non-finite x, so every sum that chunk scales is NaN
 * (the integer parts cannot carry it; an absmax by fmax would even drop a NaN). */
INLINE float nonfinite_nan(float16 z)
{
    const float8 a = z.lo + z.hi;
    const float4 b = a.lo + a.hi;
    return (b.s0 + b.s1) + (b.s2 + b.s3);
}

/* rte(x / 2^s): x 2^-s is exact, and adding 1.5 2^23 rounds it to an integer, to nearest even (|x 2^-s| < 2^22; no
 * library call) */
INLINE int16 fixed_point(float16 x, int s)
{
    return as_int16(fma(x, (float16)as_float((127 - s) << 23), (float16)12582912.0f)) - 0x4B400000;
}

/* x[k0 .. k0 + 127] for vnni_dpbusd, stored at q (XQ_STRIDE ints): xi = rte(x / sx) (fixed_point_exponent), so
 * |xi| < 2^14 and every element within 2^3 of the largest is exact (the others are rounded to a multiple of sx).
 * xi = 256 hi + lo with signed bytes lo in
 * [-128, 127], hi in [-64, 64], laid out as the packed codes: lane i byte j of the even rows holds k = k0 + 8 i + 2 j,
 * of the odd rows k + 1. q: 16 ints each of even hi, odd hi, even lo, odd lo, the lane sums of xi, then sx.
 * CPU_AVX2 (for avx2_pmaddwd): xi itself as 16-bit lanes in place of the four byte vectors (order at the store). */
INLINE void int8_parts_of(const float16* X, __local int* q) /* X[t] lane i = x[k0 + 8 i + t] (x_phases) */
{
#if X_Q8
    /* X_Q8 (variant gemv_w4a16_avx2_q8): x as signed bytes with one float scale per 32 k, as llama.cpp's Q8_0:
     * d = max |x| / 127 over the 32, xi = rte(x / d) in [-127, 127] (0 where the 32 are all 0). Bytes in the codes'
     * order for vpmaddubsw: half j (64 k) as 32 bytes of even k (k0 + 64 j + 2 p) then 32 of odd k (+ 1), i.e. byte
     * (i / 8) 64 + (t % 2) 32 + 4 (i % 8) + t / 2 holds lane i of phase t; then the lane sums of xi (ints 64-79), and
     * per lane (8 k, inside one 32) its d as float (ints 32-47), NaN for every lane when some x was not finite. */
    float16 a = fmax(fmax(fabs(X[0]), fabs(X[1])), fmax(fabs(X[2]), fabs(X[3])));
    a = fmax(a, fmax(fmax(fabs(X[4]), fabs(X[5])), fmax(fabs(X[6]), fabs(X[7]))));
    a = fmax(a, shuffle(a, (uint16)(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14)));
    a = fmax(a, shuffle(a, (uint16)(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13)));
    const float16 z = ((X[0] + X[1]) + (X[2] + X[3]) + (X[4] + X[5]) + (X[6] + X[7])) * 0.0f;
    const float16 inv = select((float16)0.0f, 127.0f / a, a > 0.0f);
    __local char* qb = (__local char*)q;
    int16 sum = 0;
    char16 c[8];
    for (int t = 0; t < 8; ++t) {
        /* rte(x 127 / amax) by the 1.5 2^23 addition (|x 127 / amax| <= 127 + rounding: no clamp needed) */
        const int16 xi = as_int16(fma(X[t], inv, (float16)12582912.0f)) - 0x4B400000;
        sum += xi;
        c[t] = convert_char16(xi);
    }
    for (int odd = 0; odd < 2; ++odd) {
        /* phases odd, 2 + odd, 4 + odd, 6 + odd interleaved byte by byte: byte 4 i + s of half j is phase 2 s + odd,
         * lane 8 j + i */
        const char32 p01 = CAT32(c[odd], c[2 + odd]), p23 = CAT32(c[4 + odd], c[6 + odd]);
        *(__local char32*)(qb + 32 * odd) = __builtin_shufflevector(p01, p23, 0, 16, 32, 48, 1, 17, 33, 49, 2, 18,
            34, 50, 3, 19, 35, 51, 4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55);
        *(__local char32*)(qb + 64 + 32 * odd) = __builtin_shufflevector(p01, p23, 8, 24, 40, 56, 9, 25, 41, 57, 10,
            26, 42, 58, 11, 27, 43, 59, 12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63);
    }
    vstore16(sum, 4, q);
    vstore16(as_int16(a / 127.0f + nonfinite_nan(z)), 2, q);
#else
    float16 a = fmax(fmax(fabs(X[0]), fabs(X[1])), fmax(fabs(X[2]), fabs(X[3])));
    a = fmax(a, fmax(fmax(fabs(X[4]), fabs(X[5])), fmax(fabs(X[6]), fabs(X[7]))));
    const float16 z = ((X[0] + X[1]) + (X[2] + X[3]) + (X[4] + X[5]) + (X[6] + X[7])) * 0.0f;
    const int e = fixed_point_exponent(a);
    int16 sum = 0;
#if CPU_AVX2
    /* 16-bit xi in the order of a row's 64 code bytes read as two ushort16 (AVX2 step, gemv_w4a16.cl): short vector
     * 4 j + t, lane i = xi at k = k0 + 64 j + 4 i + t, i.e. phase 4 (i % 2) + t, lane 8 j + i / 2 */
    int16 xi[8];
    for (int t = 0; t < 8; ++t) {
        xi[t] = fixed_point(X[t], e);
        sum += xi[t];
    }
    const uint16 ORDER = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    for (int j = 0; j < 2; ++j)
        for (int t = 0; t < 4; ++t)
            vstore16(convert_short16(shuffle2(xi[t], xi[t + 4], ORDER + 8 * j)), 4 * j + t, (__local short*)q);
#else
    int16 hi[8], lo[8];
    for (int t = 0; t < 8; ++t) {
        const int16 xi = fixed_point(X[t], e);
        lo[t] = ((xi + 128) & 255) - 128;
        hi[t] = (xi - lo[t]) >> 8;
        sum += xi;
    }
    vstore16((hi[0] & 255) | ((hi[2] & 255) << 8) | ((hi[4] & 255) << 16) | (hi[6] << 24), 0, q);
    vstore16((hi[1] & 255) | ((hi[3] & 255) << 8) | ((hi[5] & 255) << 16) | (hi[7] << 24), 1, q);
    vstore16((lo[0] & 255) | ((lo[2] & 255) << 8) | ((lo[4] & 255) << 16) | (lo[6] << 24), 2, q);
    vstore16((lo[1] & 255) | ((lo[3] & 255) << 8) | ((lo[5] & 255) << 16) | (lo[7] << 24), 3, q);
#endif
    vstore16(sum, 4, q);
    q[80] = as_int(as_float((127 + e) << 23) + nonfinite_nan(z)); /* sx as float bits (NaN: a non-finite x) */
#endif
}

INLINE void x_int8_parts(__global const half* x, int k0, __local int* q)
{
    float16 X[8];
    x_phases(x, k0, X);
    int8_parts_of(X, q);
}

#endif
