"""The OpenCL entry points xe2rt calls itself, bound once from the ICD loader the SYCL runtime loaded: the command
buffers of xe2rt.graph and the program binaries of xe2rt.program_cache. The handles they take come from the SYCL
objects through xe2rt._compat (libsycl's getNative members)."""
from __future__ import annotations

import ctypes
import threading

_VP = ctypes.c_void_p


class OpenCL:
    """The OpenCL entry points xe2rt uses, from the ICD loader the SYCL runtime loaded, and cl_khr_command_buffer's
    from the platform of the first device asked about."""

    def __init__(self):
        lib = ctypes.CDLL("libOpenCL.so.1")  # already loaded by SYCL's OpenCL adapter: the same library

        def f(name, restype, *argtypes):
            fn = lib[name]
            fn.restype, fn.argtypes = restype, list(argtypes)
            return fn
        size, pint = ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)
        self.queue_info = f("clGetCommandQueueInfo", ctypes.c_int, _VP, ctypes.c_uint, size, _VP, _VP)
        self.device_info = f("clGetDeviceInfo", ctypes.c_int, _VP, ctypes.c_uint, size, _VP, _VP)
        self.clone_kernel = f("clCloneKernel", _VP, _VP, pint)
        self.set_arg = f("clSetKernelArg", ctypes.c_int, _VP, ctypes.c_uint, size, _VP)
        self.release_kernel = f("clReleaseKernel", ctypes.c_int, _VP)
        self.release_queue = f("clReleaseCommandQueue", ctypes.c_int, _VP)
        self.release_event = f("clReleaseEvent", ctypes.c_int, _VP)
        self.wait_events = f("clWaitForEvents", ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_VP))
        self.finish = f("clFinish", ctypes.c_int, _VP)
        self._address = f("clGetExtensionFunctionAddressForPlatform", _VP, _VP, ctypes.c_char_p)
        # program binaries (xe2rt.program_cache)
        self.kernel_info = f("clGetKernelInfo", ctypes.c_int, _VP, ctypes.c_uint, size, _VP, _VP)
        self.program_info = f("clGetProgramInfo", ctypes.c_int, _VP, ctypes.c_uint, size, _VP, _VP)
        self.program_with_binary = f("clCreateProgramWithBinary", _VP, _VP, ctypes.c_uint, ctypes.POINTER(_VP),
                                     ctypes.POINTER(size), ctypes.POINTER(ctypes.c_char_p), pint, pint)
        self.build_program = f("clBuildProgram", ctypes.c_int, _VP, ctypes.c_uint, ctypes.POINTER(_VP),
                               ctypes.c_char_p, _VP, _VP)
        self.release_program = f("clReleaseProgram", ctypes.c_int, _VP)
        self.release_context = f("clReleaseContext", ctypes.c_int, _VP)
        self.platform = None

    def extension(self, platform: int):
        """Bind the extension entry points of `platform` (once: a process has one OpenCL platform per runtime, and
        the graphs of other platforms replay their plans)."""
        if self.platform is not None:
            return self.platform == platform

        def f(name, restype, *argtypes):
            address = self._address(platform, name.encode())
            if not address:
                raise OSError(f"the OpenCL platform has no {name}")
            return ctypes.CFUNCTYPE(restype, *argtypes)(address)
        pint, puint = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint)
        self.set_arg_pointer = f("clSetKernelArgMemPointerINTEL", ctypes.c_int, _VP, ctypes.c_uint, _VP)
        self.create_buffer = f("clCreateCommandBufferKHR", _VP, ctypes.c_uint, ctypes.POINTER(_VP), _VP, pint)
        self.command_kernel = f("clCommandNDRangeKernelKHR", ctypes.c_int, _VP, _VP, _VP, _VP, ctypes.c_uint, _VP, _VP,
                                _VP, ctypes.c_uint, puint, puint, _VP)
        self.finalize = f("clFinalizeCommandBufferKHR", ctypes.c_int, _VP)
        self.enqueue_buffer = f("clEnqueueCommandBufferKHR", ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_VP), _VP,
                                ctypes.c_uint, _VP, ctypes.POINTER(_VP))
        self.release_buffer = f("clReleaseCommandBufferKHR", ctypes.c_int, _VP)
        self.platform = platform
        return True


_cl: OpenCL | None = None
lock = threading.Lock()  # held by opencl() and by whoever binds entry points (OpenCL.extension)


def opencl() -> OpenCL:
    global _cl
    with lock:
        if _cl is None:
            _cl = OpenCL()
        return _cl
