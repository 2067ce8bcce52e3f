/* MoE routing (seed 003): per row of logits [rows, n], the top-k entries (value descending, lower index first on
 * ties), optionally turned into softmax probabilities and renormalized over the k kept. One load of the row, one
 * store of k values + k indices.
 *
 * Selection works on the logits, not on the probabilities: exp is monotonic, so the top-k of softmax(x) is the top-k
 * of x, and ranking exact inputs keeps ties exact (a probability rounded to fp16 first would create new ties).
 * Each logit becomes an order-preserving int key (NaN above +Inf, -0 == +0), so one signed compare orders
 * everything, including NaN, and no sentinel collides with a real key (INT_MIN is a NaN bit pattern, and every NaN
 * maps to INT_MAX).
 *
 * Softmax numerics: m = the row maximum (the top-1 key), e_i = 1 where x_i == m, else exp(x_i - m), in fp32.
 * The x_i == m case gives the usual limits where the max-subtracted form is inf - inf = NaN: a row with +Inf puts
 * all mass equally on its +Inf entries, an all -Inf row is uniform. A NaN anywhere makes every probability NaN.
 * normalize: p_i / sum_kept p_j = e_i / sum_kept e_j, so only the full-row sum of the unnormalized softmax is ever
 * needed for mode SOFTMAX; it is always >= 1 (the max entry contributes 1), so no division by zero exists.
 *
 * mode: 0 = top-k of the inputs (values returned exactly as stored), 1 = softmax probabilities, 2 = softmax
 * renormalized over the kept k.
 *
 * Kernels: one per (dtype, N, K) compile-time variant from ROUTING_VARIANTS (N, K unrolled; their n and k arguments
 * must equal N and K) and a generic one per dtype (runtime n <= N_MAX, runtime k <= K_MAX). Names:
 * softmax_topk_<f16|f32>_n<N>_k<K>_w<W> and softmax_topk_<f16|f32>_any; W is the lanes per row of the Xe2 shape.
 *
 * Two code shapes (TOOLCHAIN.md 6):
 *  - XE2: a segment of W lanes of a 16-lane sub-group per row (16 / W rows per sub-group), the row held in registers
 *    as E = ceil(N / W) keys per lane (element j*W + lane; sub-group block reads when a row is one aligned
 *    sub-group's), k rounds of a segment arg-max (butterfly shuffles), the r-th winner parked in lane r of the
 *    segment (W >= K), which stores it.
 *  - CPU: one work-item per row. Variants with 16 | N <= 256 select along the row with int16 vectors of packed
 *    (key, index) ints (the runtime then keeps one work-item per vector unit and loads stream along the row); the
 *    others, and the generic kernels, stream the row (vload8) through a sorted K-slot register list with branch-free
 *    insertion, which the runtime vectorizes across work-items (each vector load then gathers across rows).
 */
#include "xe2rt.h"

#define MODE_TOPK 0
#define MODE_SOFTMAX 1
#define MODE_SOFTMAX_NORMALIZE 2

/* Mixtral (8, 2), Phi-3.5-MoE (16, 2), (32, 4), Qwen1.5-MoE (60, 4), DeepSeek-V2-Lite (64, 6), OLMoE (64, 8),
 * Llama-4-Maverick (128, 1), Qwen3-MoE (128, 8), DeepSeek-V2 (160, 6), DeepSeek-V3 (256, 8), Qwen3-Next (512, 10).
 * X(N, K, W): W = lanes per row on Xe2, a power of two >= K with E = N / W small enough to stay in registers. */
#define ROUTING_VARIANTS(X) \
    X(8, 2, 4)              \
    X(16, 2, 4)             \
    X(32, 4, 8)             \
    X(60, 4, 16)            \
    X(64, 6, 16)            \
    X(64, 8, 16)            \
    X(128, 1, 16)           \
    X(128, 8, 16)           \
    X(160, 6, 16)           \
    X(256, 8, 16)           \
    X(512, 10, 16)

static inline int order_key(float f)
{
    const int b = (f == 0.0f) ? 0 : as_int(f);
    return isnan(f) ? INT_MAX : (b ^ ((b >> 31) & 0x7fffffff));
}

static inline float key_value(int key)
{
    return as_float(key ^ ((key >> 31) & 0x7fffffff));
}

