"""`python -m xe2rt generate PATH (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--weights ...] [--temperature T]
[--seed S]`: load a Hugging Face decoder folder, stream the generated text (token ids when the folder has no
tokenizer.json) and end with one line: prompt tokens, prefill tok/s, decode tok/s, peak memory."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="model folder: config.json + model.safetensors (or shards)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs tokenizer.json in the folder)")
    src.add_argument("--prompt-ids", help="prompt token ids, comma separated: 1,2,3")
    parser.add_argument("-n", "--max-new-tokens", type=int, default=32)
    parser.add_argument("--weights", default="auto", choices=["auto", "fp16", "w4", "w8"])
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--activations", default="auto", choices=["auto", "q8"],
                        help="q8: the W4 GEMVs take the activations as 8-bit integers per 32 (llama.cpp's Q8_0; CPU "
                             "devices with AVX2)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="KV cache size in tokens (default: the prompt's tokens + n, at most 4096)")
    parser.add_argument("--device", default=None, help="SYCL filter string (default: dpctl's default device)")


def run(args: argparse.Namespace) -> int:
    from ..errors import InputError, Xe2rtError
    if not Path(args.path).is_dir():
        state = "is a file, not a folder" if Path(args.path).exists() else "does not exist"
        print(f"xe2rt generate: model folder {args.path!r} {state}", file=sys.stderr)
        return 2
    import dpctl
    import numpy as np
    from . import llm
    from .checkpoint import current_rss_bytes, env_rss_bytes, read_config, tokenizer_for
    streamed = []  # tokens printed so far (an error after them starts on a new line)
    try:
        if args.prompt_ids is not None:
            items = [t.strip() for t in args.prompt_ids.split(",")]
            if items == [""]:
                items = []
            try:
                values = [int(t) for t in items]
            except ValueError:
                print(f"xe2rt generate: --prompt-ids must be comma-separated integers, got {args.prompt_ids!r}",
                      file=sys.stderr)
                return 2
            if not values:
                print("xe2rt generate: --prompt-ids is empty: a prompt needs at least one token", file=sys.stderr)
                return 2
            huge = [v for v in values if not -2**31 <= v < 2**31]
            if huge:
                print(f"xe2rt generate: --prompt-ids holds {huge[0]}, which is no token id (outside int32)",
                      file=sys.stderr)
                return 2
            ids = np.array(values, np.int32)
        else:  # the text's tokens first: the KV cache is sized from them
            tokenizer = tokenizer_for(args.path)
            if tokenizer is None:
                print(f"xe2rt generate: {args.path} has no tokenizer.json: pass token ids with --prompt-ids",
                      file=sys.stderr)
                return 2
            ids = np.asarray(tokenizer.encode(args.prompt).ids, np.int32)
        # what can be refused without the weights is refused before loading them
        if args.max_new_tokens < 0:
            raise InputError(f"-n / --max-new-tokens must be >= 0, got {args.max_new_tokens}")
        llm.token_ids(ids, read_config(args.path).vocab,
                      "--prompt-ids" if args.prompt_ids is not None else "the tokenizer's ids")
        max_tokens = args.max_tokens
        if max_tokens is None:
            max_tokens = min(4096, max(1, len(ids) + max(args.max_new_tokens, 0)))
        queue = dpctl.SyclQueue(args.device, property="in_order") if args.device else None
        before_load = current_rss_bytes()  # the Python, dpnp and SYCL runtimes, before any weight
        model = llm.load(args.path, queue=queue, weights=args.weights, group_size=args.group_size,
                         max_tokens=max_tokens, activations=args.activations)
        warm_seconds = _warm_up(model, ids, args)
        text = []

        def stream(token):
            streamed.append(token)
            if model.tokenizer is None:
                print(token, end=" ", flush=True)
            else:  # decode the whole text so far: tokenizers join sub-words correctly only in context
                text.append(token)
                # a character whose UTF-8 bytes span tokens decodes as U+FFFD until its last byte arrives: hold back
                # a trailing U+FFFD (as transformers' TextStreamer does); the end of the run prints what is left
                _show(model.tokenizer.decode(text).rstrip("\ufffd"))

        def _show(full):
            print(full[len(stream.shown):], end="", flush=True)
            stream.shown = full
        stream.shown = ""
        try:
            out = model.generate(ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                 top_p=args.top_p, seed=args.seed, stop=model.cfg.eos_ids or None, stream=stream)
        finally:
            if text:  # bytes that never completed a character stay U+FFFD, as a whole decode shows them
                _show(model.tokenizer.decode(text))
    except Xe2rtError as exc:
        message = str(exc)
        message = message[len("generate: "):] if message.startswith("generate: ") else message
        print(("\n" if streamed else "") + f"xe2rt generate: error: {message}", file=sys.stderr)
        return 2
    steps = model.step_seconds
    prefill = f"{len(ids) / steps[0]:.1f} tok/s" if steps else "- (no new token)"
    decode = f"{(len(steps) - 1) / sum(steps[1:]):.1f} tok/s" if len(steps) > 1 else "- (one new token or none)"
    print()
    print(f"prompt tokens {len(ids)}, prefill {prefill}, decode {decode} ({len(out)} new), "
          f"warm-up {warm_seconds:.1f} s, peak memory {env_rss_bytes() / 2**20:.0f} MiB ("
          + (f"{before_load / 2**20:.0f} MiB of it before loading, " if before_load else "")
          + f"weights {model.weight_bytes / 2**20:.0f} MiB, KV cache {model.cache_bytes / 2**20:.0f} MiB)")
    return 0


def _warm_up(model, ids, args) -> float:
    """Seconds of one short generate on the prompt's first tokens (up to 17: the prompt path the whole prompt takes,
    GEMV up to 16 tokens and GEMM above) and one decode step, with the run's sampling settings (sampling builds dpnp
    kernels greedy decoding does not use), so that the summary's rates leave out the kernel builds and plan binding of
    first calls, as llama.cpp's tools warm up before they time. The prompt is checked first: a bad one is refused
    before anything is launched; bad settings are refused by this generate as by the real one."""
    model._check_ids(ids)
    if args.max_new_tokens < 1:
        return 0.0
    import time
    n = min(len(ids), 17)
    new = min(2, args.max_new_tokens, model.max_tokens - n)
    if new < 1:  # the prompt does not fit with the new tokens: the real call says so
        return 0.0
    start = time.perf_counter()
    model.generate(ids[:n], new, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    return time.perf_counter() - start
