"""Output arrays for ops that allocate their result, recycled without reference-count heuristics.

dpctl frees USM memory with sycl::free, which on the OpenCL runtime blocks until the queued kernels that may use the
allocation finish: a decode loop that drops each step's output would wait for the device at every free. The pool keeps
small allocations and hands out each one wrapped in a fresh memory handle (a Python subclass of dpctl's
MemoryUSMDevice). Every array or view the user makes of the output refers to that handle, and so does every launch
record (xe2rt.launch keeps a kernel's arguments until its event completes, dpnp's keep-alive tasks do the same for its
own ops). When the handle is collected (its `__del__`), nothing can touch the allocation any more and its last kernel
has completed: it goes back to the free list. A recycled allocation is handed out only on the queue it was made for,
whose order manager orders the next writer after everything queued before. An op with several outputs
(softmax_topk's values and indices, rms_norm's y and s) takes them as one group: one allocation and one handle, each
output at an aligned offset in it, back to the pool when nothing reaches any of them. The later outputs of a group
are therefore arrays that start inside their allocation, as views do: `usm_data` is the allocation, and raw-pointer
code must take the offset into account (`__sycl_usm_array_interface__`, `dpctl.memory.as_usm_memory(array)`, or
`xe2rt.launch.memory_at`), as it must for any view. A launch passes an array as its first element's address.

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
    """A handle on a pooled allocation (`_base`, the pool's own memory object, at `_address`; dpctl's copy shares the
    allocation). When the handle is collected, nothing can reach the allocation any more: `__del__` puts it back on
    its free list (`_home`). No weak reference or closure per hand-out: a handle costs its construction and three
    attributes. A group's outputs (softmax_topk's values and indices) share one handle: one return to the pool."""
    __slots__ = ("_home", "_base", "_address")

    def __del__(self):
        home = getattr(self, "_home", None)
        if home is not None:
            home.append((self._base, self._address))


def _handle(base, address: int, free) -> _PooledMemory:
    """A new handle on pooled allocation `base` (at `address`), which returns to `free` when collected."""
    memory = _PooledMemory(base)
    memory._base, memory._address, memory._home = base, address, free
    return memory


GROUP_ALIGNMENT = 128  # bytes between the start of the allocation and each output of a group, rounded up to this


class OutputSpec:
    """What the pool needs to hand out the outputs of one kind of call, computed once (a warm call's replay keeps
    it): per output its shape, dtype as a type string (usm_ndarray builds from one in half the time it takes from a
    numpy dtype) and element offset in the allocation; the allocation's byte size; the queue; and the free list of
    such allocations itself (None when they are too large to keep), so that a hand-out looks nothing up.
    `layout` is None for a single output; for a group, one (shape, type string, byte offset, element offset) per
    output."""
    __slots__ = ("shape", "typestr", "nbytes", "queue", "free", "layout")

    def __init__(self, shape, typestr, nbytes, queue, free, layout=None):
        self.shape, self.typestr, self.nbytes, self.queue, self.free = shape, typestr, nbytes, queue, free
        self.layout = layout


class OutputPool:
    MAX_BYTES_EACH = 1 << 20  # decode-sized outputs; larger ones are allocated and freed as usual
    MAX_TOTAL = 64 << 20

    def __init__(self):
        # (nbytes, queue[, layout]) -> deque of allocations no handle refers to; a deque, once made, stays (specs
        # hold it, and handles out there return to it)
        self._free: dict = {}
        self._total = 0
        self._lock = threading.Lock()

    def _free_list(self, nbytes: int, key: tuple):
        """The free list of allocations of `key`, made on first use (dict.setdefault is atomic); None for sizes the
        pool does not keep."""
        if nbytes > self.MAX_BYTES_EACH:
            return None
        free = self._free.get(key)
        return free if free is not None else self._free.setdefault(key, collections.deque())

    def spec(self, shape: tuple, dtype, queue: dpctl.SyclQueue) -> OutputSpec:
        """What `take` needs to hand out arrays of one shape, dtype and queue."""
        dtype = np.dtype(dtype)
        nbytes = max(1, dtype.itemsize * math.prod(shape))
        return OutputSpec(tuple(shape), dtype.str, nbytes, queue, self._free_list(nbytes, (nbytes, queue)))

    def take(self, spec: OutputSpec):
        """A dpnp array of the shape, dtype and queue that `spec` (from `spec()`) describes, uninitialised."""
        return self._take(spec)[0]

    def _allocate(self, spec: OutputSpec):
        """A new allocation for `spec`, its address, and the free list it returns to (None: not pooled, too large
        or past MAX_TOTAL)."""
        base = dpctl.memory.MemoryUSMDevice(spec.nbytes, queue=spec.queue)
        address = base.__sycl_usm_array_interface__["data"][0]
        if spec.free is None:
            return base, address, None
        with self._lock:
            if self._total + spec.nbytes > self.MAX_TOTAL:
                return base, address, None
            self._total += spec.nbytes
        return base, address, spec.free

    def _acquire(self, spec: OutputSpec) -> tuple:
        """(allocation, its address, the free list it returns to or None) for `spec`: a free one, else a new one."""
        free = spec.free
        if free is not None:
            try:
                base, address = free.pop()
                return base, address, free
            except IndexError:  # none free (pop, not a test first: another thread may have taken the last one)
                pass
        return self._allocate(spec)

    def _take(self, spec: OutputSpec) -> tuple:
        """take's array, and its address."""
        base, address, free = self._acquire(spec)
        if free is None:  # not pooled: the array owns the allocation
            return _wrap(_usm_ndarray(spec.shape, spec.typestr, None, base)), address
        return _wrap(_usm_ndarray(spec.shape, spec.typestr, None, _handle(base, address, free))), address

    def group_spec(self, parts, queue: dpctl.SyclQueue) -> OutputSpec:
        """What `take_group` needs to hand out one array per (shape, dtype) of `parts`, all in one allocation (each
        starting GROUP_ALIGNMENT-aligned)."""
        layout, offset = [], 0
        for shape, dtype in parts:
            dtype = np.dtype(dtype)
            layout.append((tuple(shape), dtype.str, offset, offset // dtype.itemsize))
            offset += -(-max(1, dtype.itemsize * math.prod(shape)) // GROUP_ALIGNMENT) * GROUP_ALIGNMENT
        layout = tuple(layout)
        return OutputSpec(None, None, offset, queue, self._free_list(offset, (offset, queue, layout)), layout)

    def take_group(self, spec: OutputSpec) -> tuple:
        """The arrays `spec` (from `group_spec`) describes, uninitialised, sharing one allocation and one handle."""
        arrays = []
        self._take_group(spec, arrays)
        return tuple(arrays)

    def _take_group(self, spec: OutputSpec, into: list) -> int:
        """Append take_group's arrays to `into`; return the allocation's address."""
        base, address, free = self._acquire(spec)
        memory = base if free is None else _handle(base, address, free)
        for shape, typestr, _, element_offset in spec.layout:
            into.append(_wrap(_usm_ndarray(shape, typestr, None, memory, element_offset)))
        return address

    def take_into(self, spec: OutputSpec, arrays: list, addresses: list) -> None:
        """Append the array(s) `spec` (a `spec()` or a `group_spec()`) describes to `arrays`, and each one's
        first-element address to `addresses` (what a launch passes for it): a warm call's replay packs these without
        asking each array for them."""
        if spec.layout is not None:
            address = self._take_group(spec, arrays)
            for _, _, offset, _ in spec.layout:
                addresses.append(address + offset)
        else:
            array, address = self._take(spec)
            arrays.append(array)
            addresses.append(address)

    def free_count(self) -> int:
        return sum(len(d) for d in self._free.values())

    def clear(self) -> None:
        """Drop the free allocations (those still handed out return to the pool when released)."""
        with self._lock:
            for key, free in self._free.items():
                nbytes = key[0]
                while True:
                    try:
                        free.pop()
                    except IndexError:
                        break
                    self._total -= nbytes


_usm_ndarray = dpt.usm_ndarray
_wrap = _compat.wrap_usm_ndarray


pool = OutputPool()
