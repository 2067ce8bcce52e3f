"""xe2rt.models.llm end to end on tiny random checkpoints: prompt logits and greedy decode against the float64
forward (xe2rt/checks/llm.py, shared with the selftest), sampling, and every bad input."""
from __future__ import annotations

import subprocess
import sys

import dpctl
import dpnp
import fractions

import numpy as np
import pytest

import xe2rt
from xe2rt.checks import llm as llm_checks
from xe2rt.errors import InputError, InputTypeError
from xe2rt.models import llm
from xe2rt.models import random as rnd

from conftest import skip_unless_int_dot


@pytest.fixture(scope="module")
def queue():
    return dpctl.SyclQueue("cpu")


@pytest.mark.parametrize("check", llm_checks.checks(), ids=str)
def test_llm_against_float64_forward(check, queue):
    result = check.run(queue, None)
    assert result.passed, result.describe()


@pytest.mark.parametrize("check", llm_checks.checks(quick=True), ids=str)
def test_llm_through_the_xe2_code_path(check, queue, monkeypatch):
    """XE2RT_TARGET=bmg on the CPU device: the whole model through the Xe2-shaped kernels (GEMVs, norms, rope,
    attention, MoE), with software DPAS and 2D block reads for the prompt's GEMMs and attention, as on a Battlemage
    card; the same float64 checks. (The prompt path refused a forced Xe2 target on this device before.)"""
    monkeypatch.setenv("XE2RT_TARGET", "bmg")
    result = check.run(queue, "bmg")
    assert result.passed, result.describe()
    model = next(iter(llm_checks._models.values()))
    assert model._dpas == "xe2emu"


@pytest.fixture(scope="module")
def model(queue, tmp_path_factory):
    folder = rnd.write("tiny-qwen3", tmp_path_factory.mktemp("m"), fmt="fp16", seed=2)
    return llm.load(folder, queue=queue, max_tokens=48, progress=False)


def test_decode_across_attention_buckets(queue, tmp_path):
    """Decode steps read the length from the device through attention plans bound per power-of-two bucket of lengths
    (64, 128, then max_tokens): steps that cross buckets match the float64 forward step by step."""
    from xe2rt.reference.llm import cosine_rows, forward
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", seed=4)
    model = llm.load(folder, queue=queue, max_tokens=136, progress=False)
    rng = np.random.default_rng(3)
    for prompt in (60, 124):  # lengths 61..68 (buckets 64, 128), 125..132 (128, then 136 = max_tokens)
        ids = rng.integers(0, model.cfg.vocab, prompt).astype(np.int32)
        tokens, logits = model.generate(ids, 8, return_logits=True)
        full = forward(model.cfg, model.reference_weights(), np.concatenate([ids, tokens[:-1]]))
        assert (1.0 - cosine_rows(logits, full[prompt - 1:])).max() <= llm_checks.BOUND
    assert {bucket for _, bucket in model._dec["attention"]} == {64, 128, 136}


def test_bad_input_leaves_model_usable(model):
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    before = model.logits(ids)
    v = model.cfg.vocab
    with pytest.raises(InputError, match=rf"ids\[2\] = {v} is outside the vocabulary \[0, {v}\)"):
        model.generate([1, 2, v], 3)
    with pytest.raises(InputError, match=r"ids\[0\] = -1 is outside the vocabulary"):
        model.logits([-1, 2])
    with pytest.raises(InputError, match="ids is empty"):
        model.generate([], 3)
    with pytest.raises(InputError, match=r"prompt \(8 tokens\) \+ max_new_tokens \(41\) = 49 exceeds max_tokens = 48"):
        model.generate(ids, 41)
    with pytest.raises(InputError, match="max_new_tokens must be >= 0, got -1"):
        model.generate(ids, -1)
    with pytest.raises(InputTypeError, match="integer token ids"):
        model.logits(np.array([1.5, 2.0]))
    with pytest.raises(InputError, match="top_p must be in"):
        model.generate(ids, 2, temperature=1.0, top_p=0.0)
    for t in (-1.0, float("nan"), float("inf"), 1e39, 2.0 ** 121, 10**400):
        with pytest.raises(InputError, match=r"temperature must be a number in \[0, 2\^120\] .*got "):
            model.generate(ids, 2, temperature=t)
    np.testing.assert_array_equal(model.logits(ids), before)
    assert len(model.generate(ids, 40)) == 40  # the full cache is usable after the rejections
    assert model.generate(ids, 0).shape == (0,)


