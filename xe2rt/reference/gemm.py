"""GEMM references (float64 from the exact fp16 inputs) and the error bound the tests apply."""
from __future__ import annotations

import numpy as np

GELU_C = np.sqrt(2.0 / np.pi)
EPS32 = float(np.finfo(np.float32).eps)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh form of GELU, as the kernels compute it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x**3)))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """The exact (erf) form of GELU that BERT uses: 0.5 x (1 + erf(x / sqrt(2)))."""
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[np.float64])(x / np.sqrt(2.0)))


def dense_b(b: np.ndarray, b_layout: str) -> np.ndarray:
    """B as [K, N] in float64."""
    b = np.asarray(b, dtype=np.float64)
    return b if b_layout == "kn" else b.T


def products(a, b, b_layout="kn") -> tuple[np.ndarray, np.ndarray]:
    """(a @ B, |a| @ |B|) in float64: the exact product and the magnitude the accumulation error scales with."""
    a64, b64 = np.asarray(a, dtype=np.float64), dense_b(b, b_layout)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def epilogue(pre: np.ndarray, bias=None, activation=None) -> np.ndarray:
    y = pre if bias is None else pre + np.asarray(bias, dtype=np.float64)
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "gelu":
        return gelu_tanh(y)
    if activation == "gelu_erf":
        return gelu_erf(y)
    if activation is not None:
        raise ValueError(f"unknown activation {activation!r}")
    return y


def gemm(a, b, *, bias=None, activation=None, b_layout="kn") -> np.ndarray:
    """float64 act(a @ B + bias)."""
    return epilogue(products(a, b, b_layout)[0], bias, activation)


def error_bound_from(pre, mag, k: int, *, bias=None, activation=None, out_dtype=np.float16,
                     operand_error=0.0) -> np.ndarray:
    """Elementwise bound on |out - ref| for fp32 accumulation of exact fp16 products (any order), an fp32 epilogue
    and one rounding to out_dtype:
      pre-activation   e = K eps32 sum_k |a_mk b_kn| + eps32 (|a.B + bias| + |bias|)
      activation       relu is 1-Lipschitz; gelu (tanh form) has |gelu'| <= 1.13 and its fp32 evaluation adds at most
                       8 eps32 (|x| + 1); gelu_erf has |gelu'| <= 1.13 too and OpenCL's erf is within 16 ulp, so its
                       fp32 evaluation adds at most 16 eps32 (|x| + 1)
      output rounding  0.5 eps16 (|ref| + e) + the smallest fp16 subnormal
    operand_error: a further pre-activation error term (e.g. weights rounded to fp16 inside a kernel), added to e.
    """
    bias64 = 0.0 if bias is None else np.abs(np.asarray(bias, dtype=np.float64))
    x = pre if bias is None else pre + np.asarray(bias, dtype=np.float64)
    e = k * EPS32 * mag + EPS32 * (np.abs(x) + bias64) + operand_error
    if activation == "gelu":
        e = 1.13 * e + 8 * EPS32 * (np.abs(x) + 1.0)
    elif activation == "gelu_erf":
        e = 1.13 * e + 16 * EPS32 * (np.abs(x) + 1.0)
    ref = epilogue(pre, bias, activation)
    out_eps = float(np.finfo(out_dtype).eps)
    return e + 0.5 * out_eps * (np.abs(ref) + e) + float(np.finfo(out_dtype).smallest_subnormal)


def error_bound(a, b, *, bias=None, activation=None, b_layout="kn", out_dtype=np.float16) -> np.ndarray:
    pre, mag = products(a, b, b_layout)
    return error_bound_from(pre, mag, np.shape(a)[1], bias=bias, activation=activation, out_dtype=out_dtype)


def dpas_spec(a_regs: np.ndarray, b_regs: np.ndarray, acc_regs: np.ndarray) -> np.ndarray:
    """cl_intel_subgroup_matrix_multiply_accumulate, sub-group size 16, f16 x f16 + f32, M = 8, K = 16, N = 16, on raw
    per-lane registers: a_regs int16 [16 lanes, 8], b_regs int32 [16 lanes, 8], acc_regs float32 [16 lanes, 8].
    Returns the result registers [16 lanes, 8] in float64 (exact sum)."""
    a_mat = np.ascontiguousarray(a_regs, dtype=np.int16).view(np.float16).astype(np.float64).T  # [m, k]: lane k
    b_mat = np.ascontiguousarray(b_regs, dtype=np.int32).view(np.float16).astype(np.float64).T  # [k, n]: lane n
    c = acc_regs.astype(np.float64).T + a_mat @ b_mat  # [m, n]
    return c.T


