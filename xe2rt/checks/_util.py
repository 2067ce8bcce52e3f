"""Small helpers the family check modules share."""
from __future__ import annotations

import zlib

import numpy as np


def rng(*seed) -> np.random.Generator:
    """A generator seeded by the case, so a case's inputs are the same in the tests and the selftest, in every process.
    Strings enter by their CRC-32: Python's hash() of a str differs from process to process (PYTHONHASHSEED), which
    gave every run other inputs."""
    return np.random.default_rng([1234, *[zlib.crc32(s.encode()) if isinstance(s, str) else int(s) for s in seed]])


def dev(a, queue):
    import dpnp
    return dpnp.asarray(a, sycl_queue=queue)


def host(a) -> np.ndarray:
    import dpnp
    return dpnp.asnumpy(a)
