"""xe2rt._capi against the C headers the installed dpctl ships: the argument type codes, the local accessor layout and
the functions it calls are what those headers declare (a dpctl that changes them is noticed here), and a launch
through it computes what dpctl's own submit_async computes."""
from __future__ import annotations

import ctypes
import os
import re

import dpctl
import dpnp
import numpy as np
import pytest

import xe2rt
from xe2rt import _capi, launch

HEADERS = os.path.join(os.path.dirname(dpctl.__file__), "include", "syclinterface")


def _header(name: str) -> str:
    path = os.path.join(HEADERS, name)
    if not os.path.exists(path):
        pytest.fail(f"dpctl {dpctl.__version__} ships no {path}: xe2rt._capi cannot be checked against it")
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", open(path).read(), flags=re.S)


def test_argument_type_codes_are_the_headers():
    text = _header("dpctl_sycl_enum_types.h")
    body = re.search(r"typedef enum\s*\{([^}]*)\}\s*DPCTLKernelArgType;", text).group(1)
    names = [item.strip() for item in body.split(",") if item.strip()]
    assert all("=" not in name for name in names), names  # implicit values: the position is the code
    codes = {name: i for i, name in enumerate(names)}
    expected = {"DPCTL_INT8_T": _capi.INT8, "DPCTL_UINT8_T": _capi.UINT8, "DPCTL_INT16_T": _capi.INT16,
                "DPCTL_UINT16_T": _capi.UINT16, "DPCTL_INT32_T": _capi.INT32, "DPCTL_UINT32_T": _capi.UINT32,
                "DPCTL_INT64_T": _capi.INT64, "DPCTL_UINT64_T": _capi.UINT64, "DPCTL_FLOAT32_T": _capi.FLOAT32,
                "DPCTL_FLOAT64_T": _capi.FLOAT64, "DPCTL_VOID_PTR": _capi.VOID_PTR,
                "DPCTL_LOCAL_ACCESSOR": _capi.LOCAL_ACCESSOR, "DPCTL_RAW_KERNEL_ARG": _capi.RAW_KERNEL_ARG}
    assert {name: codes.get(name) for name in expected} == expected
    for ctype, code in _capi.SCALAR_CODES.items():  # each scalar code names a C type of the ctypes type's size
        assert ctypes.sizeof(ctype) == {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 8, 7: 8, 8: 4, 9: 8}[code], ctype


def test_local_accessor_layout_is_the_headers():
    text = _header("dpctl_sycl_queue_interface.h")
    body = re.search(r"typedef struct MDLocalAccessorTy\s*\{([^}]*)\}\s*MDLocalAccessor;", text).group(1)
    fields = [tuple(item.split()) for item in body.split(";") if item.strip()]
    assert fields == [("size_t", "ndim"), ("DPCTLKernelArgType", "dpctl_type_id"), ("size_t", "dim0"),
                      ("size_t", "dim1"), ("size_t", "dim2")]
    assert [name for name, _ in _capi.MDLocalAccessor._fields_] == [name for _, name in fields]


@pytest.mark.parametrize("header, declaration", [
    ("dpctl_sycl_queue_interface.h",
     r"DPCTLSyclEventRef\s+DPCTLQueue_SubmitNDRange\(\s*__dpctl_keep const DPCTLSyclKernelRef KRef,\s*"
     r"__dpctl_keep const DPCTLSyclQueueRef QRef,\s*__dpctl_keep void \*\*Args,\s*"
     r"__dpctl_keep const DPCTLKernelArgType \*ArgTypes,\s*size_t NArgs,\s*__dpctl_keep const size_t gRange\[3\],\s*"
     r"__dpctl_keep const size_t lRange\[3\],\s*size_t NDims,\s*__dpctl_keep const DPCTLSyclEventRef \*DepEvents,\s*"
     r"size_t NDepEvents\);"),
    ("dpctl_sycl_event_interface.h", r"void DPCTLEvent_Delete\(__dpctl_take DPCTLSyclEventRef ERef\);"),
    ("dpctl_sycl_extension_interface.h",
     r"DPCTLSyclRawKernelArgRef DPCTLRawKernelArg_Create\(void \*bytes,\s*size_t count\);"),
    ("dpctl_sycl_extension_interface.h", r"void DPCTLRawKernelArg_Delete\(__dpctl_take DPCTLSyclRawKernelArgRef"),
    ("dpctl_sycl_extension_interface.h", r"bool DPCTLRawKernelArg_Available\(\);"),
])
def test_functions_are_declared_as_called(header, declaration):
    assert re.search(declaration, _header(header)), f"{header} no longer declares {declaration!r}"