def test_sampling(model):
    ids = np.array([7, 8, 9, 10], np.int32)
    greedy = model.generate(ids, 6)
    a = model.generate(ids, 6, temperature=0.8, top_k=20, top_p=0.9, seed=123)
    b = model.generate(ids, 6, temperature=0.8, top_k=20, top_p=0.9, seed=123)
    np.testing.assert_array_equal(a, b)  # seeded: reproducible
    np.testing.assert_array_equal(model.generate(ids, 6, temperature=1.0, top_k=1, seed=5), greedy)
    np.testing.assert_array_equal(model.generate(ids, 6, temperature=5.0, top_p=1e-6, seed=5), greedy)
    draws = np.concatenate([model.generate(ids, 1, temperature=100.0, seed=s) for s in range(12)])
    assert len(set(draws.tolist())) > 3  # near-uniform at a high temperature: different tokens
    seen = []
    stop = int(greedy[2])
    first = greedy.tolist().index(stop) + 1  # generation ends with the first stop token, included
    out = model.generate(ids, 6, stop=[stop], stream=seen.append)
    np.testing.assert_array_equal(out, greedy[:first])
    assert seen == greedy[:first].tolist()
    np.testing.assert_array_equal(model.generate(ids, 6, stop=np.array(stop)), greedy[:first])  # a 0-d array
    on_device = dpnp.asarray(stop, sycl_queue=model.queue)  # 0-d dpnp (it was taken for an iterable and refused)
    np.testing.assert_array_equal(model.generate(ids, 6, stop=on_device), greedy[:first])
    for bad in (True, [False, True], np.array(True), "ab", 1.5, dpnp.asarray(1.5), dpnp.asarray(True)):
        with pytest.raises(InputTypeError, match="stop must be a token id or an iterable of token ids"):
            model.generate(ids, 6, stop=bad)


def test_unsupported_and_missing(tmp_path, queue):
    with pytest.raises(xe2rt.Xe2rtError, match="does not exist"):
        llm.load(tmp_path / "missing", queue=queue)
    with pytest.raises(InputError, match="weights must be one of"):
        llm.load(tmp_path, queue=queue, weights="int3")
    with pytest.raises(InputError, match="max_tokens must be an int in"):
        llm.load(tmp_path, queue=queue, max_tokens=0)


def test_default_queue_is_in_order(tmp_path):
    """load(queue=None) runs the model on an in-order queue of the default device (docs/llm.md: a 128-token prompt
    of Llama-3.2-1B shapes ran 1.7-2.2x faster than on a default, out-of-order queue; same logits bit for bit)."""
    from xe2rt.models import llm as llm_mod, random as rnd_mod
    folder = rnd_mod.write("tiny-llama", tmp_path / "m", fmt="fp16", seed=3)
    model = llm_mod.load(folder, max_tokens=32, progress=False)
    assert model.queue.is_in_order
    assert model.generate(np.arange(1, 6, dtype=np.int32), 3).shape == (3,)


def test_exact_load_option(queue, tmp_path):
    """load(exact=True) keeps the W4 layers on the kernels exact in the activations (the ops' default); exact=False
    (the default) may take the integer-dot kernels; both match the float64 forward."""
    from xe2rt.reference.llm import cosine_rows, forward
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="gptq", group=32, seed=6)
    ids = np.arange(3, 23, dtype=np.int32)
    for exact in (True, False):
        model = llm.load(folder, queue=queue, max_tokens=64, progress=False, exact=exact)
        assert model.exact is exact
        want = forward(model.cfg, model.reference_weights(), ids)
        assert (1.0 - cosine_rows(model.logits(ids), want)).max() <= llm_checks.BOUND
        tokens, logits = model.generate(ids, 4, return_logits=True)
        full = forward(model.cfg, model.reference_weights(), np.concatenate([ids, tokens[:-1]]))
        assert (1.0 - cosine_rows(logits, full[len(ids) - 1:])).max() <= llm_checks.BOUND
    with pytest.raises(InputTypeError, match="exact must be True or False, got str"):
        llm.load(folder, queue=queue, exact="yes")


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen3"])
def test_q8_activations_load_option(queue, tmp_path, arch):
    """load(activations="q8") runs the decode step's W4 GEMVs on gemv_w4a16_avx2_q8 (x as signed bytes per 32 k):
    greedy decode still within the bar's cosine of the float64 forward over the same tokens, its logits not those of
    the default kernels (so the 8-bit path ran); refused by name with exact=True, an unknown value, or a device
    that cannot run it."""
    from xe2rt.reference.llm import cosine_rows, forward
    folder = rnd.write(arch, tmp_path / "m", fmt="gptq", group=32, seed=7)
    ids = np.arange(3, 23, dtype=np.int32)
    with pytest.raises(xe2rt.InputError, match=r"activations must be one of \('auto', 'q8'\), got 'int8'"):
        llm.load(folder, queue=queue, activations="int8")
    with pytest.raises(xe2rt.InputError, match="activations='q8' rounds the activations to 8 bits, which exact=True"):
        llm.load(folder, queue=queue, activations="q8", exact=True)
    skip_unless_int_dot(queue, "avx2")
    got = {}
    for act in ("auto", "q8"):
        model = llm.load(folder, queue=queue, max_tokens=64, progress=False, activations=act)
        tokens, logits = model.generate(ids, 6, return_logits=True)
        full = forward(model.cfg, model.reference_weights(), np.concatenate([ids, tokens[:-1]]))
        assert (1.0 - cosine_rows(logits, full[len(ids) - 1:])).max() <= llm_checks.BOUND
        got[act] = (tokens, logits)
    assert model.gemv_dequant == "avx2_q8"
    assert not np.array_equal(got["auto"][1][1:], got["q8"][1][1:])  # the decode steps took another path


