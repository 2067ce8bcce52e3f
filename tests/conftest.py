"""Shared fixtures. xe2rt is imported first so the OpenCL CPU runtime is visible before SYCL enumerates devices."""
import numpy as np
import pytest

import xe2rt  # noqa: F401  (sets OCL_ICD_FILENAMES when unset)
import dpctl
import dpnp

# Every target's binary runs on the CPU device: the Xe2 binaries through the same loader a GPU user takes.
TARGETS = ["cpu", "bmg", "lnl"]


@pytest.fixture(scope="session")
def queue():
    try:
        return dpctl.SyclQueue("opencl:cpu")
    except dpctl.SyclQueueCreationError as exc:
        pytest.skip(f"this machine has no opencl:cpu SYCL device ({exc}); install intel-opencl-rt")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def to_device(a, queue):
    return dpnp.asarray(a, sycl_queue=queue)
