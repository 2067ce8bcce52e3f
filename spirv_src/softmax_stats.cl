/* Softmax statistics per row at a temperature: the vocabulary pass of LLM sampling (xe2rt.models.llm), one launch
 * instead of a chain of array operations. For each row of x [rows, n] (float16 or float32), in fp32:
 *   m = the row maximum,
 *   s = sum_j e_j with e_j = 1 where x_j == m, else exp((x_j - m) / t).
 * The x_j == m rule is softmax_topk's (softmax_topk.cl): an all -inf row gives (-inf, n), a row holding +inf
 * (m = +inf) counts its +inf entries and nothing else (exp(-inf) = 0), and a NaN anywhere makes both m and s NaN.
 * Rows combine exactly: the mass of row r against a maximum M over all rows is s_r exp((m_r - M) / t), and the
 * probability of x_j in row r is e_j exp((m_r - M) / t) / sum_r' (that of r'). The host passes scale = log2(e) / t
 * (rounded once; t from float32's smallest normal to 2^120, so scale is finite, and a float32 row spanning more than
 * float32's range, where x - m overflows to -inf, stands only for terms that underflow anyway) and e_j is computed
 * as 2^((x_j - m) scale).
 * out [rows, 2] float32: (m, s) per row. One read of the row for m and a second one (from cache) for s.
 *
 * Kernels: softmax_stats_f16, softmax_stats_f32 (x's dtype). Two code shapes (TOOLCHAIN.md 6):
 *  - XE2: a 16-lane sub-group per row, SGS sub-groups per work-group; lane l takes elements 16 c + l, as one
 *    8-chunk sub-group block read per 128 elements where the row is 16-byte aligned and n % 128 == 0 (every row
 *    start then as aligned as x), element by element otherwise; sub_group_reduce_max / _add; e_j by the built-in
 *    exp2 of (x - m) scale (a multiply: a division per element took 294 instructions per 128 elements).
 *  - CPU: a work-item per row, LOCAL per work-group; 16-wide vectors along the row, then the tail one element at a
 *    time; exp written out as exp2_nonpos((x - m) scale) (exp2_cpu.h: the runtime's exp is a call per
 *    element). Compare-and-select maxima: a NaN input makes s NaN (exp2_nonpos passes it), and m is then set to NaN.
 */
#include "xe2rt.h"

#define INLINE static inline __attribute__((always_inline))

#if XE2RT_XE2

#define SG 16

XE2RT_OVERLOAD static inline float8 load8(__global const half* p)
{
    return convert_float8(as_half8(intel_sub_group_block_read_us8((__global const ushort*)p)));
}

XE2RT_OVERLOAD static inline float8 load8(__global const float* p)
{
    return as_float8(intel_sub_group_block_read8((__global const uint*)p));
}

INLINE float e_of(float x, float m, float scale)
{
    return x == m ? 1.0f : exp2((x - m) * scale);
}

INLINE float e_sum8(float8 v, float m, float scale)
{
    return ((e_of(v.s0, m, scale) + e_of(v.s1, m, scale)) + (e_of(v.s2, m, scale) + e_of(v.s3, m, scale))) +
           ((e_of(v.s4, m, scale) + e_of(v.s5, m, scale)) + (e_of(v.s6, m, scale) + e_of(v.s7, m, scale)));
}