def test_sampling_on_the_default_in_order_queue(tmp_path):
    """load(queue=None) runs on an in-order queue; sampling there once deadlocked in dpnp.exp with kernels still
    queued (dpnp 0.20 / oneMKL VM). Run in a subprocess with a timeout, so a regression fails instead of hanging."""
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", seed=8)
    code = ("import numpy as np; from xe2rt.models import llm; "
            f"m = llm.load({str(folder)!r}, max_tokens=32, progress=False); "
            "a = m.generate([5, 9, 13], 4, temperature=0.8, top_k=20, top_p=0.9, seed=3); "
            "b = m.generate([5, 9, 13], 4, temperature=0.8, top_k=20, top_p=0.9, seed=3); "
            "assert m.queue.is_in_order and np.array_equal(a, b); print('tokens', a.tolist())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0 and "tokens" in res.stdout, res.stderr[-2000:]


def test_sampling_extremes(model):
    """A temperature so small that logits / T overflow float32 is greedy (the limit), not NaN; numpy scalars are
    accepted where Python numbers are; a seed must be an int >= 0."""
    ids = np.array([3, 1, 4, 1, 5], np.int32)
    greedy = model.generate(ids, 3)
    for t in (1e-30, 1e-39, 1e-45, 1e-60, np.float32(1e-40)):
        np.testing.assert_array_equal(model.generate(ids, 3, temperature=t, seed=1), greedy)
    a = model.generate(ids, 3, temperature=np.float32(0.7), top_p=np.float64(0.9), seed=np.int64(4))
    np.testing.assert_array_equal(a, model.generate(ids, 3, temperature=0.7, top_p=0.9, seed=4))
    # any real number: a Fraction is its float
    np.testing.assert_array_equal(model.generate(ids, 3, temperature=fractions.Fraction(1, 2), seed=5),
                                  model.generate(ids, 3, temperature=0.5, seed=5))
    with pytest.raises(InputError, match=r"seed must be None or an int >= 0.*got -1"):
        model.generate(ids, 2, temperature=1.0, seed=-1)
    with pytest.raises(InputError, match="seed must be None or an int >= 0"):
        model.generate(ids, 2, temperature=1.0, seed="abc")
    with pytest.raises(InputTypeError, match="temperature must be a real number >= 0, got str"):
        model.generate(ids, 2, temperature="hot")
    # a top_p that is 0 in float32 keeps the most likely token (it kept none, and the search then took the least
    # likely one)
    for p in (1e-6, 1e-46, 1e-300):
        np.testing.assert_array_equal(model.generate(ids, 3, temperature=1.0, top_p=p, seed=3), greedy)


def test_ids_on_the_device(model):
    """Token ids may be a dpnp array (a pipeline's output): the same as the host ids."""
    import dpnp
    ids = np.array([3, 1, 4, 1, 5], np.int32)
    on_device = dpnp.asarray(ids, sycl_queue=model.queue)
    np.testing.assert_array_equal(model.logits(on_device), model.logits(ids))
    np.testing.assert_array_equal(model.generate(on_device, 3), model.generate(ids, 3))


def test_generate_command_line(tmp_path):
    """python -m xe2rt generate streams the new token ids (no tokenizer in this folder) and ends with the one summary
    line; bad --prompt-ids are one clear line and exit status 2."""
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", seed=9)
    run = lambda *a: subprocess.run([sys.executable, "-m", "xe2rt", "generate", str(folder), *a], capture_output=True,
                                    text=True, timeout=240)
    res = run("--prompt-ids", "5,9,13", "-n", "4")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines[0].split()) == 4 and all(t.isdigit() for t in lines[0].split())
    assert lines[-1].startswith("prompt tokens 3, prefill ") and "decode" in lines[-1] and "peak memory" in lines[-1]
    assert "warm-up" in lines[-1]
    import re
    peak, before = (int(v) for v in re.search(r"peak memory (\d+) MiB \((\d+) MiB of it before loading, ",
                                                lines[-1]).groups())
    assert 0 < before <= peak
    model = llm.load(folder, max_tokens=16, progress=False)
    assert [int(t) for t in lines[0].split()] == model.generate([5, 9, 13], 4).tolist()
    from xe2rt import targets
    q8 = ("--weights", "w4", "--group-size", "32", "--activations", "q8")
    res = run("--prompt-ids", "5,9,13", "-n", "4", *q8)
    if targets.cpu_has_flag(model.queue.sycl_device, "avx2"):  # the W4 GEMVs on gemv_w4a16_avx2_q8
        assert res.returncode == 0, res.stderr[-2000:]
        q8_model = llm.load(folder, max_tokens=16, progress=False, weights="w4", group_size=32, activations="q8")
        assert [int(t) for t in res.stdout.split()[:4]] == q8_model.generate([5, 9, 13], 4).tolist()
    else:
        assert res.returncode == 2 and "needs the cpu target on a CPU device whose host has AVX2" in res.stderr
    for ids, message in [("1,,2", "must be comma-separated integers"), ("", "is empty"),
                         ("4294967297", "outside int32"), (f"1,{model.cfg.vocab}", "outside the vocabulary"),
                         ("-1,2", "ids[0] = -1 is outside the vocabulary")]:  # argparse would take -1,2 for an option
        res = run("--prompt-ids", ids, "-n", "2")
        assert res.returncode == 2 and message in res.stderr, (ids, res.stderr[-1000:])
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    # what needs no weights is refused before the weights are read: with the safetensors file cut short, a bad -n or
    # prompt id is the error reported, not the file (the user of a large model would wait for the load first)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:len(data) // 2])
    for args, message in [(("--prompt-ids", "1,2", "-n", "-1"), "-n / --max-new-tokens must be >= 0, got -1"),
                          (("--prompt-ids", f"1,{model.cfg.vocab}"), f"--prompt-ids[1] = {model.cfg.vocab} is "
                                                                     f"outside the vocabulary")]:
        res = run(*args)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr[-1000:])
    res = run("--prompt-ids", "1,2", "-n", "2")
    assert res.returncode == 2 and "model.safetensors" in res.stderr, res.stderr[-1000:]
    res = subprocess.run([sys.executable, "-m", "xe2rt", "generate", str(folder / "config.json"), "--prompt-ids", "1"],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 2 and "is a file, not a folder" in res.stderr, res.stderr


def _byte_level_tokenizer(folder, vocab: int, token_bytes: dict) -> None:
    """A byte-level BPE tokenizer.json (GPT-2's byte-to-character table, as Llama-3 and Qwen3 use) with no merges:
    token id -> one byte as given in token_bytes, the other bytes and fillers on the remaining ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = iter(range(256, 512))
    char = {b: chr(b if b in printable else next(extra)) for b in range(256)}
    table = {char[b]: t for t, b in token_bytes.items()}
    free = (i for i in range(vocab) if i not in token_bytes)
    for b in range(256):
        table.setdefault(char[b], next(free))
    table.update({f"<filler{i}>": i for i in free})
    tok = Tokenizer(models.BPE(vocab=table, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(folder / "tokenizer.json"))


def test_command_line_streams_characters_split_across_tokens(tmp_path):
    """With a byte-level tokenizer a character's UTF-8 bytes may come in several tokens: the streamed text holds back
    the U+FFFD an incomplete character decodes to (it printed U+FFFD and lost the character before)."""
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", layers=1, seed=2)
    model = llm.load(folder, max_tokens=16, progress=False)
    greedy = model.generate([1, 2, 3], 5).tolist()
    assert len(set(greedy)) == 5, greedy  # this seed's greedy output: five distinct ids, one byte each
    _byte_level_tokenizer(folder, model.cfg.vocab, dict(zip(greedy, "€é".encode())))  # E2 82 AC C3 A9
    res = subprocess.run([sys.executable, "-m", "xe2rt", "generate", str(folder), "--prompt-ids", "1,2,3", "-n", "5"],
                         capture_output=True, text=True, encoding="utf-8", timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[0] == "€é"


def test_command_line_text_prompt_sizes_the_cache(tmp_path):
    """A text prompt sizes the KV cache from its tokens (it was 1024 + n before tokenizing, so a 1100-token text
    was refused)."""
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", layers=1, seed=9, tokenizer=True)
    text = " ".join(f"w{i % 300}" for i in range(1100))
    res = subprocess.run([sys.executable, "-m", "xe2rt", "generate", str(folder), "--prompt", text, "-n", "2"],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1].startswith("prompt tokens 1100, prefill ")


def test_one_call_at_a_time(model):
    """A call made while generate runs (here from its stream callback) would overwrite the KV cache the running
    generation decodes from: it is refused, the outer generation goes on undisturbed, and the model stays usable."""
    ids = np.array([3, 1, 4, 1, 5], np.int32)
    want = model.generate(ids, 6)
    errors = []

    def stream(token):
        try:
            model.logits([7, 8, 9])
        except InputError as exc:
            errors.append(str(exc))
    np.testing.assert_array_equal(model.generate(ids, 6, stream=stream), want)
    assert len(errors) == 6 and "in the middle of generate" in errors[0]
    np.testing.assert_array_equal(model.generate(ids, 6), want)
    with pytest.raises(InputError, match="steps must be an int >= 1, got 0"):
        model.profile_step(ids, steps=0)


def test_step_seconds_before_any_generate(queue, tmp_path):
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", layers=1, seed=4)
    assert llm.load(folder, queue=queue, max_tokens=16, progress=False).step_seconds == []


class _Draw:
    """A stand-in for numpy's Generator whose one draw per token is given."""
    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


def _reference_choice(logits, temperature, top_k, top_p, u):
    """The sampling rule in float64 on the host: vocabulary order for plain temperature; otherwise sorted descending,
    the top_k, then the smallest prefix whose mass reaches top_p (of the top-k mass, or of the whole vocabulary)."""
    x = logits.astype(np.float64)
    if top_k == 0 and top_p >= 1:
        order = np.arange(x.size)
    else:
        order = np.argsort(-x, kind="stable")
    v = x[order][:top_k or None]
    p = np.exp((v - v.max()) / temperature)
    if top_p < 1:
        c = np.cumsum(p)
        total = c[-1] if top_k else np.exp((x - v.max()) / temperature).sum()
        p = np.where(c - p < top_p * total, p, 0)
    return order, p


def test_sampling_rule_matches_the_host_reference(queue, tmp_path):
    """The device sampler (vocabulary order for plain temperature; the per-row top-16 candidates when they provably
    hold the kept set; the full sort otherwise) chooses what the float64 rule chooses for a given uniform draw, on a
    peaked and on a flat distribution (where the candidates cannot be proved to hold the nucleus). A vocabulary of
    2500 tokens: five rows of candidates."""
    import dpnp
    config = dict(rnd.shipped_config("tiny-llama"), vocab_size=2500, num_hidden_layers=1)
    model = llm.load(rnd.write(config, tmp_path / "m", fmt="fp16", seed=3), queue=queue, max_tokens=16,
                     progress=False)
    v = model.cfg.vocab
    assert model._arg_rows == 5
    rng = np.random.default_rng(11)
    values = np.linspace(-6, 6, v).astype(np.float16)
    assert np.unique(values).size == v  # distinct: no tie rule involved
    for logits in (rng.permutation(values), (rng.permutation(values) / 8).astype(np.float16)):
        model._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=model.queue)
        for temperature, top_k, top_p in ((0.7, 0, 1.0), (1.0, 5, 1.0), (0.8, 20, 1.0), (0.5, 0, 0.9),
                                          (1.3, 0, 0.95), (0.9, 12, 0.8), (2.0, 600, 0.99)):
            order, p = _reference_choice(logits, temperature, top_k, top_p, None)
            cdf = np.cumsum(p)
            for j in rng.choice(np.flatnonzero(p > 1e-3 * p.max()), size=3):
                u = (cdf[j] - p[j] / 2) / cdf[-1]  # the middle of token order[j]'s interval
                got = model._choose(model._logit_row, temperature, top_k, top_p, _Draw(u))
                assert got == order[j], (temperature, top_k, top_p, u, got, order[j])
            # a draw that rounds to 1 in fp32 still picks a kept token (it took the last of the order, p = 0)
            got = model._choose(model._logit_row, temperature, top_k, top_p, _Draw(1 - 2**-30))
            assert p[list(order).index(got)] > 0, (temperature, top_k, top_p, got)

    # several of the top_k in one row of candidates: the top_p mass must be that of the true top_k (the kept set
    # was {0, 1, 2} instead of the rule's 8 tokens)
    logits = np.zeros(v, np.float16)
    logits[0], logits[1:40] = 10, 9 - 0.025 * np.arange(39)
    model._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=model.queue)
    order, p = _reference_choice(logits, 1.0, 40, 0.3, None)
    assert np.count_nonzero(p) == 8
    cdf = np.cumsum(p)
    for j in range(8):
        got = model._choose(model._logit_row, 1.0, 40, 0.3, _Draw((cdf[j] - p[j] / 2) / cdf[-1]))
        assert got == order[j], (j, got)
    # a +inf or NaN logit: the token greedy decoding picks, in every sampling mode (inf - inf made the cdf NaN)
    for bad in (np.inf, np.nan):
        logits = rng.permutation(values)
        logits[1234] = bad
        model._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=model.queue)
        for top_k, top_p in ((0, 1.0), (5, 1.0), (0, 0.9), (40, 0.9)):
            assert model._choose(model._logit_row, 1.0, top_k, top_p, _Draw(0.5)) == 1234