/* exp(x - m) with the limits described above; m is the row maximum. */
static inline float shifted_exp(float x, float m)
{
    return (x == m) ? 1.0f : exp(x - m);
}

#if XE2RT_XE2

#define SG 16

static inline int seg_max(int v, int w)
{
    for (int s = w >> 1; s > 0; s >>= 1)
        v = max(v, intel_sub_group_shuffle_xor(v, (uint)s));
    return v;
}

static inline int seg_min(int v, int w)
{
    for (int s = w >> 1; s > 0; s >>= 1)
        v = min(v, intel_sub_group_shuffle_xor(v, (uint)s));
    return v;
}

static inline float seg_sum(float v, int w)
{
    for (int s = w >> 1; s > 0; s >>= 1)
        v += intel_sub_group_shuffle_xor(v, (uint)s);
    return v;
}

/* Element p[lane] of a 16-element chunk through a sub-group block read (the chunk start must be 16-byte aligned and
 * the same for all lanes): one message per chunk instead of a 16-address gather. */
XE2RT_OVERLOAD static inline float block_load(__global const half* p)
{
    return (float)as_half(intel_sub_group_block_read_us((__global const ushort*)p));
}

XE2RT_OVERLOAD static inline float block_load(__global const float* p)
{
    return as_float(intel_sub_group_block_read((__global const uint*)p));
}

/* Chunks c .. c+7 (element p[u * 16 + lane] in component u) in one block read. */
XE2RT_OVERLOAD static inline float8 block_load8(__global const half* p)
{
    return convert_float8(as_half8(intel_sub_group_block_read_us8((__global const ushort*)p)));
}

XE2RT_OVERLOAD static inline float8 block_load8(__global const float* p)
{
    return as_float8(intel_sub_group_block_read8((__global const uint*)p));
}

/* Every lane reaches every shuffle (rows past `rows` hold INT_MIN keys and store nothing): sub-group collectives
 * need converged control flow. */
#define ROUTING_BODY_XE2(T, NN, KK, W, E)                                                                          \
    const int lane = get_sub_group_local_id();                                                                     \
    const int l = lane % (W);                                                                                      \
    const long sg_global = (long)get_group_id(0) * get_num_sub_groups() + get_sub_group_id();                      \
    const long row = sg_global * (SG / (W)) + lane / (W);                                                          \
    const bool live = row < rows;                                                                                  \
    __global const T* xr = x + (live ? row : 0) * (long)(NN);                                                      \
    int keys[E];                                                                                                   \
    if ((W) == SG && (E) % 8 == 0 && (NN) % (8 * SG) == 0 && XE2RT_BLOCK_ALIGNED(xr)) { /* uniform: 1 row/SG */ \
        _Pragma("unroll") for (int j = 0; j < (E); j += 8)                                                         \
            if (j * SG < (NN)) {                                                                                   \
                const float8 v = block_load8(xr + j * SG);                                                         \
                const float vv[8] = {v.s0, v.s1, v.s2, v.s3, v.s4, v.s5, v.s6, v.s7};                              \
                _Pragma("unroll") for (int u = 0; u < 8; ++u) keys[j + u] = live ? order_key(vv[u]) : INT_MIN;     \
            } else {                                                                                               \
                _Pragma("unroll") for (int u = 0; u < 8; ++u) keys[j + u] = INT_MIN;                               \
            }                                                                                                      \
    } else if ((W) == SG && (NN) % SG == 0 && XE2RT_BLOCK_ALIGNED(xr)) {                                          \
        _Pragma("unroll") for (int j = 0; j < (E); ++j)                                                            \
            keys[j] = (live && j * SG < (NN)) ? order_key(block_load(xr + j * SG)) : INT_MIN;                      \
    } else {                                                                                                       \
        _Pragma("unroll") for (int j = 0; j < (E); ++j) {                                                          \
            const int i = j * (W) + l;                                                                             \
            keys[j] = (live && i < (NN)) ? order_key((float)xr[i]) : INT_MIN;                                      \
        }                                                                                                          \
    }                                                                                                              \
    float row_sum = 0.0f;                                                                                          \
    if (mode == MODE_SOFTMAX) { /* uniform branch: the whole-row sum needs the max before keys are consumed */     \
        int local_max = INT_MIN;                                                                                   \
        _Pragma("unroll") for (int j = 0; j < (E); ++j) local_max = max(local_max, keys[j]);                      \
        const float m = key_value(seg_max(local_max, (W)));                                                        \
        float s = 0.0f;                                                                                            \
        _Pragma("unroll") for (int j = 0; j < (E); ++j) if (keys[j] != INT_MIN) s += shifted_exp(key_value(keys[j]), m); \
        row_sum = seg_sum(s, (W));                                                                                 \
    }                                                                                                              \
    int slot_key = INT_MIN, slot_idx = 0, top_key = INT_MIN;                                                       \
    for (int r = 0; r < (KK); ++r) {                                                                               \
        int best = INT_MIN, best_i = INT_MAX;                                                                      \
        _Pragma("unroll") for (int j = 0; j < (E); ++j) if (keys[j] > best) { best = keys[j]; best_i = j * (W) + l; } \
        const int win = seg_max(best, (W));                                                                        \
        const int win_i = seg_min(best == win ? best_i : INT_MAX, (W));                                            \
        _Pragma("unroll") for (int j = 0; j < (E); ++j) keys[j] = (j * (W) + l == win_i) ? INT_MIN : keys[j];      \
        if (r == 0) top_key = win;                                                                                 \
        if (l == r) { slot_key = win; slot_idx = win_i; }                                                          \
    }                                                                                                              \
    const bool mine = live && l < (KK);                                                                            \
    if (mode == MODE_TOPK) {                                                                                       \
        if (mine) { values[row * (KK) + l] = xr[slot_idx]; indices[row * (KK) + l] = slot_idx; }                  \
    } else {                                                                                                       \
        const float e = (l < (KK)) ? shifted_exp(key_value(slot_key), key_value(top_key)) : 0.0f;                  \
        const float denom = (mode == MODE_SOFTMAX) ? row_sum : seg_sum(e, (W));                                    \
        if (mine) { values[row * (KK) + l] = (T)(e / denom); indices[row * (KK) + l] = slot_idx; }                \
    }

