"""gemv_fp16 on the CPU device, every target's binary, against a float64 numpy reference."""
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt.reference.gemv import fp32_accumulation_bound, gemv

from conftest import TARGETS, to_device

# Bar: max error <= 1e-2 x max|ref|, plus the rigorous fp32-accumulation bound per row (reference.gemv).
REL_TOL_OF_MAX = 1e-2

# the shape cases are the selftest's (xe2rt.checks.gemv_fp16), run by tests/test_checks.py


def check(y_dev, x, w):
    y = dpnp.asnumpy(y_dev).astype(np.float64).reshape(-1)
    ref = gemv(x, w)
    err = np.abs(y - ref)
    assert err.max() <= REL_TOL_OF_MAX * max(np.abs(ref).max(), 1e-30), f"max err {err.max()} vs max|ref|"
    bound = fp32_accumulation_bound(x, w)
    worst = np.argmax(err - bound)
    assert np.all(err <= bound), f"row {worst}: err {err[worst]} exceeds fp32-accumulation bound {bound[worst]}"


def make(rng, n, k):
    w = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
    x = rng.standard_normal(k, dtype=np.float32).astype(np.float16)
    return x, w


@pytest.mark.parametrize("target", TARGETS)
def test_views_with_offsets(queue, rng, target):
    """Row and element offsets into larger allocations (USM pointers that are not the allocation start)."""
    x_big, w_big = make(rng, 40, 1030)
    w_dev = to_device(w_big, queue)[3:40, 8:1008]  # not contiguous: must be refused
    with pytest.raises(xe2rt.InputError, match="C-contiguous"):
        xe2rt.gemv_fp16(to_device(x_big[:1000], queue), w_dev, target=target)
    w_rows = to_device(w_big[:, :1024], queue)[5:37]  # contiguous view starting 5 rows in
    x_view = to_device(x_big, queue)[3:1027]  # starts 6 bytes in: not 16-byte aligned
    check(xe2rt.gemv_fp16(x_view, w_rows, target=target), x_big[3:1027], w_big[5:37, :1024])


@pytest.mark.parametrize("target", TARGETS)
def test_row_vector_and_out(queue, rng, target):
    x, w = make(rng, 100, 256)
    out = dpnp.full((1, 100), 7, dtype=np.float16, sycl_queue=queue)
    y = xe2rt.gemv_fp16(to_device(x.reshape(1, -1), queue), to_device(w, queue), out=out, target=target)
    assert y is out and y.shape == (1, 100)
    check(y, x, w)


@pytest.mark.parametrize("short_rows", [True, False])
@pytest.mark.parametrize("n,k", [(3072, 2048), (37, 6144), (130, 1000), (9, 6146)])
def test_cpu_row_orders(queue, rng, monkeypatch, n, k, short_rows):
    """The cpu target reads rows of K <= SEQ_K_MAX one after another (gemv_fp16_short) on AVX-512 hosts and side by
    side (gemv_fp16) elsewhere (short_rows_pay): both kernels on every host, each within the bound, at K on both sides
    of SEQ_K_MAX = 6144 and odd N / K."""
    from xe2rt.ops import gemv_fp16 as op
    monkeypatch.setattr(op, "short_rows_pay", lambda q: short_rows)
    launched = []
    original = op.launch.launch
    monkeypatch.setattr(op.launch, "launch", lambda kernel, *a, **kw: launched.append(kernel.name) or
                        original(kernel, *a, **kw))
    x, w = make(rng, n, k)
    check(op.run(to_device(x, queue), to_device(w, queue), target="cpu")[0], x, w)
    assert launched == ["gemv_fp16_short" if short_rows and k <= 6144 else "gemv_fp16"]


def test_nan_inf_propagate_like_numpy(queue):
    w = np.ones((3, 64), dtype=np.float16)
    x = np.ones(64, dtype=np.float16)
    w[0, 5] = np.nan
    w[1, 7] = np.inf
    w[2, 9], w[2, 10] = np.inf, -np.inf
    y = dpnp.asnumpy(xe2rt.gemv_fp16(to_device(x, queue), to_device(w, queue)))
    with np.errstate(invalid="ignore"):  # inf - inf in the reference is the NaN the test expects
        ref = gemv(x, w)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    assert y[1] == ref[1] == np.inf


def test_empty_inputs_follow_numpy(queue):
    y = xe2rt.gemv_fp16(to_device(np.ones(16, np.float16), queue), to_device(np.ones((0, 16), np.float16), queue))
    assert y.shape == (0,)
    y = xe2rt.gemv_fp16(to_device(np.ones(0, np.float16), queue), to_device(np.ones((5, 0), np.float16), queue))
    np.testing.assert_array_equal(dpnp.asnumpy(y), np.zeros(5, np.float16))


