"""Quantized MoE expert weights for moe_ffn_w4a16: E experts' gate_up [E, 2I, H] and down [E, H, I] in W4.

Each stack is one `QuantizedW4` of stacked rows (xe2rt.quant's layout, checks and dequantization reused as they are):
  gate_up  QuantizedW4 [E * 2I, H]  expert e's gate rows at e 2I + i, its up rows at e 2I + I + i (gate first, as
                                    vLLM's w13 and the HF checkpoints' concatenation)
  down     QuantizedW4 [E * H, I]   expert e's rows at e H + n
So expert e's weight is rows [e N, (e + 1) N) of the stack, and the kernels index it without a copy.

Built by `quantize_w4_experts(gate_up, down)` from float weights, or imported from stacked GPTQ / AWQ tensors (the
per-expert layouts of xe2rt.from_gptq / from_awq with a leading expert axis, as vLLM's fused-MoE w13 / w2 params).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InputError, InputTypeError
from .quant import QuantizedW4, from_awq, from_gptq, quantize_w4, SYMMETRIC_ZERO

STEP = 128  # H and I must be multiples of this (the kernels' k step and h layout)


def _host(a) -> np.ndarray:
    if hasattr(a, "sycl_queue"):
        import dpnp
        return dpnp.asnumpy(a)
    return np.asarray(a)


@dataclass(frozen=True)
class QuantizedW4Experts:
    """E experts' W4 FFN weights (layout in the module docstring)."""
    gate_up: QuantizedW4
    down: QuantizedW4
    num_experts: int

    def __post_init__(self):
        self.check("QuantizedW4Experts")

    def check(self, owner: str) -> None:
        for name, part in (("gate_up", self.gate_up), ("down", self.down)):
            if not isinstance(part, QuantizedW4):
                raise InputTypeError(f"{owner}: {name} must be a QuantizedW4 of stacked rows, got "
                                     f"{type(part).__name__}")
            part.check(f"{owner} {name}")
        e = self.num_experts
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or e < 1:
            raise InputError(f"{owner}: num_experts must be an int >= 1, got {e!r}")
        (gu_rows, h), (d_rows, i) = self.gate_up.shape, self.down.shape
        if gu_rows % (2 * e) or d_rows % e:
            raise InputError(f"{owner}: gate_up rows {gu_rows} must be E x 2I and down rows {d_rows} E x H for "
                             f"E = {e}")
        if gu_rows // (2 * e) != i or d_rows // e != h:
            raise InputError(f"{owner}: gate_up is [E*2I, H] = {self.gate_up.shape} and down [E*H, I] = "
                             f"{self.down.shape} for E = {e}: they disagree (need I = {gu_rows // (2 * e)} columns "
                             f"in down and H = {h} rows per expert in down)")
        for name, size in (("H", h), ("I", i)):
            if size % STEP or size == 0:
                raise InputError(f"{owner}: {name} = {size} must be a positive multiple of {STEP}")
        if self.gate_up.sycl_queue != self.down.sycl_queue:
            raise InputError(f"{owner}: gate_up and down must both be host (numpy) or both on one queue")

    @property
    def hidden(self) -> int:
        return self.gate_up.shape[1]

    @property
    def intermediate(self) -> int:
        return self.down.shape[1]

    @property
    def shape(self) -> tuple[int, int, int]:
        """(E, H, I)."""
        return self.num_experts, self.hidden, self.intermediate

    @property
    def sycl_queue(self):
        return self.gate_up.sycl_queue

    @property
    def nbytes(self) -> int:
        return self.gate_up.nbytes + self.down.nbytes

    def expert_nbytes(self) -> int:
        """Bytes of one expert's codes, scales and zero points (gate_up and down)."""
        return self.nbytes // self.num_experts

    def to_device(self, queue) -> "QuantizedW4Experts":
        return QuantizedW4Experts(self.gate_up.to_device(queue), self.down.to_device(queue), self.num_experts)

    def to_host(self) -> "QuantizedW4Experts":
        return QuantizedW4Experts(self.gate_up.to_host(), self.down.to_host(), self.num_experts)

    def dequantize(self):
        """(gate_up [E, 2I, H], down [E, H, I]) float32 numpy: the exact weights the kernels multiply with."""
        e, h, i = self.shape
        gu = self.gate_up.to_host().dequantize(np.float32).reshape(e, 2 * i, h)
        dn = self.down.to_host().dequantize(np.float32).reshape(e, h, i)
        return gu, dn


def _float_experts(owner: str, name: str, w, dims: int = 3):
    if not (isinstance(w, np.ndarray) or hasattr(w, "sycl_queue")):
        raise InputTypeError(f"{owner}: {name} must be a numpy or dpnp array, got {type(w).__name__}")
    if w.ndim != dims:
        raise InputError(f"{owner}: {name} must be {dims}-D, got shape {tuple(w.shape)}")
    return w