def test_sampling_second_candidate_tier(queue, tmp_path, monkeypatch):
    """40 large logits spread through the first row of 512 (about 10 per window of 128): the rows' 16 candidates
    cannot hold a nucleus of more than 15 tokens, the windows' can, so the choice comes from the second tier (the
    whole vocabulary is never sorted) and is still the float64 rule's."""
    import dpnp
    config = dict(rnd.shipped_config("tiny-llama"), vocab_size=2500, num_hidden_layers=1)
    model = llm.load(rnd.write(config, tmp_path / "m", fmt="fp16", seed=3), queue=queue, max_tokens=16,
                     progress=False)
    v = model.cfg.vocab
    rng = np.random.default_rng(5)
    logits = (rng.uniform(-4.5, -1.5, v)).astype(np.float16)
    big = np.arange(0, 480, 12)
    logits[big] = (6 - 0.01 * np.arange(big.size)).astype(np.float16)
    model._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=model.queue)
    sorts = []
    real_argsort = dpnp.argsort
    monkeypatch.setattr(dpnp, "argsort", lambda *a, **k: sorts.append(1) or real_argsort(*a, **k))
    for temperature, top_k, top_p in ((1.0, 0, 0.9), (0.7, 0, 0.5), (1.0, 30, 1.0), (1.5, 36, 0.95)):
        order, p = _reference_choice(logits, temperature, top_k, top_p, None)
        assert np.count_nonzero(p) > 16  # more than one row's candidates
        cdf = np.cumsum(p)
        for j in rng.choice(np.flatnonzero(p > 1e-3 * p.max()), size=4):
            got = model._choose(model._logit_row, temperature, top_k, top_p, _Draw((cdf[j] - p[j] / 2) / cdf[-1]))
            assert got == order[j], (temperature, top_k, top_p, got, order[j])
    assert not sorts, "the whole vocabulary was sorted"