class TestBadInput:
    """Each case fails before launch with the rule and the value; out is left untouched."""

    def setup_method(self):
        self.x = np.ones(64, np.float16)
        self.w = np.ones((8, 64), np.float16)

    def test_float32_x(self, queue):
        with pytest.raises(xe2rt.InputTypeError, match=r"x must be float16, got float32"):
            xe2rt.gemv_fp16(to_device(self.x.astype(np.float32), queue), to_device(self.w, queue))

    def test_int_w(self, queue):
        with pytest.raises(xe2rt.InputTypeError, match=r"w must be float16, got int32"):
            xe2rt.gemv_fp16(to_device(self.x, queue), to_device(self.w.astype(np.int32), queue))

    def test_k_mismatch(self, queue):
        with pytest.raises(xe2rt.InputError, match=r"x has K = 63 but w is \[N, K\] = \(8, 64\)"):
            xe2rt.gemv_fp16(to_device(self.x[:63], queue), to_device(self.w, queue))

    def test_non_contiguous_w(self, queue):
        w = to_device(np.ones((8, 128), np.float16), queue)[:, ::2]
        with pytest.raises(xe2rt.InputError, match="w must be C-contiguous"):
            xe2rt.gemv_fp16(to_device(self.x, queue), w)

    def test_other_queue(self, queue):
        import dpctl
        other = dpctl.SyclQueue(queue.sycl_device)
        with pytest.raises(xe2rt.InputError, match="w and x are on different queues"):
            xe2rt.gemv_fp16(to_device(self.x, queue), dpnp.asarray(self.w, sycl_queue=other))

    def test_three_d(self, queue):
        with pytest.raises(xe2rt.InputError, match=r"w must be 2-D, got 3-D"):
            xe2rt.gemv_fp16(to_device(self.x, queue), to_device(self.w.reshape(2, 4, 64), queue))

    def test_batch_over_16(self, queue):
        with pytest.raises(xe2rt.InputError, match=r"x must be \[K\] or \[M, K\] with M <= 16 .* got shape \(17, 64\)"):
            xe2rt.gemv_fp16(to_device(np.ones((17, 64), np.float16), queue), to_device(self.w, queue))

    def test_numpy_input(self, queue):
        with pytest.raises(xe2rt.InputTypeError, match="x must be a dpnp array"):
            xe2rt.gemv_fp16(self.x, to_device(self.w, queue))

    def test_unknown_target(self, queue):
        with pytest.raises(xe2rt.ConfigError, match=r"target='pvc' is not a known target; use one of bmg, lnl, cpu"):
            xe2rt.gemv_fp16(to_device(self.x, queue), to_device(self.w, queue), target="pvc")

    def test_unknown_target_env(self, queue, monkeypatch):
        monkeypatch.setenv("XE2RT_TARGET", "xe3")
        with pytest.raises(xe2rt.ConfigError, match="XE2RT_TARGET='xe3'"):
            xe2rt.gemv_fp16(to_device(self.x, queue), to_device(self.w, queue))

    def test_bad_out_untouched(self, queue):
        out = dpnp.full(9, 3, dtype=np.float16, sycl_queue=queue)
        with pytest.raises(xe2rt.InputError, match=r"out must have shape \(8,\), got \(9,\)"):
            xe2rt.gemv_fp16(to_device(self.x, queue), to_device(self.w, queue), out=out)
        assert np.all(dpnp.asnumpy(out) == 3)

    def test_out_overlapping_input(self, queue):
        w = to_device(self.w, queue)
        with pytest.raises(xe2rt.InputError, match="out overlaps input w"):
            xe2rt.gemv_fp16(to_device(self.x, queue), w, out=w[0, :8])

    def test_overlap_uses_view_offsets(self, queue):
        """out and x as views of one allocation: adjacent is fine, one shared element is refused."""
        buf = to_device(np.ones(200, np.float16), queue)
        w = to_device(self.w, queue)
        y = xe2rt.gemv_fp16(buf[:64], w, out=buf[64:72])
        np.testing.assert_array_equal(dpnp.asnumpy(y), np.full(8, 64, np.float16))
        with pytest.raises(xe2rt.InputError, match="out overlaps input x"):
            xe2rt.gemv_fp16(buf[8:72], w, out=buf[71:79])

    def test_device_without_fp16(self, queue, monkeypatch):
        import xe2rt.validate as validate

        class NoFp16Device:
            name = "fake device"
            has_aspect_fp16 = False

        class FakeQueue:
            sycl_device = NoFp16Device()

        with pytest.raises(xe2rt.TargetError, match="has no fp16 support"):
            validate.require_fp16("gemv_fp16", FakeQueue())
