import time, numpy as np, dpctl, dpnp, xe2rt
from xe2rt.ops import prefill_attention as P
from xe2rt.bench.harness import BenchContext
ctx = BenchContext(device="opencl:cpu", iters=3)
print("fma", ctx.measure_fma_peak())
rng = np.random.default_rng(0)
for (t, hq, hkv, d) in [(512, 32, 8, 128), (512, 32, 8, 64), (128, 32, 8, 128)]:
    q = dpnp.asarray(rng.standard_normal((t, hq, d)).astype(np.float16), sycl_queue=ctx.queue)
    k = dpnp.asarray(rng.standard_normal((t, hkv, d)).astype(np.float16), sycl_queue=ctx.queue)
    v = dpnp.asarray(rng.standard_normal((t, hkv, d)).astype(np.float16), sycl_queue=ctx.queue)
    s = ctx.time_events(lambda i: P.run(q, k, v)[1])
    fl = 4 * d * hq * t * (t + 1) / 2
    print(t, hq, hkv, d, f"{s*1e3:.1f} ms {fl/s/1e9:.1f} GFLOP/s")
print("fma", ctx.measure_fma_peak())