def test_w4_decode_step_folds_the_norms_and_silu_mul_into_its_gemvs(queue, tmp_path):
    """On an AVX512-VNNI or AVX2 host a W4 decode step runs ln1 inside the qkv GEMV and ln2 and silu_mul inside the gate/up
    GEMV (gemv_w4a16's norm= and silu_mul=, one kernel each): 3 launches fewer per dense layer, with tokens and
    logits equal bit for bit to the step with every op on its own."""
    from conftest import int_dot_variant
    int_dot_variant(queue)
    folder = rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", seed=5)
    fused = llm.load(folder, queue=queue, weights="w4", group_size=32, max_tokens=64, progress=False)
    apart = llm.load(folder, queue=queue, weights="w4", group_size=32, max_tokens=64, progress=False)
    apart._fuses = lambda w, silu_mul=False: False
    ids = np.random.default_rng(5).integers(0, fused.cfg.vocab, 9).astype(np.int32)
    tokens, logits = fused.generate(ids, 12, return_logits=True)
    tokens_apart, logits_apart = apart.generate(ids, 12, return_logits=True)
    assert np.array_equal(tokens, tokens_apart) and np.array_equal(logits, logits_apart)
    for plans in fused._dec["layers"]:
        assert set(plans) == {"qkv", "rope_kv", "o", "gate_up", "down"}
        assert plans["qkv"].launches == plans["gate_up"].launches == 1
    assert set(apart._dec["layers"][1]) == {"ln1", "qkv", "rope_kv", "o", "ln2", "gate_up", "silu_mul", "down"}


