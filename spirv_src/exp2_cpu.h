/* CPU-shape 2^x for x <= 0 written out as arithmetic the runtime vectorizes (shared by decode_attention_body.h and
 * softmax_stats.cl): include in a CPU branch after defining INLINE. */
#ifndef XE2RT_EXP2_CPU_H
#define XE2RT_EXP2_CPU_H

/* 2^x for x <= 0 inline (the library exp2 is a call, after which every live vector is reloaded from the stack):
 * x = n + f with n = floor(x), f in [0, 1), 2^f by a degree-6 polynomial (a least-squares fit of the relative
 * error; evaluated in fp32 at most 9e-8 off, about one rounding), times 2^n built in the exponent field.
 * x < -126 (including -inf, masked tokens) gives exactly 0; NaN gives NaN (both compares are false for it), so a NaN
 * score, or a +inf one (inf - inf), makes its head's output NaN as in the float64 reference. */
INLINE float16 exp2_nonpos(float16 x)
{
    const float16 xc = x < (float16)(-126.0f) ? (float16)(-126.0f) : x;
    const float16 n = floor(xc);
    const float16 f = xc - n;
    float16 p = (float16)2.161380825e-4f;
    p = fma(p, f, (float16)1.246737638e-3f);
    p = fma(p, f, (float16)9.675532627e-3f);
    p = fma(p, f, (float16)5.548522016e-2f);
    p = fma(p, f, (float16)2.402293251e-1f);
    p = fma(p, f, (float16)6.931470423e-1f);
    p = fma(p, f, (float16)1.0f);
    const float16 r = p * as_float16((convert_int16(n) + 127) << 23);
    return x < (float16)(-126.0f) ? (float16)0.0f : r;
}
#endif
