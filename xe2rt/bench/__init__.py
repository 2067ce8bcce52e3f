"""`python -m xe2rt bench`: event-timed kernel benchmarks against the device's own measured read bandwidth and the
best alternative a user has, measured side by side in one run.

Each family module exposes `cases(ctx) -> list[Case]`; FAMILIES maps the family name to its module.
"""
FAMILIES = {
    "gemm_fp16": "xe2rt.bench.gemm_fp16",
    "gemm_w4a16": "xe2rt.bench.gemm_w4a16",
    "gemv_fp16": "xe2rt.bench.gemv_fp16",
    "gemv_w4a16": "xe2rt.bench.gemv_w4a16",
    "gemv_w8a16": "xe2rt.bench.gemv_w8a16",
    "launch": "xe2rt.bench.launch",
    "minilm": "xe2rt.bench.models",
    "softmax_topk": "xe2rt.bench.routing",
    "tp": "xe2rt.bench.tp",
    "moe_ffn_w4a16": "xe2rt.bench.moe",
    "decode": "xe2rt.bench.decode",
    "decoder_small": "xe2rt.bench.decoder",
    "decode_attention": "xe2rt.bench.attention",
    "prefill_attention": "xe2rt.bench.attention_prefill",
}
# Not a timed family: the static hot-loop table of every bmg/lnl kernel (ocloc ISA + estimated ceilings per chip),
# printed by `python -m xe2rt bench` after the timed table.
STATIC_TABLE = "xe2rt.bench.xe2_static"