#define DEFINE_XE2(T, TN, N, K, W)                                                                                 \
    XE2RT_REQD_SUB_GROUP_SIZE(SG)                                                                                  \
    __kernel void softmax_topk_##TN##_n##N##_k##K##_w##W(__global const T* x, __global T* values,                 \
                                                         __global int* indices, long rows, int n, int k, int mode) \
    {                                                                                                              \
        ROUTING_BODY_XE2(T, N, K, W, ((N) + (W) - 1) / (W))                                                        \
    }

#define DEFINE_XE2_BOTH(N, K, W) DEFINE_XE2(half, f16, N, K, W) DEFINE_XE2(float, f32, N, K, W)
ROUTING_VARIANTS(DEFINE_XE2_BOTH)

/* Generic: a full sub-group per row, N_MAX / 16 keys per lane, runtime n and k (k <= 16 = one slot per lane). */
#define DEFINE_XE2_ANY(T, TN)                                                                                      \
    XE2RT_REQD_SUB_GROUP_SIZE(SG)                                                                                  \
    __kernel void softmax_topk_##TN##_any(__global const T* x, __global T* values, __global int* indices,          \
                                          long rows, int n, int k, int mode)                                       \
    {                                                                                                              \
        ROUTING_BODY_XE2(T, n, k, SG, N_MAX / SG)                                                                  \
    }

DEFINE_XE2_ANY(half, f16)
DEFINE_XE2_ANY(float, f32)

#else /* CPU shape */

/* Streaming shape: one work-item per row, the row streamed in octets (vload8) through a sorted list of KSLOTS register
 * slots, without branches: the CPU runtime runs 8-16 work-items per vector, and a per-element "does it beat the k-th" branch is
 * taken by some lane most of the time, so it only added mispredictions (measured 12.2 ms vs 3.6 ms at 32768 x 128).
 *  - f16: the 16-bit order key of the half bits and 0xFFFF - index share one int, so one signed max/min pair per slot
 *    inserts (value descending, lower index first) exactly (needs n <= 65536).
 *  - f32: the order key truncated by the index bits, packed with the index the same way (CPU_STATE_f32), with an
 *    exact rescan for the rare rows whose k-th and (k+1)-th entries share a truncated key.
 * Slots start below every real key (INT_MIN is no real key in either form), so k <= n fills every output slot. */

