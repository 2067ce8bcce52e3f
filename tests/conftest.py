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


def skip_unless_int_dot(queue, variant: str):
    """Skip where the integer-dot kernels of `variant` ("vnni": the *_vnni kernels, AVX512-VNNI; "avx2": the *_avx2
    ones) cannot run (xe2rt.targets.cpu_has_flag), saying why."""
    from xe2rt import targets
    from xe2rt.ops.common import INT_DOT_FLAGS
    flag = INT_DOT_FLAGS[variant]
    if not targets.cpu_has_flag(queue.sycl_device, flag):
        pytest.skip(f"the {variant} kernels run on CPUs with {targets.HOST_ISA_NAMES[flag]}; this host's "
                    f"/proc/cpuinfo has no {flag} (or CL_CONFIG_CPU_TARGET_ARCH is set)")


def skip_unless_vnni(queue):
    skip_unless_int_dot(queue, "vnni")


def skip_unless_host_runs(queue, check):
    """Skip a check whose cpu binary needs a host CPU flag this host lacks (xe2rt.checks.Check.cpu_flag)."""
    from xe2rt import targets
    if check.cpu_flag and not targets.cpu_has_flag(queue.sycl_device, check.cpu_flag):
        pytest.skip(f"the case's cpu binary needs a host CPU with {check.cpu_flag}; this host's /proc/cpuinfo has "
                    f"none (or CL_CONFIG_CPU_TARGET_ARCH is set)")


def int_dot_variant(queue) -> str:
    """The integer-dot variant dequant="auto" takes on this device ("vnni" before "avx2"); skips where neither runs."""
    from xe2rt.ops.common import int_dot_variant
    variant = int_dot_variant("tests", "dequant", "auto", "cpu", queue)
    if variant:
        return variant
    pytest.skip("the integer-dot kernels run on CPUs with AVX512-VNNI or AVX2; this host's /proc/cpuinfo has neither "
                "(or CL_CONFIG_CPU_TARGET_ARCH is set)")


def to_device(a, queue):
    return dpnp.asarray(a, sycl_queue=queue)


def guarded(queue, shape, fill=7.0, guard=64):
    """A float16 view of `shape` inside one allocation filled with `fill`, and the guards before and after it."""
    n = int(np.prod(shape))
    big = to_device(np.full(n + 2 * guard, fill, np.float16), queue)
    return big[guard:guard + n].reshape(shape), big[:guard], big[guard + n:]


# ---- parallel runs (pytest-xdist, `--dist loadgroup`) ----
# Most of the suite's time is the OpenCL CPU compiler building the Xe2-shaped kernels (about 9 s per bmg W4 kernel),
# and every worker process builds the kernels its tests launch. Tests that launch the same family's bmg / lnl binaries
# (lnl's are mostly bmg's bytes, one built program) therefore run in one worker, so each of those kernels is built once.
_FAMILY_OF_FILE = {"test_gemv_fp16.py": "gemv_fp16", "test_gemv_w8a16.py": "gemv_w8a16",
                   "test_gemv_w4a16.py": "gemv_w4a16", "test_moe_xe2.py": "moe_ffn_w4a16"}
_FAMILY_OF_PREFIX = {"test_fp16_": "gemv_fp16", "test_w8_": "gemv_w8a16", "test_w4_": "gemv_w4a16"}  # gemv_batched


def _params(item) -> dict:
    return getattr(getattr(item, "callspec", None), "params", {})


def _check_family(params: dict) -> str:
    """The family of a test_checks.py case (its check's name is "family[case]")."""
    return str(params.get("check", "")).split("[")[0]


def xe2_group(item) -> str | None:
    """The xdist group of a test that launches a gemv / moe family's Xe2 binary, or None."""
    params = _params(item)
    name = item.path.name
    target = params.get("target", "bmg" if name == "test_moe_xe2.py" else None)
    if target not in ("bmg", "lnl"):
        return None
    if name == "test_checks.py":
        family = _check_family(params)
    elif name == "test_gemv_batched.py":
        family = next((f for p, f in _FAMILY_OF_PREFIX.items() if item.originalname.startswith(p)), None)
    else:
        family = _FAMILY_OF_FILE.get(name)
    if family not in ("gemv_fp16", "gemv_w8a16", "gemv_w4a16", "moe_ffn_w4a16"):
        return None
    # W4 plain dequant is another binary (gemv_w4a16_alt on bmg / lnl): its own group, so two workers share the W4 builds
    plain = params.get("dequant") == "plain" or (name == "test_checks.py" and " plain]" in str(params.get("check")))
    return f"xe2-{family}{'_alt' if family == 'gemv_w4a16' and plain else ''}"


# Files whose tests launch a few kernels of one family over and over (a build log showed 5-20 s per file of kernels
# built in both workers): each file runs in one worker, with the selftest checks of the same kernels.
_FILE_GROUPS = ("test_gemm_fp16.py", "test_gemm_fp16_ult.py", "test_gemm_w4a16.py", "test_decode_attention.py",
                "test_prefill_attention.py", "test_routing.py", "test_moe.py")
_FILE_OF_CHECK = {"gemm_fp16": "test_gemm_fp16.py", "softmax_topk": "test_routing.py", "moe_ffn_w4a16": "test_moe.py"}


# Tests that run a whole decoder layer through the bmg kernels (decode_attention's among them, 12-20 s each to
# compile): one worker, so the second loads what the first compiled (xe2rt.program_cache) instead of both compiling
# at once (seen: 35 s of one cold run).
_XE2_LAYER_TESTS = ("test_llm_through_the_xe2_code_path", "test_native_graph_replays_the_plans_bit_for_bit")


def build_group(item) -> str | None:
    """The xdist group of a test: xe2_group, else its file's group for the files above (and test_checks.py's cases
    of the same families), else None (scheduled freely)."""
    group = xe2_group(item)
    if group:
        return group
    if item.originalname in _XE2_LAYER_TESTS and _params(item).get("target", "bmg") in ("bmg", "lnl"):
        return "xe2-decoder-layer"
    name = item.path.name
    if name == "test_checks.py":
        name = _FILE_OF_CHECK.get(_check_family(_params(item)))
    return f"file-{name}" if name in _FILE_GROUPS else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the marker into the scheduling group
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = build_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
