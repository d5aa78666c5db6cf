"""Writing the rotated k and the given v into KV caches, for inference (RotaryEmbedding.prologue):

    contiguous  k_cache, v_cache [B, P, Nk, D]   token (b, s) at row positions[b, s] of batch b
    paged       k_cache, v_cache [T, Nk, D]      token (b, s) at row slots[b, s] (slots [S] or [B, S])

Eagerly (PyNative on the host) the rows are copied on the host's memory after MindSpore's queue has drained,
with no op of their own, and the caches' version counters move; traced (and on a device), MindSpore's
ScatterNdUpdate writes them, behind the target's write guard (a view passed into the graph is refused before
anything is written). Every row index is checked first (outside the cache, or one row for two tokens: an error
naming it, nothing written). Not differentiable: under autograd it is refused."""
import ctypes
import functools

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.graph.api import _pynative_executor
from mindspore.ops import functional as F

from . import routes
from .constraints import (
    LAYER,
    POSITION_DTYPES,
    byte_span,
    check_eager_inputs,
    dtype_name,
    element_dtype,
    require_contiguous,
    shared_memory_error,
    spans_overlap,
)
from .functions import CONSTANT_TARGET_ERROR, VIEW_WRITE_ERROR, advance_version
from .planned import StepPlans, plannable
from .routes import Route
from .targets.base import as_tensor, host_array, host_integers, host_positions, new_outputs

NOT_DIFFERENTIABLE = (f"{LAYER}.prologue writes the KV caches for inference and has no gradient; call the layer "
                      f"itself (rope(q, k, positions, ...)) where gradients are needed")


def _row_rule(paged):
    return "slots" if paged else "positions"


def check_caches(k_shape, v_shape, k_cache_shape, v_cache_shape, k_dtype, v_dtype, k_cache_dtype, v_cache_dtype,
                 indices_shape, indices_dtype, paged):
    """The shape and dtype rules (eagerly, and traced at compile time): v shaped like k [B, S, Nk, D]; the
    caches [B, P, Nk, D] (contiguous) or [T, Nk, D] (paged), each of its tensor's dtype; the row indices
    [B, S], or [S] (positions shared by the batch; slots only for B = 1)."""
    if tuple(v_shape) != tuple(k_shape):
        raise ValueError(f"{LAYER}.prologue: v of shape {tuple(v_shape)} must be shaped like k {tuple(k_shape)}")
    batch, seq, heads, dim = k_shape
    for name, shape, dtype, of in (("k_cache", k_cache_shape, k_cache_dtype, k_dtype),
                                   ("v_cache", v_cache_shape, v_cache_dtype, v_dtype)):
        rule = f"[T, {heads}, {dim}] (paged)" if paged else f"[{batch}, P, {heads}, {dim}]"
        fits = tuple(shape[1:]) == (heads, dim) if paged else \
            len(shape) == 4 and (shape[0], shape[2], shape[3]) == (batch, heads, dim)
        if len(shape) != (3 if paged else 4) or not fits:
            raise ValueError(f"{LAYER}.prologue: {name} of shape {tuple(shape)} must be {rule}")
        if element_dtype(dtype) != element_dtype(of):
            raise TypeError(f"{LAYER}.prologue: {name} has dtype {element_dtype(dtype)}, the rows written into "
                            f"it {element_dtype(of)}")
    if dtype_name(indices_dtype) not in POSITION_DTYPES:
        raise TypeError(f"{LAYER}.prologue: {_row_rule(paged)} must hold integers ({', '.join(POSITION_DTYPES)}), "
                        f"got dtype {dtype_name(indices_dtype)}")
    shared = not paged or batch == 1  # positions [S] serve every batch row; slots name each token's own row
    if tuple(indices_shape) not in ((batch, seq),) + (((seq,),) if shared else ()):
        raise ValueError(f"{LAYER}.prologue: {_row_rule(paged)} of shape {tuple(indices_shape)} must be "
                         f"[B, S] = [{batch}, {seq}]" + (" or [S]" if shared else ""))


@functools.lru_cache(maxsize=64)
def _checked_signature(*signature):
    """check_caches once per signature of shapes and dtypes: a decode loop repeats one."""
    check_caches(*signature)


