"""Unit tests of the DPAS register contract and operand patterns (seed 001's ULT in spirit), through the software DPAS
on the CPU device, every target's binary.

1. The software built-in against a direct evaluation of the specification's formula (a separate kernel with no
   sub-group operation) and against numpy, on random register contents: all 16 x 8 results must be bit-identical to the
   direct kernel (same fp32 fma order k = 0..15) and within 16 eps32 (sum|a b| + |acc|) of the exact sum.
2. Each operand pattern in a one-tile kernel against numpy, with tails in M, N and K and aligned (block-read) cases:
   usage 1 (A[M, K] -> a_tile; B[K, N] or B[N, K] -> VNNI b_tile; direct store) and usage 2 (swapped: B -> a_tile,
   A -> VNNI b_tile with M rows as lanes; transposed write-back). Bound: K eps32 sum|a b| + 0.5 ulp16 of the result.
"""
import numpy as np
import pytest

import dpnp

from xe2rt import artifacts, launch
from xe2rt.reference import gemm as R
from conftest import TARGETS, to_device

EPS32 = float(np.finfo(np.float32).eps)


def random_fp16_bits(rng, shape):
    """Finite fp16 values of mixed magnitude and sign (normals and a few subnormals), as raw int16 bits."""
    v = rng.uniform(-2, 2, shape) * 2.0 ** rng.integers(-16, 4, shape)
    return v.astype(np.float16).view(np.int16)


@pytest.mark.parametrize("target", TARGETS)
def test_software_dpas_matches_spec_formula(queue, rng, target):
    program = artifacts.load(queue, target, "gemm_fp16_ult")
    for trial in range(4):
        a_regs = random_fp16_bits(rng, (16, 8))                       # lane k: a.s[m] = A[m][k]
        b_regs = random_fp16_bits(rng, (16, 16)).view(np.int32)       # lane n: b.s[i] = (B[2i][n], B[2i+1][n])
        acc_regs = rng.uniform(-4, 4, (16, 8)).astype(np.float32)     # lane n: acc.s[m] = C[m][n]
        args = [to_device(a_regs, queue), to_device(b_regs, queue), to_device(acc_regs, queue)]
        emulated = dpnp.zeros((16, 8), dtype=np.float32, sycl_queue=queue)
        direct = dpnp.zeros((16, 8), dtype=np.float32, sycl_queue=queue)
        launch.launch(program.kernel("dpas_emulated_regs"), args + [emulated], 16, 16, queue).wait()
        launch.launch(program.kernel("dpas_spec_formula"), args + [direct], (16, 8), (16, 8), queue).wait()
        emulated, direct = dpnp.asnumpy(emulated), dpnp.asnumpy(direct)
        assert np.array_equal(emulated.view(np.int32), direct.view(np.int32)), f"trial {trial}"
        exact = R.dpas_spec(a_regs, b_regs, acc_regs)
        a_mat = np.abs(a_regs.view(np.float16).astype(np.float64).T)
        b_mat = np.abs(b_regs.view(np.float16).astype(np.float64).T)
        bound = 16 * EPS32 * ((a_mat @ b_mat).T + np.abs(acc_regs))  # 16 roundings of a partial sum
        assert np.all(np.abs(emulated - exact) <= bound), f"trial {trial}"
    # A single non-zero per operand pins the layout: A[m][k] = 1 only at (m=3, k=5), B[k][n] = 2 only at (k=5, n=11).
    a_regs = np.zeros((16, 8), np.float16)
    a_regs[5, 3] = 1
    b_half = np.zeros((16, 16), np.float16)
    b_half[11, 5] = 2  # lane 11, int 2, high half: K = 5
    zeros = np.zeros((16, 8), np.float32)
    out = dpnp.zeros((16, 8), dtype=np.float32, sycl_queue=queue)
    launch.launch(program.kernel("dpas_emulated_regs"),
                  [to_device(a_regs.view(np.int16), queue), to_device(b_half.view(np.int32), queue),
                   to_device(zeros, queue), out], 16, 16, queue).wait()
    expected = np.zeros((16, 8), np.float32)
    expected[11, 3] = 2  # C[m=3][n=11] lives in lane 11, component 3
    assert np.array_equal(dpnp.asnumpy(out), expected)


PATTERN_SHAPES = [(8, 16, 16), (16, 16, 64), (5, 7, 9), (19, 33, 50), (24, 40, 31), (3, 1, 100)]
PATTERNS = {
    # kernel: (b_layout, tile rows (M per tile), tile cols (N per tile))
    "ult_usage1_b_kn": ("kn", 8, 16),
    "ult_usage1_b_nk": ("nk", 8, 16),
    "ult_usage2_b_nk": ("nk", 16, 8),
    "ult_usage2_b_kn": ("kn", 16, 8),
}


@pytest.mark.parametrize("shape", PATTERN_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", sorted(PATTERNS))
@pytest.mark.parametrize("target", TARGETS)
def test_operand_pattern(queue, rng, target, kernel, shape):
    m, n, k = shape
    b_layout, tile_m, tile_n = PATTERNS[kernel]
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n) if b_layout == "kn" else (n, k)).astype(np.float16)
    out = dpnp.full((m, n), np.nan, dtype=np.float16, sycl_queue=queue)
    program = artifacts.load(queue, target, "gemm_fp16_ult")
    groups = (-(-n // tile_n), -(-m // tile_m))
    launch.launch(program.kernel(kernel), [to_device(a, queue), to_device(b, queue), out, m, n, k],
                  (groups[0] * 16, groups[1]), (16, 1), queue).wait()
    got = dpnp.asnumpy(out).astype(np.float64)
    ref = R.gemm(a, b, b_layout=b_layout)
    bound = R.error_bound(a, b, b_layout=b_layout)
    assert np.all(np.abs(got - ref) <= bound), f"{kernel} {shape}: max err {np.nanmax(np.abs(got - ref))}"
