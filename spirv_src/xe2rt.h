/* Shared declarations for every xe2rt kernel.
 *
 * Build macros (set per target by build_scripts/build_spirv.py from spirv_src/<family>.toml):
 *   XE2RT_TARGET_BMG / XE2RT_TARGET_LNL / XE2RT_TARGET_CPU   exactly one is 1
 *   XE2RT_XE2        1 for bmg and lnl: sub-group-per-row shapes, block reads, DPAS
 *
 * Intel built-ins are declared here rather than taken from a vendor header: declared `overloadable`, clang gives
 * them the Itanium-mangled names that both Intel's CPU runtime and Intel's GPU compiler (IGC) resolve.
 */
#ifndef XE2RT_H
#define XE2RT_H

#pragma OPENCL EXTENSION cl_khr_fp16 : enable

#ifndef XE2RT_TARGET_BMG
#define XE2RT_TARGET_BMG 0
#endif
#ifndef XE2RT_TARGET_LNL
#define XE2RT_TARGET_LNL 0
#endif
#ifndef XE2RT_TARGET_CPU
#define XE2RT_TARGET_CPU 0
#endif
#define XE2RT_XE2 (XE2RT_TARGET_BMG || XE2RT_TARGET_LNL)

#define XE2RT_OVERLOAD __attribute__((overloadable))
#define XE2RT_REQD_SUB_GROUP_SIZE(n) __attribute__((intel_reqd_sub_group_size(n)))

/* cl_intel_subgroups: sub-group block reads. Element i of the vector a lane receives is p[i * SG + lane]. */
XE2RT_OVERLOAD uint  intel_sub_group_block_read(const __global uint* p);
XE2RT_OVERLOAD uint2 intel_sub_group_block_read2(const __global uint* p);
XE2RT_OVERLOAD uint4 intel_sub_group_block_read4(const __global uint* p);
XE2RT_OVERLOAD uint8 intel_sub_group_block_read8(const __global uint* p);

/* cl_intel_subgroups_short */
XE2RT_OVERLOAD ushort  intel_sub_group_block_read_us(const __global ushort* p);
XE2RT_OVERLOAD ushort2 intel_sub_group_block_read_us2(const __global ushort* p);
XE2RT_OVERLOAD ushort4 intel_sub_group_block_read_us4(const __global ushort* p);
XE2RT_OVERLOAD ushort8 intel_sub_group_block_read_us8(const __global ushort* p);

/* cl_intel_subgroups_char */
XE2RT_OVERLOAD uchar   intel_sub_group_block_read_uc(const __global uchar* p);
XE2RT_OVERLOAD uchar2  intel_sub_group_block_read_uc2(const __global uchar* p);
XE2RT_OVERLOAD uchar4  intel_sub_group_block_read_uc4(const __global uchar* p);
XE2RT_OVERLOAD uchar8  intel_sub_group_block_read_uc8(const __global uchar* p);
XE2RT_OVERLOAD uchar16 intel_sub_group_block_read_uc16(const __global uchar* p);

/* cl_intel_subgroups shuffles (generic OpenCL has sub_group_broadcast only with a uniform lane). */
XE2RT_OVERLOAD float intel_sub_group_shuffle(float x, uint lane);
XE2RT_OVERLOAD int   intel_sub_group_shuffle(int x, uint lane);
XE2RT_OVERLOAD short intel_sub_group_shuffle(short x, uint lane);
XE2RT_OVERLOAD uint  intel_sub_group_shuffle(uint x, uint lane);
XE2RT_OVERLOAD ushort intel_sub_group_shuffle(ushort x, uint lane);
XE2RT_OVERLOAD float intel_sub_group_shuffle_xor(float x, uint mask);

/* cl_intel_subgroup_matrix_multiply_accumulate (Xe2: SIMD16, fp16 x fp16 -> fp32, K = 16 per call). */
XE2RT_OVERLOAD float8 intel_sub_group_f16_f16_matrix_mad_k16(short8 a, int8 b, float8 acc);
XE2RT_OVERLOAD float  intel_sub_group_f16_f16_matrix_mad_k16(short  a, int8 b, float  acc);
XE2RT_OVERLOAD float2 intel_sub_group_f16_f16_matrix_mad_k16(short2 a, int8 b, float2 acc);
XE2RT_OVERLOAD float4 intel_sub_group_f16_f16_matrix_mad_k16(short4 a, int8 b, float4 acc);

