"""RotaryEmbedding: the layer a model calls with positions, over a cos/sin cache built once from its config.

    rope = ms_rotary.RotaryEmbedding.from_config(config)
    q_rot, k_rot = rope(q, k, positions)       # q [B, S, Nq, D], k [B, S, Nk, D], positions int [S] or [B, S]

One more call shape of the op stack (functions.py): the same rotation, reading each token's cos/sin row from
the cache at its position (no gathered table is built), q and k in one call; its backward is the same call
transposed. This module holds what is the layer's own: the cache, the constructor's values, positions put in
the kernels' form (constraints.kernel_positions) and from_config."""
import numbers
from dataclasses import replace

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from .call import LAYOUT_AXES, CacheRead, HeadNorm, RotaryCall
from .constraints import FLOAT_DTYPES, LAYER, MAX_HEAD_DIM, kernel_positions, normalize_mode
from .functions import head_normalised, rotary
from .head_norms import head_norm_from_config
from .kv_cache import KVCacheWrite, Prologue
from .length_rope import LengthDependentRows, is_length_dependent, refuse_length_dependent_with
from .planned import CallPlans, PlannedPrologue
from .rope_config import RopeConfig, config_fields
from .rope_scaling import NON_NEGATIVE, check_value, resolve_rope_scaling, rope_type_of
from .tables import cache_parameters, check_partial_rotary_factor, mrope_lane_channels

GROWTH_LIMIT = 1 << 20  # positions grow_cache covers at most, beyond max_position_embeddings
_CACHE_DTYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _rotated_lanes(head_dim, partial_slice):
    """(start, end) of a non-empty part of [0, head_dim]; None: the whole head."""
    if not _is_integer(head_dim) or head_dim < 1:
        raise ValueError(f"{LAYER}: head_dim={head_dim!r} must be a positive integer")
    if partial_slice is None:
        return 0, int(head_dim)
    if not isinstance(partial_slice, (list, tuple)) or len(partial_slice) != 2 or \
            not all(_is_integer(value) for value in partial_slice):
        raise TypeError(f"{LAYER}: partial_slice={partial_slice!r} must be None (the whole head) or [start, end], "
                        f"two integers")
    start, end = (int(value) for value in partial_slice)
    if not 0 <= start < end <= head_dim:
        raise ValueError(f"{LAYER}: partial_slice={[start, end]} must be a non-empty part of [0, head_dim={head_dim}]")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"{LAYER}: head_dim={head_dim} exceeds the supported maximum D <= {MAX_HEAD_DIM}")
    return start, end


def _cache_dtype(cache_dtype):
    if isinstance(cache_dtype, str) and cache_dtype in _CACHE_DTYPES:
        return _CACHE_DTYPES[cache_dtype]
    if cache_dtype in FLOAT_DTYPES:
        return cache_dtype
    raise TypeError(f"{LAYER}: cache_dtype={cache_dtype!r} must be ms.float32, ms.float16 or ms.bfloat16 (or their "
                    f"names)")


class QueryScale(nn.Cell):
    """Llama-4's attention temperature, which transformers multiplies into q after the rotation (Ministral-3,
    Mistral-4): 1 + beta * log(1 + floor(position / original)) per token, in float32 as transformers computes
    it, cast to q's dtype and shaped to broadcast over q in the layer's layout."""

    def __init__(self, beta, original, layout):
        super().__init__()
        self.beta, self.original, self.layout = float(beta), float(original), layout

    def construct(self, positions, dtype):
        scale = 1 + self.beta * ops.log(1 + ops.floor(positions.astype(ms.float32) / self.original))
        scale = scale.reshape(1, -1) if scale.ndim == 1 else scale  # [1|B, S]
        if self.layout == "SBND":
            scale = scale.transpose(1, 0)
        scale = scale.reshape(scale.shape[0], 1, scale.shape[1], 1) if self.layout == "BNSD" else \
            scale.reshape(scale.shape[0], scale.shape[1], 1, 1)
        return scale.astype(dtype)


