"""MoE routing (seed 003): softmax + top-k + renormalize per row of router logits, and top-k alone.

Kernels (spirv_src/softmax_topk.cl): compile-time variants for common (n, k) router shapes, named
softmax_topk_<f16|f32>_n<N>_k<K>_w<W>, and a generic runtime-(n, k) kernel per dtype, softmax_topk_<f16|f32>_any.
The variant list lives only in the .cl; it is read back here from the kernel names in the manifest.

Geometry:
  Xe2 targets: W lanes of a 16-lane sub-group per row (W from the variant, 16 for the generic kernel), so a
               sub-group covers 16 / W rows and a work-group of SGS sub-groups covers SGS * 16 / W rows
               -> local size 16 * SGS, global size ceil(rows / (SGS * 16 / W)) * local
  cpu target:  one work-item per row -> local size LOCAL, global size ceil(rows / LOCAL) * LOCAL
Rows past the end idle (Xe2: they still take part in the segment shuffles, storing nothing).
"""
from __future__ import annotations

import operator
import re

import numpy as np

from .. import launch, validate
from ..errors import InputError, InputTypeError
from .common import ceil_div, is_xe2, program_for

FAMILY = "softmax_topk"
SUB_GROUP = 16
MODE_TOPK, MODE_SOFTMAX, MODE_SOFTMAX_NORMALIZE = 0, 1, 2
_DTYPE_TAGS = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}
_VARIANT_RE = re.compile(r"softmax_topk_(f16|f32)_n(\d+)_k(\d+)_w(\d+)$")
_variants_cache: dict[tuple, dict] = {}


def variants(program) -> dict[tuple[str, int, int], tuple[str, int]]:
    """(dtype tag, n, k) -> (kernel name, lanes per row W) for the program's compile-time variants."""
    key = (program.target, str(program.path))
    if key not in _variants_cache:
        table = {}
        for name in program.kernel_names:
            m = _VARIANT_RE.match(name)
            if m:
                tag, n, k, w = m.group(1), *map(int, m.groups()[1:])
                table[(tag, n, k)] = (name, w)
        _variants_cache[key] = table
    return _variants_cache[key]


def choose_kernel(program, dtype, n: int, k: int) -> tuple[str, int]:
    """(kernel name, W): the compile-time variant for (n, k) if one exists, else the generic kernel (W = 16)."""
    tag = _DTYPE_TAGS[np.dtype(dtype)]
    return variants(program).get((tag, n, k), (f"softmax_topk_{tag}_any", SUB_GROUP))


def geometry(constants: dict, target: str, rows: int, lanes_per_row: int) -> tuple[int, int]:
    """(global size, local size) for `rows` rows."""
    if is_xe2(target):
        local = SUB_GROUP * constants["SGS"]
        rows_per_group = constants["SGS"] * (SUB_GROUP // lanes_per_row)
    else:
        local = rows_per_group = constants["LOCAL"]
    return ceil_div(rows, rows_per_group) * local, local


def _check_k(op: str, k, n: int, constants: dict, target: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputTypeError(f"{op}: k must be an int, got {type(k).__name__} {k!r}")
    k = operator.index(k)
    n_max, k_max = constants["N_MAX"], constants["K_MAX"]
    if n > n_max:
        raise InputError(f"{op}: rows of n = {n} values exceed the supported maximum n <= {n_max} "
                         f"(target {target})")
    if not 1 <= k <= min(n, k_max):
        raise InputError(f"{op}: k must satisfy 1 <= k <= min(n, {k_max}) = {min(n, k_max)}, got k = {k} "
                         f"for n = {n}")
    return k


def _check_out(op: str, out, shape: tuple, dtype, queue, x):
    if out is None:
        return None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise InputTypeError(f"{op}: out must be a (values, indices) tuple of two dpnp arrays, got "
                             f"{type(out).__name__}")
    values, indices = out
    validate.out_array(op, values, shape=shape, dtype=dtype, queue=queue, inputs={"x": x})
    validate.out_array(op, indices, shape=shape, dtype=np.int32, queue=queue, inputs={"x": x})
    if values.size and validate.overlaps(values, indices):
        raise InputError(f"{op}: out values and out indices overlap; they must be separate arrays")
    return values, indices


def run(op: str, x, k, mode: int, *, out=None, target: str | None = None):
    """Validate, launch, and return ((values, indices), event); event is None when nothing needed launching."""
    validate.device_array(op, "x" if mode == MODE_TOPK else "logits", x, dtypes=[np.float16, np.float32], ndims=[2])
    queue = x.sycl_queue
    if np.dtype(x.dtype) == np.float16:
        validate.require_fp16(op, queue)
    rows, n = x.shape
    program = program_for(queue, FAMILY, target)
    k = _check_k(op, k, n, program.constants, program.target)
    shape = (rows, k)
    out = _check_out(op, out, shape, x.dtype, queue, x)
    validate.fits_int32(op, rows=rows, n=n)  # element offsets in the kernels are 64-bit; row and column ids 32-bit
    values, indices = out if out is not None else launch.new_outputs([(shape, x.dtype), (shape, np.int32)], queue)
    if rows == 0:
        return (values, indices), None
    name, lanes_per_row = choose_kernel(program, x.dtype, n, k)
    global_size, local_size = geometry(program.constants, program.target, rows, lanes_per_row)
    event = launch.launch(program.kernel(name), [x, values, indices, rows, n, k, mode], global_size, local_size,
                          queue)
    return (values, indices), event


def softmax_topk(logits, k: int, *, normalize: bool = True, out=None, target: str | None = None):
    """MoE routing: per row of logits [rows, n] (float16 or float32), the k largest softmax probabilities and their
    expert indices, ordered by value descending (lower index first on ties). normalize=True divides the kept k by
    their sum. Returns (values [rows, k] in the logits' dtype, indices [rows, k] int32); `out` may give both as a
    tuple. Softmax is computed in fp32 after max subtraction; rows with +-Inf or NaN follow the rules in
    xe2rt.reference.routing. `target` forces a kernel target (bmg, lnl, cpu) for this call."""
    if not isinstance(normalize, (bool, np.bool_)):
        raise InputTypeError(f"softmax_topk: normalize must be True or False, got {normalize!r}")
    mode = MODE_SOFTMAX_NORMALIZE if normalize else MODE_SOFTMAX
    return run("softmax_topk", logits, k, mode, out=out, target=target)[0]


def topk(x, k: int, *, out=None, target: str | None = None):
    """The k largest values of each row of x [rows, n] (float16 or float32) and their indices, ordered by value
    descending, lower index first on ties, NaN above +Inf. Returns (values [rows, k] in x's dtype, exactly as stored
    in x, indices [rows, k] int32); `out` may give both as a tuple."""
    return run("topk", x, k, MODE_TOPK, out=out, target=target)[0]
