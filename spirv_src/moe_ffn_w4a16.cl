/* Fused MoE expert FFN for decode, W4A16: y[t] = sum_j w[t, j] * down_e(silu(gate_e x[t]) * up_e x[t]),
 * e = ids[t, j], for T <= 64 tokens, uint4 expert weights with per-group fp16 scales (optional uint8 zero points).
 *
 * Weights (xe2rt.quant_experts): each expert stack is one QuantizedW4 matrix of stacked rows,
 *   gate_up  [E * 2I, H]  expert e's gate rows at e 2I + i, its up rows at e 2I + I + i
 *   down     [E * H,  I]  expert e's rows at e H + n
 * Layout per matrix as gemv_w4a16.cl: packed uchar [rows, K/2] (low nibble = even k), scales half [rows, K/G], zeros
 * uchar [rows, K/G]. H and I are multiples of 128.
 *
 * Decomposition (four launches, no host readback; pair p = t k + j is the j-th choice of token t):
 *  1. moe_route (one work-item): counting sort of the T k ids by expert. Writes to `meta`: the number of distinct
 *     chosen experts, the number of ids outside [0, E) (those pairs are dropped: they contribute zero), the chosen
 *     experts in increasing order (`active`, one per slot), each slot's range in `pairs`, and `pairs`: pair indices
 *     grouped by expert, increasing within an expert. Deterministic.
 *  2. moe_gate_up: work-groups over (slot, block of I rows); a slot past the number of chosen experts exits at once.
 *     A thread owns RPT gate rows and the RPT matching up rows of its slot's expert and walks the expert's pairs in
 *     chunks of PB: each weight step is loaded and decoded once per chunk and multiplied into the PB tokens' x, so
 *     an expert's weights stream from memory once per call (a further chunk re-reads the thread's few rows from
 *     cache). Writes h[p, i] = silu(gate) * up in fp32 (fp32, not fp16: it is a small workspace, T k I floats, and
 *     an fp16 rounding there would add a 2^-11 relative error to every down input, 16x the rest of the bound).
 *  3. moe_down: the same over (slot, block of H rows) with x = h[p]; writes ypair[p, n] (fp32).
 *  4. moe_combine: y[t, n] = sum_j w[t, j] ypair[t k + j, n] over j in order, skipping ids outside [0, E); one
 *     fp16 rounding. A separate pass keeps the sum deterministic (no atomics across experts).
 *  cpu, T k <= FUSED_PAIRS (fused = 1): no moe_route. gate_up and down take the ids; their groups are the pairs, and
 *     pair p's threads work only when p is the first valid pair naming its expert, gathering that expert's pairs
 *     from the ids themselves (group_pairs); down's work-item 0 writes meta's two counts (fused_head).
 *
 * Xe2 (SG = 16): one sub-group per (RPT rows, slot), SGS sub-groups per work-group; 512 k per uint4 sub-group block
 *   read per row (lane word i = 8 codes k = 8 (i SG + lane) .. + 7), codes to halves 1024 + q by the 0x6400 OR and
 *   bias correction per word (seed 004, as gemv_w4a16); x is loaded per lane (16 bytes), shared by the rows; the
 *   PB x RPT accumulators live in registers; K % 512 is covered word by word per lane. h is stored row-major.
 * cpu: one work-item per (RPT rows, slot); 128 k per step and row as one 64-byte load; codes become 1 + q/256 and
 *   1 + q/16 by one shift per code pair and one mask-OR per code (the gemv_w4a16 wide step); activations are
 *   split into 8 phase vectors (lane i, phase t = x[k0 + 8 i + t]) once per step and pair, shared by the rows.
 *   h is stored in that phase order (index 128 b + 16 t + i), so the down kernel loads its phases directly.
 */
#include "xe2rt.h"

#define INLINE static inline __attribute__((always_inline))
#define SYM_ZERO 8
#define META_ACTIVE 0 /* meta[0] = number of chosen experts, meta[1] = ids outside [0, E) */
#define META_INVALID 1
#define META_HEAD 2
/* meta after the head: active[n_slots], seg[n_slots + 1], pairs[TK], counts[E] (scratch) */