def test_w4_decode_step_folds_on_the_xe2_code_path(queue, tmp_path, monkeypatch):
    """XE2RT_TARGET=bmg on the CPU device, hidden 512 (a multiple of the Xe2 kernels' 512-k block read): the decode
    step folds ln1 into qkv and ln2 + silu_mul into gate/up through the Xe2 fused kernels, and each step's logits
    match the float64 forward over the same tokens (the bar's cosine)."""
    from xe2rt.reference.llm import cosine_rows, forward
    monkeypatch.setenv("XE2RT_TARGET", "bmg")
    raw = dict(rnd.shipped_config("tiny-llama"), hidden_size=512, intermediate_size=1024, num_attention_heads=8,
               num_key_value_heads=2, head_dim=64)
    folder = rnd.write(raw, tmp_path / "m", fmt="fp16", seed=6)
    model = llm.load(folder, queue=queue, weights="w4", group_size=32, max_tokens=64, progress=False)
    ids = np.random.default_rng(6).integers(0, model.cfg.vocab, 9).astype(np.int32)
    tokens, logits = model.generate(ids, 10, return_logits=True)
    for plans in model._dec["layers"]:
        assert set(plans) == {"qkv", "rope_kv", "o", "gate_up", "down"}
    full = forward(model.cfg, model.reference_weights(), np.concatenate([ids, tokens[:-1]]))
    assert (1.0 - cosine_rows(logits, full[ids.size - 1:])).max() <= llm_checks.BOUND