#if N_MAX > 65536
#error "packed_half keeps the index in 16 bits: the cpu N_MAX must stay <= 65536"
#endif

static inline int packed_half(ushort h, int i)
{
    const int b = (int)(short)h;
    int key = ((h & 0x7fff) == 0) ? 0 : (b ^ ((b >> 15) & 0x7fff)); /* -0 == +0 */
    key = ((h & 0x7fff) > 0x7c00) ? 0x7fff : key;                    /* every NaN above +Inf (0x7c00) */
    return (int)(((uint)key << 16) | (uint)(0xffff - i));
}

#define CPU_STATE_f16(NN, KSLOTS) \
    int s[KSLOTS];            \
    _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) s[j] = INT_MIN;

#define CPU_PUSH_f16(KSLOTS, v, i)                                                                               \
    {                                                                                                              \
        int cur = packed_half(as_ushort(v), (i));                                                                  \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) { const int hi = max(s[j], cur); cur = min(s[j], cur); s[j] = hi; } \
    }

/* f32, exact two-list insertion: the fallback of the packed path below. */
#define CPU_EXACT_PUSH_f32(KSLOTS, v, i)                                                                         \
    {                                                                                                              \
        const int kx = order_key(v);                                                                               \
        _Pragma("unroll") for (int j = (KSLOTS) - 1; j > 0; --j) {                                                 \
            const bool up = kx > keys[j - 1];                                                                      \
            const bool here = kx > keys[j];                                                                        \
            idx[j] = up ? idx[j - 1] : (here ? (i) : idx[j]);                                                      \
            keys[j] = up ? keys[j - 1] : (here ? kx : keys[j]);                                                    \
        }                                                                                                          \
        idx[0] = kx > keys[0] ? (i) : idx[0];                                                                      \
        keys[0] = max(kx, keys[0]);                                                                                \
    }

/* f32, packed: the 32-bit order key with its low IB bits replaced by IMASK - index (IB = bits of n - 1) is one int
 * per slot, ordered like f16's, so each slot again costs one max and one min. Truncation is monotonic, so the kept
 * set is exact whenever the (k+1)-th truncated key is below the k-th (everything outside is then strictly below
 * everything inside); otherwise the row is rescanned with the exact lists (rare: two distinct logits sharing all
 * but the low IB key bits at the boundary). The order inside the kept set is then fixed on the full keys. */
#define CPU_STATE_f32(NN, KSLOTS)                                                                                    \
    const int ib = ((NN) > 1) ? 32 - clz((NN) - 1) : 0;                                                            \
    const int imask = (1 << ib) - 1;                                                                               \
    int s[(KSLOTS) + 1];                                                                                           \
    _Pragma("unroll") for (int j = 0; j <= (KSLOTS); ++j) s[j] = INT_MIN;

#define CPU_PUSH_f32(KSLOTS, v, i)                                                                               \
    {                                                                                                              \
        int cur = (order_key(v) & ~imask) | (imask - (i));                                                         \
        _Pragma("unroll") for (int j = 0; j <= (KSLOTS); ++j) { const int hi = max(s[j], cur); cur = min(s[j], cur); s[j] = hi; } \
    }

#define CPU_TOP_f32(T, NN, KK, KSLOTS)                                                                             \
    _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) top[j] = imask - (s[j] & imask);                          \
    int kth = 0, next = 0;                                                                                         \
    _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) {                                                         \
        kth = (j == (KK) - 1) ? s[j] : kth;                                                                        \
        next = (j == (KK) - 1) ? s[j + 1] : next;                                                                  \
    }                                                                                                              \
    bool tied = false; /* kept neighbours sharing a truncated key: only their full keys order them */              \
    _Pragma("unroll") for (int j = 1; j < (KSLOTS); ++j) tied |= j < (KK) && ((s[j] ^ s[j - 1]) & ~imask) == 0;     \
    if ((next & ~imask) == (kth & ~imask)) {                                                                       \
        int keys[KSLOTS], idx[KSLOTS];                                                                             \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) { keys[j] = INT_MIN; idx[j] = 0; }                    \
        for (int i = 0; i < (NN); ++i)                                                                             \
            CPU_EXACT_PUSH_f32(KSLOTS, xr[i], i)                                                                   \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) top[j] = idx[j];                                      \
    } else if (tied) {                                                                                             \
        /* insertion on (full key, lower index first) packed in a long; slots past k sink below every real one */  \
        long t[KSLOTS];                                                                                            \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) {                                                     \
            long cur = (j < (KK)) ? (((long)order_key(xr[top[j]]) << 32) | (long)(INT_MAX - top[j])) : LONG_MIN;   \
            _Pragma("unroll") for (int q = 0; q < j; ++q) { const long hi = max(t[q], cur); cur = min(t[q], cur); t[q] = hi; } \
            t[j] = cur;                                                                                            \
        }                                                                                                          \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) top[j] = INT_MAX - (int)(t[j] & INT_MAX);             \
    }