def quantize_w4_experts(gate_up, down, *, group_size: int = 128, symmetric: bool = True) -> QuantizedW4Experts:
    """Quantize float16/float32 gate_up [E, 2I, H] (gate rows first) and down [E, H, I] with xe2rt.quantize_w4's
    rules, per group of `group_size` along the reduction axis. dpnp inputs give device parts on their queue."""
    owner = "quantize_w4_experts"
    gate_up = _float_experts(owner, "gate_up", gate_up)
    down = _float_experts(owner, "down", down)
    e, two_i, h = gate_up.shape
    if tuple(down.shape) != (e, h, two_i // 2) or two_i % 2:
        raise InputError(f"{owner}: gate_up [E, 2I, H] = {tuple(gate_up.shape)} needs down [E, H, I] = "
                         f"{(e, h, two_i // 2)}, got {tuple(down.shape)}")
    gu = quantize_w4(gate_up.reshape(e * two_i, h), group_size=group_size, symmetric=symmetric)
    dn = quantize_w4(down.reshape(e * h, two_i // 2), group_size=group_size, symmetric=symmetric)
    return QuantizedW4Experts(gu, dn, e)


def _stack(owner: str, name: str, layers: list[QuantizedW4]) -> QuantizedW4:
    """One QuantizedW4 of stacked rows from per-expert layers; zero points kept unless every expert is symmetric."""
    sizes = {layer.group_size for layer in layers}
    if len(sizes) != 1:
        raise InputError(f"{owner}: {name} experts have different group sizes {sorted(sizes)}")
    packed = np.concatenate([_host(layer.packed) for layer in layers])
    scales = np.concatenate([_host(layer.scales) for layer in layers])
    zeros = None
    if any(layer.zeros is not None for layer in layers):
        zeros = np.concatenate([layer.zero_points() for layer in layers])
        if (zeros == SYMMETRIC_ZERO).all():
            zeros = None
    return QuantizedW4(packed, scales, zeros, sizes.pop())


def _import(owner: str, one, w13: tuple, w2: tuple, queue, **kw) -> QuantizedW4Experts:
    e = len(w13[0])
    for name, parts in (("w13", w13), ("w2", w2)):
        for part_name, part in zip(("qweight", "qzeros", "scales"), parts):
            if getattr(part, "ndim", None) != 3 or len(part) != e:
                raise InputError(f"{owner}: {name}_{part_name} must be 3-D with E = {e} experts first, got shape "
                                 f"{tuple(getattr(part, 'shape', ()))}")
    w13 = [_host(p) for p in w13]
    w2 = [_host(p) for p in w2]
    gu = _stack(owner, "w13", [one(*(p[x] for p in w13), **kw) for x in range(e)])
    dn = _stack(owner, "w2", [one(*(p[x] for p in w2), **kw) for x in range(e)])
    experts = QuantizedW4Experts(gu, dn, e)
    return experts if queue is None else experts.to_device(queue)


def experts_from_gptq(w13_qweight, w13_qzeros, w13_scales, w2_qweight, w2_qzeros, w2_scales, *,
                      checkpoint_format: str = "gptq", queue=None) -> QuantizedW4Experts:
    """Import stacked 4-bit GPTQ experts: w13_* are E per-expert xe2rt.from_gptq layers of the fused gate_up
    projection (qweight int32 [E, H/8, 2I], qzeros [E, H/G, 2I/8], scales float16 [E, H/G, 2I], gate columns
    first), w2_* of the down projection (qweight [E, I/8, H], qzeros [E, I/G, H/8], scales [E, I/G, H])."""
    return _import("experts_from_gptq", from_gptq, (w13_qweight, w13_qzeros, w13_scales),
                   (w2_qweight, w2_qzeros, w2_scales), queue, checkpoint_format=checkpoint_format)


def experts_from_awq(w13_qweight, w13_qzeros, w13_scales, w2_qweight, w2_qzeros, w2_scales, *,
                     queue=None) -> QuantizedW4Experts:
    """Import stacked 4-bit AWQ (GEMM layout) experts: w13_qweight int32 [E, H, 2I/8], w13_qzeros [E, H/G, 2I/8],
    w13_scales float16 [E, H/G, 2I]; w2_qweight [E, I, H/8], w2_qzeros [E, I/G, H/8], w2_scales [E, I/G, H]; each
    expert as xe2rt.from_awq reads it."""
    return _import("experts_from_awq", from_awq, (w13_qweight, w13_qzeros, w13_scales),
                   (w2_qweight, w2_qzeros, w2_scales), queue)