INLINE float silu(float g)
{
    return g / (1.0f + exp(-g));
}

#if XE2RT_XE2
#define SG_ATTR XE2RT_REQD_SUB_GROUP_SIZE(16)
#else
#define SG_ATTR
#endif

SG_ATTR __kernel void moe_route(__global const int* ids, __global int* meta, int TK, int E, int n_slots)
{
    if (get_global_id(0) != 0)
        return;
    __global int* active = meta + META_HEAD;
    __global int* seg = active + n_slots;
    __global int* pairs = seg + n_slots + 1;
    __global int* counts = pairs + TK;
    for (int e = 0; e < E; ++e)
        counts[e] = 0;
    int invalid = 0;
    for (int p = 0; p < TK; ++p) {
        const int e = ids[p];
        if (e >= 0 && e < E)
            counts[e] += 1;
        else
            invalid += 1;
    }
    int n = 0, offset = 0;
    for (int e = 0; e < E; ++e) {
        const int c = counts[e];
        if (c) {
            active[n] = e;
            seg[n] = offset;
            counts[e] = offset; /* from here on: the next free place of expert e in pairs */
            offset += c;
            n += 1;
        }
    }
    for (int s = n; s <= n_slots; ++s)
        seg[s] = offset;
    for (int p = 0; p < TK; ++p) {
        const int e = ids[p];
        if (e >= 0 && e < E) {
            pairs[counts[e]] = p;
            counts[e] += 1;
        }
    }
    meta[META_ACTIVE] = n;
    meta[META_INVALID] = invalid;
}

/* One fp16 rounding of sum_j w[t, j] ypair[t k + j, n] (j in order), 8 columns per work-item. */
#define COMBINE_KERNEL(NAME, WTYPE)                                                                                \
    SG_ATTR __kernel void NAME(__global const WTYPE* weights, __global const int* ids, __global const float* ypair, \
                               __global half* y, int k_top, int E, int H)                                         \
    {                                                                                                              \
        const int per_row = H / 8;                                                                                 \
        const int t = get_global_id(0) / per_row;                                                                  \
        const int c = get_global_id(0) % per_row;                                                                  \
        float8 acc = 0.0f;                                                                                         \
        for (int j = 0; j < k_top; ++j) {                                                                          \
            const int p = t * k_top + j;                                                                           \
            const int e = ids[p];                                                                                  \
            if (e >= 0 && e < E)                                                                                   \
                acc = fma((float8)((float)weights[p]), vload8(c, ypair + (size_t)p * H), acc);                     \
        }                                                                                                          \
        vstore_half8_rte(acc, c, y + (size_t)t * H);                                                               \
    }
COMBINE_KERNEL(moe_combine_wf16, half)
COMBINE_KERNEL(moe_combine_wf32, float)

#define EXPERT_PARAMS __global const half* x, __global const float* act, __global const uchar* packed,            \
                      __global const half* scales, __global const uchar* zeros, __global const int* meta,          \
                      __global float* out, int k_top, int H, int I, int n_slots
#define EXPERT_ARGS x, act, packed, scales, zeros, meta, out, k_top, H, I, n_slots

#if XE2RT_XE2

#if SG != 16
#error "the Xe2 MoE shape is written for SG = 16"
#endif
#define BLOCK_K (SG * 32)

/* The 8 codes of one packed word (nibble t in bits 4t) as floats 1024 + q, in k order (gemv_w4a16.cl's w4_codes). */
INLINE float8 codes8(uint word)
{
    const float2 v04 = convert_float2(as_half2((word & 0x000F000Fu) | 0x64006400u));
    const float2 v15 = convert_float2(as_half2(((word >> 4) & 0x000F000Fu) | 0x64006400u));
    const float2 v26 = convert_float2(as_half2(((word >> 8) & 0x000F000Fu) | 0x64006400u));
    const float2 v37 = convert_float2(as_half2(((word >> 12) & 0x000F000Fu) | 0x64006400u));
    return (float8)(v04.s0, v15.s0, v26.s0, v37.s0, v04.s1, v15.s1, v26.s1, v37.s1);
}