def fp32_ordered(a, b, b_layout="kn", *, bias=None, relu=False, k_step=16, slices=1) -> np.ndarray:
    """The Xe2 kernels' result by the direct formula, in their exact fp32 order: each K slice sums its products
    k = k_begin, k_begin + 1, ... into a float32 that starts at +0 (an fp16 x fp16 product is exact in fp32, so each
    fma of the DPAS rounds once, like a float32 add of the product); slice 0 then adds slices 1, 2, ... in order; bias
    is added in fp32, relu applied, and the result rounded once to float16 (round to nearest even). Slice s owns the
    K steps [s p, (s + 1) p) of ceil(K / k_step) steps, p = ceil(steps / slices) (xe2rt_slice_range)."""
    a32 = np.asarray(a, dtype=np.float32)
    b32 = np.asarray(dense_b(b, b_layout), dtype=np.float32)
    k = a32.shape[1]
    steps = -(-k // k_step)
    per = -(-steps // slices) if slices else 0
    total = None
    for s in range(slices):
        k0, k1 = min(s * per * k_step, k), min((s + 1) * per * k_step, k)
        acc = np.zeros((a32.shape[0], b32.shape[1]), np.float32)
        for kk in range(k0, k1):
            acc += np.outer(a32[:, kk], b32[kk, :])
        total = acc if total is None else total + acc
    if bias is not None:
        total = total + np.asarray(bias, dtype=np.float32)
    if relu:
        total = np.maximum(total, np.float32(0))
    return total.astype(np.float16)


def block2d_read(region: np.ndarray, *, width: int, height: int, pitch: int, coord: tuple[int, int], elem: int,
                 block_w: int, block_h: int, count: int = 1, transform: bool = False, transpose: bool = False,
                 lanes: int = 16) -> np.ndarray:
    """A sub-group 2D block read by the SPV_INTEL_2d_block_io mapping, on a region given as raw bytes (uint8, at least
    height x pitch). Returns each lane's destination as raw bytes [lanes, bytes per lane].

    Per block (blocks side by side, block c starting block_w elements after block c - 1): elements outside
    [0, width / elem) x [0, height) are zero; the width is padded to a power of two (transpose: the height), padded
    elements zero; transform packs 4 / elem consecutive rows of a column into one 32-bit value, lower row in the lower
    bits; transpose swaps rows and columns. The (possibly packed) block rows are then dealt to lanes: a row as wide as
    the sub-group gives one element per lane; a narrower row goes to a group of lanes, the next row to the next group;
    a wider row gives each lane consecutive elements. The destination is block 0's values, then block 1's, ...
    """
    x0, y0 = coord
    region = np.asarray(region, dtype=np.uint8)

    def element(x, y):
        if x < 0 or y < 0 or y >= height or x >= width // elem:
            return 0
        off = y * pitch + x * elem
        return int.from_bytes(region[off:off + elem].tobytes(), "little")

    def pow2(v):
        return 1 << (v - 1).bit_length()

    per_lane: list[list[tuple[int, int]]] = [[] for _ in range(lanes)]  # (value, size in bytes)
    for c in range(count):
        bx = x0 + c * block_w
        if transpose:
            hp = pow2(block_h)
            mat = [[element(bx + col, y0 + row) if row < block_h else 0 for row in range(hp)] for col in range(block_w)]
            size = elem
        elif transform:
            per = 4 // elem
            hp = -(-block_h // per) * per
            wp = pow2(block_w)
            mat = []
            for r in range(0, hp, per):
                row = []
                for col in range(wp):
                    v = 0
                    for j in range(per):
                        e = element(bx + col, y0 + r + j) if col < block_w and r + j < block_h else 0
                        v |= e << (8 * elem * j)
                    row.append(v)
                mat.append(row)
            size = 4
        else:
            wp = pow2(block_w)
            mat = [[element(bx + col, y0 + row) if col < block_w else 0 for col in range(wp)] for row in range(block_h)]
            size = elem
        w = len(mat[0])
        if w == lanes:
            for row in mat:
                for lane in range(lanes):
                    per_lane[lane].append((row[lane], size))
        elif w < lanes:
            group = lanes // w
            for q in range(0, len(mat), group):
                for lane in range(lanes):
                    r = q + lane // w
                    per_lane[lane].append((mat[r][lane % w] if r < len(mat) else 0, size))
        else:
            each = w // lanes
            for row in mat:
                for lane in range(lanes):
                    for j in range(each):
                        per_lane[lane].append((row[lane * each + j], size))
    out = [b"".join(v.to_bytes(n, "little") for v, n in values) for values in per_lane]
    return np.frombuffer(b"".join(out), dtype=np.uint8).reshape(lanes, -1)
