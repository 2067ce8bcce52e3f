"""xe2rt.parallel in one process: shards on CPU sub-device queues (1, 2 and 4 shards) against the float64 reference
and the single-device result, within the bounds of xe2rt.reference.mlp; sharding rules and bad input."""
import numpy as np
import pytest

import dpnp
from xe2rt import parallel
from xe2rt.errors import InputError, InputTypeError
from xe2rt.ops import gemv_w4a16, gemv_w8a16
from xe2rt.parallel import block, local, sharding
from xe2rt.quant import QuantizedW4, QuantizedW8
from xe2rt.reference import mlp as ref

SHARDS = [1, 2, 4]


@pytest.fixture(scope="module")
def groups(queue):
    """{R: queues}: 2 sub-devices of the CPU device (one core each); 4 shards deal 4 queues over them."""
    qs4 = parallel.local_queues(4, queue.sycl_device)
    qs2 = parallel.local_queues(2, queue.sycl_device)
    return {1: qs2[:1], 2: qs2, 4: qs4}


def make_weight(rng, kind, n, k, scale=0.05):
    if kind == "fp16":
        return (rng.standard_normal((n, k)) * scale).astype(np.float16)
    if kind == "w8":
        return QuantizedW8(rng.integers(-127, 128, size=(n, k), dtype=np.int8),
                           (rng.uniform(0.5, 1.5, size=n) * scale / 64).astype(np.float16))
    g = int(kind[2:].split("zp")[0].strip("g"))
    zp = kind.endswith("zp")
    return QuantizedW4(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8),
                       (rng.uniform(0.5, 1.5, size=(n, k // g)) * scale / 4).astype(np.float16),
                       rng.integers(0, 16, size=(n, k // g), dtype=np.uint8) if zp else None, g)


def constants_of(queue):
    def lookup(w):
        if isinstance(w, QuantizedW4):
            return gemv_w4a16.program_variant(queue, None, None).constants
        if isinstance(w, QuantizedW8):
            return gemv_w8a16.program_for(queue, gemv_w8a16.OP, None).constants
        return {}
    return lookup


def host(y):
    return dpnp.asnumpy(y).astype(np.float64).reshape(-1)


def assert_within(y, expected, bound, what):
    bad = np.nonzero(~(np.abs(y - expected) <= bound))[0]
    assert bad.size == 0, (f"{what}: rows {bad[:5]}: |diff| {np.abs(y - expected)[bad[:5]]} > bound "
                           f"{bound[bad[:5]]}")


# ---------------------------------------------------------------- sharding

@pytest.mark.parametrize("kind", ["fp16", "w8", "w4g32zp", "w4g128"])
@pytest.mark.parametrize("shards", SHARDS)
def test_split_reassembles(rng, kind, shards):
    w = make_weight(rng, kind, 8 * 4, 512)
    cols = sharding.split_column_parallel(w, shards)
    rows = sharding.split_row_parallel(w, shards)
    assert len(cols) == len(rows) == shards
    full = w.dequantize(np.float64) if kind != "fp16" else w.astype(np.float64)
    col_dense = np.concatenate([c.dequantize(np.float64) if kind != "fp16" else c.astype(np.float64) for c in cols])
    row_dense = np.concatenate([r.dequantize(np.float64) if kind != "fp16" else r.astype(np.float64) for r in rows],
                               axis=1)
    np.testing.assert_array_equal(col_dense, full)
    np.testing.assert_array_equal(row_dense, full)
    assert all(sharding.shape(c) == (32 // shards, 512) for c in cols)
    assert all(sharding.shape(r) == (32, 512 // shards) for r in rows)
    if kind == "w8":  # a row-parallel W8 shard keeps the full per-row scale
        assert all(np.array_equal(r.scales, w.scales) for r in rows)


def test_split_errors(rng):
    w4 = make_weight(rng, "w4g128", 30, 512)
    with pytest.raises(InputError, match=r"N = 30 .* do not split into 4 .*N % R = 2"):
        sharding.split_column_parallel(w4, 4)
    with pytest.raises(InputError, match=r"K / R = 512 / 8 = 64 columns per shard cuts a quantization group .*g128"):
        sharding.split_row_parallel(w4, 8)
    with pytest.raises(InputError, match=r"K = 512 .* do not split into 3"):
        sharding.split_row_parallel(w4, 3)
    with pytest.raises(InputError, match="shard count must be an integer >= 1"):
        sharding.split_row_parallel(w4, 0)
    with pytest.raises(InputError, match="shard count must be an integer >= 1"):
        sharding.split_column_parallel(w4, True)
    with pytest.raises(InputTypeError, match="must be float16"):
        sharding.split_column_parallel(np.zeros((4, 4), np.float32), 2)
    with pytest.raises(InputTypeError, match="got list"):
        sharding.split_column_parallel([[1.0]], 1)
    with pytest.raises(InputError, match="mode must be"):
        sharding.split(w4, 2, "diagonal")


# ---------------------------------------------------------------- linears

# N = 148 and K = 640 / 1536: 37 rows and 160 / 384 columns per shard at R = 4 (5 g32 / 3 g128 groups)
LINEAR_CASES = [("fp16", 148, 640), ("w8", 148, 640), ("w4g32zp", 148, 640), ("w4g128", 148, 1536)]


@pytest.mark.parametrize("kind,n,k", LINEAR_CASES)
@pytest.mark.parametrize("shards", SHARDS)
def test_linears_match_single_device(groups, rng, kind, n, k, shards):
    qs = groups[shards]
    root = qs[0]
    w = make_weight(rng, kind, n, k)
    x = rng.standard_normal(k).astype(np.float16)
    xd = dpnp.asarray(x, sycl_queue=root)
    consts = constants_of(root)
    exact = ref.linear(x, w)
    single = host(block.linear(xd, sharding.place(w, root)))
    single_bound = ref.kernel_bound(x, w, consts(w))
    assert_within(single, exact, single_bound, "single device vs float64")

    col = host(parallel.ColumnParallelLinear(w, qs).forward(xd))
    assert_within(col, exact, single_bound, f"column-parallel x{shards} vs float64")
    assert_within(col, single, 2 * single_bound, f"column-parallel x{shards} vs single device")

    parts = sharding.split_row_parallel(w, shards)
    cols = k // shards
    xs = [x[r * cols:(r + 1) * cols] for r in range(shards)]
    row_bound = ref.row_parallel_bound([ref.linear(xr, p) for xr, p in zip(xs, parts)],
                                       [ref.kernel_bound(xr, p, consts(p)) for xr, p in zip(xs, parts)])
    row = host(parallel.RowParallelLinear(w, qs).forward(xd))
    assert_within(row, exact, row_bound, f"row-parallel x{shards} vs float64")
    assert_within(row, single, row_bound + single_bound, f"row-parallel x{shards} vs single device")


# ---------------------------------------------------------------- MLP block

# H 384 (3 g128 groups), I 1536: I/4 = 384 rows of gate/up and 3 g128 groups of down per shard at R = 4
MLP_CASES = ["w4g128", "w4g32zp", "w8", "fp16"]


def mlp_weights(rng, kind, hidden, inter):
    return (make_weight(rng, kind, inter, hidden), make_weight(rng, kind, inter, hidden),
            make_weight(rng, kind, hidden, inter, scale=0.02))


def check_mlp(groups, x, weights, shards):
    qs = groups[shards]
    root = qs[0]
    consts = constants_of(root)
    xd = dpnp.asarray(x, sycl_queue=root)
    exact = ref.mlp(x, *weights)
    single = host(parallel.ParallelMLP(*weights, qs[:1]).forward(xd))
    single_bound = ref.mlp_bound(x, [weights], consts)
    assert_within(single, exact, single_bound, "single-device MLP vs float64")
    model = parallel.ParallelMLP(*weights, qs)
    timings = {}
    y = host(model.forward(xd, timings))
    bound = ref.mlp_bound(x, block.split_mlp(*weights, shards), consts)
    assert_within(y, exact, bound, f"MLP x{shards} vs float64")
    assert_within(y, single, bound + single_bound, f"MLP x{shards} vs single device")
    # the bound is rigorous, so it grows with |W_down| |dh| (no cancellation assumed); the plain accuracy bar too:
    assert np.abs(y - exact).max() <= 1e-2 * np.abs(exact).max()
    assert set(timings) == {"shards", "reduce"} and all(v >= 0 for v in timings.values())
    return y, exact, bound


@pytest.mark.parametrize("kind", MLP_CASES)
@pytest.mark.parametrize("shards", SHARDS)
def test_mlp_matches_single_device(groups, rng, kind, shards):
    hidden, inter = 384, 1536
    check_mlp(groups, rng.standard_normal(hidden).astype(np.float16), mlp_weights(rng, kind, hidden, inter), shards)


def test_mlp_llama3_8b_shape_w4_g128(groups, rng):
    """The benchmark's shape (H 4096, I 14336, W4 g128) on 4 shards; x [1, K] form."""
    hidden, inter = 4096, 14336
    weights = mlp_weights(rng, "w4g128", hidden, inter)
    x = rng.standard_normal(hidden).astype(np.float16)
    check_mlp(groups, x, weights, 4)
    qs = groups[4]
    y2 = parallel.ParallelMLP(*weights, qs).forward(dpnp.asarray(x.reshape(1, -1), sycl_queue=qs[0]))
    assert y2.shape == (1, hidden)


def test_launches_before_reads(groups, rng, monkeypatch):
    """Every shard's work is submitted before any partial is read back (overlap when launches are asynchronous)."""
    qs = groups[4]
    weights = mlp_weights(rng, "w4g128", 384, 1536)
    model = parallel.ParallelMLP(*weights, qs)
    log = []
    real_linear, real_move = block.linear, local.move
    monkeypatch.setattr(block, "linear", lambda x, w: log.append("launch") or real_linear(x, w))
    monkeypatch.setattr(local, "move", lambda a, q: log.append("move") or real_move(a, q))
    model.forward(dpnp.asarray(rng.standard_normal(384).astype(np.float16), sycl_queue=qs[0]))
    # x to every shard, 3 launches per shard, then every partial to the root (shard 0's and x's stay put)
    assert log == ["move"] * 4 + ["launch"] * 12 + ["move"] * 4


# ---------------------------------------------------------------- bad input

def test_bad_input_before_launch(groups, rng, monkeypatch):
    qs = groups[2]
    gate, up, down = mlp_weights(rng, "w4g128", 384, 1536)
    model = parallel.ParallelMLP(gate, up, down, qs)
    launched = []
    monkeypatch.setattr(block, "linear", lambda x, w: launched.append(1))
    x = rng.standard_normal(384).astype(np.float16)
    with pytest.raises(InputTypeError, match="x must be float16"):
        model.forward(dpnp.asarray(x.astype(np.float32), sycl_queue=qs[0]))
    with pytest.raises(InputError, match="x has K = 383, the weights take K = 384"):
        model.forward(dpnp.asarray(x[:383], sycl_queue=qs[0]))
    with pytest.raises(InputError, match="decode, M = 1"):
        model.forward(dpnp.asarray(np.stack([x, x]), sycl_queue=qs[0]))
    with pytest.raises(InputError, match="must be on the first .root. queue"):
        model.forward(dpnp.asarray(x, sycl_queue=qs[1]))
    with pytest.raises(InputTypeError, match="must be a dpnp array"):
        model.forward(x)
    for timings in ([], "x"):  # it ran every shard, then failed writing the seconds
        with pytest.raises(InputTypeError, match="timings must be a dict .* or None, got "):
            model.forward(dpnp.asarray(x, sycl_queue=qs[0]), timings=timings)
    assert not launched


def test_bad_arguments_are_xe2rt_errors(groups, rng):
    """Inputs that raised Python's own errors (AttributeError, ZeroDivisionError, TypeError) or were read a
    character at a time get xe2rt errors stating the rule and the value."""
    import dpctl.memory
    qs = groups[2]
    block_of_memory = dpctl.memory.MemoryUSMDevice(1024, queue=qs[0])
    for call in (lambda: sharding.split_row_parallel(block_of_memory, 2),
                 lambda: parallel.ColumnParallelLinear(block_of_memory, qs)):
        with pytest.raises(InputTypeError, match="a weight must be a float16 array .*got MemoryUSMDevice"):
            call()
    for kw, match in ((dict(devices=[]), r"devices must be a non-empty list of dpctl.SyclDevice, got \[\]"),
                      (dict(devices="cpu"), "devices must be a non-empty list of dpctl.SyclDevice, got 'cpu'"),
                      (dict(device=5), "device must be None, a filter string or a dpctl.SyclDevice, got int 5"),
                      (dict(device=qs[0]), "device must be .*, got SyclQueue")):
        with pytest.raises(InputTypeError, match=match):
            parallel.local_queues(2, **kw)
    # a numpy integer count is an integer, as the split functions take it (it was refused as "not an integer")
    assert len(parallel.local_queues(np.int64(2), qs[0].sycl_device)) == 2
    gate, up, down = mlp_weights(rng, "fp16", 64, 128)
    shards = block.split_mlp(gate, up, down, 2)
    for bad, what in (([s[:2] for s in shards], "a list whose item 0 is a tuple of 2"), (iter(shards), "list_iterator"),
                      (None, "NoneType")):
        with pytest.raises(InputTypeError, match=f"shards must be a list of .gate_r, up_r, down_r., one per queue, "
                                                 f"got {what}"):
            parallel.ParallelMLP.from_shards(bad, qs)


def test_bad_weights(groups, rng):
    qs = groups[4]
    gate, up, down = mlp_weights(rng, "w4g128", 384, 1536)
    with pytest.raises(InputError, match="gate is W4 .1536, 384. g128 and up is W4 .1536, 256. g128"):
        parallel.ParallelMLP(gate, make_weight(rng, "w4g128", 1536, 256), down, qs)
    with pytest.raises(InputError, match=r"down must be \[H, I\] = \[384, 1536\]"):
        parallel.ParallelMLP(gate, up, make_weight(rng, "w4g128", 384, 1024), qs)
    with pytest.raises(InputError, match="cuts a quantization group"):  # I / 4 = 256 is fine, I / 4 = 160 is not
        g2, u2, d2 = mlp_weights(rng, "w4g128", 384, 640)
        parallel.ParallelMLP(g2, u2, d2, qs)
    with pytest.raises(InputError, match="do not split into 4 equal shards"):
        parallel.ColumnParallelLinear(make_weight(rng, "fp16", 30, 64), qs)
    shards = block.split_mlp(gate, up, down, 2)
    mixed = [shards[0], block.split_mlp(*mlp_weights(rng, "w4g32", 384, 1536), 2)[1]]
    with pytest.raises(InputError, match="shard 1 is .* but shard 0 is .*; shards must match"):
        parallel.ParallelMLP.from_shards(mixed, groups[2])
    with pytest.raises(InputError, match="2 shards for 4 queues"):
        parallel.ParallelMLP.from_shards(shards, qs)
    with pytest.raises(InputTypeError, match="queues must be a non-empty list"):
        parallel.ParallelMLP(gate, up, down, [])


def test_reduce_sum_checks(groups):
    qs = groups[2]
    a = dpnp.ones(8, dtype=np.float16, sycl_queue=qs[0])
    b = dpnp.ones(8, dtype=np.float16, sycl_queue=qs[1])
    np.testing.assert_array_equal(dpnp.asnumpy(parallel.reduce_sum([a, b], qs)), np.full(8, 2, np.float16))
    with pytest.raises(InputTypeError, match=r"partials\[1\] is float32 but partials\[0\] is float16"):
        parallel.reduce_sum([a, dpnp.ones(8, dtype=np.float32, sycl_queue=qs[1])], qs)
    with pytest.raises(InputError, match=r"partials\[1\] is not on queues\[1\]"):
        parallel.reduce_sum([a, dpnp.ones(8, dtype=np.float16, sycl_queue=qs[0])], qs)
    with pytest.raises(InputError, match=r"partials\[1\] has shape \(7,\)"):
        parallel.reduce_sum([a, dpnp.ones(7, dtype=np.float16, sycl_queue=qs[1])], qs)
    with pytest.raises(InputError, match=r"one partial per queue \(2\), got 1"):
        parallel.reduce_sum([a], qs)
