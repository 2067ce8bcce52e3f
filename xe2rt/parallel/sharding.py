"""Splitting one decode weight [N, K] into R equal shards for tensor parallelism.

column-parallel: shard r holds output rows [r N/R, (r+1) N/R); every shard reads the whole x and produces its own
                 slice of y, so the slices are concatenated (or consumed where they are, as the MLP does).
row-parallel:    shard r holds input columns [r K/R, (r+1) K/R); every shard reads its slice of x and produces a
                 partial y [N] over its K slice; the partials are summed (the one reduction).

Weights: float16 numpy/dpnp arrays [N, K], QuantizedW4 and QuantizedW8 (xe2rt.quant). A row-parallel W4 split keeps
whole quantization groups (K/R must be a multiple of group_size: a group's scale and zero point belong to exactly
one shard); a row-parallel W8 shard keeps the full per-row scale (scale[n] multiplies every k of row n, so each
partial carries it and the sum is unchanged). Shards are equal; R not dividing the split dimension is an error
(no uneven policy: equal shards keep the per-device bytes and the reduction shapes identical on every device).

Shards come back as host (numpy) parts; `place(shard, queue)` puts one on a device. Slicing a device weight brings it
to the host once (sharding is a load-time cost).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError, InputTypeError
from ..quant import QuantizedW4, QuantizedW8, _host

MODES = ("column", "row")


def kind(w) -> str:
    """'w4', 'w8' or 'fp16' for a weight the decode ops take; InputTypeError otherwise."""
    if isinstance(w, QuantizedW4):
        return "w4"
    if isinstance(w, QuantizedW8):
        return "w8"
    if isinstance(w, np.ndarray) or all(hasattr(w, a) for a in ("sycl_queue", "dtype", "ndim", "shape")):
        if np.dtype(w.dtype) != np.float16:
            raise InputTypeError(f"xe2rt.parallel: a plain weight must be float16 [N, K], got {np.dtype(w.dtype)}")
        if w.ndim != 2:
            raise InputError(f"xe2rt.parallel: a plain weight must be 2-D [N, K], got shape {tuple(w.shape)}")
        return "fp16"
    raise InputTypeError(f"xe2rt.parallel: a weight must be a float16 array [N, K], QuantizedW4 or QuantizedW8, "
                         f"got {type(w).__name__}")


def shape(w) -> tuple[int, int]:
    kind(w)
    return tuple(int(s) for s in w.shape)


def describe(w) -> str:
    """Kind, shape and grouping, as error messages and reports quote them."""
    k = kind(w)
    n, kk = shape(w)
    if k == "w4":
        return f"W4 [{n}, {kk}] g{w.group_size}{'' if w.symmetric else ' zp'}"
    return f"{'W8' if k == 'w8' else 'fp16'} [{n}, {kk}]"


def _check_count(owner: str, shards) -> int:
    if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
        raise InputError(f"{owner}: the shard count must be an integer >= 1, got {shards!r}")
    return int(shards)


def split_column_parallel(w, shards: int) -> list:
    """R shards of w by output rows N (each [N/R, K]); N % R != 0 raises InputError."""
    owner = "split_column_parallel"
    r = _check_count(owner, shards)
    k = kind(w)
    n, _ = shape(w)
    if n % r:
        raise InputError(f"{owner}: N = {n} output rows of {describe(w)} do not split into {r} equal shards "
                         f"(N % R = {n % r}); choose R dividing N")
    rows = n // r
    cut = lambda a, i: np.ascontiguousarray(_host(a)[i * rows:(i + 1) * rows])  # noqa: E731
    if k == "w4":
        return [QuantizedW4(cut(w.packed, i), cut(w.scales, i), None if w.zeros is None else cut(w.zeros, i),
                            w.group_size) for i in range(r)]
    if k == "w8":
        return [QuantizedW8(cut(w.qweight, i), cut(w.scales, i)) for i in range(r)]
    return [cut(w, i) for i in range(r)]


def split_row_parallel(w, shards: int) -> list:
    """R shards of w by input columns K (each [N, K/R]); K % R != 0, or for W4 a K/R that is not a whole number of
    quantization groups, raises InputError."""
    owner = "split_row_parallel"
    r = _check_count(owner, shards)
    k = kind(w)
    n, kk = shape(w)
    if kk % r:
        raise InputError(f"{owner}: K = {kk} input columns of {describe(w)} do not split into {r} equal shards "
                         f"(K % R = {kk % r}); choose R dividing K")
    cols = kk // r
    if k == "w4":
        g = w.group_size
        if cols % g:
            raise InputError(f"{owner}: K / R = {kk} / {r} = {cols} columns per shard cuts a quantization group of "
                             f"{describe(w)}: a row-parallel W4 shard must hold whole groups (K / R a multiple of "
                             f"group_size {g}); choose R dividing K / group_size = {kk // g}")
        per_group = cols // g
        half = lambda a, i: np.ascontiguousarray(_host(a)[:, i * cols // 2:(i + 1) * cols // 2])  # noqa: E731
        grp = lambda a, i: np.ascontiguousarray(_host(a)[:, i * per_group:(i + 1) * per_group])  # noqa: E731
        return [QuantizedW4(half(w.packed, i), grp(w.scales, i), None if w.zeros is None else grp(w.zeros, i), g)
                for i in range(r)]
    cut = lambda a, i: np.ascontiguousarray(_host(a)[:, i * cols:(i + 1) * cols])  # noqa: E731
    if k == "w8":
        scales = np.ascontiguousarray(_host(w.scales))  # every shard keeps the full per-row scale
        return [QuantizedW8(cut(w.qweight, i), scales.copy()) for i in range(r)]
    return [cut(w, i) for i in range(r)]


def split(w, shards: int, mode: str) -> list:
    if mode not in MODES:
        raise InputError(f"xe2rt.parallel.split: mode must be 'column' or 'row', got {mode!r}")
    return split_column_parallel(w, shards) if mode == "column" else split_row_parallel(w, shards)


def place(w, queue):
    """The weight with device parts on `queue` (no copy when already there)."""
    if kind(w) == "fp16":
        import dpnp
        if getattr(w, "sycl_queue", None) == queue:
            return w
        return dpnp.asarray(_host(w), sycl_queue=queue)
    return w.to_device(queue)


def nbytes(w) -> int:
    return int(w.nbytes) if kind(w) != "fp16" else int(w.size) * 2