/* 8 activations from k0 on: fp16 x (gate_up) or fp32 h (down). Per-lane 16- / 32-byte loads; x is 4-byte aligned
 * (checked before launch), so a lane's 8 halves are 4 dwords (a 2-byte-aligned load took 4 separate sends). */
INLINE float8 act8(__global const half* xrow, __global const float* hrow, int k0, const int FROM_HALF)
{
    if (FROM_HALF)
        return convert_float8(as_half8(vload4(0, (__global const uint*)(xrow + k0))));
    return vload8(0, hrow + k0);
}

/* Rows [row0, row0 + RPT) of the slot's expert (gate_up: RPT gate rows and the RPT up rows after I, NR = 2 RPT;
 * down: NR = RPT) against PB pairs at a time. */
INLINE void expert_xe2(EXPERT_PARAMS, const int G, const int ZP, const int GATE_UP)
{
    const int NR = GATE_UP ? 2 * RPT : RPT;
    const int n_rows = GATE_UP ? I : H;    /* output rows per expert */
    const int K = GATE_UP ? H : I;         /* reduction length */
    const int act_len = GATE_UP ? H : I;   /* activation row length */
    const int blocks = (n_rows + SGS * RPT - 1) / (SGS * RPT);
    const int slot = get_group_id(0) / blocks;
    if (slot >= meta[META_ACTIVE])
        return;
    __global const int* active = meta + META_HEAD;
    __global const int* seg = active + n_slots;
    __global const int* pairs = seg + n_slots + 1;
    const int expert = active[slot];
    const int lane = get_sub_group_local_id();
    const int row0 = (get_group_id(0) % blocks) * SGS * RPT + get_sub_group_id() * RPT;
    if (row0 >= n_rows)
        return;
    const int groups_per_row = K / G;
    const size_t expert_row0 = (size_t)expert * (GATE_UP ? 2 * I : H);

    __global const uchar* prow[2 * RPT]; /* NR used */
    __global const half* srow[2 * RPT];
    __global const uchar* zrow[2 * RPT];
    __attribute__((opencl_unroll_hint))
    for (int r = 0; r < NR; ++r) {
        const int rr = r % RPT;
        const size_t row = expert_row0 + (r >= RPT ? I : 0) + min(row0 + rr, n_rows - 1);
        prow[r] = packed + row * (K / 2);
        srow[r] = scales + row * groups_per_row;
        zrow[r] = zeros + row * groups_per_row;
    }
    const int chunks = K / BLOCK_K;
    const int tail_k = chunks * BLOCK_K;
    const int p_begin = seg[slot], p_end = seg[slot + 1];

    for (int pc = p_begin; pc < p_end; pc += PB) {
        const int nb = min(PB, p_end - pc); /* pairs in this chunk */
        __global const half* xrow[PB];
        __global const float* hrow[PB];
        __attribute__((opencl_unroll_hint))
        for (int b = 0; b < PB; ++b) {
            const int p = pairs[min(pc + b, p_end - 1)]; /* chunk tail: repeat the last pair, store nothing */
            xrow[b] = x + (size_t)(p / k_top) * act_len;
            hrow[b] = act + (size_t)p * act_len;
        }
        float acc[2 * RPT][PB];
        __attribute__((opencl_unroll_hint))
        for (int r = 0; r < NR; ++r)
            __attribute__((opencl_unroll_hint))
            for (int b = 0; b < PB; ++b)
                acc[r][b] = 0.0f;
        for (int c = 0; c <= chunks; ++c) {
            const bool tail = c == chunks;
            const int kb = c * BLOCK_K;
            /* whole blocks: 4 words per lane by block read; tail: word i of this lane is word (i SG + lane) of the
             * rest of the row, when it exists */
            const int tail_words = (K - tail_k) / 8;
            if (tail && tail_words == 0)
                break;
            uint words[2 * RPT][4];
            __attribute__((opencl_unroll_hint))
            for (int r = 0; r < NR; ++r) {
                if (!tail) {
                    vstore4(intel_sub_group_block_read4((__global const uint*)(prow[r] + kb / 2)), 0, words[r]);
                } else {
                    __attribute__((opencl_unroll_hint))
                    for (int i = 0; i < 4; ++i) {
                        const int w = i * SG + lane;
                        words[r][i] = w < tail_words ? ((__global const uint*)(prow[r] + kb / 2))[w] : 0u;
                    }
                }
            }
            __attribute__((opencl_unroll_hint))
            for (int i = 0; i < 4; ++i) {
                const int w = i * SG + lane;
                const bool live = !tail || w < tail_words;
                const int k0 = live ? kb + 8 * w : 0;
                const int g = k0 / G;
                float8 xf[PB];
                float xs[PB];
                __attribute__((opencl_unroll_hint))
                for (int b = 0; b < PB; ++b) {
                    xf[b] = live && b < nb ? act8(xrow[b], hrow[b], k0, GATE_UP) : (float8)0.0f;
                    const float4 s4 = xf[b].lo + xf[b].hi;
                    xs[b] = (s4.s0 + s4.s1) + (s4.s2 + s4.s3);
                }
                __attribute__((opencl_unroll_hint))
                for (int r = 0; r < NR; ++r) {
                    const float8 v = codes8(words[r][i]);
                    const float bias = 1024.0f + (ZP ? (float)zrow[r][g] : (float)SYM_ZERO);
                    const float s = (float)srow[r][g];
                    __attribute__((opencl_unroll_hint))
                    for (int b = 0; b < PB; ++b) {
                        if (b < nb) { /* uniform across the sub-group: a chunk tail skips the work */
                            const float4 p4 = v.lo * xf[b].lo + v.hi * xf[b].hi;
                            const float dot = fma(-bias, xs[b], (p4.s0 + p4.s1) + (p4.s2 + p4.s3));
                            acc[r][b] = fma(dot, s, acc[r][b]);
                        }
                    }
                }
            }
        }
        __attribute__((opencl_unroll_hint))
        for (int b = 0; b < PB; ++b) {
            const int p = pairs[min(pc + b, p_end - 1)];
            __attribute__((opencl_unroll_hint))
            for (int r = 0; r < RPT; ++r) {
                const float a = sub_group_reduce_add(acc[r][b]);
                if (GATE_UP) {
                    const float u = sub_group_reduce_add(acc[RPT + r][b]);
                    if (lane == 0 && pc + b < p_end && row0 + r < n_rows)
                        out[(size_t)p * I + row0 + r] = silu(a) * u;
                } else if (lane == 0 && pc + b < p_end && row0 + r < n_rows) {
                    out[(size_t)p * H + row0 + r] = a;
                }
            }
        }
    }
}

