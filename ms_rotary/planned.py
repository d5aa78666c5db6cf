"""Eager calls planned once per signature of shapes and dtypes (a decode loop repeats one): the layer's call
(CallPlans) and its prologue (StepPlans). After the full path has passed every rule of a signature once, a call
of that signature checks only what values can break (positions and KV-cache rows in range and distinct, memory
materialised, contiguous and apart) and calls the compiled kernel with its other arguments bound. Whatever a plan
does not take returns None, and the full path runs and refuses by name: a plan never raises a rule of its own.

Plans serve PyNative with nothing recording, on the host, with the CPU kernel, int64 positions of at most
FEW_POSITIONS tokens (one a token, or M-RoPE's axes; not quarter mode's), out of place; everything else takes
the full path."""
import ctypes

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore._c_expression import _unsafe_set_version_counter
from mindspore.graph.api import _pynative_executor

from . import library, routes
from .constraints import FEW_POSITIONS, element_dtype, spans_overlap
from .routes import Route
from .targets.base import DTYPE_NAMES, EAGER_OUT_OF_PLACE_MIN_SIZE, HOST_DTYPES, tensor_sharing

MAX_PLANS = 64  # signatures kept per call shape (a new one past it starts afresh)
# dtypes by the identity of MindSpore's dtype singletons: hashing a dtype costs 0.5 us
_DTYPE_CODES = {id(dtype): code for code, dtype in enumerate((ms.float32, ms.float16, ms.bfloat16, ms.int64))}


def signature(flags, tensors):
    """The key a plan is kept under: flags (which optional arguments are given) and each tensor's shape and
    dtype; None for arguments no plan takes (not tensors, other dtypes)."""
    try:
        return (flags,) + tuple((t.shape, _DTYPE_CODES[id(t.dtype)]) for t in tensors)
    except (AttributeError, KeyError):
        return None


class Plans:
    """Plans by signature; `make(*args)` builds one (None where no plan serves the signature) after the full
    path has passed a call of it."""

    def __init__(self, make):
        self.make, self.plans = make, {}

    def run(self, key, args):
        plan = self.plans.get(key) if key is not None else None
        return plan.run(*args) if plan else None

    def learn(self, key, args):
        if key is not None and key not in self.plans:
            if len(self.plans) >= MAX_PLANS:
                self.plans.clear()
            self.plans[key] = self.make(*args)


def plannable(kernel):
    """Whether a call's kernel can serve plans: the CPU kernel on the host, out of place, reading a cache at one
    position a token or M-RoPE's several (a caller's positions are then the kernels' form: quarter mode's,
    channel last, are not)."""
    if not (getattr(kernel, "on_host", False) and hasattr(kernel, "cache_read_entry")):
        return False
    call = kernel.call
    return not call.in_place and call.cache is not None and call.rotary_mode != 2 and not call.cache.rows_per_call


def _few_int64(positions, channels):
    """int64 positions in the kernels' form ([S], [B, S]; M-RoPE [N, S], [N, B, S]) of a few tokens."""
    return positions.dtype is ms.int64 and len(positions.shape) in ((1, 2) if channels == 1 else (2, 3)) and \
        0 < positions.size <= FEW_POSITIONS * channels


def _ready(tensors):
    """Materialised and contiguous: what the kernel reads in place (the full path copies or refuses others)."""
    for t in tensors:
        if t.init is not None or not t.is_contiguous():
            return False
    return True


class _CacheRead:
    """What a planned cache read binds: the kernel's entry for the signature, its positions' form and bounds."""

    def __init__(self, kernel, tensors, cos, positions, weights):
        channels, shape = kernel.call.cache.channels, tuple(positions.shape)
        self.depth = len(shape)  # of the nested lists tolist gives
        self.shared = self.depth == (1 if channels == 1 else 2)  # no batch axis: every batch row's positions
        self.cos_rows = cos.shape[1]
        positions_3d = (channels, 1 if self.shared else shape[-2], shape[-1])
        self.entry = kernel.cache_read_entry([t.shape for t in tensors], tensors[0].dtype, positions_3d, cos.shape,
                                             cos.dtype, [w.dtype for w in weights])

    def tokens(self, positions):
        """(positions' values as read, all of them flat), or None when one lies outside the cos/sin cache."""
        values = positions.tolist()
        tokens = _flat(values, self.depth)
        if min(tokens) < 0 or max(tokens) >= self.cos_rows:
            return None
        return values, tokens


def _flat(values, depth):
    """The integers of a tensor's tolist() (nested `depth` deep) in one list."""
    if depth == 1:
        return values
    return [p for row in values for p in row] if depth == 2 else [p for plane in values for row in plane for p in row]


