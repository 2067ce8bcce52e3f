"""float64 references for the decode linears and the Llama MLP block, and the error bounds of their tensor-parallel
(sharded) computation, shared by tests/test_parallel*.py, tests/mpi_worker.py and the tp benchmark.

Weights are float16 arrays [N, K], QuantizedW4 or QuantizedW8 (host or device parts); references use their exact
dequantized values.

Bounds (first order in eps32 = 2^-23 and eps16 = 2^-10, u16 = eps16 / 2; sub16 = the smallest fp16 subnormal):

1. One decode linear on one device: B(x, w) = the op's own per-row bound (xe2rt.reference.gemv / quant: fp32
   accumulation of the products in the kernel's summation order, plus the rounding of y to fp16). Column-parallel
   shards compute the same rows with the same kernel, so the same B holds row by row.

2. Row-parallel over R shards: shard r returns p_r = fp16(s~_r), |p_r - s_r| <= B_r (its own bound on its K slice,
   s_r the exact partial). The root sums the p_r in fp32 (fp16 -> fp32 is exact; R - 1 additions, each off by at most
   u32 = eps32 / 2 of the running sum, so the sum is off by at most (R - 1) eps32 sum_r |p_r|, with slack for any
   order, MPI's included) and rounds once to fp16 (u16 of the result, or sub16 absolute below the normal range):
       |y - y*| <= E + (R - 1) eps32 sum_r (|s_r| + B_r) + u16 (|y*| + E) + sub16,   E = sum_r B_r
   (R = 1: the partial is the result, bound B_0). The term that sharding adds in practice is the fp16 rounding of
   each partial inside B_r: u16 sum_r |s_r| rather than u16 |y*|, larger when the partials cancel. A GEMV writing
   fp32 partials would remove it; the decode ops write fp16.

3. MLP y = down(h), h = silu(g) * u, g = gate x, u = up x. On shard r the ops give g~, u~ within B_g, B_u of the exact
   g*, u*; h is computed in fp32 from them and rounded to fp16, so (|silu'| <= L = 1.1; 16 eps32 covers the fp32
   exp, add, divide and multiply):
       dh <= L B_g (|u*| + B_u) + |silu(g*)| B_u + 16 eps32 (|h*| + d) + u16 (|h*| + d) + sub16,  d = the first two
   and down's partial is off from its exact value at h* by at most B_down(h*) + 1.01 |W_down| dh (the 1% covers the
   change of B_down's own magnitude terms from h* to h, which are below 2^-7 relative for K < 2^16). The partials then
   reduce as in 2. The comparison with the single-device result uses |y_R - y_1| <= bound_R + bound_1.
"""
from __future__ import annotations

import numpy as np

from ..quant import QuantizedW4, QuantizedW8
from . import gemv as ref_gemv
from . import quant as ref_quant

EPS32 = float(np.finfo(np.float32).eps)
EPS16 = float(np.finfo(np.float16).eps)
SUB16 = float(np.finfo(np.float16).smallest_subnormal)
SILU_LIPSCHITZ = 1.1  # max |silu'(x)| = 1.0998, at x = 2.3994


def _host_fp16(w) -> np.ndarray:
    if hasattr(w, "sycl_queue"):
        import dpnp
        return dpnp.asnumpy(w)
    return np.asarray(w)


def linear(x, w) -> np.ndarray:
    """float64 w @ x from the exact (dequantized) weights; x [K] or [1, K]."""
    if isinstance(w, QuantizedW4):
        return ref_quant.gemv_w4(x, w)
    if isinstance(w, QuantizedW8):
        return ref_quant.gemv_w8(x, w)
    return ref_gemv.gemv(x, _host_fp16(w))


def abs_linear(w, v) -> np.ndarray:
    """|W| @ v for v >= 0, in row blocks (no [N, K] float64 temporary for quantized weights)."""
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    if isinstance(w, QuantizedW4):
        host = w.to_host()
        n, k = host.shape
        g = host.group_size
        view = ref_quant.QuantView(host)
        zeros, scales = host.zero_points().astype(np.float64), np.abs(np.asarray(host.scales, dtype=np.float64))
        out = np.empty(n)
        for r in range(0, n, 512):
            rows = slice(r, min(r + 512, n))
            q = view.codes(rows).reshape(-1, k // g, g)
            out[rows] = (np.einsum("rgk,gk->rg", np.abs(q - zeros[rows][:, :, None]), v.reshape(-1, g))
                         * scales[rows]).sum(axis=1)
        return out
    if isinstance(w, QuantizedW8):
        host = w.to_host()
        return (np.abs(np.asarray(host.qweight, dtype=np.float64)) @ v) * np.abs(np.asarray(host.scales, np.float64))
    return np.abs(_host_fp16(w).astype(np.float64)) @ v


def kernel_bound(x, w, constants: dict) -> np.ndarray:
    """Per-row bound of the decode op on (x, w), output rounding included; `constants` are the program's (they
    set the summation structure: K_SPLIT, the W4 dequant variant)."""
    if isinstance(w, QuantizedW4):
        return ref_quant.w4_kernel_bound(x, w, constants)
    if isinstance(w, QuantizedW8):
        return ref_quant.w8_fp32_bound(x, w, k_split=constants["K_SPLIT"])
    return ref_gemv.fp32_accumulation_bound(x, _host_fp16(w))


def row_parallel_bound(partial_refs, partial_bounds) -> np.ndarray:
    """Bound 2 of the module docstring: partial_refs [R, N] exact partials, partial_bounds [R, N] their B_r."""
    s = np.abs(np.asarray(partial_refs, dtype=np.float64))
    b = np.asarray(partial_bounds, dtype=np.float64)
    if len(s) == 1:
        return b[0]
    e = b.sum(axis=0) + (len(s) - 1) * EPS32 * (s + b).sum(axis=0)
    y = np.abs(np.asarray(partial_refs, dtype=np.float64).sum(axis=0))
    return e + 0.5 * EPS16 * (y + e) + SUB16


def silu(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(over="ignore"):
        return v / (1.0 + np.exp(-v))


def mlp(x, gate, up, down) -> np.ndarray:
    """float64 down @ (silu(gate @ x) * (up @ x)) from the exact weights."""
    return linear(silu(linear(x, gate)) * linear(x, up), down)


def mlp_bound(x, shards, constants_of) -> np.ndarray:
    """Bound 3 of the module docstring for the MLP over shards [(gate_r, up_r, down_r)] (gate/up column-parallel,
    down row-parallel); constants_of(weight) gives the program constants of the op that runs that weight."""
    refs, bounds = [], []
    for gate, up, down in shards:
        g, u = linear(x, gate), linear(x, up)
        bg, bu = kernel_bound(x, gate, constants_of(gate)), kernel_bound(x, up, constants_of(up))
        h = silu(g) * u
        d = SILU_LIPSCHITZ * bg * (np.abs(u) + bu) + np.abs(silu(g)) * bu
        dh = d + (16 * EPS32 + 0.5 * EPS16) * (np.abs(h) + d) + SUB16
        refs.append(linear(h, down))
        bounds.append(kernel_bound(h, down, constants_of(down)) + 1.01 * abs_linear(down, dh))
    return row_parallel_bound(refs, bounds)