#define EXPERT_KERNELS(G, ZP, TAG)                                                                                   \
    SG_ATTR __kernel void moe_gate_up_g##G##_##TAG(EXPERT_PARAMS) { expert_xe2(EXPERT_ARGS, G, ZP, 1); }          \
    SG_ATTR __kernel void moe_down_g##G##_##TAG(EXPERT_PARAMS) { expert_xe2(EXPERT_ARGS, G, ZP, 0); }

#else /* CPU shape */

#define STEP 128
/* rows per work-item: gate_up RPT rows of I (2 RPT weight rows), down DOWN_RPT rows of H */
#ifndef DOWN_RPT
#define DOWN_RPT (2 * RPT)
#endif
#define MAX_NR (2 * RPT > DOWN_RPT ? 2 * RPT : DOWN_RPT)
#if RPT % 8
#error "the cpu gate_up epilogue takes the thread's RPT gate rows 8 at a time"
#endif
#include "w4_cpu.h"

/* Index of element i of a row in the phase order h is stored in. */
INLINE int phase_index(int i)
{
    const int w = i % STEP;
    return i - w + (w % 8) * 16 + w / 8;
}

/* One 128-k step of one row: load and decode its 64 bytes once, multiply into NB pairs' phases, accumulate. */
INLINE void row_step_into(__global const uchar* prow, __global const half* srow, __global const uchar* zrow, int k0,
                          int gs, float16 (*X)[8], const float16* base, const float16* neg_xs, float16* acc,
                          const int NB, const int G, const int ZP)
{
    const uint16 w = vload16(0, (__global const uint*)(prow + k0 / 2));
    float16 c[8];
    for (int t = 0; t < 8; t += 2) {
        const uint16 v = PAIR_SHIFT(w, t);
        c[t] = AS_CODE(v, 0x00078000u);
        c[t + 1] = AS_CODE(v, 0x00780000u);
    }
    const float16 scale = lanes_half(srow, gs, G);
    const float16 zero = ZP ? lanes_uchar(zrow, gs, G) : (float16)0.0f;
    for (int b = 0; b < NB; ++b) {
        float16 d_even = c[0] * X[b][0], d_odd = c[1] * X[b][1];
        for (int t = 2; t < 8; t += 2) {
            d_even = fma(c[t], X[b][t], d_even);
            d_odd = fma(c[t + 1], X[b][t + 1], d_odd);
        }
        float16 u = (d_even + d_odd) - base[b];
        if (ZP)
            u = fma(zero, neg_xs[b], u);
        acc[b] = fma(u, scale, acc[b]);
    }
}