def _host_buffer(tensor):
    name = DTYPE_NAMES[element_dtype(tensor.dtype)]
    return tuple(tensor.shape), HOST_DTYPES[name], name


class CallPlan:
    """The layer's eager call (q, or q and k; with a head norm its weights) for one signature."""

    def __init__(self, kernel, tensors, cos, positions, weights):
        self.read = _CacheRead(kernel, tensors, cos, positions, weights)
        self.outs = [_host_buffer(t) for t in tensors]

    @classmethod
    def serving(cls, kernel, tensors, cos, sin, positions, weights):
        if not plannable(kernel) or not _few_int64(positions, kernel.call.cache.channels) or \
                sum(t.size for t in tensors) >= EAGER_OUT_OF_PLACE_MIN_SIZE:
            return None
        return cls(kernel, tensors, cos, positions, weights)

    def run(self, tensors, cos, sin, positions, weights):
        if not _ready((*tensors, cos, sin, *weights)):
            return None
        read = self.read.tokens(positions)
        if read is None:
            return None
        outs = [np.empty(shape, host) for shape, host, _ in self.outs]
        positions_host = np.array(read[0], np.int64)
        k, k_out = (tensors[1].data_ptr(), outs[1].ctypes.data) if len(tensors) == 2 else (None, None)
        _pynative_executor.sync()  # the ops that produce q and k have run
        status = self.read.entry(tensors[0].data_ptr(), outs[0].ctypes.data, k, k_out, cos.data_ptr(),
                                 sin.data_ptr(), positions_host.ctypes.data, *(w.data_ptr() for w in weights))
        if status:
            library.raise_for_status(status)
        results = [tensor_sharing(out, name) for out, (_, _, name) in zip(outs, self.outs)]
        return results[0] if len(results) == 1 else tuple(results)


class CallPlans:
    """RotaryEmbedding's eager calls by signature; `kernels[(k given, norm weights given)]`: the kernel that
    call runs (absent: none plannable)."""

    def __init__(self, kernels):
        self.kernels, self.plans = kernels, Plans(CallPlan.serving)

    def _key(self, q, k, positions, q_weight, k_weight, cos, sin):
        flags = (k is None, q_weight is None, k_weight is None)
        tensors = (q,) if k is None else (q, k)
        weights = tuple(w for w in (q_weight, k_weight) if w is not None)
        return signature(flags, (*tensors, positions, cos, sin, *weights)), (tensors, cos, sin, positions, weights)

    def run(self, q, k, positions, q_weight, k_weight, cos, sin):
        """The call's results, or None (not eager, no plan for this signature, a value its plan does not take)."""
        if routes.current() is not Route.EAGER:
            return None
        key, args = self._key(q, k, positions, q_weight, k_weight, cos, sin)
        return self.plans.run(key, args)

    def learn(self, q, k, positions, q_weight, k_weight, cos, sin):
        """After the full path has passed this call (eagerly): its signature's plan."""
        if routes.current() is not Route.EAGER:
            return
        key, (tensors, cos, sin, positions, weights) = self._key(q, k, positions, q_weight, k_weight, cos, sin)
        kernel = self.kernels.get((k is not None, bool(weights)))
        if kernel is not None:
            self.plans.learn(key, (kernel, tensors, cos, sin, positions, weights))


