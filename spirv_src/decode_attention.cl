/* Decode attention (flash-decoding): one new token's Hq query heads against a KV cache of `length` tokens.
 *
 * q [Hq, D] fp16, k_cache / v_cache [Hkv, max_tokens, D] fp16 (token t of kv head h at [h, t, :]), G = Hq / Hkv query
 * heads per kv head (query head hq reads kv head hq / G), D 64 or 128. fp32 math: scores s = (q . k) * scale,
 * softmax over [0, length), out = sum_t p_t v_t, one fp16 rounding.
 *
 * Split-K over the context. Split `split` of S owns tokens [split * chunk, (split + 1) * chunk) clipped to `length`
 * (chunk a whole number of tokens; a split past the end is empty). One work-group per (kv head, split) handles ALL G
 * query heads of its kv head, so every K and V row is read from memory once per call. Tokens are taken BT = 16 at a
 * time: scores of the block for each head, the block's max, rescale of the running state, then P V. Each split
 * writes its unnormalized partial (o [Hq, D], running max m and sum l, fp32) to the workspace
 *   ws[(split * Hq + hq) * D + d]             partial output
 *   ws[S * Hq * D + (split * Hq + hq) * 2]    m (log2 domain: q carries scale * log2(e), so exp2 is the exponential)
 *   ws[... + 1]                               l
 * and decode_attention_reduce_d<D> merges the S partials per head: M = max m_s, w_s = exp2(m_s - M),
 * out = sum w_s o_s / sum w_s l_s. With S == 1 (`direct`) the split kernel normalizes and writes out itself and no
 * reduce is launched. An empty split leaves m = -inf, l = 0, o = 0, which the reduce weights by exp2(-inf) = 0.
 *
 * Xe2 (bmg, lnl): D across the 16 lanes of a sub-group (lane i holds elements i + 16 j, the block-read layout);
 *   GH query heads per sub-group, ceil(G / GH) sub-groups per work-group (they stream the same rows: one memory
 *   read, the other sub-groups hit the Xe core's L1). Per block: 16 K rows by sub-group block reads, GH x 16
 *   per-lane partial dots, one transposing butterfly per head (15 shuffles for 16 tokens instead of 16 reductions)
 *   that leaves token t's score in lane t; then per V row one block read and an fma per head with the token's
 *   probability broadcast from its lane.
 * cpu: one work-item per (kv head, split) streams its rows (TOOLCHAIN.md 6), its G heads taken 4 (then 2, then 1)
 *   at a time so that every fp16 row is converted to fp32 (vload_half16) once per group of heads, into registers, and
 *   used by all of them there: no fp32 copy of the block goes through memory. Per block: Q K^T per head group, each
 *   K row's dot with each head as float16 fmas, two tokens per q read (q as memory operands), reduced 4 tokens at a
 *   time and then across the 16 by in-lane and 128-bit-lane shuffles into one float16 of 16 scores; per head the
 *   online softmax with an inline exp2 (a library call would reload every live vector), the probabilities to a small
 *   array; then P V per head group, each V row converted 4 vectors at a time and fma'd into 4 accumulators per head.
 * cpu, 16 ymm registers (CPU256 = 1, PV_VECS = 1: variant decode_attention_cpu256, taken on hosts without AVX-512):
 *   the same decomposition with Q K^T in float8 pieces (two tokens x the group's heads as float8 accumulators, the
 *   16 partial dots reduced by unpack / add shuffles, token_sums8) and P V one float16 of the V row per pass (4 heads
 *   x 2 ymm accumulators, the token loop unrolled PV_UNROLL times), so that neither spills on AVX2's 16
 *   registers. For G a multiple of 8 it has kernels of their own (decode_attention_g8_d<D>, at_g8): Q K^T for 8
 *   heads per pass from the fp16 cache (scores8_d) and the online softmax with the 8 heads in the lanes.
 */
#include "xe2rt.h"

#ifndef PV_VECS
#define PV_VECS 4 /* float16 vectors of each V row per P V pass (4 ch accumulators each) */
#endif
#ifndef PV_UNROLL
#define PV_UNROLL 1 /* P V's token loop unrolled this many times (1: left to the compiler) */
#endif
#define PV_PRAGMA_(x) _Pragma(#x)
#define PV_PRAGMA(n) PV_PRAGMA_(unroll n)
#if PV_UNROLL > 1
#define PV_TOKEN_UNROLL PV_PRAGMA(PV_UNROLL)
#else
#define PV_TOKEN_UNROLL
#endif
#ifndef CPU256
#define CPU256 0 /* the cpu kernels shaped for 16 ymm registers (decode_attention_body.h) */
#endif

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("unroll")
#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)

#define SPLIT_PARAMS __global const half* q, __global const half* k_cache, __global const half* v_cache, \
                     __global float* ws, __global half* out, int G, int Hq, int S, int max_tokens, int length, \
                     int chunk, float qscale, int direct
#define SPLIT_ARGS q, k_cache, v_cache, ws, out, G, Hq, S, max_tokens, length, chunk, qscale, direct
#define REDUCE_PARAMS __global const float* ws, __global half* out, int Hq, int S
/* decode_attention_at_d<D>: the length is length_at[0] when the kernel runs (so one bound launch serves every decode
 * step), clamped to [1, max_length]; the chunk follows from it as the Python split rule computes it from an int. */
#define SPLIT_AT_PARAMS __global const half* q, __global const half* k_cache, __global const half* v_cache, \
                        __global float* ws, __global half* out, int G, int Hq, int S, int max_tokens, \
                        __global const int* length_at, int max_length, float qscale, int direct
#define SPLIT_AT_LENGTH \
    const int length = clamp(length_at[0], 1, max_length); \
    const int chunk = ((length + S - 1) / S + BT - 1) / BT * BT

#if XE2RT_XE2
/* One step of the transposing butterfly that turns 16 per-lane partial dots (one per token) into 16 scores, token t's
 * in lane t: `lower` and `upper` are the partial sums of two token groups that differ in index bit w; lanes with bit
 * w set keep the upper group and send the lower one to their partner lane (lane ^ w), the others the reverse. After
 * the steps w = 8, 4, 2, 1 every lane holds the sum over all 16 lanes of its own token's products. */
INLINE float xe2_combine(float lower, float upper, const int w, const int lane)
{
    const bool upper_lane = (lane & w) != 0;
    const float keep = upper_lane ? upper : lower;
    const float give = upper_lane ? lower : upper;
    return keep + intel_sub_group_shuffle_xor(give, (uint)w);
}
#endif

#define D 64
#include "decode_attention_body.h"
#undef D
#define D 128
#include "decode_attention_body.h"
#undef D