/* The thread's NR rows against NB pairs (pair[0 .. NB)) over the whole K: each 128-k step of a row is loaded and
 * decoded once and multiplied into the NB activations. NB is a compile-time 1 or PB, so every loop unrolls and the
 * accumulators and activation phases have constant indices. */
INLINE void rows_x_pairs(__global const half* x, __global const float* act, __global const uchar* const* prow,
                         __global const half* const* srow, __global const uchar* const* zrow, const int* pair,
                         int k_top, int K, int act_len, float* result, const int G, const int ZP, const int GATE_UP,
                         const int NB)
{
    const int NR = GATE_UP ? 2 * RPT : DOWN_RPT;
    const int groups_per_step = STEP / G;
    float16 acc[MAX_NR][PB];
    for (int r = 0; r < NR; ++r)
        for (int b = 0; b < NB; ++b)
            acc[r][b] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += STEP) {
        const int gs = k0 / STEP * groups_per_step;
        /* Even phases scaled by 256 and odd by 16 (exact) meet codes 1 + q/256 and 1 + q/16 as (256 + q) x and
         * (16 + q) x; sum_t (q - z) x = d - 256 xs_even - 16 xs_odd - z xs. */
        float16 X[PB][8], base[PB], neg_xs[PB];
        for (int b = 0; b < NB; ++b) {
            if (GATE_UP) {
                x_phases(x + (size_t)(pair[b] / k_top) * act_len, k0, X[b]);
            } else {
                for (int t = 0; t < 8; ++t)
                    X[b][t] = vload16(0, act + (size_t)pair[b] * act_len + k0 + 16 * t);
            }
            const float16 xs_even = (X[b][0] + X[b][2]) + (X[b][4] + X[b][6]);
            const float16 xs_odd = (X[b][1] + X[b][3]) + (X[b][5] + X[b][7]);
            neg_xs[b] = -(xs_even + xs_odd);
            base[b] = ZP ? fma(xs_even, 256.0f, 16.0f * xs_odd) : fma(xs_even, 264.0f, 24.0f * xs_odd);
            for (int t = 0; t < 8; t += 2) {
                X[b][t] *= 256.0f;
                X[b][t + 1] *= 16.0f;
            }
        }
        /* one pair: rows unrolled (independent fma chains, as gemv_w4a16's cpu path); PB pairs: the pair loop gives
         * the independent chains, and unrolling both would multiply the code (and the JIT time) by NR */
        if (NB == 1) {
            __attribute__((opencl_unroll_hint(MAX_NR)))
            for (int r = 0; r < NR; ++r)
                row_step_into(prow[r], srow[r], zrow[r], k0, gs, X, base, neg_xs, acc[r], 1, G, ZP);
        } else {
            for (int r = 0; r < NR; ++r)
                row_step_into(prow[r], srow[r], zrow[r], k0, gs, X, base, neg_xs, acc[r], NB, G, ZP);
        }
    }
    for (int r = 0; r < NR; ++r)
        for (int b = 0; b < NB; ++b)
            result[b * MAX_NR + r] = hsum16(acc[r][b]);
}

