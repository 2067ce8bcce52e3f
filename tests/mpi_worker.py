"""Run under mpiexec by tests/test_mpi.py: `mpiexec -n R python tests/mpi_worker.py MODE`.

check           MLP block (W4 g128, W4 g32 zp, W8, fp16) and both linears over the ranks, host staging (auto), against
                the float64 reference and the single-device result within xe2rt.reference.mlp's bounds
check-pointers  the same with device pointers handed to MPI (valid on the CPU device: its USM memory is host memory)
bad-input       the last rank passes x with the wrong K: every rank must raise RankError (exit 3)
bad-shard       the last rank holds a g32 shard where the others hold g128: every rank must raise RankError (exit 3)
crash           the last rank dies after the agreement, the others wait in the allreduce: MPI Abort must end all
Each rank prints one line per result, prefixed by its rank.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import xe2rt  # noqa: E402,F401  (OpenCL CPU runtime before any device query)
import dpnp  # noqa: E402
from test_parallel import constants_of, mlp_weights, make_weight  # noqa: E402
from xe2rt.parallel import block, sharding  # noqa: E402
from xe2rt.parallel.local import ParallelMLP  # noqa: E402
from xe2rt.parallel.mpi import (MpiColumnParallelLinear, MpiMLP, MpiRowParallelLinear, RankError,  # noqa: E402
                                RankGroup, run_or_abort)
from xe2rt.reference import mlp as ref  # noqa: E402

HIDDEN, INTER = 384, 1536


def say(group, text):
    print(f"[rank {group.rank}/{group.size}] {text}", flush=True)


def within(y, expected, bound, what):
    bad = np.nonzero(~(np.abs(y - expected) <= bound))[0]
    if bad.size:
        raise AssertionError(f"{what}: rows {bad[:5]} |diff| {np.abs(y - expected)[bad[:5]]} > {bound[bad[:5]]}")


def host(y):
    return dpnp.asnumpy(y).astype(np.float64).reshape(-1)


def check(group):
    consts = constants_of(group.queue)
    for kind in ("w4g128", "w4g32zp", "w8", "fp16"):
        rng = np.random.default_rng(7)  # same weights and x on every rank
        weights = mlp_weights(rng, kind, HIDDEN, INTER)
        x = rng.standard_normal(HIDDEN).astype(np.float16)
        xd = dpnp.asarray(x, sycl_queue=group.queue)
        y = host(MpiMLP(group, *weights).forward(xd))
        exact = ref.mlp(x, *weights)
        bound = ref.mlp_bound(x, block.split_mlp(*weights, group.size), consts)
        single = host(ParallelMLP(*weights, [group.queue]).forward(xd))
        single_bound = ref.mlp_bound(x, [weights], consts)
        within(y, exact, bound, f"MLP {kind} x{group.size} ranks vs float64")
        within(y, single, bound + single_bound, f"MLP {kind} x{group.size} ranks vs single device")
        # every rank holds the same reduced result
        every = group.comm.allgather(y.tobytes())
        assert all(e == every[0] for e in every), "ranks disagree on the allreduced y"

        w = make_weight(rng, kind, 4 * 37, 1536)
        x2 = rng.standard_normal(1536).astype(np.float16)
        x2d = dpnp.asarray(x2, sycl_queue=group.queue)
        exact2 = ref.linear(x2, w)
        b1 = ref.kernel_bound(x2, w, consts(w))
        within(host(MpiColumnParallelLinear(group, w).forward(x2d)), exact2, b1, f"column {kind} vs float64")
        parts = sharding.split_row_parallel(w, group.size)
        cols = 1536 // group.size
        xs = [x2[r * cols:(r + 1) * cols] for r in range(group.size)]
        b_row = ref.row_parallel_bound([ref.linear(xr, p) for xr, p in zip(xs, parts)],
                                       [ref.kernel_bound(xr, p, consts(p)) for xr, p in zip(xs, parts)])
        within(host(MpiRowParallelLinear(group, w).forward(x2d)), exact2, b_row, f"row {kind} vs float64")
        say(group, f"ok {kind}: MLP max|y - ref| {np.abs(y - exact).max():.3g} (bound min {bound.min():.3g}), "
                   f"max|y - single| {np.abs(y - single).max():.3g}")


def bad_input(group):
    weights = mlp_weights(np.random.default_rng(7), "w4g128", HIDDEN, INTER)
    model = MpiMLP(group, *weights)
    k = HIDDEN - 1 if group.rank == group.size - 1 else HIDDEN
    try:
        model.forward(dpnp.zeros(k, dtype=np.float16, sycl_queue=group.queue))
    except RankError as exc:
        say(group, f"raised RankError: {exc}")
        sys.exit(3)
    say(group, "no error raised")


def bad_shard(group):
    rng = np.random.default_rng(7)
    kind = "w4g32" if group.rank == group.size - 1 else "w4g128"
    try:
        MpiMLP.from_shard(group, *(make_weight(rng, kind, n, k) for n, k in
                                   ((INTER // group.size, HIDDEN), (INTER // group.size, HIDDEN),
                                    (HIDDEN, INTER // group.size))))
    except RankError as exc:
        say(group, f"raised RankError: {exc}")
        sys.exit(3)
    say(group, "no error raised")


def bad_weight(group):
    """The last rank's weight is no array at all (a USM block): its AttributeError must reach the agreement, not
    leave the other ranks waiting in it."""
    import dpctl.memory
    w = make_weight(np.random.default_rng(7), "fp16", 8, 64)
    if group.rank == group.size - 1:
        w = dpctl.memory.MemoryUSMDevice(1024, queue=group.queue)
    try:
        MpiRowParallelLinear(group, w)
    except RankError as exc:
        say(group, f"raised RankError: {exc}")
        sys.exit(3)
    say(group, "no error raised")


def crash(group):
    weights = mlp_weights(np.random.default_rng(7), "w4g128", HIDDEN, INTER)
    model = MpiMLP(group, *weights)
    if group.rank == group.size - 1:
        model.group.allreduce_sum = None  # this rank fails between the agreement and the allreduce
    say(group, "entering forward")
    model.forward(dpnp.zeros(HIDDEN, dtype=np.float16, sycl_queue=group.queue))
    say(group, "returned")


def main():
    mode = sys.argv[1]
    if mode == "bad-device":  # the last rank's device filter matches nothing: every rank raises, none waits
        from mpi4py import MPI
        rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        try:
            RankGroup(device="no_such_device" if rank == size - 1 else None)
        except RankError as exc:
            print(f"[rank {rank}/{size}] raised RankError: {exc}", flush=True)
            sys.exit(3)
        print(f"[rank {rank}/{size}] no error raised", flush=True)
        return
    group = RankGroup(device_pointers=True if mode == "check-pointers" else None)
    if group.rank == 0:
        say(group, f"transport: {group.transport}")
    modes = {"check": check, "check-pointers": check, "bad-input": bad_input, "bad-shard": bad_shard, "crash": crash,
             "bad-weight": bad_weight}
    modes[mode](group)


if __name__ == "__main__":
    run_or_abort(main)