def host_rows(rows):
    """Row indices (a tensor, an array or a list) as numpy on the host."""
    return host_integers(rows) if isinstance(rows, ms.Tensor) else np.asarray(rows)


def _copy_rows(cache, values, targets):
    """values' B * S token rows (a tensor or a numpy buffer) into the cache's rows `targets` ([B * S]) on host
    memory: one copy when the rows follow each other (a decode step, a prompt from 0), else numpy's indexed
    write."""
    count = targets.size
    if count == 0:
        return
    host = isinstance(values, np.ndarray)
    row_bytes = values.nbytes // count
    if count == 1 or (targets[-1] - targets[0] == count - 1 and (np.diff(targets) == 1).all()):
        ctypes.memmove(cache.data_ptr() + int(targets[0]) * row_bytes,
                       values.ctypes.data if host else values.data_ptr(), count * row_bytes)
    else:
        host_array(cache).view(np.uint8).reshape(-1, row_bytes)[targets] = \
            (values if host else host_array(values)).view(np.uint8).reshape(count, row_bytes)


def outside_message(value, rows, paged):
    return (f"{LAYER}.prologue: {_row_rule(paged)} value {value} is outside the KV cache's {rows} rows [0, {rows}); "
            f"nothing was written")


def check_rows(rows, limit, paged):
    """Each token's cache row ([S] or [B, S]): inside the cache's `limit` rows, and none named for two tokens (a
    slot twice in a paged cache, a position twice in one batch row of a contiguous one: one token's k and v
    would be lost). Eagerly, and inside a graph's check op."""
    rows = np.asarray(rows)
    if rows.size == 0:
        return
    if rows.size == 1:  # a decode step's one token: no numpy reductions (each costs microseconds)
        row = int(rows.reshape(-1)[0])
        if not 0 <= row < limit:
            raise ValueError(outside_message(row, limit, paged))
        return
    if rows.min() < 0 or rows.max() >= limit:
        raise ValueError(outside_message(int(rows.min() if rows.min() < 0 else rows.max()), limit, paged))
    groups = rows.reshape(1, -1) if paged else rows.reshape(-1, rows.shape[-1])
    if groups.shape[1] < 2:  # one token a group (a decode step): nothing to collide
        return
    groups = np.sort(groups, axis=-1)
    twice = groups[:, 1:] == groups[:, :-1]
    if twice.any():
        where = "" if paged else " of one batch row"
        raise ValueError(f"{LAYER}.prologue: {_row_rule(paged)} value {int(groups[:, 1:][twice][0])} names one KV "
                         f"cache row for two tokens{where}: each token's k and v need a row of their own; nothing "
                         f"was written")


def _rows_in_cache(paged):
    def check(rows, limit):
        check_rows(rows, int(limit), paged)
        return np.zeros(1, np.int32)
    return check


@ops.constexpr
def _checked(k_shape, v_shape, k_cache_shape, v_cache_shape, k_dtype, v_dtype, k_cache_dtype, v_cache_dtype,
             indices_shape, indices_dtype, paged, on_host):
    check_caches(k_shape, v_shape, k_cache_shape, v_cache_shape, k_dtype, v_dtype, k_cache_dtype, v_cache_dtype,
                 indices_shape, indices_dtype, paged)
    if on_host and element_dtype(k_cache_dtype) == ms.bfloat16:
        raise TypeError(f"{LAYER}.prologue: bf16 KV caches are written in PyNative only on CPU: MindSpore 2.10's CPU "
                        f"graphs have no bf16 Reshape or ScatterNdUpdate kernel")
    return True


def shared_memory_message(written, other):
    return shared_memory_error(f"{LAYER}.prologue", written, other)