/* Whether pair p is the first to name its expert (fused path: that pair leads the expert's group). */
INLINE int leads_group(__global const int* ids, int p)
{
    for (int q = 0; q < p; ++q)
        if (ids[q] == ids[p])
            return 0;
    return 1;
}

/* One group of pairs: the pairs that chose one expert. With the route kernel's meta (fused = 0), group s is the s-th
 * chosen expert in increasing order and its pairs stay in meta (*from). Without a route launch (fused = 1, T k <=
 * FUSED_PAIRS), group p is pair p when p is the first valid pair naming its expert, and its pairs (every pair naming
 * that expert, in increasing p) are gathered into grp. Returns the expert, or -1 for an empty group. */
INLINE int group_pairs(__global const int* meta, __global const int* ids, int group, int TK, int E, int n_slots,
                       int fused, int* grp, __global const int** from, int* count)
{
    if (!fused) {
        if (group >= meta[META_ACTIVE])
            return -1;
        __global const int* active = meta + META_HEAD;
        __global const int* seg = active + n_slots;
        *from = seg + n_slots + 1 + seg[group];
        *count = seg[group + 1] - seg[group];
        return active[group];
    }
    const int e = ids[group];
    if (e < 0 || e >= E || !leads_group(ids, group))
        return -1; /* an earlier pair leads this expert's group */
    int n = 0;
    for (int q = group; q < TK; ++q)
        if (ids[q] == e)
            grp[n++] = q;
    *count = n;
    return e;
}

#define GROUP_PAIR(i) (fused ? grp[i] : from[i])

/* Counts of a fused launch (no route kernel) for meta's head: chosen experts and ids outside [0, E). */
INLINE void fused_head(__global int* meta, __global const int* ids, int TK, int E)
{
    int invalid = 0, leaders = 0;
    for (int p = 0; p < TK; ++p) {
        const int e = ids[p];
        if (e < 0 || e >= E)
            invalid += 1;
        else
            leaders += leads_group(ids, p);
    }
    meta[META_ACTIVE] = leaders;
    meta[META_INVALID] = invalid;
}

/* A work-item per (RPT rows of I (gate_up: 2 RPT weight rows), or DOWN_RPT rows of H, group). gate_up writes
 * h[p, :] = silu(gate) * up (phase order), down ypair[p, :]; down's work-item 0 also writes meta's head when there
 * was no route launch. */
