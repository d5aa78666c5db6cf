"""RoPE whose frequencies follow the sequence length (rope types "dynamic" and "longrope"): no cache built once
can hold them, so the layer computes each call's cos/sin rows from the call's length, as transformers'
dynamic_rope_update does, and the same cache-read call reads them (token i at row i).

The length is L = max(positions) + 1 of the call, over the whole batch:
  dynamic   (NTK) theta scaled by (factor * max(L, M) / M - (factor - 1)) ** (d / (d - 2)), M =
            max_position_embeddings: the plain frequencies up to M, then ones that follow L.
  longrope  short factors while L <= original_max_position_embeddings, long ones past it; the attention factor
            on both.
transformers keeps dynamic's longest length seen until a call falls below M; this layer takes each call's own
L. They agree for a growing sequence (prefill, then decode steps: each step's L is the longest yet); a call
whose L is shorter than an earlier one's and still above M gets its own length's frequencies here."""
import mindspore as ms
import numpy as np
from mindspore import nn, ops

from .constraints import LAYER
from .rope_scaling import inverse_frequencies, resolve_rope_scaling, rope_type_of
from .tables import on_lanes

LENGTH_DEPENDENT = ("dynamic", "longrope")


def is_length_dependent(rope_scaling):
    return isinstance(rope_scaling, dict) and rope_type_of(rope_scaling) in LENGTH_DEPENDENT


class LengthDependentRows(nn.Cell):
    """positions (int64 [S] or [B, S]) -> (cos rows, sin rows [1, n, 1, rotary_dim] in `dtype`, the positions
    that read them: token i at row i, a negative position kept so the kernel refuses it by name). Float64
    throughout, as the layer's cache is built."""

    def __init__(self, rotary_dim, rotary_mode, rope_theta, rope_scaling, max_position_embeddings, dtype):
        super().__init__()
        self.rope_type, params = resolve_rope_scaling(rope_scaling, max_position_embeddings)
        self.dynamic = self.rope_type == "dynamic"
        self.dtype = dtype
        plain, attention = inverse_frequencies(rotary_dim, rope_theta, rope_scaling, max_position_embeddings, 0)
        self.plain = ms.Tensor(on_lanes(plain, rotary_mode, rotary_dim))
        # float64 tensors: a graph would take Python floats as float32 constants (angles past 1e4 rad off by 1e-5)
        self.attention = ms.Tensor(attention, ms.float64)
        if self.dynamic:  # (theta * scale) ** -e = theta ** -e * scale ** -e, e = 2i / d per frequency i
            exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
            self.exponents = ms.Tensor(on_lanes(exponents, rotary_mode, rotary_dim))
            self.switch = ms.Tensor(max_position_embeddings, ms.float64)
            self.factor = ms.Tensor(params["factor"], ms.float64)
            self.power = ms.Tensor(rotary_dim / (rotary_dim - 2), ms.float64)
        else:
            original = int(params["original_max_position_embeddings"])
            self.switch = ms.Tensor(original, ms.float64)
            long, _ = inverse_frequencies(rotary_dim, rope_theta, rope_scaling, max_position_embeddings, original + 1)
            self.long = ms.Tensor(on_lanes(long, rotary_mode, rotary_dim))

    def construct(self, positions):
        count = positions.size
        length = (positions.max() + 1).astype(ms.float64) if count else ms.Tensor(0, ms.float64)
        if self.dynamic:
            scale = self.factor * ops.maximum(length, self.switch) / self.switch - (self.factor - 1.0)
            frequencies = self.plain * ops.pow(ops.pow(scale, self.power), -self.exponents)
        else:
            frequencies = ops.where(length > self.switch, self.long, self.plain)
        angles = positions.reshape(-1, 1).astype(ms.float64) * frequencies.reshape(1, -1)
        cos = self._stored(ops.cos(angles) * self.attention, count)
        sin = self._stored(ops.sin(angles) * self.attention, count)
        rows = ops.arange(0, count, dtype=ms.int64).reshape(positions.shape)
        return cos, sin, ops.where(positions < 0, positions, rows)

    def _stored(self, values, count):
        """[n, L] float64 -> [1, n, 1, L] rounded as the layer's cache rounds (bf16 from fp32)."""
        values = values.astype(ms.float16 if self.dtype == ms.float16 else ms.float32).astype(self.dtype)
        return values.reshape(1, count, 1, self.plain.shape[0])


def refuse_length_dependent_with(rope_type, what):
    """A layer option that cannot serve a rope type whose rows are computed per call."""
    return ValueError(f"{LAYER}: rope_type {rope_type!r} computes each call's cos/sin rows from the sequence "
                      f"length (ms_rotary.length_rope): {what}")