class KVCacheWrite(nn.Cell):
    """write(q_rot, k_rot, v, rows, k_cache, v_cache) -> q_rot, ordered after both writes; `rows` are the
    tokens' positions (contiguous caches) or slots (paged), [B, S] or [S]. `kernel`: the rotation's target
    kernel, whose guards (targets/*.py, write_guard, apart_guard) a graph's writes depend on."""

    def __init__(self, paged, kernel):
        super().__init__()
        self.paged, self.on_host = paged, routes.on_host(routes.device_target())
        self.update = ops.ScatterNdUpdate()
        self.guards = nn.CellList([kernel.write_guard(VIEW_WRITE_ERROR.format(op=f"{LAYER}.prologue", name=name))
                                   for name in ("k_cache", "v_cache")])
        # the caches apart from each other and from v (dtypes: k_cache's, then v_cache's and v's)
        self.apart = kernel.apart_guard(("k_cache", "v_cache", "v"), 2, (1, 2), shared_memory_message)
        self.constant_errors = [CONSTANT_TARGET_ERROR.format(name=name) for name in ("k_cache", "v_cache")]
        # A raise under a condition on the rows would make the graph branch, and MindSpore 2.10 then writes the
        # caches' copies, not the caches: the check is an op of its own that raises from the host.
        self.rows_check = ops.Custom(_rows_in_cache(paged), lambda *shapes: [1], lambda *dtypes: ms.int32,
                                     func_type="pyfunc")

    def __call__(self, q_rot, k_rot, v, rows, k_cache, v_cache):
        route = routes.current()
        if route is Route.TRACED:
            return super().__call__(q_rot, k_rot, v, rows, k_cache, v_cache)
        if route is Route.RECORDING:
            _pynative_executor.clear_res()  # MindSpore 2.10 would stay recording after a forward raised under grad
            raise ValueError(NOT_DIFFERENTIABLE)
        if not self.on_host:  # device memory: the ops, run now
            self.write_ops(k_rot, v, rows, k_cache, v_cache)
        else:
            self._write_now(k_rot, v, rows, k_cache, v_cache)
        return q_rot

    def _write_now(self, k_rot, v, rows, k_cache, v_cache):
        targets = self.checked_targets_now(k_rot.shape, k_rot.dtype, v, rows, k_cache, v_cache, k_rot)
        k_rot, v = (t if t.is_contiguous() else t.contiguous() for t in (k_rot, v))
        _pynative_executor.sync()  # the ops that produce k and v have run; earlier reads of the caches too
        for cache, values in ((k_cache, k_rot), (v_cache, v)):
            _copy_rows(cache, values, targets)
            advance_version(cache, cache._version + 1)

    def checked_targets_now(self, k_shape, k_dtype, v, rows, k_cache, v_cache, k_rot=None, q=None):
        """The write's rules on live tensors (rows read on the host), before anything is written: each token's
        row among the cache's rows ([B * S] of [T] paged, of [B * P] contiguous). k_rot, when it exists already
        (or k, which an in-place rotation writes), and q, when the rotation writes it in place, must not share
        the caches' memory, as v must not."""
        for name, value in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
            if not isinstance(value, ms.Tensor):
                raise TypeError(f"{LAYER}.prologue: {name} must be a mindspore.Tensor, got {type(value).__name__}")
        rows = host_rows(rows)
        _checked_signature(k_shape, v.shape, k_cache.shape, v_cache.shape, k_dtype, v.dtype, k_cache.dtype,
                           v_cache.dtype, rows.shape, rows.dtype, self.paged)
        limit = k_cache.shape[0] if self.paged else k_cache.shape[1]
        check_rows(rows, limit, self.paged)
        for cache, name in ((k_cache, "k_cache"), (v_cache, "v_cache")):
            require_contiguous(cache, name)
        spans = {name: byte_span(t) for name, t in (("q", q), ("k", k_rot), ("v", v), ("k_cache", k_cache),
                                                    ("v_cache", v_cache)) if t is not None and t.size}
        for name, other in (("k_cache", "v_cache"), ("k_cache", "q"), ("k_cache", "k"), ("k_cache", "v"),
                            ("v_cache", "q"), ("v_cache", "k"), ("v_cache", "v")):
            if other in spans and spans_overlap(spans[name], spans[other]):
                raise ValueError(shared_memory_message(name, other))
        batch, seq = k_shape[:2]
        if rows.size == 0:  # no token: nothing to write
            return np.zeros(0, np.int64)
        rows = rows.astype(np.int64, copy=False).reshape(-1, seq)
        return (rows if self.paged or batch == 1 else rows + np.arange(batch)[:, None] * limit).reshape(-1)

    def construct(self, q_rot, k_rot, v, rows, k_cache, v_cache):
        if F.isconstant(k_cache):
            raise ValueError(self.constant_errors[0])
        if F.isconstant(v_cache):
            raise ValueError(self.constant_errors[1])
        return ops.depend(q_rot, self.write_ops(k_rot, v, rows, k_cache, v_cache))

    def write_ops(self, k_rot, v, rows, k_cache, v_cache):
        """The write as MindSpore ops: the checks, the rows' check (an op), the guards, ScatterNdUpdate."""
        checked = _checked(k_rot.shape, v.shape, k_cache.shape, v_cache.shape, k_rot.dtype, v.dtype, k_cache.dtype,
                           v_cache.dtype, rows.shape, rows.dtype, self.paged, self.on_host)
        batch, seq, heads, dim = k_rot.shape
        if batch * seq == 0:  # no token: nothing to write (the shapes are constants in a graph)
            return ops.depend(k_cache, checked)
        rows = rows.astype(ms.int64).reshape(-1, seq).broadcast_to((batch, seq))
        limit = k_cache.shape[0] if self.paged else k_cache.shape[1]
        in_cache = self.rows_check(rows, ops.scalar_to_tensor(limit, ms.int64))  # raises naming one outside
        if self.paged:
            index = rows.reshape(-1, 1)
        else:
            batches = ops.arange(batch, dtype=ms.int64).reshape(-1, 1).broadcast_to((batch, seq))
            index = ops.stack([batches, rows], -1).reshape(-1, 2)
        guarded = (self.guards[0](k_cache), self.guards[1](v_cache), self.apart(k_cache, v_cache, v))
        # a data edge from the check (its 0) into the rows written: no write can start before it has passed
        index = ops.depend(ops.depend(index + in_cache.astype(ms.int64), checked), guarded)
        written_k = self.update(k_cache, index, k_rot.reshape(batch * seq, heads, dim))
        written_v = self.update(v_cache, index, v.reshape(batch * seq, heads, dim))
        return ops.depend(written_k, written_v)

    def bprop(self, q_rot, k_rot, v, rows, k_cache, v_cache, out, dout):
        raise ValueError(NOT_DIFFERENTIABLE)