class RotaryEmbedding(nn.Cell):
    """RotaryEmbedding(head_dim, partial_slice, rotary_mode, rope_theta=10000.0, rope_scaling=None,
    max_position_embeddings=None, cache_positions=None, cache_dtype=ms.float32, backend=None, layout="BSND",
    mrope_section=None, mrope_interleaved=False, inplace=False, grow_cache=False, llama_4_scaling_beta=None,
    qk_norm_eps=None, qk_norm_offset=0.0, transposed=False)

    One of cache_positions and max_position_embeddings is required: the cache covers positions
    [0, cache_positions), cache_positions defaulting to max_position_embeddings. partial_slice: the rotated lanes
    [start, end) of each head (None: all). Use `from_config` for a model.

    `rope(q, k, positions)` -> (q_rot, k_rot); `rope(q, None, positions)` -> q_rot; `rope.inverse(...)` the
    same with R^T (undoes the rotation where cos/sin carry no attention factor; DeepSeek-V4 de-rotates its
    attention output so). q [B, S, Nq, D] and k [B, S, Nk, D] (their own head counts: GQA, MQA; layout "SBND":
    [S, B, N, D], "BNSD": [B, N, S, D]) of one float dtype, D = head_dim; positions integer (a tensor, array or
    list) [S] or [B, S], each in [0, cache_positions). M-RoPE (an mrope_section of three frequency counts;
    mrope_interleaved True for Qwen3-VL, "hw" for ERNIE-4.5-VL, "lanes" for HunYuan-VL's 3 or 4 sections of lanes:
    tables.MROPE_LAYOUTS): positions [N, S] or [N, B, S], N the section's axes (time, height, width), each lane's
    cos/sin read at its axis's position; quarter mode (rotary_mode 2,
    ChatGLM-6B): positions [S, 2] or [B, S, 2] (token, block). The cache holds cos/sin computed in float64 and
    stored in cache_dtype: fp32 by default; a bf16 cache rounds cos/sin to 8 bits, whose angle error grows with the
    position. Set cos_cache/sin_cache.requires_grad to train them: they get the true gradient (each token's, added
    into the row it read). inplace=True writes q and k themselves (contiguous, apart) and returns them, as
    InplacePartialRotaryMul writes x.

    grow_cache=True: a call from Python with a position past the cache first rebuilds it to cover it (at least
    doubling, up to max(max_position_embeddings, 2**20) positions; `extend_cache(n)` by hand). A compiled
    network keeps the cache it was compiled with and refuses a position past it by name. rope types "dynamic"
    and "longrope" have no cache: each call's rows are computed from its length (ms_rotary.length_rope), any
    position >= 0. llama_4_scaling_beta (Ministral-3, Mistral-4): q_rot is multiplied by Llama-4's attention
    temperature at its position (RopeConfig.query_scale). transposed=True (NanoChat): pairs turn by -angle (the
    cache's sin negated). qk_norm_eps (and qk_norm_offset, 1 for Gemma's 1 + weight): each head of q and k
    RMS-normalised before the rotation in the same pass; the call then takes the norms' weights,
    rope(q, k, positions, q_norm_weight, k_norm_weight).
    """

    def __init__(self, head_dim, partial_slice, rotary_mode, rope_theta=10000.0, rope_scaling=None,
                 max_position_embeddings=None, cache_positions=None, cache_dtype=ms.float32, backend=None,
                 layout="BSND", mrope_section=None, mrope_interleaved=False, inplace=False, grow_cache=False,
                 llama_4_scaling_beta=None, qk_norm_eps=None, qk_norm_offset=0.0, transposed=False):
        super().__init__()
        mode = normalize_mode(rotary_mode)
        start, end = _rotated_lanes(head_dim, partial_slice)
        if layout not in LAYOUT_AXES:
            raise ValueError(f"{LAYER}: layout={layout!r} must be one of {list(LAYOUT_AXES)}")
        length_dependent = is_length_dependent(rope_scaling)
        positions = cache_positions if cache_positions is not None else max_position_embeddings
        if length_dependent and cache_positions is not None:
            raise refuse_length_dependent_with(rope_type_of(rope_scaling), f"it reads no cache (any position >= 0 "
                                               f"is served); leave cache_positions={cache_positions!r} out")
        if positions is None:
            raise ValueError(f"{LAYER}: give cache_positions (or max_position_embeddings, its default): the cache "
                             f"covers positions [0, cache_positions)")
        if not _is_integer(positions) or positions < 1:
            raise ValueError(f"{LAYER}: cache_positions={positions!r} (default max_position_embeddings) must be a "
                             f"positive integer: the cache covers positions [0, cache_positions)")
        dtype = _cache_dtype(cache_dtype)
        if (end - start) % (4 if mode == 2 else 2):
            raise ValueError(f"{LAYER}: partial_slice={[start, end]} has length {end - start}, which rotary_mode "
                             f"{mode} needs divisible by {4 if mode == 2 else 2}")
        if mode == 2 and mrope_section is not None:
            raise ValueError(f"{LAYER}: mrope_section does not combine with rotary_mode 2 (quarter)")
        if mode == 2:  # quarter: a token reads its first half at its position and its second at its block's
            lane_channels, channels = (0,) * ((end - start) // 2) + (1,) * ((end - start) // 2), 2
        elif mrope_section is not None:
            lane_channels = mrope_lane_channels(mode, end - start, mrope_section, mrope_interleaved)
            channels = len(mrope_section)
        else:
            lane_channels, channels = None, 1
        if length_dependent and channels > 1:
            raise refuse_length_dependent_with(rope_type_of(rope_scaling), "it takes one position a token, not "
                                               "quarter mode's two or M-RoPE's several")
        if length_dependent:
            check_partial_rotary_factor(rope_scaling, end - start, int(head_dim))
            self.rows = LengthDependentRows(end - start, mode, rope_theta, rope_scaling, max_position_embeddings,
                                            dtype)
            self.cos_cache = self.sin_cache = None
        else:
            self.rows = None
            self._cache_values = (end - start, mode, rope_theta, rope_scaling, max_position_embeddings, dtype)
            self.cos_cache, self.sin_cache = cache_parameters(int(positions), *self._cache_values,
                                                              head_dim=int(head_dim), transposed=bool(transposed))
        self.query_scale = None
        if llama_4_scaling_beta is not None:
            if channels > 1 or inplace:
                raise ValueError(f"{LAYER}: llama_4_scaling_beta scales q by its token's position after the rotation: "
                                 f"one position a token, out of place (not inplace, quarter mode or M-RoPE)")
            original = resolve_rope_scaling(rope_scaling, max_position_embeddings)[1].get(
                "original_max_position_embeddings")
            if original is None:
                raise ValueError(f"{LAYER}: llama_4_scaling_beta needs original_max_position_embeddings in "
                                 f"rope_scaling (it divides the positions)")
            self.query_scale = QueryScale(check_value("llama_4_scaling_beta", llama_4_scaling_beta, NON_NEGATIVE),
                                          original, layout)
        if grow_cache and length_dependent:
            raise refuse_length_dependent_with(rope_type_of(rope_scaling), "it has no cache to grow")
        self.grow_cache = bool(grow_cache)
        # a stray huge position must not allocate a huge cache: grow to the model's length at most
        self.growth_limit = max(int(positions), int(max_position_embeddings or 0), GROWTH_LIMIT)
        self.head_dim, self.partial_slice, self.rotary_mode, self.layout = int(head_dim), (start, end), mode, layout
        self.channels, self.inplace, self.transposed = channels, bool(inplace), bool(transposed)
        cache = CacheRead(int(head_dim), layout, lane_channels, channels, False,
                          {ms.float32: "float32", ms.float16: "float16", ms.bfloat16: "bfloat16"}[dtype],
                          length_dependent)
        call = RotaryCall(mode, (start, end), False, self.inplace, "q", cache)
        with_k = replace(call, cache=replace(cache, with_k=True))
        self.rotate_q, self.rotate_qk = (rotary(c, backend, "RotaryEmbedding") for c in (call, with_k))
        # R^T: the same call conjugated (the Grad op's direction), out of place or in place as the layer
        self.inverse_q, self.inverse_qk = (rotary(replace(c, conjugate=True), backend, "RotaryEmbedding.inverse")
                                           for c in (call, with_k))
        self.backend = self.rotate_q.backend
        self.write_contiguous, self.write_paged = (KVCacheWrite(paged, self.rotate_q.kernel)
                                                   for paged in (False, True))
        self.head_norm = _head_norm(qk_norm_eps, qk_norm_offset)
        if self.head_norm is not None and self.inplace and self.backend == "ascend":
            raise ValueError(f"{LAYER}: qk_norm_eps with inplace=True is not built on Ascend (MindSpore's norm runs "
                             f"before the rotation there, on copies); build the layer with inplace=False")
        if self.head_norm is not None:
            self.norm_q, self.norm_qk = (
                (ComposedNorm if self.backend == "ascend" else rotary)(replace(c, norm=self.head_norm), self.backend,
                                                                       "RotaryEmbedding") for c in (call, with_k))
        rotation = self.rotate_qk if self.head_norm is None else self.norm_qk
        self.prologue_contiguous, self.prologue_paged = (
            Prologue(rotation, write, self.head_norm is not None, self.rows, self.transposed)
            for write in (self.write_contiguous, self.write_paged))
        # eager calls planned once per signature (planned.py): a cache read out of place, q's result as is
        plain = self.rows is None and self.query_scale is None
        plans = (self.prologue_contiguous.plans, self.prologue_paged.plans) if plain and layout == "BSND" else \
            (None, None)
        self.planned_prologue = PlannedPrologue(plans, self.head_norm is not None)
        calls = {(False, False): self.rotate_q, (True, False): self.rotate_qk}
        if self.head_norm is not None:
            calls.update({(False, True): self.norm_q, (True, True): self.norm_qk})
        kernels = {key: call.kernel for key, call in calls.items() if hasattr(call, "kernel")}
        self.call_plans = CallPlans(kernels) if plain and not self.inplace else None

    @classmethod
    def from_config(cls, config, rotary_mode=None, cache_positions=None, cache_dtype=ms.float32, backend=None,
                    layout="BSND", inplace=False, layer_type=None, qk_norm=False):
        """From a Hugging Face config (dict or object): RopeConfig.from_config's facts (M-RoPE included), a
        cache of cache_positions (default max_position_embeddings) positions; `layer_type` where the config's
        rope differs by layer type (Gemma-3: one layer for "sliding_attention", one for "full_attention").
        qk_norm=True: the family's per-head q/k RMSNorm runs in the same pass (head_norms.py: Qwen3, Gemma-3,
        ...); the call then takes the norms' weights, rope(q, k, positions, q_norm.weight, k_norm.weight)."""
        rope = RopeConfig.from_config(config, rotary_mode, layer_type)
        norm = head_norm_from_config(config_fields(config)) if qk_norm else None
        return cls(rope.head_dim, rope.partial_slice, rope.rotary_mode, rope.rope_theta, rope.rope_scaling,
                   rope.max_position_embeddings, cache_positions, cache_dtype, backend, layout, rope.mrope_section,
                   rope.mrope_interleaved, inplace, llama_4_scaling_beta=rope.llama_4_scaling_beta,
                   qk_norm_eps=None if norm is None else norm.eps, qk_norm_offset=0.0 if norm is None else norm.offset,
                   transposed=rope.transposed)

    def __call__(self, q, k=None, positions=None, q_norm_weight=None, k_norm_weight=None):
        """From Python (PyNative, or a top-level call in GRAPH_MODE): the rotation's own call routes it; a numpy
        array or list of positions stays on the host."""
        plans = self.call_plans
        if plans is not None:  # eagerly, a call whose signature's rules have passed once (planned.py)
            out = plans.run(q, k, positions, q_norm_weight, k_norm_weight, self.cos_cache, self.sin_cache)
            if out is not None:
                return out
        if positions is None:
            raise TypeError(f"{LAYER} takes (q, k, positions): positions are required")
        _check_norm_weights_given(self.head_norm, k, q_norm_weight, k_norm_weight)
        given, positions = positions, kernel_positions(positions, self.channels, self.rotary_mode == 2)
        if self.grow_cache and positions.size:
            high = int((positions if isinstance(positions, np.ndarray) else positions.asnumpy()).max())
            rows = self.cos_cache.shape[1]
            if rows <= high < self.growth_limit:  # past the limit: the call's own out-of-cache error
                self.extend_cache(min(max(2 * rows, high + 1), self.growth_limit))
        if isinstance(positions, np.ndarray) and ms.get_context("mode") == ms.GRAPH_MODE:
            positions = ms.Tensor(positions)  # the calls below compile: an array argument would reach them as ()
        out = self._rotate(q, k, positions, False, q_norm_weight, k_norm_weight)
        if plans is not None:
            plans.learn(q, k, given, q_norm_weight, k_norm_weight, self.cos_cache, self.sin_cache)
        return out

    def extend_cache(self, cache_positions):
        """Rebuilds the caches to cover [0, cache_positions), in place of the layer's (the rows it had come out
        bit for bit the same). A network compiled before keeps the cache it was compiled with: it refuses a
        position past that by name."""
        rows = self.cos_cache.shape[1] if self.cos_cache is not None else None
        if rows is None:
            raise refuse_length_dependent_with(self.rows.rope_type, "it has no cache to extend")
        if not _is_integer(cache_positions) or cache_positions < rows:
            raise ValueError(f"{LAYER}: extend_cache(cache_positions={cache_positions!r}) must be an integer of at "
                             f"least the cache's {rows} positions")
        if self.cos_cache.requires_grad or self.sin_cache.requires_grad:
            raise ValueError(f"{LAYER}: a trainable cache keeps its {rows} positions (an optimizer holds state of "
                             f"its shape); build the layer with the cache_positions it will train on")
        if cache_positions == rows:
            return
        cos, sin = cache_parameters(int(cache_positions), *self._cache_values, head_dim=self.head_dim,
                                    transposed=self.transposed)
        self.cos_cache.set_data(cos)
        self.sin_cache.set_data(sin)

    def construct(self, q, k, positions, q_norm_weight=None, k_norm_weight=None):
        """Traced, inside a compiled network: positions given as a list or array become a constant tensor."""
        _check_norm_weights_given(self.head_norm, k, q_norm_weight, k_norm_weight)
        return self._rotate(q, k, self._tensor_positions(positions), False, q_norm_weight, k_norm_weight)

    def prologue(self, q, k, v, positions, k_cache, v_cache, slots=None, q_norm_weight=None, k_norm_weight=None):
        """Inference's attention prologue in one call: q and k rotated at their positions (normalised first when
        the layer norms heads), k's rotated rows and v's rows written into the KV caches: contiguous
        [B, P, Nk, D] at the tokens' positions, or paged [T, Nk, D] at `slots` ([B, S] or [S]); returns q_rot
        (ms_rotary/kv_cache.py). Layout BSND; not differentiable. From Python or inside a compiled network."""
        q_rot = self.planned_prologue(q, k, v, positions, k_cache, v_cache, slots, q_norm_weight, k_norm_weight,
                                      self.cos_cache, self.sin_cache)
        if q_rot is not None:  # eagerly, a decode step whose signature's rules have passed once (planned.py)
            return q_rot
        if self.layout != "BSND":
            raise ValueError(f"{LAYER}.prologue: the KV caches take k and v as [B, S, Nk, D]: build the layer with "
                             f"layout='BSND' (this one is {self.layout})")
        if k is None or v is None:
            raise TypeError(f"{LAYER}.prologue takes (q, k, v, positions, k_cache, v_cache): k and v are required")
        if slots is None and self.channels > 1:
            raise ValueError(f"{LAYER}.prologue: with several positions a token (M-RoPE, quarter mode) give the "
                             f"cache rows as slots")
        _check_norm_weights_given(self.head_norm, k, q_norm_weight, k_norm_weight)
        positions = self._tensor_positions(positions)
        if self.query_scale is None:  # one call shape: kv_cache.Prologue
            prologue = self.prologue_contiguous if slots is None else self.prologue_paged
            return prologue(q, k, v, positions, positions if slots is None else slots, k_cache, v_cache,
                            self.cos_cache, self.sin_cache, q_norm_weight, k_norm_weight)
        # q scaled after its rotation (llama_4_scaling_beta, never in place): the rotation, then the write
        q_rot, k_rot = self._rotate(q, k, positions, False, q_norm_weight, k_norm_weight)
        if slots is None:
            return self.write_contiguous(q_rot, k_rot, v, positions, k_cache, v_cache)
        return self.write_paged(q_rot, k_rot, v, slots, k_cache, v_cache)

    def inverse(self, q, k=None, positions=None):
        """The transpose R^T at the same positions, which undoes the rotation (it is orthogonal): DeepSeek-V4
        de-rotates its attention output with it. The Grad op's direction, with the layer's cache and rules;
        from Python or inside a compiled network."""
        if positions is None:
            raise TypeError(f"{LAYER}.inverse takes (q, k, positions): positions are required")
        return self._rotate(q, k, self._tensor_positions(positions), True)

    def _tensor_positions(self, positions):
        positions = kernel_positions(positions, self.channels, self.rotary_mode == 2)
        return ms.Tensor(positions) if isinstance(positions, np.ndarray) else positions

    def _rotate(self, q, k, positions, inverse=False, q_norm_weight=None, k_norm_weight=None):
        cos, sin, given = self.cos_cache, self.sin_cache, positions
        if self.rows is not None:  # this call's own rows (length_rope), read at 0..n-1
            cos, sin, positions = self.rows(positions if isinstance(positions, ms.Tensor) else ms.Tensor(positions))
            if self.transposed:
                sin = -sin
        if q_norm_weight is not None:  # each head normalised first (qk_norm_eps), in the same pass
            if k is None:
                return self._scaled_q(self.norm_q(q, cos, sin, positions, q_norm_weight), given, False)
            q_out, k_out = self.norm_qk(q, k, cos, sin, positions, q_norm_weight, k_norm_weight)
            return self._scaled_q(q_out, given, False), k_out
        if k is None:
            return self._scaled_q((self.inverse_q if inverse else self.rotate_q)(q, cos, sin, positions), given,
                                  inverse)
        q_out, k_out = (self.inverse_qk if inverse else self.rotate_qk)(q, k, cos, sin, positions)
        return self._scaled_q(q_out, given, inverse), k_out

    def _scaled_q(self, q_out, positions, inverse):
        if self.query_scale is None or inverse:
            return q_out
        positions = positions if isinstance(positions, ms.Tensor) else ms.Tensor(positions)
        return q_out * self.query_scale(positions, q_out.dtype)

    def extend_repr(self):
        rows = "rows per call" if self.rows is not None else f"cache_positions={self.cos_cache.shape[1]}"
        norm = "" if self.head_norm is None else f", qk_norm_eps={self.head_norm.eps}"
        mrope = self.channels > 1 and self.rotary_mode != 2  # quarter mode's two channels are no M-RoPE
        return (f"head_dim={self.head_dim}, partial_slice={list(self.partial_slice)}, "
                f"rotary_mode={self.rotary_mode}, layout={self.layout}, {rows}"
                f"{', M-RoPE' if mrope else ''}{', inplace' if self.inplace else ''}{norm}")


def _head_norm(eps, offset):
    """The HeadNorm of qk_norm_eps and qk_norm_offset, or None without an epsilon."""
    if eps is None:
        return None
    for name, value in (("qk_norm_eps", eps), ("qk_norm_offset", offset)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
            raise TypeError(f"{LAYER}: {name}={value!r} must be a finite number")
    if eps < 0:
        raise ValueError(f"{LAYER}: qk_norm_eps={eps!r} must be >= 0 (it is added to the mean square)")
    return HeadNorm(float(eps), float(offset))


def _check_norm_weights_given(head_norm, k, q_norm_weight, k_norm_weight):
    """A layer built with qk_norm_eps takes q's norm weight (and k's with k); one without takes neither.
    Traced, the Nones are known at compile time."""
    if head_norm is None:
        if q_norm_weight is not None or k_norm_weight is not None:
            raise TypeError(f"{LAYER}: q_norm_weight/k_norm_weight given to a layer built without qk_norm_eps; "
                            f"build it with qk_norm_eps (from_config(config, qk_norm=True)) to norm each head first")
        return
    if q_norm_weight is None:
        raise TypeError(f"{LAYER}: this layer norms each head first (qk_norm_eps={head_norm.eps}): pass "
                        f"q_norm_weight (and k_norm_weight with k), each [head_dim]")
    if k is not None and k_norm_weight is None:
        raise TypeError(f"{LAYER}: k given without k_norm_weight; this layer norms k's heads too")
    if k is None and k_norm_weight is not None:
        raise TypeError(f"{LAYER}: k_norm_weight given without k")


class ComposedNorm(nn.Cell):
    """A head norm's call where the target has no fused kernel (Ascend): MindSpore's own ops normalise each head
    in fp32, then the target's rotation; the same values and gradients, two passes."""

    def __init__(self, call, backend, op_name):
        super().__init__()
        self.eps, self.offset = call.norm.eps, call.norm.offset
        self.rotate = rotary(replace(call, norm=None), backend, op_name)
        self.backend = self.rotate.backend
        self.traced = self._q_and_k if call.cache.with_k else self._q

    def normalised(self, x, weight):
        return head_normalised(x, weight, self.eps, self.offset).astype(x.dtype)

    def construct(self, *inputs):
        return self.traced(*inputs)

    def _q(self, q, cos, sin, positions, q_weight):
        return self.rotate(self.normalised(q, q_weight), cos, sin, positions)

    def _q_and_k(self, q, k, cos, sin, positions, q_weight, k_weight):
        return self.rotate(self.normalised(q, q_weight), self.normalised(k, k_weight), cos, sin, positions)