# ---- found by mutation testing (session 32): config values that matter, the argmax past row 0, edge rules ----

def test_moe_without_norm_topk_prob(queue, tmp_path):
    """L18: norm_topk_prob false end to end (the tiny MoE config has it true): prompt logits against the float64
    forward."""
    from xe2rt.checks.llm import BOUND
    from xe2rt.reference.llm import cosine_rows, forward
    raw = dict(rnd.shipped_config("tiny-qwen3-moe"), norm_topk_prob=False)
    model = llm.load(rnd.write(raw, tmp_path / "m", fmt="fp16", seed=11), queue=queue, max_tokens=64, progress=False)
    assert model.cfg.norm_topk_prob is False
    ids = np.random.default_rng(7).integers(0, model.cfg.vocab, 20).astype(np.int32)
    got = model.logits(ids)
    want = forward(model.cfg, model.reference_weights(), ids)
    assert (1 - cosine_rows(got, want)).max() <= BOUND
    tokens, logits = model.generate(ids, 4, return_logits=True)
    full = forward(model.cfg, model.reference_weights(), np.concatenate([ids, tokens[:-1]]))
    assert (1 - cosine_rows(logits, full[19:])).max() <= BOUND


def test_large_eps_reaches_every_norm(queue, tmp_path):
    """L19: rms_norm_eps that matters (1.0 against activations of unit RMS): logits against the float64 forward in
    value, not only in direction (a wrong eps scales rows, which the cosine does not see)."""
    from xe2rt.reference.llm import forward
    raw = dict(rnd.shipped_config("tiny-llama"), rms_norm_eps=1.0)
    model = llm.load(rnd.write(raw, tmp_path / "m", fmt="fp16", seed=11), queue=queue, max_tokens=64, progress=False)
    ids = np.random.default_rng(7).integers(0, model.cfg.vocab, 20).astype(np.int32)
    got = model.logits(ids).astype(np.float64)
    want = forward(model.cfg, model.reference_weights(), ids)
    ratio = np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert np.abs(ratio - 1).max() < 0.01, ratio


@pytest.fixture(scope="module")
def wide(queue, tmp_path_factory):
    config = dict(rnd.shipped_config("tiny-llama"), vocab_size=2500, num_hidden_layers=1)
    model = llm.load(rnd.write(config, tmp_path_factory.mktemp("w"), fmt="fp16", seed=3), queue=queue,
                     max_tokens=16, progress=False)
    assert model._arg_rows == 5
    return model


def test_greedy_argmax_past_the_first_row(wide):
    """L28: the greedy argmax over rows of 512 logits returns the vocabulary index (numpy's argmax), for a maximum in
    every row, the short last one included."""
    v = wide.cfg.vocab
    for where in (3, 700, 1500, 2047, 2048, 2499):
        logits = np.linspace(-4, 4, v).astype(np.float16)[np.random.default_rng(where).permutation(v)]
        logits[where] = 8
        wide._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=wide.queue)
        assert wide._choose(wide._logit_row, 0.0, 0, 1.0, None) == where == int(np.argmax(logits))


def test_top_k_tie_at_the_candidate_floor(wide):
    """L33: 17 logits of 9 at ids 0..16 (row 0's 16 candidates hold ids 0..15) and one at id 512. top_k 17 keeps ids
    0..16 (ties: the lower id first, as a sort of the vocabulary orders them); a draw in the last kept token's
    interval picks id 16, never 512."""
    v = wide.cfg.vocab
    logits = np.full(v, -2.0, np.float16)
    logits[:17] = 9
    logits[512] = 9
    wide._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=wide.queue)
    assert wide._choose(wide._logit_row, 1.0, 17, 1.0, _Draw(16.5 / 17)) == 16


def test_bad_top_k_and_stream(wide):
    """L34 / L35."""
    with pytest.raises(xe2rt.InputError, match="top_k must be an int >= 0"):
        wide.generate([1, 2], 2, temperature=1.0, top_k=-1)
    with pytest.raises(xe2rt.InputTypeError, match="stream must be callable"):
        wide.generate([1, 2], 2, stream=5)