/* f32 rows of a multiple of 16 values, 64 <= N <= 256 (compile-time N), selected along the row: the row as N / 16 int16
 * vectors of packed keys (contiguous vload16, no cross-row gather). N = 64, 128: each of the 16 columns sorted by a
 * Batcher network, then the best column head popped once per slot (hmax; the packed key is unique, so it names its
 * element). Other N: one round per slot of vector max, horizontal max, clear that element. Below N = 64 streaming
 * measured faster (N = 16: 0.59 vs 0.85 ms, N = 32: 1.46 vs 1.58 ms at 32768 rows). The CPU runtime runs this
 * shape one work-item per vector unit (kernel sub-group size 64) instead of packetizing 16 work-items, so every load
 * streams along the row. Fills the same s[] as the streaming insertion (f32: k + 1 entries, exactness handled by
 * CPU_TOP_f32). 32768 x 128 k8 fp32 went from 2.4 ms (streaming, packed) to 1.9 ms. */
#define CPU_ROWVEC_MAX_f32 256
#define CPU_ROWVEC_MAX_f16 0

static inline int16 order_key16(float16 f)
{
    const int16 b = select(as_int16(f), (int16)0, f == 0.0f);
    return select(b ^ ((b >> 31) & 0x7fffffff), (int16)INT_MAX, isnan(f));
}

static inline int hmax16(int16 v)
{
    const int8 a = max(v.lo, v.hi);
    const int4 b = max(a.lo, a.hi);
    const int2 c = max(b.lo, b.hi);
    return max(c.x, c.y);
}

#define CPU_ROWVEC(TN, NN, KSLOTS)                                                                                  \
    {                                                                                                              \
        const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);                          \
        int16 v[CPU_ROWVEC_MAX_f32 / 16]; /* a constant size: the branch is dead code for other N and the generic n */ \
        _Pragma("unroll") for (int j = 0; j < (NN) / 16; ++j)                                                      \
            v[j] = CPU_ROWKEYS_##TN(j);                                                                           \
        if ((NN) == 64 || (NN) == 128) {                                                                           \
            /* sort each column (Batcher networks: 5, 19 exchanges), then pop the best head k + 1 times */          \
            if ((NN) == 64) {                                                                                      \
                CE16(0, 1) CE16(2, 3) CE16(0, 2) CE16(1, 3) CE16(1, 2)                                             \
            } else {                                                                                               \
                CE16(0, 1) CE16(2, 3) CE16(4, 5) CE16(6, 7) CE16(0, 2) CE16(1, 3) CE16(4, 6) CE16(5, 7) CE16(1, 2)   \
                CE16(5, 6) CE16(0, 4) CE16(1, 5) CE16(2, 6) CE16(3, 7) CE16(2, 4) CE16(3, 5) CE16(1, 2) CE16(3, 4)   \
                CE16(5, 6)                                                                                         \
            }                                                                                                      \
            _Pragma("unroll") for (int r = 0; r < CPU_POPS_##TN(KSLOTS); ++r) {                                                \
                s[r] = hmax16(v[0]);                                                                               \
                const int16 won = v[0] == s[r];                                                                    \
                _Pragma("unroll") for (int j = 0; j < (NN) / 16 - 1; ++j) v[j] = select(v[j], v[j + 1], won);      \
                v[(NN) / 16 - 1] = select(v[(NN) / 16 - 1], (int16)INT_MIN, won);                                  \
            }                                                                                                      \
        } else {                                                                                                   \
            _Pragma("unroll") for (int r = 0; r < CPU_POPS_##TN(KSLOTS); ++r) {                                                \
                int16 m = v[0];                                                                                    \
                _Pragma("unroll") for (int j = 1; j < (NN) / 16; ++j) m = max(m, v[j]);                            \
                s[r] = hmax16(m);                                                                                  \
                _Pragma("unroll") for (int j = 0; j < (NN) / 16; ++j) v[j] = select(v[j], (int16)INT_MIN, v[j] == s[r]); \
            }                                                                                                      \
        }                                                                                                          \
    }

