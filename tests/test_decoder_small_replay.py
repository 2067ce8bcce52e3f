"""rope_kv warm calls are replayed by xe2rt.fastcall (the inv_freq table a resident device constant; with
check_positions true the positions are read back and checked before each replay) and plans (xe2rt.bind) hold it;
replays and plan launches give exactly what a fresh call of the op gives, write the caches at the new positions, and
keep every check the key does not cover (overlaps, positions)."""
import numpy as np
import pytest

import xe2rt
from xe2rt import fastcall
from xe2rt.ops import decoder_small as op

from conftest import to_device

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
HKV, MAX = 2, 16


def inputs(rng, queue, positions):
    """Host copies of q [T, 8, 128], k, v [T, 2, 128] and caches [2, 16, 128] (the caches filled with 5)."""
    t = len(positions)
    host = dict(q=rng.standard_normal((t, 8, 128)), k=rng.standard_normal((t, HKV, 128)),
                v=rng.standard_normal((t, HKV, 128)), kc=np.full((HKV, MAX, 128), 5.0), vc=np.full((HKV, MAX, 128), 5.0))
    host = {name: a.astype(np.float16) for name, a in host.items()}
    host["pos"] = np.array(positions, np.int32)
    return host


def on_device(host, queue):
    d = {name: to_device(a, queue) for name, a in host.items()}
    return d["q"], d["k"], d["v"], d["pos"], d["kc"], d["vc"]


def results(args):
    return [a.asnumpy() for a in (args[0], args[1], args[4], args[5])]


def fresh(host, queue, **kw):
    """What the op itself (no replay cache) gives."""
    args = on_device(host, queue)
    op.rope_kv(*args, **kw)
    return results(args)


def entries_of_rope_kv():
    return [e for key, e in fastcall._entries.items() if key[0] is op.rope_kv]


@pytest.mark.parametrize("kw", [dict(theta=500000.0, scaling=LLAMA3),
                                dict(theta=1000000.0, qk_norm="weights"),
                                dict(theta=10000.0)], ids=["llama3", "qk_norm", "plain"])
def test_warm_calls_replay(queue, rng, monkeypatch, kw):
    fastcall.clear()
    if kw.get("qk_norm"):
        kw = dict(kw, qk_norm=(to_device((1 + 0.1 * rng.standard_normal(128)).astype(np.float16), queue),
                               to_device((1 + 0.1 * rng.standard_normal(128)).astype(np.float16), queue), 1e-6))
    first = inputs(rng, queue, [3, 9])
    args = on_device(first, queue)
    assert xe2rt.rope_kv(*args, check_positions=False, **kw) == (args[0], args[1])
    np.testing.assert_array_equal(np.concatenate([a.ravel() for a in results(args)]),
                                  np.concatenate([a.ravel() for a in fresh(first, queue, **kw)]))
    assert len(entries_of_rope_kv()) == 1 and entries_of_rope_kv()[0] is not fastcall._UNCACHEABLE
    # warm calls must not run the op: a table lookup now fails the test
    monkeypatch.setattr(op, "freq_table", lambda *a: pytest.fail("a warm call ran the op"))
    for positions in ([0, 15], [7, 2]):
        host = inputs(rng, queue, positions)
        args = on_device(host, queue)
        assert xe2rt.rope_kv(*args, check_positions=False, **kw) == (args[0], args[1])
        got = results(args)
        monkeypatch.undo()
        want = fresh(host, queue, **kw)
        monkeypatch.setattr(op, "freq_table", lambda *a: pytest.fail("a warm call ran the op"))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        kc = got[2]
        np.testing.assert_array_equal(kc[:, positions[0]], got[1][0])  # the rotated k at its position
        np.testing.assert_array_equal(got[3][:, positions[1]], host["v"][1])
        assert (np.delete(kc, positions, axis=1) == 5).all()
    assert len(entries_of_rope_kv()) == 1


def test_scaling_dict_values_key_the_table(queue, rng):
    """A warm call with another scaling dict (or its Llama3Scaling) never reuses a stale table."""
    host = inputs(rng, queue, [4])
    other = dict(LLAMA3, factor=32.0)
    for scaling in (LLAMA3, other, op.Llama3Scaling(8.0, 1.0, 4.0, 8192), dict(LLAMA3, factor=8)):
        args = on_device(host, queue)
        xe2rt.rope_kv(*args, theta=500000.0, scaling=scaling, check_positions=False)
        want = fresh(host, queue, theta=500000.0, scaling=scaling if isinstance(scaling, dict) else LLAMA3)
        for g, w in zip(results(args), want):
            np.testing.assert_array_equal(g, w)
    assert op.scaling_key(dict(LLAMA3)) is op.scaling_key(LLAMA3)  # a dict's values normalized once
    assert op.scaling_key(dict(LLAMA3, factor=8)) == op.scaling_key(LLAMA3)  # 8 and 8.0: one table, one key
    with pytest.raises(xe2rt.InputError, match=r"scaling\['factor'\] must be a finite number > 0 .*, got True"):
        op.scaling_key(dict(LLAMA3, factor=True))
    a = fresh(host, queue, theta=500000.0, scaling=LLAMA3)
    b = fresh(host, queue, theta=500000.0, scaling=other)
    assert not np.array_equal(a[0], b[0])  # the case above can tell the tables apart


