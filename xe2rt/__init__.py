"""xe2rt: hand-tuned Intel Xe2 (Battlemage, Lunar Lake) kernels for dpnp users, precompiled per target to SPIR-V
and loaded through dpctl. CPU devices get CPU-shaped variants of the same kernels.

Importing xe2rt points OCL_ICD_FILENAMES at the pip-installed Intel OpenCL CPU runtime when that variable is unset
(see xe2rt._icd), so `opencl:cpu` works without any exported variable. Import xe2rt before the first SYCL device query.
"""
from . import _icd

_icd.setup()

from .errors import (ArtifactError, ConfigError, InputError, InputTypeError, LaunchLimitError,  # noqa: E402
                     TargetError, Xe2rtError)
from .info import info  # noqa: E402
from .ops.gemm_fp16 import gemm_fp16  # noqa: E402
from .ops.gemv_fp16 import gemv_fp16  # noqa: E402
from .ops.gemv_w4a16 import gemv_w4a16  # noqa: E402
from .ops.gemv_w8a16 import gemv_w8a16  # noqa: E402
from .ops.moe import moe_ffn_w4a16, moe_layer  # noqa: E402
from .ops.routing import softmax_topk, topk  # noqa: E402
from .quant import QuantizedW4, QuantizedW8, from_awq, from_gptq, quantize_w4, quantize_w8  # noqa: E402
from .quant_experts import (QuantizedW4Experts, experts_from_awq, experts_from_gptq,  # noqa: E402
                            quantize_w4_experts)
from .targets import target_for  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "gemm_fp16", "gemv_fp16", "softmax_topk", "topk", "info", "target_for", "__version__",
    "gemv_w4a16", "gemv_w8a16", "QuantizedW4", "QuantizedW8", "quantize_w4", "quantize_w8", "from_gptq", "from_awq",
    "moe_ffn_w4a16", "moe_layer", "QuantizedW4Experts", "quantize_w4_experts", "experts_from_gptq",
    "experts_from_awq",
    "Xe2rtError", "ArtifactError", "ConfigError", "InputError", "InputTypeError", "LaunchLimitError", "TargetError",
]
