"""Quantized weights for the W4A16 / W8A16 GEMV kernels: containers, quantizers, and GPTQ / AWQ importers.

Layouts (seed 000), row n = output feature, k = input feature:
  QuantizedW4.packed  uint8   [N, K/2]    two uint4 per byte: low nibble = even k, high nibble = odd k
  QuantizedW4.scales  float16 [N, K/G]    one scale per group of G consecutive k
  QuantizedW4.zeros   uint8   [N, K/G]    zero point per group in [0, 15], or None for symmetric (zero point 8)
  weight[n, k] = (q[n, k] - zero[n, k // G]) * scale[n, k // G]

  QuantizedW8.qweight int8    [N, K], QuantizedW8.scales float16 [N];  weight[n, k] = q[n, k] * scale[n]

Parts are numpy arrays (host) or dpnp arrays (device, all on one queue); the GEMV ops need device parts:
`qw.to_device(queue)`. Quantizers given a dpnp array return device parts on its queue; importers take `queue=`.
The quantizers compute on the host in float64 (exact and deterministic; quantizing is a one-time cost).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InputError, InputTypeError

GROUP_SIZES = (32, 64, 128)
SYMMETRIC_ZERO = 8
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AWQ GEMM packing: nibble slot j of each int32 holds column AWQ_ORDER[j]


def _is_device(a) -> bool:
    return hasattr(a, "sycl_queue")


def _host(a) -> np.ndarray:
    if _is_device(a):
        import dpnp
        return dpnp.asnumpy(a)
    return np.asarray(a)


def _check_part(owner: str, name: str, a, dtype, shape: tuple) -> None:
    if not (isinstance(a, np.ndarray) or _is_device(a)):
        raise InputTypeError(f"{owner}: {name} must be a numpy or dpnp array, got {type(a).__name__}")
    if np.dtype(a.dtype) != np.dtype(dtype):
        raise InputTypeError(f"{owner}: {name} must be {np.dtype(dtype)}, got {np.dtype(a.dtype)}")
    if tuple(a.shape) != tuple(shape):
        raise InputError(f"{owner}: {name} must have shape {tuple(shape)} to match the other parts, got "
                         f"{tuple(a.shape)}")
    if not a.flags.c_contiguous:
        raise InputError(f"{owner}: {name} must be C-contiguous, got strides {tuple(a.strides)}; "
                         f"use ascontiguousarray")


def _check_same_place(owner: str, **parts) -> None:
    parts = {k: v for k, v in parts.items() if v is not None}
    kinds = {k: ("device" if _is_device(v) else "host") for k, v in parts.items()}
    if len(set(kinds.values())) > 1:
        raise InputError(f"{owner}: parts must all be numpy or all dpnp, got {kinds}")
    queues = [(k, v.sycl_queue) for k, v in parts.items() if _is_device(v)]
    for k, q in queues[1:]:
        if q != queues[0][1]:
            raise InputError(f"{owner}: {k} and {queues[0][0]} are on different queues; all parts of one "
                             f"quantized weight must share a queue (use .to_device(queue))")


def _place(arrays: dict, queue):
    if queue is None:
        return {k: (None if v is None else _host(v)) for k, v in arrays.items()}
    import dpctl
    import dpnp
    if not isinstance(queue, dpctl.SyclQueue):
        fix = f" {queue!r}; make one with dpctl.SyclQueue({queue!r})" if isinstance(queue, str) else ""
        raise InputTypeError(f"queue must be a dpctl.SyclQueue (or None: host parts), got {type(queue).__name__}{fix}")
    return {k: (None if v is None else dpnp.asarray(_host(v), sycl_queue=queue)) for k, v in arrays.items()}


def _check_group_size(owner: str, group_size) -> None:
    if isinstance(group_size, (bool, np.bool_)) or not isinstance(group_size, (int, np.integer)) \
            or group_size not in GROUP_SIZES:
        raise InputError(f"{owner}: group_size must be one of {GROUP_SIZES}, got {group_size!r}")


@dataclass(frozen=True)
class QuantizedW4:
    """4-bit weights [N, K] in groups of `group_size` along K (layout in the module docstring)."""
    packed: object
    scales: object
    zeros: object | None
    group_size: int

    def __post_init__(self):
        self.check("QuantizedW4")

    def check(self, owner: str) -> None:
        """Shapes, dtypes, contiguity and placement of the parts agree; raise InputError/InputTypeError if not."""
        _check_group_size(owner, self.group_size)
        if getattr(self.packed, "ndim", None) != 2:
            raise InputError(f"{owner}: packed must be 2-D uint8 [N, K/2], got shape "
                             f"{tuple(getattr(self.packed, 'shape', ()))}")
        n, half_k = self.packed.shape
        k = 2 * half_k
        if k % self.group_size:
            raise InputError(f"{owner}: K = {k} (packed is [N, K/2] = {tuple(self.packed.shape)}) must be a multiple "
                             f"of group_size {self.group_size}")
        _check_part(owner, "packed", self.packed, np.uint8, (n, half_k))
        _check_part(owner, "scales", self.scales, np.float16, (n, k // self.group_size))
        if self.zeros is not None:
            _check_part(owner, "zeros", self.zeros, np.uint8, (n, k // self.group_size))
        _check_same_place(owner, packed=self.packed, scales=self.scales, zeros=self.zeros)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.packed.shape[0]), 2 * int(self.packed.shape[1])

    @property
    def symmetric(self) -> bool:
        return self.zeros is None

    @property
    def sycl_queue(self):
        return self.packed.sycl_queue if _is_device(self.packed) else None

    @property
    def nbytes(self) -> int:
        return sum(int(p.size) * p.itemsize for p in (self.packed, self.scales, self.zeros) if p is not None)

    def to_device(self, queue) -> "QuantizedW4":
        """A copy with dpnp parts on `queue` (no copy when already there)."""
        if self.sycl_queue == queue:
            return self
        return QuantizedW4(**_place({"packed": self.packed, "scales": self.scales, "zeros": self.zeros}, queue),
                           group_size=self.group_size)

    def to_host(self) -> "QuantizedW4":
        return QuantizedW4(**_place({"packed": self.packed, "scales": self.scales, "zeros": self.zeros}, None),
                           group_size=self.group_size)

    def codes(self) -> np.ndarray:
        """The uint4 codes q as uint8 [N, K] on the host."""
        packed = _host(self.packed)
        q = np.empty((packed.shape[0], 2 * packed.shape[1]), dtype=np.uint8)
        q[:, 0::2] = packed & 15
        q[:, 1::2] = packed >> 4
        return q

    def zero_points(self) -> np.ndarray:
        """Zero points uint8 [N, K/G] on the host (8 everywhere when symmetric)."""
        if self.zeros is None:
            return np.full(_host(self.scales).shape, SYMMETRIC_ZERO, dtype=np.uint8)
        return _host(self.zeros)

    def dequantize(self, dtype=np.float32):
        """The weights this stands for, [N, K]: (q - zero) * scale, exact in float32. Same placement as the parts."""
        # (q - zero) is an integer in [-15, 15] and the scale a float16: their product has at most 15 significant
        # bits, exact in float32. Row blocks bound the temporaries (an LLM's lm_head is 10^8 codes and more).
        g = self.group_size
        packed, zeros = _host(self.packed), self.zero_points()
        scales = _host(self.scales).astype(np.float32)
        n, k = packed.shape[0], 2 * packed.shape[1]
        w = np.empty((n, k), dtype=dtype)
        for r in range(0, n, _ROW_BLOCK):
            p = packed[r:r + _ROW_BLOCK]
            q = np.empty((p.shape[0], k // g, g), dtype=np.float32)
            q.reshape(p.shape[0], k)[:, 0::2] = p & 15
            q.reshape(p.shape[0], k)[:, 1::2] = p >> 4
            q -= zeros[r:r + _ROW_BLOCK, :, None]
            q *= scales[r:r + _ROW_BLOCK, :, None]
            w[r:r + _ROW_BLOCK] = q.reshape(p.shape[0], k)
        return _place({"w": w}, self.sycl_queue)["w"]


@dataclass(frozen=True)
class QuantizedW8:
    """8-bit weights [N, K] with one scale per row."""
    qweight: object
    scales: object

    def __post_init__(self):
        self.check("QuantizedW8")

    def check(self, owner: str) -> None:
        if getattr(self.qweight, "ndim", None) != 2:
            raise InputError(f"{owner}: qweight must be 2-D int8 [N, K], got shape "
                             f"{tuple(getattr(self.qweight, 'shape', ()))}")
        n, k = self.qweight.shape
        _check_part(owner, "qweight", self.qweight, np.int8, (n, k))
        _check_part(owner, "scales", self.scales, np.float16, (n,))
        _check_same_place(owner, qweight=self.qweight, scales=self.scales)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(int(s) for s in self.qweight.shape)

    @property
    def sycl_queue(self):
        return self.qweight.sycl_queue if _is_device(self.qweight) else None

    @property
    def nbytes(self) -> int:
        return int(self.qweight.size) + 2 * int(self.scales.size)

    def to_device(self, queue) -> "QuantizedW8":
        if self.sycl_queue == queue:
            return self
        return QuantizedW8(**_place({"qweight": self.qweight, "scales": self.scales}, queue))

    def to_host(self) -> "QuantizedW8":
        return QuantizedW8(**_place({"qweight": self.qweight, "scales": self.scales}, None))

    def dequantize(self, dtype=np.float32):
        w = _host(self.qweight).astype(np.float64) * _host(self.scales).astype(np.float64)[:, None]
        return _place({"w": w.astype(dtype)}, self.sycl_queue)["w"]


_ROW_BLOCK = 1024  # rows quantized at a time: bounds the float64 temporaries


def _weights_in(owner: str, w) -> tuple[np.ndarray, object]:
    """(host array, queue or None) of a float16/float32 [N, K] weight with finite values."""
    if not (isinstance(w, np.ndarray) or _is_device(w)):
        raise InputTypeError(f"{owner}: w must be a numpy or dpnp array, got {type(w).__name__}")
    if np.dtype(w.dtype) not in (np.dtype(np.float16), np.dtype(np.float32)):
        raise InputTypeError(f"{owner}: w must be float16 or float32, got {np.dtype(w.dtype)}")
    if w.ndim != 2:
        raise InputError(f"{owner}: w must be 2-D [N, K], got shape {tuple(w.shape)}")
    host = np.ascontiguousarray(_host(w))  # any layout (a transposed torch weight is Fortran-ordered): the parts
    bad = ~np.isfinite(host)                # made from it must be C-contiguous
    if bad.any():
        n, k = np.argwhere(bad)[0]
        raise InputError(f"{owner}: w has {int(bad.sum())} non-finite values (first: w[{n}, {k}] = "
                         f"{float(host[n, k])}); NaN/Inf weights cannot be quantized")
    return host, (w.sycl_queue if _is_device(w) else None)


def _fp16_scales(owner: str, scale: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        s16 = scale.astype(np.float16)
    if not np.isfinite(s16).all():
        raise InputError(f"{owner}: a group's scale {float(scale.max()):.6g} overflows float16 (max 65504); "
                         f"weights are too large for float16 scales")
    return s16


def quantize_w4(w, *, group_size: int = 128, symmetric: bool = True) -> QuantizedW4:
    """Round-to-nearest 4-bit quantization of float16/float32 w [N, K] in groups of group_size along K.

    symmetric:  zero point 8, scale = max|w| / 7 per group, q = clip(round(w / scale) + 8, 0, 15)
    asymmetric: scale = (max - min) / 15, zero = clip(round(-min / scale), 0, 15), q = clip(round(w/scale) + zero)
    Scales are rounded to float16 before q is computed, so dequantize() is the nearest grid point to w. An all-zero
    group gets scale 0, and so does a group whose scale underflows float16 (symmetric absmax below about 2.1e-7):
    its weights dequantize to 0, as llama.cpp's Q4_0 does. NaN/Inf weights raise InputError.
    """
    owner = "quantize_w4"
    _check_group_size(owner, group_size)
    if not isinstance(symmetric, (bool, np.bool_)):
        raise InputTypeError(f"{owner}: symmetric must be True or False, got {type(symmetric).__name__} "
                             f"{symmetric!r}")
    host, queue = _weights_in(owner, w)
    n, k = host.shape
    if k % group_size:
        raise InputError(f"{owner}: K = {k} must be a multiple of group_size {group_size}")
    parts = [_quantize_w4_rows(owner, host[r:r + _ROW_BLOCK], group_size, symmetric)
             for r in range(0, max(n, 1), _ROW_BLOCK)]
    packed, scale, zero = (np.concatenate([p[i] for p in parts]) for i in range(3))
    parts = {"packed": packed, "scales": scale, "zeros": None if symmetric else zero}
    return QuantizedW4(**_place(parts, queue), group_size=group_size)


def _quantize_w4_rows(owner: str, rows: np.ndarray, group_size: int, symmetric: bool):
    rows = rows.astype(np.float64)
    n, k = rows.shape
    groups = rows.reshape(n, k // group_size, group_size)
    if symmetric:
        scale = _fp16_scales(owner, np.abs(groups).max(axis=2) / 7.0)
        zero = np.full(scale.shape, SYMMETRIC_ZERO, dtype=np.float64)
    else:
        lo, hi = np.minimum(groups.min(axis=2), 0.0), np.maximum(groups.max(axis=2), 0.0)
        scale = _fp16_scales(owner, (hi - lo) / 15.0)
        safe = np.where(scale > 0, scale.astype(np.float64), 1.0)
        zero = np.clip(np.rint(-lo / safe), 0, 15)
    safe = np.where(scale > 0, scale.astype(np.float64), 1.0)[:, :, None]
    q = np.clip(np.rint(groups / safe) + zero[:, :, None], 0, 15).astype(np.uint8).reshape(n, k)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8), scale, zero.astype(np.uint8)


def quantize_w8(w) -> QuantizedW8:
    """Per-row symmetric 8-bit quantization: scale = max|w| / 127 (float16), q = clip(round(w / scale), -127, 127).
    A row whose scale underflows float16 (max|w| below about 3.8e-6) gets scale 0 and dequantizes to 0."""
    owner = "quantize_w8"
    host, queue = _weights_in(owner, w)
    host = host.astype(np.float64)
    scale = _fp16_scales(owner, np.abs(host).max(axis=1, initial=0.0) / 127.0)
    safe = np.where(scale > 0, scale.astype(np.float64), 1.0)[:, None]
    q = np.clip(np.rint(host / safe), -127, 127).astype(np.int8)
    return QuantizedW8(**_place({"qweight": q, "scales": scale}, queue))


def _int32_in(owner: str, name: str, a, ndim: int = 2) -> np.ndarray:
    h = _host(a)
    if h.dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
        raise InputTypeError(f"{owner}: {name} must be int32 (8 packed uint4), got {h.dtype}")
    if h.ndim != ndim:
        raise InputError(f"{owner}: {name} must be {ndim}-D, got shape {h.shape}")
    return np.ascontiguousarray(h).view(np.uint32)


def _unpack_nibbles(words: np.ndarray, order=range(8)) -> np.ndarray:
    """uint32 [..., M] -> uint8 [..., M, 8] where [..., m, order[j]] = nibble j (bits 4j..4j+3) of words[..., m]."""
    out = np.empty(words.shape + (8,), dtype=np.uint8)
    for j, dest in enumerate(order):
        out[..., dest] = (words >> np.uint32(4 * j)) & np.uint32(15)
    return out


def _from_codes(owner: str, q_kn: np.ndarray, zeros_gn: np.ndarray, scales_gn, queue) -> QuantizedW4:
    """Build from codes [K, N], zero points [K/G, N] and scales [K/G, N] (the checkpoint orientation)."""
    k, n = q_kn.shape
    scales = _host(scales_gn)
    if scales.ndim != 2 or scales.shape[1] != n or scales.shape[0] == 0 or k % scales.shape[0]:
        raise InputError(f"{owner}: scales must be [K/group_size, N] with N = {n} and K = {k}, got {scales.shape}")
    if scales.dtype != np.float16:
        raise InputTypeError(f"{owner}: scales must be float16, got {scales.dtype}")
    finite = np.isfinite(scales)
    if not finite.all():
        g, c = (int(v) for v in np.argwhere(~finite)[0])
        raise InputError(f"{owner}: scales[{g}, {c}] = {scales[g, c]}: scales must be finite (NaN / inf would make "
                         f"every product of that group NaN)")
    group_size = k // scales.shape[0]
    _check_group_size(owner, group_size)
    if zeros_gn.shape != scales.shape:
        raise InputError(f"{owner}: qzeros unpack to {zeros_gn.shape}, scales are {scales.shape}; they must match")
    q = np.ascontiguousarray(q_kn.T)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    zeros = np.ascontiguousarray(zeros_gn.T).astype(np.uint8)
    parts = {"packed": packed, "scales": np.ascontiguousarray(scales.T),
             "zeros": None if (zeros == SYMMETRIC_ZERO).all() else zeros}
    return QuantizedW4(**_place(parts, queue), group_size=group_size)


def from_gptq(qweight, qzeros, scales, *, g_idx=None, checkpoint_format: str = "gptq", queue=None) -> QuantizedW4:
    """Import a 4-bit GPTQ layer (AutoGPTQ / GPTQModel / GPTQ-for-LLaMA layout, `bits = 4`).

    qweight int32 [K/8, N]: word [i, n] holds k = 8i + j in bits 4j..4j+3.
    qzeros  int32 [K/G, N/8]: word [g, m] holds column n = 8m + j in bits 4j..4j+3.
    scales  float16 [K/G, N].
    checkpoint_format "gptq" (v1, the default of AutoGPTQ and GPTQModel): the stored zero is zero - 1, the real zero
    point is stored + 1 (a real zero of 16 cannot occur in 4 bits and is refused). "gptq_v2": stored as-is.
    g_idx (act-order) is accepted only when trivial (g_idx[k] == k // G); a permuted g_idx raises InputError.
    Returns a symmetric QuantizedW4 (zeros None) when every zero point is 8.
    """
    owner = "from_gptq"
    if checkpoint_format not in ("gptq", "gptq_v2"):
        raise InputError(f"{owner}: checkpoint_format must be 'gptq' (v1) or 'gptq_v2', got {checkpoint_format!r}")
    words = _int32_in(owner, "qweight", qweight)
    zwords = _int32_in(owner, "qzeros", qzeros)
    k, n = 8 * words.shape[0], words.shape[1]
    if n % 8:
        raise InputError(f"{owner}: N (qweight's columns) must be a multiple of 8 (qzeros pack 8 columns per word), "
                         f"got qweight {words.shape}")
    if zwords.shape[1] * 8 != n:
        raise InputError(f"{owner}: qzeros must be [K/group_size, N/8] = [*, {n // 8}], got {zwords.shape}")
    q_kn = _unpack_nibbles(words.T).reshape(n, k).T  # [n, i, j] -> k = 8i + j
    zeros = _unpack_nibbles(zwords).reshape(zwords.shape[0], n).astype(np.int32)
    if checkpoint_format == "gptq":
        zeros = zeros + 1
        if (zeros > 15).any():
            g, c = np.argwhere(zeros > 15)[0]
            raise InputError(f"{owner}: v1 qzeros store zero - 1; group {g}, column {c} stores 15, i.e. zero point "
                             f"16, which 4 bits cannot hold (is this a gptq_v2 checkpoint?)")
    if g_idx is not None:
        gi = _host(g_idx)
        if not np.issubdtype(gi.dtype, np.integer):
            raise InputTypeError(f"{owner}: g_idx must hold integers (int32 in GPTQ checkpoints), got {gi.dtype}")
        gi = gi.astype(np.int64).reshape(-1)
        groups = _host(scales).shape[0]
        expected = np.arange(k) // (k // max(groups, 1))
        if gi.shape != (k,) or not np.array_equal(gi, expected):
            raise InputError(f"{owner}: g_idx is not the trivial k // group_size (act-order / desc_act checkpoint); "
                             f"permuted groups are not supported")
    return _from_codes(owner, q_kn, zeros, scales, queue)


def from_awq(qweight, qzeros, scales, *, queue=None) -> QuantizedW4:
    """Import a 4-bit AWQ layer (llm-awq / AutoAWQ GEMM layout).

    qweight int32 [K, N/8]: word [k, m], nibble slot j (bits 4j..4j+3) holds column n = 8m + AWQ_ORDER[j],
    AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7).  qzeros int32 [K/G, N/8], same packing, zero points stored as-is.
    scales float16 [K/G, N].
    """
    owner = "from_awq"
    words = _int32_in(owner, "qweight", qweight)
    zwords = _int32_in(owner, "qzeros", qzeros)
    k, n = words.shape[0], 8 * words.shape[1]
    if zwords.shape[1] != words.shape[1]:
        raise InputError(f"{owner}: qzeros must be [K/group_size, N/8] = [*, {n // 8}], got {zwords.shape}")
    q_kn = _unpack_nibbles(words, AWQ_ORDER).reshape(k, n)
    zeros = _unpack_nibbles(zwords, AWQ_ORDER).reshape(zwords.shape[0], n)
    return _from_codes(owner, q_kn, zeros, scales, queue)
