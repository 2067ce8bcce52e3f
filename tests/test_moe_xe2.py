"""The Xe2 (bmg) binaries of moe_ffn_w4a16 run on opencl:cpu through the same loader, against the float64 reference
and the derived bound with the Xe2 code offset (1024). lnl's binary is the same SPIR-V (same constants), checked here
by sha256, so running bmg's covers it. The CPU runtime's JIT build of these sub-group kernels takes ~30 s once."""
import json

import numpy as np
import pytest

from xe2rt import config

from test_moe import random_experts, routing, run_and_check


def test_lnl_binary_is_bmg_binary():
    artifacts = json.loads((config.kernel_dir() / "manifest.json").read_text())["artifacts"]
    bmg, lnl = artifacts["bmg/moe_ffn_w4a16.spv"], artifacts["lnl/moe_ffn_w4a16.spv"]
    assert bmg["constants"] == lnl["constants"] and bmg["sha256"] == lnl["sha256"]


# (E, H, I, T, k, pool, group, symmetric): H = 640 / I = 384 leave a K tail after the 512-k block reads; T = 16 with a
# pool of 3 experts gives ~11 pairs per expert (3 PB chunks); k = 1; zero points with g32 and g128 (k = 4, ~11 pairs
# per expert of 12).
CASES = [(8, 640, 384, 3, 2, 6, 128, True), (8, 256, 640, 16, 2, 3, 32, False), (5, 512, 256, 7, 1, 5, 64, True),
         (16, 512, 256, 32, 4, 12, 128, False)]


@pytest.mark.parametrize("e,h,i,t,k,pool,group_size,symmetric", CASES)
def test_moe_xe2_binary(queue, rng, e, h, i, t, k, pool, group_size, symmetric):
    experts = random_experts(rng, e, h, i, group_size, symmetric, queue)
    x = rng.standard_normal((t, h)).astype(np.float16)
    ids, w = routing(rng, t, k, e, pool=pool, wdtype=np.float32 if symmetric else np.float16)
    if t == 7:
        ids[3, 0] = -1  # dropped and counted on Xe2 too
    run_and_check(queue, rng, experts, x, ids, w, target="bmg")
