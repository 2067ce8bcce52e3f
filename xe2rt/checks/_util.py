"""Small helpers the family check modules share."""
from __future__ import annotations

import numpy as np


def rng(*seed) -> np.random.Generator:
    """A generator seeded by the case, so a case's inputs are the same in the tests and the selftest."""
    return np.random.default_rng([1234, *[abs(hash(s)) % (2**31) if isinstance(s, str) else int(s) for s in seed]])


def dev(a, queue):
    import dpnp
    return dpnp.asarray(a, sycl_queue=queue)


def host(a) -> np.ndarray:
    import dpnp
    return dpnp.asnumpy(a)
