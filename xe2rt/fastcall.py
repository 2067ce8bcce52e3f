"""Warm calls at close to the cost of the submission itself.

An op's checks, kernel choice, geometry and argument packing depend only on facts about its arguments that do not change
between calls of a decode loop: each array's dtype, shape, contiguity, queue and base alignment, the values of its
non-array arguments, the XE2RT_* variables and the per-call target. `cached(op)` keys calls by exactly those facts. The
first call with a key runs the op as usual (so every error is the op's own) while recording its launches
(launch.recording, as xe2rt.bind does); the recorder is given the call's arrays, and each launch notes as it packs an
argument which of them it is, or which output the op made with launch.new_output. A later call with the same key replays
those launches with its own arrays substituted and fresh outputs allocated (xe2rt.pool): nothing that the facts
determine is recomputed, and nothing that they do not determine is reused.

An array's facts are read once while it lives (`launch.facts_of`: a table keyed by the usm_ndarray's id and checked
through a weak reference; the shape is read on every call, since it can be set in place): a decode loop's weights, and
any array passed to more than one call, cost a dictionary look-up per call instead of six attribute reads.

A first call that passes one array as two arguments is not stored (a launch's argument could not be traced back to
one of them); the next call with distinct arrays records its own. Checks that depend on more than the key run on
every replayed call: `out=` must not overlap an input (byte ranges of this call's arrays; on overlap the op itself is
called and raises), arrays must be device arrays at all (the key cannot be formed otherwise, and the op is called), and
an op's checks of device contents, given as `data_check` (rope_kv reads its positions back), run before the replay.
Calls the cache cannot express (an op that allocates temporaries, queues dpnp work, or takes arguments other than
arrays, quantized weights, tuples and plain scalars) are simply passed to the op every time. An op may pass one
more kind of array: a device constant it made once and keeps for good, registered with `resident(array)` (rope_kv's
inv_freq table per queue, D, theta and scaling); it must be determined by the key's facts, and a replay passes the
same array again. The cache holds no arrays: a replay keeps its own arrays
alive until its kernels complete, like any launch.
"""
from __future__ import annotations

import math

import dataclasses
import functools
import threading

import dpnp
import dpnp.tensor as dpt

from . import _compat, launch, module
from .launch import _recording

_SCALAR_TYPES = frozenset((int, float, str, bool, type(None)))
MAX_ENTRIES = 1024
_UNCACHEABLE = object()
_NO_OUT = object()
_environ_get = _compat.environ_get
_TARGET_KEY, _KERNEL_DIR_KEY = _compat.environ_key("XE2RT_TARGET"), _compat.environ_key("XE2RT_KERNEL_DIR")
facts_of = launch.facts_of
_array_facts = launch.array_facts
_take_into = launch.pool.pool.take_into
_ordered_submit = launch.ordered_submit


def _env(name: str):
    """An XE2RT_* variable as it is now."""
    return _environ_get(_compat.environ_key(name))


_DPNP_ARRAY = dpnp.ndarray
_fields_by_type: dict = {}
# Device constants an op made once from facts its cache key holds and keeps for the life of the process: the
# recorder (launch.Recorder) notes launches that pass one as constants, so a replay passes the same array again.
resident = launch.resident


def _all_dpnp(items: tuple) -> bool:
    for item in items:
        if type(item) is not _DPNP_ARRAY:
            return False
    return True


