"""Output arrays for ops that allocate their result, recycled without reference-count heuristics.

dpctl frees USM memory with sycl::free, which on the OpenCL runtime blocks until the queued kernels that may use the
allocation finish: a decode loop that drops each step's output would wait for the device at every free. The pool keeps
small allocations and hands out each one wrapped in a fresh memory handle (a Python subclass of dpctl's
MemoryUSMDevice). Every array or view the user makes of the output refers to that handle, and so does every launch
record (xe2rt.launch keeps a kernel's arguments until its event completes, dpnp's keep-alive tasks do the same for its
own ops). When the handle is collected (its `__del__`), nothing can touch the allocation any more and its last kernel
has completed: it goes back to the free list. A recycled allocation is handed out only on the queue it was made for,
whose order manager orders the next writer after everything queued before.

One way around that rule exists and is not detected: dpctl's memory copy constructor,
`dpctl.memory.MemoryUSMDevice(out.get_array().usm_data)`, makes an object that shares the allocation without
referring to the handle, so it does not keep the allocation out of the pool. Keep the array (or a view of it), or
copy it (`dpnp.copy`), instead.
"""
from __future__ import annotations

import collections
import math
import threading

import dpctl
import dpctl.memory
import numpy as np
import dpnp.tensor as dpt

from . import _compat


class _PooledMemory(dpctl.memory.MemoryUSMDevice):
    """A handle on a pooled allocation (`_base`, the pool's own memory object; dpctl's copy shares the allocation).
    When the handle is collected, nothing can reach the allocation any more: `__del__` puts it back on its free list
    (`_home`). No weak reference or closure per hand-out: a handle costs its construction and two attributes."""
    __slots__ = ("_home", "_base")

    def __del__(self):
        home = getattr(self, "_home", None)
        if home is not None:
            home.append(self._base)


class OutputPool:
    MAX_BYTES_EACH = 1 << 20  # decode-sized outputs; larger ones are allocated and freed as usual
    MAX_TOTAL = 64 << 20

    def __init__(self):
        # (nbytes, queue) -> deque of allocations no handle refers to; a deque, once made, stays (handles out
        # there return to it)
        self._free: dict = {}
        self._total = 0
        self._lock = threading.Lock()

    def array(self, shape: tuple, dtype, queue: dpctl.SyclQueue):
        """A dpnp array of `shape` and `dtype` on `queue`, with uninitialised contents."""
        return self.take(self.spec(shape, dtype, queue))

    @staticmethod
    def spec(shape: tuple, dtype, queue: dpctl.SyclQueue) -> tuple:
        """What `take` needs to hand out arrays of one shape, dtype and queue, computed once (a warm call's replay
        keeps it): the shape, the dtype as its type string (usm_ndarray builds from one in half the time it takes
        from a numpy dtype), the byte size and the free-list key."""
        dtype = np.dtype(dtype)
        nbytes = max(1, dtype.itemsize * math.prod(shape))
        return (tuple(shape), dtype.str, nbytes, (nbytes, queue))

    def take(self, spec: tuple):
        """A dpnp array of the shape, dtype and queue that `spec` (from `spec()`) describes, uninitialised."""
        shape, typestr, nbytes, key = spec
        if nbytes > self.MAX_BYTES_EACH:
            return _wrap(_usm_ndarray(shape, typestr, None, dpctl.memory.MemoryUSMDevice(nbytes, queue=key[1])))
        free = self._free.get(key)
        if free is None:
            free = self._free.setdefault(key, collections.deque())
        try:
            base = free.pop()
        except IndexError:  # none free (an empty deque raises; cheaper than testing first on the common path)
            base = dpctl.memory.MemoryUSMDevice(nbytes, queue=key[1])
            with self._lock:
                if self._total + nbytes > self.MAX_TOTAL:
                    return _wrap(_usm_ndarray(shape, typestr, None, base))
                self._total += nbytes
        memory = _PooledMemory(base)
        memory._base = base
        memory._home = free
        return _wrap(_usm_ndarray(shape, typestr, None, memory))

    def free_count(self) -> int:
        return sum(len(d) for d in self._free.values())

    def clear(self) -> None:
        """Drop the free allocations (those still handed out return to the pool when released)."""
        with self._lock:
            for (nbytes, _), free in self._free.items():
                while True:
                    try:
                        free.pop()
                    except IndexError:
                        break
                    self._total -= nbytes


_usm_ndarray = dpt.usm_ndarray
_wrap = _compat.wrap_usm_ndarray


pool = OutputPool()


def new_output(shape: tuple, dtype, queue: dpctl.SyclQueue):
    return pool.array(tuple(shape), dtype, queue)