def test_prompt_of_exactly_max_tokens(wide):
    """L54: a prompt of max_tokens ids fills the cache exactly and is accepted."""
    ids = np.arange(wide.max_tokens, dtype=np.int32)
    assert wide.logits(ids).shape == (wide.max_tokens, wide.cfg.vocab)


def test_tiny_top_p_on_the_sort_path(wide):
    """L70: a flat distribution (the candidates cannot hold the nucleus: the device sort path) with a top_p that is 0
    in float32 keeps the most likely token."""
    v = wide.cfg.vocab
    logits = (np.linspace(-6, 6, v) / 8).astype(np.float16)[np.random.default_rng(1).permutation(v)]
    wide._logit_row[...] = dpnp.asarray(logits.reshape(1, v), sycl_queue=wide.queue)
    for u in (0.0, 0.5, 1 - 2**-30):
        assert wide._choose(wide._logit_row, 1.0, 0, 1e-46, _Draw(u)) == int(np.argmax(logits))


def test_attention_bucket_is_the_smallest_power_of_two(queue, tmp_path):
    """L26: decode lengths 61..64 use the bucket 64 only (max_length = the smallest power of two >= length)."""
    model = llm.load(rnd.write("tiny-llama", tmp_path / "m", fmt="fp16", layers=1, seed=4), queue=queue,
                     max_tokens=136, progress=False)
    model.generate(np.arange(60, dtype=np.int32), 5)  # decode steps at lengths 61, 62, 63, 64
    assert {bucket for _, bucket in model._dec["attention"]} == {64}


def test_float_moe_experts_are_exact(queue, tmp_path):
    """A float Qwen3-MoE checkpoint's experts are held in float16 as stored (weights 'auto'): prompt logits and
    greedy decode steps against the float64 forward of the stored tensors themselves, read with safetensors here (not
    the model's reference_weights). Held as W4 (weights='w4', or 'auto' before session 32) the same model was at a
    cosine of 0.86."""
    from safetensors.numpy import load_file
    from xe2rt.checks.llm import BOUND
    from xe2rt.models.llm_weights import FloatExperts
    from xe2rt.quant_experts import QuantizedW4Experts
    from xe2rt.reference.llm import cosine_rows, forward
    folder = rnd.write("tiny-qwen3-moe", tmp_path / "m", fmt="fp16", seed=5)
    model = llm.load(folder, queue=queue, max_tokens=160, progress=False)
    assert all(isinstance(layer["experts"], FloatExperts) for layer in model.w["layers"] if "experts" in layer)
    stored = load_file(str(folder / "model.safetensors"))
    w = {(k[:-len(".weight")] if k.endswith("_proj.weight") else k): v.astype(np.float64) for k, v in stored.items()}
    w["lm_head"] = w.pop("lm_head.weight", w["model.embed_tokens.weight"])
    ids = np.random.default_rng(2).integers(0, model.cfg.vocab, 130).astype(np.int32)
    assert (1 - cosine_rows(model.logits(ids), forward(model.cfg, w, ids))).max() <= BOUND
    tokens, logits = model.generate(ids[:9], 10, return_logits=True)
    full = forward(model.cfg, w, np.concatenate([ids[:9], tokens[:-1]]))
    assert (1 - cosine_rows(logits, full[8:])).max() <= BOUND
    fast = llm.load(folder, queue=queue, weights="w4", group_size=64, max_tokens=16, progress=False)
    assert all(isinstance(layer["experts"], QuantizedW4Experts) for layer in fast.w["layers"] if "experts" in layer)


XE2_LOOP = r'''
import os, sys
os.environ["XE2RT_TARGET"] = "bmg"
import dpctl
from xe2rt.checks import llm
queue = dpctl.SyclQueue("opencl:cpu", property="in_order")
checks = [c for c in llm.checks(quick=True) if "llama gptq" in c.name]
for _ in range(int(sys.argv[1])):
    for check in checks:
        result = check.run(queue, "bmg")
        assert result.passed, result.describe()
    llm._models.clear()
print("ok")
'''


def test_xe2_path_on_an_in_order_queue_does_not_hang():
    """The W4 prompt GEMM's first call on the Xe2 path computed its fp16 bound with dpnp's float32 abs and multiply,
    which run on oneMKL VM and wait for their dependencies holding the GIL; on an in-order queue (llm.load's default)
    a dependency can be a host task that needs the GIL. That hung this loop within 4 iterations (and once the test
    suite); the bound is now computed on the host. A subprocess, so that a hang fails this test, not the run."""
    try:
        run = subprocess.run([sys.executable, "-c", XE2_LOOP, "8"], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("8 rounds of the Xe2-path W4 checks on an in-order queue did not finish in 180 s (the oneMKL VM "
                    "deadlock)")
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