#define CE16(a, b) { const int16 hi = max(v[a], v[b]); v[b] = min(v[a], v[b]); v[a] = hi; }

#define CPU_ROWKEYS_f32(j) ((order_key16(vload16((j), xr)) & ~imask) | (imask - (lane + 16 * (j))))
#define CPU_POPS_f32(KSLOTS) ((KSLOTS) + 1) /* k + 1: the boundary check of CPU_TOP_f32 */
#define CPU_ROWVEC_f32(NN, KSLOTS) CPU_ROWVEC(f32, NN, KSLOTS)
/* f16 streams: its exact packed key already makes insertion cheap, and along the row measured 1.77 ms vs 1.54 ms
 * streaming at 32768 x 128 k8 (the per-row scalar tail costs more than the gathers saved). */
#define CPU_ROWVEC_f16(NN, KSLOTS)

#define CPU_TOP_f16(T, NN, KK, KSLOTS) \
    _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) top[j] = 0xffff - (s[j] & 0xffff);

#define ROUTING_BODY_CPU(T, TN, NN, KK, KSLOTS, ROWVEC)                                                                  \
    const long row = get_global_id(0);                                                                             \
    if (row >= rows)                                                                                               \
        return;                                                                                                    \
    __global const T* xr = x + row * (long)(NN);                                                                   \
    CPU_STATE_##TN(NN, KSLOTS)                                                                                    \
    const int octets = (NN) / 8;                                                                                   \
    if (ROWVEC) {                                                                                                  \
        CPU_ROWVEC_##TN(NN, KSLOTS)                                                                                \
    } else {                                                                                                       \
        for (int o = 0; o < octets; ++o) {                                                                         \
            const T##8 v8 = vload8(o, xr);                                                                         \
            const T vv[8] = {v8.s0, v8.s1, v8.s2, v8.s3, v8.s4, v8.s5, v8.s6, v8.s7};                              \
            _Pragma("unroll") for (int u = 0; u < 8; ++u) CPU_PUSH_##TN(KSLOTS, vv[u], o * 8 + u)                  \
        }                                                                                                          \
        for (int i = octets * 8; i < (NN); ++i)                                                                    \
            CPU_PUSH_##TN(KSLOTS, xr[i], i)                                                                        \
    }                                                                                                              \
    __global T* vr = values + row * (KK);                                                                          \
    __global int* ir = indices + row * (KK);                                                                       \
    int top[KSLOTS];                                                                                               \
    CPU_TOP_##TN(T, NN, KK, KSLOTS)                                                                                \
    if (mode == MODE_TOPK) {                                                                                       \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) if (j < (KK)) { vr[j] = xr[top[j]]; ir[j] = top[j]; } \
        return;                                                                                                    \
    }                                                                                                              \
    const float m = (float)xr[top[0]]; /* the row maximum, or NaN when the row has one */                         \
    float e[CPU_EXP_SLOTS(KSLOTS, ROWVEC)];                                                                      \
    float denom = 0.0f;                                                                                            \
    if (ROWVEC && (KK) <= 8) { /* one vector exp: this shape runs one work-item per vector unit */              \
        const float8 xv = (float8)(CPU_KEPT(0, KK), CPU_KEPT(1, KK), CPU_KEPT(2, KK), CPU_KEPT(3, KK),            \
                                   CPU_KEPT(4, KK), CPU_KEPT(5, KK), CPU_KEPT(6, KK), CPU_KEPT(7, KK));           \
        const float8 ev = select(select(exp(xv - m), (float8)1.0f, xv == m), (float8)0.0f,                         \
                                 (int8)(0, 1, 2, 3, 4, 5, 6, 7) >= (KK));                                          \
        vstore8(ev, 0, e);                                                                                         \
        const float4 e4 = ev.lo + ev.hi;                                                                           \
        denom = (e4.s0 + e4.s1) + (e4.s2 + e4.s3);                                                                 \
    } else if (ROWVEC) {                                                                                           \
        _Pragma("unroll") for (int j = 0; j < 16; ++j) e[j] = (j < (KK)) ? (float)xr[top[j < (KK) ? j : 0]] : m;  \
        const float16 xv = vload16(0, e);                                                                          \
        const float16 ev = select(select(exp(xv - m), (float16)1.0f, xv == m), (float16)0.0f,                      \
                                  (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) >= (KK));          \
        vstore16(ev, 0, e);                                                                                        \
        const float8 e8 = ev.lo + ev.hi;                                                                           \
        const float4 e4 = e8.lo + e8.hi;                                                                           \
        denom = (e4.s0 + e4.s1) + (e4.s2 + e4.s3);                                                                 \
    } else {                                                                                                       \
        _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) {                                                     \
            e[j] = (j < (KK)) ? shifted_exp((float)xr[top[j]], m) : 0.0f;                                           \
            denom += e[j];                                                                                         \
        }                                                                                                          \
    }                                                                                                              \
    if (mode == MODE_SOFTMAX) { /* second pass over the row, now in cache */                                       \
        float8 acc = 0.0f;                                                                                         \
        for (int o = 0; o < octets; ++o) {                                                                         \
            const float8 v = convert_float8(vload8(o, xr));                                                        \
            acc += select(exp(v - m), (float8)1.0f, v == m);                                                       \
        }                                                                                                          \
        const float4 a4 = acc.lo + acc.hi;                                                                         \
        denom = (a4.s0 + a4.s1) + (a4.s2 + a4.s3);                                                                 \
        for (int i = octets * 8; i < (NN); ++i)                                                                    \
            denom += shifted_exp((float)xr[i], m);                                                                 \
    }                                                                                                              \
    const float inv = 1.0f / denom;                                                                                \
    if (ROWVEC && (KK) == 8) { /* one vector store each for the 8 values and the 8 indices (vstore8: element alignment) */ \
        vstore8(convert_##T##8(vload8(0, e) * inv), 0, vr);                                                        \
        vstore8((int8)(top[0], top[1 % (KK)], top[2 % (KK)], top[3 % (KK)], top[4 % (KK)], top[5 % (KK)],          \
                       top[6 % (KK)], top[7 % (KK)]), 0, ir);                                                      \
        return;                                                                                                    \
    }                                                                                                              \
    _Pragma("unroll") for (int j = 0; j < (KSLOTS); ++j) if (j < (KK)) { vr[j] = (T)(e[j] * inv); ir[j] = top[j]; }

/* kept value j as float, or m past k (masked out after the exp) */
#define CPU_KEPT(j, KK) ((j) < (KK) ? (float)xr[top[(j) < (KK) ? (j) : 0]] : m)
#define CPU_EXP_SLOTS(KSLOTS, ROWVEC) ((ROWVEC) ? 16 : (KSLOTS))
#define CPU_ROWVEC_OK(TN, N) (CPU_ROWVEC_MAX_##TN > 0 && (N) % 16 == 0 && (N) >= 64 && (N) <= CPU_ROWVEC_MAX_##TN)

#define DEFINE_CPU(T, TN, N, K, W)                                                                                 \
    __kernel void softmax_topk_##TN##_n##N##_k##K##_w##W(__global const T* x, __global T* values,                 \
                                                         __global int* indices, long rows, int n, int k, int mode) \
    {                                                                                                              \
        ROUTING_BODY_CPU(T, TN, N, K, K, CPU_ROWVEC_OK(TN, N))                                                                   \
    }

#define DEFINE_CPU_BOTH(N, K, W) DEFINE_CPU(half, f16, N, K, W) DEFINE_CPU(float, f32, N, K, W)
ROUTING_VARIANTS(DEFINE_CPU_BOTH)

/* Generic: K_MAX slots always kept (the top-K_MAX list starts with the top-k list, in order), the first k stored. */
#define DEFINE_CPU_ANY(T, TN)                                                                                      \
    __kernel void softmax_topk_##TN##_any(__global const T* x, __global T* values, __global int* indices,          \
                                          long rows, int n, int k, int mode)                                       \
    {                                                                                                              \
        ROUTING_BODY_CPU(T, TN, n, k, K_MAX, 0)                                                                   \
    }

DEFINE_CPU_ANY(half, f16)
DEFINE_CPU_ANY(float, f32)

#endif