#define STATS_XE2(T, TN)                                                                                           \
    XE2RT_REQD_SUB_GROUP_SIZE(SG)                                                                                  \
    __kernel void softmax_stats_##TN(__global const T* x, __global float* out, long rows, int n, float scale)      \
    {                                                                                                              \
        const long row = (long)get_group_id(0) * get_num_sub_groups() + get_sub_group_id();                       \
        if (row >= rows)                                                                                           \
            return; /* the whole sub-group: row is uniform */                                                      \
        const int lane = get_sub_group_local_id();                                                                 \
        __global const T* xr = x + row * (long)n;                                                                  \
        const bool blocks = n % 128 == 0 && XE2RT_BLOCK_ALIGNED(x);                                                \
        float m = -INFINITY;                                                                                       \
        if (blocks) {                                                                                              \
            for (int c = 0; c < n; c += 128) {                                                                     \
                const float8 v = load8(xr + c);                                                                    \
                const float4 a = fmax(v.lo, v.hi);                                                                 \
                m = fmax(m, fmax(fmax(a.s0, a.s1), fmax(a.s2, a.s3)));                                             \
            }                                                                                                      \
        } else {                                                                                                   \
            for (int i = lane; i < n; i += SG)                                                                     \
                m = fmax(m, (float)xr[i]);                                                                         \
        }                                                                                                          \
        m = sub_group_reduce_max(m);                                                                               \
        float s = 0.0f;                                                                                            \
        if (blocks) {                                                                                              \
            for (int c = 0; c < n; c += 128) {                                                                     \
                s += e_sum8(load8(xr + c), m, scale);                                                              \
            }                                                                                                      \
        } else {                                                                                                   \
            for (int i = lane; i < n; i += SG)                                                                     \
                s += e_of((float)xr[i], m, scale);                                                                 \
        }                                                                                                          \
        s = sub_group_reduce_add(s);                                                                               \
        if (lane == 0) {                                                                                           \
            out[2 * row] = isnan(s) ? NAN : m;                                                                     \
            out[2 * row + 1] = s;                                                                                  \
        }                                                                                                          \
    }

STATS_XE2(half, f16)
STATS_XE2(float, f32)

#else /* CPU shape */

#include "exp2_cpu.h"

INLINE float16 load16(int o, __global const half* p) { return vload_half16(o, p); }
INLINE float16 load16_f(int o, __global const float* p) { return vload16(o, p); }

#define STATS_CPU(T, TN, LOAD16)                                                                                   \
    __kernel void softmax_stats_##TN(__global const T* x, __global float* out, long rows, int n, float scale)      \
    {                                                                                                              \
        const long row = get_global_id(0);                                                                         \
        if (row >= rows)                                                                                           \
            return;                                                                                                \
        __global const T* xr = x + row * (long)n;                                                                  \
        const int steps = n / 16;                                                                                  \
        float16 mv = -INFINITY;                                                                                    \
        for (int o = 0; o < steps; ++o) {                                                                          \
            const float16 v = LOAD16(o, xr);                                                                       \
            mv = v > mv ? v : mv;                                                                                  \
        }                                                                                                          \
        const float8 m8 = mv.lo > mv.hi ? mv.lo : mv.hi;                                                           \
        const float4 m4 = m8.lo > m8.hi ? m8.lo : m8.hi;                                                           \
        const float2 m2 = m4.lo > m4.hi ? m4.lo : m4.hi;                                                           \
        float m = m2.s0 > m2.s1 ? m2.s0 : m2.s1;                                                                   \
        for (int i = steps * 16; i < n; ++i)                                                                       \
            m = (float)xr[i] > m ? (float)xr[i] : m;                                                               \
        float16 sv = 0.0f;                                                                                         \
        for (int o = 0; o < steps; ++o) {                                                                          \
            const float16 v = LOAD16(o, xr);                                                                       \
            sv += v == (float16)m ? (float16)1.0f : exp2_nonpos((v - m) * scale);                                  \
        }                                                                                                          \
        const float8 s8 = sv.lo + sv.hi;                                                                           \
        const float4 s4 = s8.lo + s8.hi;                                                                           \
        float s = (s4.s0 + s4.s1) + (s4.s2 + s4.s3);                                                               \
        for (int i = steps * 16; i < n; ++i) {                                                                     \
            const float v = (float)xr[i];                                                                          \
            s += v == m ? 1.0f : exp2_nonpos((float16)((v - m) * scale)).s0;                                       \
        }                                                                                                          \
        out[2 * row] = isnan(s) ? NAN : m;                                                                         \
        out[2 * row + 1] = s;                                                                                      \
    }

STATS_CPU(half, f16, load16)
STATS_CPU(float, f32, load16_f)

#endif