class Prologue(nn.Cell):
    """prologue(q, k, v, positions, rows, k_cache, v_cache, cos, sin, q_weight, k_weight) -> q_rot: `rotation`
    (the layer's call on q and k, with a head norm when `norm`) and `write` (a KVCacheWrite) as one call.
    Recording: refused. Traced or on a device: the rotation's call, then the write's; an in-place rotation's
    writes into q and k come after the write's (traced) or after its rules (eagerly). Eagerly on the host out of
    place: both calls' rules checked before anything is written, then one kernel pass reads q and k once and
    writes q's result and k's rotated rows, straight into the KV cache where the tokens' rows follow each other
    there (a decode step, a prompt), and v's rows are copied."""

    def __init__(self, rotation, write, norm, rows=None, transposed=False):
        super().__init__()
        self.rotation, self.write, self.norm = rotation, write, bool(norm)
        self.rows, self.transposed = rows, bool(transposed)
        kernel = getattr(rotation, "kernel", None)
        self.one_pass = write.on_host and getattr(kernel, "on_host", False) and not rotation.call.in_place and \
            rows is None
        if rotation.call.in_place:  # dtypes: k_cache's (q's and k's too), v_cache's
            self.in_place_apart = kernel.apart_guard(("k_cache", "v_cache", "q", "k"), 4, (1, 1, 2),
                                                     shared_memory_message)
        self.plans = StepPlans(kernel, write.paged) if self.one_pass and plannable(kernel) else None

    def __call__(self, q, k, v, positions, rows, k_cache, v_cache, cos, sin, q_weight=None, k_weight=None):
        route = routes.current()
        if route is Route.RECORDING:  # refused before an in-place rotation could rebind q and k
            _pynative_executor.clear_res()  # MindSpore 2.10 would stay recording after a forward raised under grad
            raise ValueError(NOT_DIFFERENTIABLE)
        if route is Route.EAGER and self.rotation.call.in_place:
            if self.write.on_host:  # the write's rules, q and k apart from the caches, before q and k are written
                self.write.checked_targets_now(k.shape, k.dtype, v, rows, k_cache, v_cache, k, q)
            q_rot, k_rot = self.rotation(q, k, *self.tables(positions, cos, sin),
                                         *((q_weight, k_weight) if self.norm else ()))
            return self.write(q_rot, k_rot, v, rows, k_cache, v_cache)
        if self.one_pass and route is Route.EAGER:
            args = (q, k, v, positions, rows, k_cache, v_cache, cos, sin, (q_weight, k_weight) if self.norm else ())
            q_rot = self.plans.run(args) if self.plans is not None else None
            if q_rot is None:  # no plan for this signature, or a value its plan does not take
                q_rot = self._one_pass_now(*args)  # every rule checked on the way
                if self.plans is not None:
                    self.plans.learn(args)
            return q_rot
        return super().__call__(q, k, v, positions, rows, k_cache, v_cache, cos, sin, q_weight, k_weight)

    def tables(self, positions, cos, sin):
        """(cos, sin, positions) the rotation reads: the layer's cache at the positions, or, where the rows follow
        the length (length_rope.py), this call's own rows at 0..n-1."""
        if self.rows is None:
            return cos, sin, positions
        cos, sin, read_at = self.rows(positions)
        return cos, -sin if self.transposed else sin, read_at

    def construct(self, q, k, v, positions, rows, k_cache, v_cache, cos, sin, q_weight, k_weight):
        weights = (q_weight, k_weight) if self.norm else ()
        cos, sin, read_at = self.tables(positions, cos, sin)
        if not self.rotation.call.in_place:
            q_rot, k_rot = self.rotation(q, k, cos, sin, read_at, *weights)
            return self.write(q_rot, k_rot, v, rows, k_cache, v_cache)
        # In place, traced (eagerly: __call__): q and k are written last, after every check of the write has
        # passed and the caches are written, and none of the four shares memory with another
        apart = self.in_place_apart(k_cache, v_cache, q, k)
        q_rot, k_rot = self.rotation.rotated_two(ops.depend(q, apart), k, cos, sin, read_at, *weights)
        q_rot = self.write(q_rot, k_rot, v, rows, k_cache, v_cache)
        q_rot, k_rot = self.rotation.written_two(q, k, q_rot, ops.depend(k_rot, q_rot))
        return ops.depend(q_rot, k_rot)  # k's write too

    def _one_pass_now(self, q, k, v, positions, rows, k_cache, v_cache, cos, sin, weights):
        kernel = self.rotation.kernel
        check_eager_inputs((q, k), ("q", "k"), cos, sin, in_place=False)
        positions = host_positions(positions, kernel.call.cache.channels)
        (q, k), weights = kernel.checked_cache_read_now((q, k), cos, sin, positions, weights)
        targets = self.write.checked_targets_now(k.shape, k.dtype, v, rows, k_cache, v_cache)
        count = targets.size
        # k's rows straight into the cache where they follow each other, unless what the kernel reads shares the
        # cache's memory (it would read rows it has written)
        cache_span = byte_span(k_cache)
        direct = count and targets[-1] - targets[0] == count - 1 and (count == 1 or (np.diff(targets) == 1).all()) \
            and not any(spans_overlap(byte_span(t), cache_span) for t in (q, k, cos, sin, *weights))
        if direct:
            q_out, = new_outputs((q,))
            k_out = host_array(k_cache).reshape(-1, *k.shape[2:])[targets[0]:targets[0] + count].reshape(k.shape)
        else:
            q_out, k_out = new_outputs((q, k))
        v = v if v.is_contiguous() else v.contiguous()
        _pynative_executor.sync()  # the ops that produce q, k and v have run; earlier reads of the caches too
        kernel.rotate_at_now((q, k), (q_out, k_out), cos.contiguous(), sin.contiguous(), positions, *weights)
        if not direct:
            _copy_rows(k_cache, k_out, targets)
        _copy_rows(v_cache, v, targets)
        for cache in (k_cache, v_cache):
            advance_version(cache, cache._version + 1)
        return as_tensor(q_out)