/* Seed 000's K split: slice `slice` of `k_split` owns the contiguous units [begin, end) of `count` (empty past the
 * end). Returned as (begin, end). */
static inline int2 xe2rt_slice_range(int count, int slice, int k_split)
{
    const int per_slice = (count + k_split - 1) / k_split;
    const int begin = min(slice * per_slice, count);
    return (int2)(begin, min(begin + per_slice, count));
}

/* After the barrier: the sum of one row's k_split partial sums, stored at partial[row * k_split + slice]. */
static inline float xe2rt_sum_slices(__local const float* partial, int row, int k_split)
{
    float total = 0.0f;
    for (int s = 0; s < k_split; ++s)
        total += partial[row * k_split + s];
    return total;
}

#if XE2RT_XE2
/* The end of the Xe2 batched GEMVs: each of the BR x MB accumulators (row r of the sub-group's rows, x row m) summed
 * across the sub-group into partial[(m * rows + item_row + r) * k_split + slice]; after the barrier the slice-0
 * sub-group adds the K slices and stores y[m][row0 + r] for m < M and row0 + r < N, times scales[row0 + r] when
 * scales is given (W8A16's per-row scale). Always inlined with constant BR and MB, so acc stays in registers. */
static inline __attribute__((always_inline)) void xe2rt_batch_reduce_store(
    const float* acc, const int BR, const int MB, __local float* partial, int rows, int item_row, int k_split,
    int slice, int lane, int row0, int M, int N, __global half* y, __global const half* scales)
{
    for (int r = 0; r < BR; ++r)
        for (int m = 0; m < MB; ++m) {
            const float total = sub_group_reduce_add(acc[r * MB + m]);
            if (lane == 0)
                partial[(m * rows + item_row + r) * k_split + slice] = total;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice == 0 && lane == 0)
        for (int r = 0; r < BR; ++r)
            for (int m = 0; m < MB; ++m)
                if (m < M && row0 + r < N) {
                    const float total = xe2rt_sum_slices(partial, m * rows + item_row + r, k_split);
                    y[(size_t)m * N + row0 + r] = convert_half(scales ? total * (float)scales[row0 + r] : total);
                }
}
#endif

/* True when p is aligned for sub-group block reads (IGC's OWord block messages want 16 bytes). */
#define XE2RT_BLOCK_ALIGNED(p) ((((ulong)(p)) & 15UL) == 0)

/* Integer butterfly shuffles (softmax_topk's segment arg-max). */
XE2RT_OVERLOAD int  intel_sub_group_shuffle_xor(int x, uint mask);
XE2RT_OVERLOAD uint intel_sub_group_shuffle_xor(uint x, uint mask);

/* cl_intel_subgroup_2d_block_io (Xe2, sub-group 16). The explicit __private destination gives the mangled names IGC
 * resolves (TOOLCHAIN.md 4). Only the shapes xe2rt uses; spirv_src/block2d.h holds the rules, the per-lane layout and
 * the software versions the CPU device runs. */
#define XE2RT_2D_READ(NAME, T) \
    XE2RT_OVERLOAD void NAME(__global void* base, int width, int height, int pitch, int2 coord, __private T* dst);
#define XE2RT_2D_PREFETCH(NAME) \
    XE2RT_OVERLOAD void NAME(__global void* base, int width, int height, int pitch, int2 coord);
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_32r16x1c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_8r16x2c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_16r16x2c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_16b_32r16x2c, ushort)
XE2RT_2D_READ(intel_sub_group_2d_block_read_transform_16b_16r16x2c, uint)
XE2RT_2D_READ(intel_sub_group_2d_block_read_transform_16b_32r16x2c, uint)
XE2RT_2D_READ(intel_sub_group_2d_block_read_transpose_32b_16r8x1c, uint)
XE2RT_2D_PREFETCH(intel_sub_group_2d_block_prefetch_16b_8r16x2c)
XE2RT_2D_PREFETCH(intel_sub_group_2d_block_prefetch_16b_16r16x2c)
XE2RT_2D_PREFETCH(intel_sub_group_2d_block_prefetch_16b_32r16x2c)

#endif