def test_a_launch_matches_submit_async(queue, rng):
    """The same packed launch through _capi and through dpctl's submit_async writes the same bytes: a pointer, a
    half and an int scalar, a local buffer."""
    source = """
    #pragma OPENCL EXTENSION cl_khr_fp16 : enable
    __kernel void scaled_sum(__global float* y, __global const half* x, half a, int n, __local float* tmp) {
        int i = get_global_id(0), l = get_local_id(0);
        tmp[l] = i < n ? (float)(a * x[i]) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (i < n) y[i] = tmp[l] + tmp[get_local_size(0) - 1 - l];
    }"""
    kernel = xe2rt.Module.from_source(source, queue=queue).kernel("scaled_sum")
    x = dpnp.asarray(rng.standard_normal(200).astype(np.float16), sycl_queue=queue)
    outs = [dpnp.zeros(200, dtype=np.float32, sycl_queue=queue) for _ in range(2)]
    with launch.recording() as recorder:
        kernel(outs[0], x, 0.75, 200, xe2rt.LocalMemory(4 * 64), global_size=256, local_size=64)
    (step,) = recorder.steps
    assert [type(item) for item in step.packed][:2] == [int, int] and type(step.packed[4]) is _capi.LocalArg
    step.raw.submit().wait()
    packed = list(step.packed)
    packed[0] = launch.memory_at(outs[1].get_array())
    packed[1] = launch.memory_at(x.get_array())
    packed[4] = dpctl.LocalAccessor("f4", (64,))
    queue.submit_async(step.sycl_kernel, packed, step.global_size, step.local_size).wait()
    assert outs[0].asnumpy().tobytes() == outs[1].asnumpy().tobytes()
    xs = x.asnumpy().astype(np.float32) * np.float16(0.75)
    expect = xs.astype(np.float16).astype(np.float32)
    padded = np.concatenate([expect, np.zeros(56, np.float32)]).reshape(4, 64)
    np.testing.assert_allclose(outs[0].asnumpy(), (padded + padded[:, ::-1]).reshape(-1)[:200], rtol=1e-6)


def test_a_refused_launch_raises_and_leaves_the_queue_usable(queue):
    kernel = xe2rt.Module.from_source("__kernel void one(__global int* y) { y[get_global_id(0)] = 1; }",
                                      queue=queue).kernel("one")
    y = dpnp.zeros(64, dtype=np.int32, sycl_queue=queue)
    raw = _capi.Launch(queue, kernel.sycl_kernel, [launch.facts_of(y.get_array())[3]], [2**62], [64])
    with pytest.raises(_capi.SubmitError):
        raw.submit()
    kernel(y, global_size=64, local_size=64)
    assert y.asnumpy().tolist() == [1] * 64


def test_unknown_arguments_are_refused(queue):
    kernel = xe2rt.Module.from_source("__kernel void one(__global int* y) { y[get_global_id(0)] = 1; }",
                                      queue=queue).kernel("one")
    with pytest.raises(TypeError, match="argument 0 is a float"):
        _capi.Launch(queue, kernel.sycl_kernel, [1.5], [64], [64])
