"""xe2rt: hand-tuned Intel Xe2 (Battlemage, Lunar Lake) kernels for dpnp users, precompiled per target to SPIR-V
and loaded through dpctl. CPU devices get CPU-shaped variants of the same kernels.

Installing xe2rt puts a start-up hook in site-packages that points OCL_ICD_FILENAMES at the pip-installed Intel OpenCL
CPU runtime when that variable is unset; importing xe2rt does the same where the hook is missing (see xe2rt._icd), so
`opencl:cpu` works without any exported variable. XE2RT_* variables are checked here, at import.
"""
import sys as _sys

from . import _icd, config as _config
from .errors import ConfigError as _ConfigError

try:
    _icd.setup()
    _config.icd_setup_enabled()
    _config.forced_target()
except _ConfigError:
    # `python -m xe2rt ...` (argv[0] is '-m' while the package is located) or the `xe2rt` script: the command line's
    # main() checks the variables again and reports the error as one line with exit status 2.
    if not (_sys.argv[:1] == ["-m"] or _sys.argv[0].endswith("/xe2rt")):
        raise

from .errors import (ArtifactError, CompileError, ConfigError, InputError, InputTypeError,  # noqa: E402
                     LaunchLimitError, TargetError, Xe2rtError)
from .info import info  # noqa: E402
from . import ops as _ops  # noqa: E402
from .fastcall import cached as _cached  # noqa: E402
from .ops import gemm_fp16 as _gemm_fp16, gemv_fp16 as _gemv_fp16, gemv_w4a16 as _gemv_w4a16  # noqa: E402
from .ops import gemv_w8a16 as _gemv_w8a16, moe as _moe, routing as _routing  # noqa: E402
from .ops import decoder_small as _decoder_small  # noqa: E402
from .ops import decode_attention as _decode_attention  # noqa: E402
from .ops import prefill_attention as _prefill_attention  # noqa: E402
from .ops import gemm_w4a16 as _gemm_w4a16  # noqa: E402
from .ops import softmax_stats as _softmax_stats  # noqa: E402

# The public ops: each call checked as the op checks it; warm calls replayed (xe2rt.fastcall).
gemm_fp16 = _cached(_gemm_fp16.gemm_fp16)
gemm_w4a16 = _cached(_gemm_w4a16.gemm_w4a16)
gemv_fp16 = _cached(_gemv_fp16.gemv_fp16)
gemv_w4a16 = _cached(_gemv_w4a16.gemv_w4a16)
gemv_w8a16 = _cached(_gemv_w8a16.gemv_w8a16)
softmax_topk = _cached(_routing.softmax_topk)
topk = _cached(_routing.topk)
softmax_stats = _cached(_softmax_stats.softmax_stats)
# moe allocates temporaries (routing metadata, per-pair activations) on every call: not replayable, not wrapped.
moe_ffn_w4a16 = _moe.moe_ffn_w4a16
moe_layer = _moe.moe_layer
rms_norm = _cached(_decoder_small.rms_norm)
silu_mul = _cached(_decoder_small.silu_mul)
# rope_kv reads positions back by default: its replays check them first (data_check).
rope_kv = _decoder_small.replayable_rope_kv(_cached(_decoder_small.rope_kv, in_place=(0, 1, 4, 5),
                                                    data_check=_decoder_small.positions_data_check))
# warm calls replayed by an inner cached op that takes the per-thread workspace as an argument (see the module)
decode_attention = _decode_attention.decode_attention
prefill_attention = _cached(_prefill_attention.prefill_attention)
from .quant import QuantizedW4, QuantizedW8, from_awq, from_gptq, quantize_w4, quantize_w8  # noqa: E402
from .quant_experts import (QuantizedW4Experts, experts_from_awq, experts_from_gptq,  # noqa: E402
                            quantize_w4_experts)
from .targets import target_for  # noqa: E402
from .plan import Plan, bind  # noqa: E402
from .graphs import Graph, graph  # noqa: E402
from .module import Kernel, LocalMemory, Module, load  # noqa: E402
from .warmup import warmup  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "gemm_fp16", "gemv_fp16", "softmax_topk", "topk", "softmax_stats", "info", "target_for", "__version__", "bind",
    "Plan", "graph", "Graph", "warmup",
    "gemv_w4a16", "gemv_w8a16", "gemm_w4a16", "QuantizedW4", "QuantizedW8", "quantize_w4", "quantize_w8",
    "from_gptq", "from_awq",
    "moe_ffn_w4a16", "moe_layer", "QuantizedW4Experts", "quantize_w4_experts", "experts_from_gptq",
    "experts_from_awq", "rms_norm", "rope_kv", "silu_mul", "decode_attention", "prefill_attention",
    "load", "Module", "Kernel", "LocalMemory",
    "Xe2rtError", "ArtifactError", "CompileError", "ConfigError", "InputError", "InputTypeError", "LaunchLimitError",
    "TargetError",
]
