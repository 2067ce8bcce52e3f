/* fp32 multiply-add throughput probe: every work-item runs CHAINS independent chains c = fma(c, a, b) of WIDTH-wide
 * vectors for `iters` steps and writes the sum of its lanes, so nothing can be optimized away. With a = 0.999 and
 * b = 0.001 every lane tends to 1, so the benchmark can check the sums. FLOPs: items x iters x CHAINS x WIDTH x 2.
 * The benchmark divides them by the kernel time: the device's own multiply-add ceiling, which compute-bound rows
 * (moe at T = 16) are quoted against, as memory-bound rows are quoted against stream_read.
 *
 *  - XE2: float4 chains per lane (CHAINS x 4 registers per lane), SG-wide sub-groups.
 *  - CPU: float16 chains (one AVX-512 register each); CHAINS covers the FMA latency x pipes of a core.
 */
#include "xe2rt.h"

#if WIDTH == 16
#define VEC float16
#elif WIDTH == 4
#define VEC float4
#else
#error "fma_peak: WIDTH must be 4 or 16"
#endif

#if XE2RT_XE2
XE2RT_REQD_SUB_GROUP_SIZE(SG)
#endif
__kernel void fma_peak(__global float* sums, float a, float b, int iters)
{
    VEC c[CHAINS];
    __attribute__((opencl_unroll_hint))
    for (int j = 0; j < CHAINS; ++j)
        c[j] = (VEC)(0.001f * (float)(get_global_id(0) % 7 + j));
    for (int i = 0; i < iters; ++i) {
        __attribute__((opencl_unroll_hint))
        for (int j = 0; j < CHAINS; ++j)
            c[j] = fma(c[j], a, b);
    }
    VEC s = c[0];
    __attribute__((opencl_unroll_hint))
    for (int j = 1; j < CHAINS; ++j)
        s += c[j];
#if WIDTH == 16
    const float8 s8 = s.lo + s.hi;
    const float4 s4 = s8.lo + s8.hi;
#else
    const float4 s4 = s;
#endif
    sums[get_global_id(0)] = (s4.s0 + s4.s1) + (s4.s2 + s4.s3);
}