class StepPlan:
    """Prologue's eager call for one signature: the cache read with k's output rows in the KV cache (where they
    follow each other and no input shares the cache's memory; else through a buffer), then v's rows; the
    caches' version counters move."""

    def __init__(self, kernel, paged, q, k, v, positions, rows, k_cache, v_cache, cos, sin, weights):
        self.read = _CacheRead(kernel, (q, k), cos, positions, weights)
        self.paged, self.batch, self.seq = paged, k.shape[0], k.shape[1]
        self.limit = k_cache.shape[0] if paged else k_cache.shape[1]
        self.row_bytes = k.nbytes // (k.shape[0] * k.shape[1])
        self.cache_bytes = (k_cache.nbytes, v_cache.nbytes)
        self.sizes = [t.nbytes for t in (q, k, v, cos, sin, *weights)]
        self.q_out = _host_buffer(q)

    @classmethod
    def serving(cls, kernel, paged, q, k, v, positions, rows, k_cache, v_cache, cos, sin, weights):
        if not plannable(kernel) or not _few_int64(positions, kernel.call.cache.channels) or \
                rows.dtype is not ms.int64 or q.size >= EAGER_OUT_OF_PLACE_MIN_SIZE:
            return None
        return cls(kernel, paged, q, k, v, positions, rows, k_cache, v_cache, cos, sin, weights)

    def targets(self, positions, rows, tokens):
        """Each token's row of the caches (of [B * P] contiguous, [T] paged), or None when one lies outside
        them or two tokens share one."""
        if rows is not positions:
            tokens = _flat(rows.tolist(), len(rows.shape))
        if min(tokens) < 0 or max(tokens) >= self.limit:
            return None
        if self.paged or self.batch == 1:
            targets = tokens
        else:  # positions [S] serve every batch row
            per_row = [tokens] * self.batch if len(tokens) == self.seq else \
                [tokens[b * self.seq:(b + 1) * self.seq] for b in range(self.batch)]
            targets = [b * self.limit + r for b, row in enumerate(per_row) for r in row]
        return targets if len(set(targets)) == len(targets) else None

    def run(self, q, k, v, positions, rows, k_cache, v_cache, cos, sin, weights):
        read_tensors = (q, k, v, cos, sin, *weights)
        if not _ready((*read_tensors, k_cache, v_cache)):
            return None
        read = self.read.tokens(positions)
        targets = None if read is None else self.targets(positions, rows, read[1])
        if targets is None:
            return None
        pointers = [t.data_ptr() for t in read_tensors]
        k_cache_at, v_cache_at = k_cache.data_ptr(), v_cache.data_ptr()
        k_span, v_span = (k_cache_at, k_cache_at + self.cache_bytes[0]), (v_cache_at, v_cache_at + self.cache_bytes[1])
        v_in = (pointers[2], pointers[2] + self.sizes[2])
        if spans_overlap(k_span, v_span) or spans_overlap(v_in, k_span) or spans_overlap(v_in, v_span):
            return None  # the full path refuses these
        count, first, row_bytes = len(targets), targets[0], self.row_bytes
        direct = targets[-1] - first == count - 1 and (count == 1 or targets == list(range(first, first + count)))
        # k's rows into the cache only where no input shares its memory
        direct = direct and not any(spans_overlap((at, at + size), k_span) for at, size in zip(pointers, self.sizes))
        shape, host, name = self.q_out
        q_out = np.empty(shape, host)
        k_buffer = None if direct else np.empty((count, row_bytes), np.uint8)
        k_out = k_cache_at + first * row_bytes if direct else k_buffer.ctypes.data
        positions_host = np.array(read[0], np.int64)
        _pynative_executor.sync()  # the ops that produce q, k and v have run; earlier reads of the caches too
        status = self.read.entry(pointers[0], q_out.ctypes.data, pointers[1], k_out, pointers[3], pointers[4],
                                 positions_host.ctypes.data, *pointers[5:])
        if status:
            library.raise_for_status(status)
        if direct:  # v's rows follow each other as k's do: one copy
            ctypes.memmove(v_cache_at + first * row_bytes, v_in[0], count * row_bytes)
        else:
            for index, target in enumerate(targets):
                ctypes.memmove(k_cache_at + target * row_bytes, k_out + index * row_bytes, row_bytes)
                ctypes.memmove(v_cache_at + target * row_bytes, v_in[0] + index * row_bytes, row_bytes)
        _unsafe_set_version_counter([k_cache, v_cache], [k_cache._version + 1, v_cache._version + 1])
        return tensor_sharing(q_out, name)


class StepPlans:
    """A Prologue's eager calls by signature (its arguments: q, k, v, positions, rows, k_cache, v_cache, cos,
    sin, weights as a tuple)."""

    def __init__(self, kernel, paged):
        self.plans = Plans(lambda *args: StepPlan.serving(kernel, paged, *args))

    @staticmethod
    def _key(args):
        return signature(args[4] is args[3], (*args[:-1], *args[-1]))

    def run(self, args):
        return self.plans.run(self._key(args), args)

    def learn(self, args):
        self.plans.learn(self._key(args), args)


class PlannedPrologue(nn.Cell):
    """RotaryEmbedding.prologue's first step: eagerly, a planned signature's call (StepPlans) before the layer's
    own checks and conversions; otherwise (traced, recording, a signature or value no plan takes) None, and
    the layer's path runs. `plans`: the contiguous and the paged Prologue's, None where none serve."""

    def __init__(self, plans, norm):
        super().__init__()
        self.plans, self.norm = plans, bool(norm)

    def __call__(self, q, k, v, positions, k_cache, v_cache, slots, q_weight, k_weight, cos, sin):
        plans = self.plans[slots is not None]
        if plans is None or routes.current() is not Route.EAGER:
            return None
        if self.norm:
            weights = (q_weight, k_weight)
        elif q_weight is not None or k_weight is not None:  # the layer's path refuses them
            return None
        else:
            weights = ()
        return plans.run((q, k, v, positions, positions if slots is None else slots, k_cache, v_cache, cos, sin,
                          weights))

    def construct(self, q, k, v, positions, k_cache, v_cache, slots, q_weight, k_weight, cos, sin):
        return None
