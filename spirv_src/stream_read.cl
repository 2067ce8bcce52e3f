/* Read bandwidth probe: every work-item sums a share of a large buffer and writes one float, so the reads cannot
 * be optimized away. The benchmark divides the buffer size by the kernel time to get the device's own read
 * bandwidth, which every other benchmark row is quoted against.
 *
 *  - XE2: grid-stride over float4s, so the lanes of a sub-group read adjacent 16-byte pieces (coalesced).
 *  - CPU: each work-item reads one contiguous span with float8 loads (hardware prefetchers follow it).
 */
#include "xe2rt.h"

#if XE2RT_XE2
XE2RT_REQD_SUB_GROUP_SIZE(SG)
#endif
__kernel void stream_read(__global const float* data, __global float* sums, long n_floats)
{
    const size_t gid = get_global_id(0);
    const size_t items = get_global_size(0);
#if XE2RT_XE2
    __global const float4* v = (__global const float4*)data;
    const size_t n4 = (size_t)n_floats / 4;
    float4 acc = 0.0f;
    for (size_t i = gid; i < n4; i += items)
        acc += v[i];
    float s = (acc.s0 + acc.s1) + (acc.s2 + acc.s3);
    for (size_t i = n4 * 4 + gid; i < (size_t)n_floats; i += items)
        s += data[i];
#else
    const size_t n8 = (size_t)n_floats / 8;
    const size_t per_item = (n8 + items - 1) / items;
    const size_t begin = min(gid * per_item, n8);
    const size_t end = min(begin + per_item, n8);
    float8 acc0 = 0.0f, acc1 = 0.0f;
    size_t i = begin;
    for (; i + 1 < end; i += 2) {
        acc0 += vload8(i, data);
        acc1 += vload8(i + 1, data);
    }
    if (i < end)
        acc0 += vload8(i, data);
    float8 acc = acc0 + acc1;
    float4 a4 = acc.lo + acc.hi;
    float s = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);
    if (gid == 0)
        for (size_t j = n8 * 8; j < (size_t)n_floats; ++j)
            s += data[j];
#endif
    sums[gid] = s;
}