INLINE void expert_cpu(__global const half* x, __global const float* act, __global const uchar* packed,
                       __global const half* scales, __global const uchar* zeros, __global int* meta,
                       __global const int* ids, __global float* out, int k_top, int H, int I, int n_slots, int TK,
                       int E, int fused, const int G, const int ZP, const int GATE_UP)
{
    const int rpt = GATE_UP ? RPT : DOWN_RPT; /* output rows per work-item */
    const int NR = GATE_UP ? 2 * RPT : DOWN_RPT;
    const int n_rows = GATE_UP ? I : H;
    const int K = GATE_UP ? H : I;
    if (!GATE_UP && fused && get_global_id(0) == 0)
        fused_head(meta, ids, TK, E);
    const int wg_items = get_local_size(0);
    const int blocks = (n_rows + wg_items * rpt - 1) / (wg_items * rpt);
    int grp[FUSED_PAIRS], count = 0;
    __global const int* from = meta;
    const int expert = group_pairs(meta, ids, get_group_id(0) / blocks, TK, E, n_slots, fused, grp, &from, &count);
    if (expert < 0)
        return;
    /* Rows dealt out strided within the group (thread j: rows j, j + W, j + 2W, ..., W threads per group), so threads
     * that run one after the other on a core continue each other's row streams (what gemv_w4a16's cpu path found
     * pays for short rows; a down row here is I / 2 bytes, 384 for Qwen3-30B-A3B). A work-item that owned rows of
     * every group instead (down with the combine folded in) ran 1.6x slower at Qwen3-30B-A3B T = 1: its streams
     * broke at every expert. */
    const int n_items = (n_rows + rpt - 1) / rpt;
    const int item = (get_group_id(0) % blocks) * wg_items + get_local_id(0);
    if (item >= n_items)
        return;
    const int groups_per_row = K / G;
    const size_t expert_row0 = (size_t)expert * (GATE_UP ? 2 * I : H);
    __global const uchar* prow[MAX_NR]; /* NR used */
    __global const half* srow[MAX_NR];
    __global const uchar* zrow[MAX_NR];
    for (int r = 0; r < NR; ++r) {
        const size_t row = expert_row0 + (GATE_UP && r >= RPT ? I : 0) + min(item + (r % rpt) * n_items, n_rows - 1);
        prow[r] = packed + row * (K / 2);
        srow[r] = scales + row * groups_per_row;
        zrow[r] = zeros + row * groups_per_row;
    }
    float result[MAX_NR * PB];
    int pair[PB];
    for (int i = 0; i < count;) {
        /* PB pairs per pass while that many are left, then one at a time (a pass re-reads the rows from cache) */
        const int nb = count - i >= PB ? PB : 1;
        for (int b = 0; b < nb; ++b)
            pair[b] = GROUP_PAIR(i + b);
        if (nb == PB)
            rows_x_pairs(x, act, prow, srow, zrow, pair, k_top, K, K, result, G, ZP, GATE_UP, PB);
        else
            rows_x_pairs(x, act, prow, srow, zrow, pair, k_top, K, K, result, G, ZP, GATE_UP, 1);
        for (int b = 0; b < nb; ++b) {
            const float* res = result + b * MAX_NR;
            if (GATE_UP) {
                /* silu of the thread's RPT gate rows as vectors (one vector exp per 8 rows, not 8 scalar calls) */
                for (int r0 = 0; r0 < RPT; r0 += 8) {
                    const float8 g = vload8(0, res + r0);
                    const float8 hv = g / (1.0f + exp(-g)) * vload8(0, res + RPT + r0);
                    for (int r = 0; r < 8; ++r) {
                        const int row = item + (r0 + r) * n_items;
                        if (row < n_rows)
                            out[(size_t)pair[b] * I + phase_index(row)] = hv[r];
                    }
                }
            } else {
                for (int r = 0; r < rpt; ++r) {
                    const int row = item + r * n_items;
                    if (row < n_rows)
                        out[(size_t)pair[b] * H + row] = res[r];
                }
            }
        }
        i += nb;
    }
}

#define CPU_EXPERT_PARAMS __global const half* x, __global const float* act, __global const uchar* packed,           \
                          __global const half* scales, __global const uchar* zeros, __global int* meta,               \
                          __global const int* ids, __global float* out, int k_top, int H, int I, int n_slots, int TK, \
                          int E, int fused
#define CPU_EXPERT_ARGS x, act, packed, scales, zeros, meta, ids, out, k_top, H, I, n_slots, TK, E, fused

#define EXPERT_KERNELS(G, ZP, TAG)                                                                                   \
    __kernel void moe_gate_up_g##G##_##TAG(CPU_EXPERT_PARAMS) { expert_cpu(CPU_EXPERT_ARGS, G, ZP, 1); }          \
    __kernel void moe_down_g##G##_##TAG(CPU_EXPERT_PARAMS) { expert_cpu(CPU_EXPERT_ARGS, G, ZP, 0); }

#endif

EXPERT_KERNELS(32, 0, sym)
EXPERT_KERNELS(64, 0, sym)
EXPERT_KERNELS(128, 0, sym)
EXPERT_KERNELS(32, 1, zp)
EXPERT_KERNELS(64, 1, zp)
EXPERT_KERNELS(128, 1, zp)
