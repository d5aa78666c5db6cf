"""One frozen description of a kernel call: what every target (targets/) and the autograd and in-place
machinery (functions.py) are built from. Where cos/sin come from is part of it:

  a table     (rotated, cos, sin)                 cos/sin [b, s, n, L] broadcast over the rotated tensor
  a cache     (q, cos, sin, positions)            cos/sin a cache [1, P, 1, L], each token's row read at its
              (q, k, cos, sin, positions)         position ([channels, 1|B, S] int64); q and k in one call
  + a norm    (..., positions, q_weight[, k_weight]) each head RMS-normalised first (HeadNorm)"""
from dataclasses import dataclass, replace
from typing import Optional, Tuple

# Each layout's (B axis, S axis) of the rotated tensors.
LAYOUT_AXES = {"BSND": (0, 1), "SBND": (1, 0), "BNSD": (0, 2)}


@dataclass(frozen=True)
class CacheRead:
    """cos/sin read from a cache at each token's positions."""

    head_dim: int                                 # D of the rotated tensors
    layout: str = "BSND"                          # where B and S sit in them (LAYOUT_AXES)
    # Several positions a token: the channel each cos/sin lane reads its position from. M-RoPE: its axes (0
    # time, 1 height, 2 width; NeoMME's row and column); quarter mode (ChatGLM-6B): 0 the token's position, 1
    # its block position.
    lane_channels: Optional[Tuple[int, ...]] = None
    channels: int = 1                             # positions a token: 1, 2 (quarter, or M-RoPE), up to 4
    with_k: bool = False                          # q and k in one call
    cache_dtype: str = "float32"                  # the cache's (the Ascend ops' lane masks follow its bytes)
    rows_per_call: bool = False                   # the rows are the call's own (length_rope), not a cache

    @property
    def axes(self):
        return LAYOUT_AXES[self.layout]


@dataclass(frozen=True)
class HeadNorm:
    """Each head RMS-normalised before the rotation (Qwen3's and Gemma-3's q_norm and k_norm): x * r * (offset +
    weight), r = 1 / sqrt(mean(x^2) + eps) over the whole head, in fp32; the weights ([D] each, q's and k's) are
    the call's last inputs. A call with a norm is a forward (out of place or in place)."""

    eps: float
    offset: float = 0.0                           # 1.0: Gemma's (1 + weight)


@dataclass(frozen=True)
class RotaryCall:
    rotary_mode: int                           # 0 half, 1 interleave, 2 quarter, 3 interleave-half
    partial_slice: Optional[Tuple[int, int]]   # None: [0, cos.shape[-1])
    conjugate: bool                            # False: the forward y = R x; True: its transpose R^T (the grad)
    in_place: bool                             # writes its rotated inputs (and returns them) instead of new tensors
    input_name: str = "dy"                     # the first input's name in error messages
    cache: Optional[CacheRead] = None          # None: cos/sin are tables
    norm: Optional[HeadNorm] = None            # a cache read's head norm first (its weights the last inputs)

    @property
    def rotated_names(self):
        """The names of the tensors the call rotates, in input order."""
        if self.cache is None:
            return (self.input_name,)
        return ("q", "k") if self.cache.with_k else ("q",)

    @property
    def weight_names(self):
        """The names of a head norm's weights, in input order (after the positions)."""
        return tuple(f"{name}_norm_weight" for name in self.rotated_names)

    def transpose(self):
        """The call that maps the gradient of this call's output to the gradient of its rotated inputs: the
        other direction, out of place (autograd's dout must never be written)."""
        return replace(self, conjugate=not self.conjugate, in_place=False,
                       input_name="dout" if self.cache is None else self.input_name)

    def out_of_place(self):
        return replace(self, in_place=False)