def _flatten(value, facts: list, arrays: list, hits: list) -> bool:
    """Append the facts of `value` to `facts` and its arrays (the object passed, and its usm_ndarray) to `arrays`;
    False if the value is of a kind the key cannot express. Queues enter the key by identity: an entry holds its
    queue, so the identity cannot be reused while the entry can be found."""
    kind = type(value)
    if kind is _DPNP_ARRAY:  # the facts' id alone (an int; every other kind of value starts with a type or a name)
        u = value.get_array()
        hit = facts_of(u)
        facts.append(hit[4])
        arrays.append((value, u))
        hits.append(hit)
        return True
    if kind is dpt.usm_ndarray:
        hit = facts_of(value)
        facts.append(kind)
        facts.append(hit[4])
        arrays.append((value, value))
        hits.append(hit)
        return True
    if kind in _SCALAR_TYPES:
        facts.append(kind)
        facts.append(value)
        if kind is float and value == 0.0:
            facts.append(math.copysign(1.0, value))  # -0.0 == 0.0, but x / -0.0 is not x / 0.0
        return True
    if kind is tuple or kind is list:
        facts.append(kind)
        facts.append(len(value))
        for item in value:
            if not _flatten(item, facts, arrays, hits):
                return False
        return True
    names = _fields_by_type.get(kind)
    if names is None:
        if not (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            return False
        names = _fields_by_type[kind] = tuple(f.name for f in dataclasses.fields(value))
    facts.append(kind)
    for name in names:
        if not _flatten(getattr(value, name), facts, arrays, hits):
            return False
    return True


class _Entry:
    """How to replay one call signature: per launch the kernel, ranges and, per argument, either a constant (scalars,
    local memory) or the index of the call's array or of a fresh output."""
    __slots__ = ("launches", "fresh", "result", "fresh_result", "out_arrays", "nbytes", "pairs", "queues")

    def __init__(self, launches, fresh, result, out_arrays, nbytes, queues=(), n_new: int = 0):
        self.launches, self.fresh, self.result, self.out_arrays = launches, fresh, result, out_arrays
        # result slots that are the call's fresh outputs exactly, in order (a replay returns them as one tuple)
        slots = result[1]
        self.fresh_result = slots if slots == tuple(("new", j) for j in range(n_new)) else None
        # every queue the key names by id (the call's arrays may live on SyclQueue objects equal to, but other than,
        # the launch queue): held, so that no id in the key can be reused while the entry exists
        self.queues = queues
        self.nbytes = nbytes  # per array of the call: its byte size (its shape and dtype are in the key)
        # the (written, other) pairs of array indices whose byte ranges must not meet (validate.out_array's rule):
        # a written array against every other array of the call, except a written one checked before it
        self.pairs = tuple((i, j) for n, i in enumerate(out_arrays) if nbytes[i]
                           for j in range(len(nbytes))
                           if j != i and nbytes[j] and (j not in out_arrays or out_arrays.index(j) > n))


def _analyse(recorder: launch.Recorder, result, n_out_args: int, in_place: tuple = ()):
    """An _Entry for what the recorder holds, or None when a launch used anything but the call's arrays, the
    outputs the op made with launch.new_output and resident constants, or the op queued host steps."""
    if not recorder.replayable or any(not isinstance(step, launch.Submission) for step in recorder.steps):
        return None
    result_slots = []
    for r in (list(result) if isinstance(result, tuple) else [result]):
        slot = next((("in", i) for i, (obj, _) in enumerate(recorder.inputs) if r is obj), None)
        if slot is None:
            slot = next((("new", j) for j, (array, _, _) in enumerate(recorder.outputs) if r is array), None)
        if slot is None:
            return None
        result_slots.append(slot)
    # one pool spec per single output and per group (whose arrays follow one another in recorder.outputs)
    fresh = [spec for _, spec, part in recorder.outputs if not part]
    launches = []
    for step in recorder.steps:
        # where this call's arrays and fresh outputs go (the constants stay in place in step.raw's arguments)
        ins = tuple((pos, what) for pos, (kind, what) in enumerate(step.slots) if kind == "in")
        news = tuple((pos, what) for pos, (kind, what) in enumerate(step.slots) if kind == "new")
        launches.append((step.raw, step.in_order, ins, news))
    n_inputs = len(recorder.inputs)
    out_arrays = list(in_place) + list(range(n_inputs - n_out_args, n_inputs))
    nbytes = [u.size * u.itemsize for _, u in recorder.inputs]
    queues = launch.distinct_queues(u.sycl_queue for _, u in recorder.inputs)
    return _Entry(launches, fresh, (isinstance(result, tuple), tuple(result_slots)), out_arrays, nbytes, queues,
                  len(recorder.outputs))


def _overlapping(entry: _Entry, hits: list) -> bool:
    """Whether an array the op writes (`out=`, or an in-place argument) overlaps another of the call's arrays (the op's
    own rule, e.g. validate.out_array), from the first-byte addresses of this call's arrays (launch.facts_of) and the
    sizes the entry knows (an array's C-contiguous span from its first byte, as validate.usm_byte_range)."""
    nbytes = entry.nbytes
    for i, j in entry.pairs:
        a, b = hits[i][3], hits[j][3]
        if a < b + nbytes[j] and b < a + nbytes[i]:
            return True
    return False


def _replay(entry: _Entry, arrays: list, hits: list):
    new, addresses = [], []
    for spec in entry.fresh:  # fresh outputs, and the address each is passed as
        _take_into(spec, new, addresses)
    keep = (arrays, new)  # held until the kernels complete (launch._record)
    for raw, in_order, ins, news in entry.launches:
        packed = raw.copy_args()
        for pos, what in ins:
            packed[pos] = hits[what][3]  # facts_of's first-element address
        for pos, what in news:
            packed[pos] = addresses[what]
        _ordered_submit(raw, keep, in_order, packed)
    is_tuple, slots = entry.result
    if not is_tuple:
        kind, what = slots[0]
        return arrays[what][0] if kind == "in" else new[what]
    if slots is entry.fresh_result:  # the op returns exactly its fresh outputs, in order
        return tuple(new)
    return tuple([arrays[what][0] if kind == "in" else new[what] for kind, what in slots])


def _in_place_slots(in_place: tuple, args: tuple) -> tuple:
    """The indices in the call's array list of the positional arguments `in_place` names, or None (the call is then
    not cached) when they cannot be told: a positional argument holding other than one array or a plain scalar."""
    slots, n = [], 0
    for i, value in enumerate(args):
        kind = type(value)
        if kind is _DPNP_ARRAY or kind is dpt.usm_ndarray:
            if i in in_place:
                slots.append(n)
            n += 1
        elif kind not in _SCALAR_TYPES or i in in_place:
            return None
    return tuple(slots)


_entries: dict = {}
_entries_lock = threading.Lock()


def cached(op, in_place: tuple = (), data_check=None):
    """`op` with warm calls replayed from the launches its first call with the same facts recorded.
    `in_place`: indices of positional array arguments the op writes; a replay checks, as it checks `out=`, that none
    overlaps another argument (the key holds shapes, not addresses). `data_check(*args, **kwargs)`: the checks of
    device contents the op makes before it launches (rope_kv's positions); a replay calls it first, so a warm call
    raises what the op would, with nothing queued."""

    @functools.wraps(op)
    def call(*args, **kwargs):
        if _recording.current is not None:  # inside xe2rt.bind or a composite op: the outer recording takes them
            return op(*args, **kwargs)
        facts = [op, _environ_get(_TARGET_KEY), _environ_get(_KERNEL_DIR_KEY), module.generation]
        arrays, hits = [], []
        for value in args:  # the common cases inline: a dpnp array (as _flatten does), a plain scalar
            kind = type(value)
            if kind is _DPNP_ARRAY:
                u = value.get_array()
                hit = _array_facts.get(id(u))  # facts_of's fast path, inline
                if hit is None or hit[1] != u.shape or hit[0]() is not u:
                    hit = facts_of(u)
                facts.append(hit[4])
                arrays.append((value, u))
                hits.append(hit)
            elif kind in _SCALAR_TYPES:
                facts.append(kind)
                facts.append(value)
                if kind is float and value == 0.0:
                    facts.append(math.copysign(1.0, value))  # -0.0 == 0.0, but x / -0.0 is not x / 0.0
            elif not _flatten(value, facts, arrays, hits):
                return op(*args, **kwargs)
        n_out_args = 0
        if kwargs:
            out = kwargs.get("out", _NO_OUT)
            if out is _NO_OUT or len(kwargs) > 1:
                for name in sorted(kwargs):
                    if name != "out":
                        facts.append(name)
                        if not _flatten(kwargs[name], facts, arrays, hits):
                            return op(*args, **kwargs)
            if out is not _NO_OUT:  # last: its arrays are the call's last ones
                n_before_out = len(arrays)
                facts.append("out")
                if type(out) is _DPNP_ARRAY or type(out) is tuple and _all_dpnp(out):  # as _flatten, inline
                    if type(out) is tuple:
                        facts.append(tuple)
                        facts.append(len(out))
                        items = out
                    else:
                        items = (out,)
                    for value in items:
                        u = value.get_array()
                        hit = _array_facts.get(id(u))
                        if hit is None or hit[1] != u.shape or hit[0]() is not u:
                            hit = facts_of(u)
                        facts.append(hit[4])
                        arrays.append((value, u))
                        hits.append(hit)
                elif not _flatten(out, facts, arrays, hits):
                    return op(*args, **kwargs)
                n_out_args = len(arrays) - n_before_out
        try:
            key = tuple(facts)
            entry = _entries.get(key)
        except TypeError:  # an unhashable fact (e.g. a scalar subclass): no caching
            return op(*args, **kwargs)
        if entry is _UNCACHEABLE:
            return op(*args, **kwargs)
        if entry is not None:
            if entry.pairs and _overlapping(entry, hits):
                return op(*args, **kwargs)  # the op raises its own overlap error
            if data_check is not None:
                data_check(*args, **kwargs)
            return _replay(entry, arrays, hits)
        with launch.recording(arrays) as recorder:
            result = op(*args, **kwargs)
        launch.run_steps(recorder.steps)  # the first call runs exactly what was recorded
        if len({id(u) for _, u in arrays}) < len(arrays):
            # one array passed as two arguments (rms_norm(x, w, residual=x)): the recording cannot tell which of the
            # two a launch used, so a replay with two distinct arrays could put one where the other belongs. Not
            # stored: the next call with distinct arrays records its own.
            return result
        in_place_slots = _in_place_slots(in_place, args) if in_place else ()
        entry = _analyse(recorder, result, n_out_args, in_place_slots) if in_place_slots is not None else None
        with _entries_lock:
            if len(_entries) >= MAX_ENTRIES:
                _entries.clear()
            _entries[key] = entry if entry is not None else _UNCACHEABLE
        return result

    call.__wrapped_op__ = op
    return call


def clear() -> None:
    with _entries_lock:
        _entries.clear()
