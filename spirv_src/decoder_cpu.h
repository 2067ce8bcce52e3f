/* CPU-shape pieces of the decoder ops that gemv_w4a16.cl's fused VNNI kernels compute too, and must compute in the
 * same order to give the same halves (decoder_small.cl's rms_norm_f16 and silu_mul_f16 use them): include in a CPU
 * branch after defining INLINE.
 *
 * exp2_neg_log2e: exp(-g) for SiLU. The CPU runtime calls its exp per element (not vectorized: 0.4-0.75 GB/s at T = 128, compute-bound), so exp(-g) is
 * written as plain arithmetic it vectorizes: 2^t with t = -g log2(e), t = n + f (n = rint(t), |f| <= 1/2, f exact),
 * 2^f by the degree-6 Taylor polynomial of e^(f ln 2) in Horner form (truncation <= (ln2 / 2)^7 / 7! e^(ln2 / 2)
 * / 2^-1/2 < 2.5e-7 relative), 2^n from the exponent bits. Relative error of exp(-g), derived in
 * xe2rt/checks/decoder_small.py: < 2^-21 + 2 |g| 2^-24 (the second term: t's rounding, scaled by |t| ln 2).
 * t > 126 (g < -87.3) gives exp = +inf as libm's exp overflows (silu -> -0, and NaN at g = -inf as torch gives);
 * t < -126 is clamped to 2^-126 (1 + that is 1: silu = g). */
#ifndef XE2RT_DECODER_CPU_H
#define XE2RT_DECODER_CPU_H

static inline float8 exp2_neg_log2e(float8 g)
{
    const float8 t = g * -1.44269504088896341f;
    const float8 tc = fmax(t, -126.0f);
    const float8 n = rint(fmin(tc, 126.0f));
    const float8 f = fmin(tc, 126.0f) - n;
    float8 p = 1.5403530393381606e-4f;               /* ln2^6 / 6! */
    p = fma(p, f, 1.3333558146428443e-3f);           /* ln2^5 / 5! */
    p = fma(p, f, 9.6181291076284772e-3f);           /* ln2^4 / 4! */
    p = fma(p, f, 5.5504108664821580e-2f);           /* ln2^3 / 3! */
    p = fma(p, f, 2.4022650695910071e-1f);           /* ln2^2 / 2! */
    p = fma(p, f, 6.9314718055994531e-1f);           /* ln2 */
    p = fma(p, f, 1.0f);
    const float8 scale = as_float8((convert_int8(n) + 127) << 23);
    return select(p * scale, (float8)(INFINITY), t > 126.0f);
}

/* rms_sumsq32: the sum of squares of s = fp16(x + res) (has_res) or x over the first 32 * steps elements, 32 per step
 * as two vload_half16 into two float16 sums (one chain of adds is the bound otherwise), lane-reduced by halves; with
 * write_s, s is stored there too. */
INLINE float rms_sumsq32(__global const half* x, __global const half* res, __global half* s, int steps, int has_res,
                         int write_s)
{
    float16 acc0 = 0.0f, acc1 = 0.0f;
    for (int o = 0; o < steps; ++o) {
        float16 v0 = vload_half16(2 * o, x), v1 = vload_half16(2 * o + 1, x);
        if (has_res) {
            const half16 h0 = convert_half16_rte(v0 + vload_half16(2 * o, res));
            const half16 h1 = convert_half16_rte(v1 + vload_half16(2 * o + 1, res));
            if (write_s) {
                vstore16(as_ushort16(h0), 2 * o, (__global ushort*)s);
                vstore16(as_ushort16(h1), 2 * o + 1, (__global ushort*)s);
            }
            v0 = convert_float16(h0);
            v1 = convert_float16(h1);
        }
        acc0 = fma(v0, v0, acc0);
        acc1 = fma(v1, v1, acc1);
    }
    const float16 a16 = acc0 + acc1;
    const float8 a8 = a16.lo + a16.hi;
    const float4 a4 = a8.lo + a8.hi;
    return (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
}

#endif