def test_warm_calls_keep_the_other_checks(queue, rng):
    host = inputs(rng, queue, [1, 2])
    xe2rt.rope_kv(*on_device(host, queue), theta=10000.0, check_positions=False)
    q, k, v, pos, kc, vc = on_device(host, queue)
    with pytest.raises(xe2rt.InputError, match="k_cache overlaps v_cache"):
        xe2rt.rope_kv(q, k, v, pos, kc, kc, theta=10000.0, check_positions=False)
    with pytest.raises(xe2rt.InputError, match="q overlaps k"):
        xe2rt.rope_kv(q, q.reshape(-1)[:2 * HKV * 128].reshape(2, HKV, 128), v, pos, kc, vc, theta=10000.0, check_positions=False)
    bad = to_device(np.array([1, 16], np.int32), queue)
    with pytest.raises(xe2rt.InputError, match=r"positions\[1\] = 16"):
        xe2rt.rope_kv(q, k, v, bad, kc, vc, theta=10000.0)  # the default check reads positions on every call
    assert (kc.asnumpy() == 5).all() and (vc.asnumpy() == 5).all()


def test_checked_warm_calls_replay_and_check_every_call(queue, rng, monkeypatch):
    """Default calls (check_positions=True) replay too, and each replay reads its own positions back first: a bad
    position, a repeat, or a bad position produced by queued device work is refused with nothing written."""
    fastcall.clear()
    first = inputs(rng, queue, [3, 9])
    args = on_device(first, queue)
    xe2rt.rope_kv(*args, theta=10000.0)
    assert len(entries_of_rope_kv()) == 1 and entries_of_rope_kv()[0] is not fastcall._UNCACHEABLE
    monkeypatch.setattr(op, "freq_table", lambda *a: pytest.fail("a warm call ran the op"))
    host = inputs(rng, queue, [0, 15])
    args = on_device(host, queue)
    xe2rt.rope_kv(*args, theta=10000.0)
    got = results(args)
    monkeypatch.undo()
    for g, w in zip(got, fresh(host, queue, theta=10000.0)):
        np.testing.assert_array_equal(g, w)
    monkeypatch.setattr(op, "freq_table", lambda *a: pytest.fail("a warm call ran the op"))
    for positions, message in (([1, 16], r"positions\[1\] = 16"), ([-1, 2], r"positions\[0\] = -1"),
                               ([4, 4], "must be distinct")):
        q, k, v, pos, kc, vc = on_device(inputs(rng, queue, positions), queue)
        with pytest.raises(xe2rt.InputError, match=message):
            xe2rt.rope_kv(q, k, v, pos, kc, vc, theta=10000.0)
        assert (kc.asnumpy() == 5).all() and (vc.asnumpy() == 5).all()
    # positions written by queued device work (dpnp) are the ones checked
    q, k, v, pos, kc, vc = on_device(inputs(rng, queue, [1, 2]), queue)
    pos += 20
    with pytest.raises(xe2rt.InputError, match=r"positions\[0\] = 21"):
        xe2rt.rope_kv(q, k, v, pos, kc, vc, theta=10000.0)
    assert (kc.asnumpy() == 5).all()
    assert len(entries_of_rope_kv()) == 1


def test_bind(queue, rng):
    """A plan re-launches with the arrays' new contents and gives what a fresh call gives."""
    host = inputs(rng, queue, [0, 5])
    args = on_device(host, queue)
    plan = xe2rt.bind(xe2rt.rope_kv, *args, theta=500000.0, scaling=LLAMA3, check_positions=False)
    assert plan.launches == 1
    for positions in ([0, 5], [11, 6]):
        new = inputs(rng, queue, positions)
        for dst, name in zip(args, ("q", "k", "v", "pos", "kc", "vc")):
            dst[...] = to_device(new[name], queue)
        assert plan() == (args[0], args[1])
        for g, w in zip(results(args), fresh(new, queue, theta=500000.0, scaling=LLAMA3)):
            np.testing.assert_array_equal(g, w)
