"""Pieces the attention examples share: the same rotary written with plain MindSpore ops
(the yardstick each example checks itself against), a causal attention core and the self-check."""
import math

import mindspore as ms
import numpy as np
from mindspore import nn, ops

import ms_rotary
from ms_rotary.modes import MODE_LAYOUTS


# --- the same rotary with plain MindSpore ops -------------------------------------------------------------
def _split(t, layout):
    if layout == "halves":
        return ops.chunk(t, 2, -1)
    if layout == "pairs":
        return t[..., 0::2], t[..., 1::2]
    first, second = ops.chunk(t, 2, -1)  # quarters: halves of each half
    (a1, b1), (a2, b2) = ops.chunk(first, 2, -1), ops.chunk(second, 2, -1)
    return ops.cat([a1, a2], -1), ops.cat([b1, b2], -1)


def _merge(a, b, layout):
    if layout == "halves":
        return ops.cat([a, b], -1)
    if layout == "pairs":
        return ops.stack([a, b], -1).reshape(a.shape[:-1] + (a.shape[-1] * 2,))
    a1, a2 = ops.chunk(a, 2, -1)
    b1, b2 = ops.chunk(b, 2, -1)
    return ops.cat([a1, b1, a2, b2], -1)


LAYOUTS = MODE_LAYOUTS  # mode: (x layout, y layout), the operator's definition (docs/operator.md)


def plain_rotary(t, cos, sin, rotary_mode, start, end, conjugate=False):
    """The operator composed from MindSpore built-ins (forward, or with conjugate=True the backward)."""
    x_layout, y_layout = LAYOUTS[rotary_mode]
    ca, cb = _split(cos, y_layout)
    sa, sb = _split(sin, y_layout)
    part = t[..., start:end]
    if conjugate:
        da, db = _split(part, y_layout)
        rotated = _merge(da * ca + db * sb, db * cb - da * sa, x_layout)
    else:
        xa, xb = _split(part, x_layout)
        rotated = _merge(xa * ca - xb * sa, xb * cb + xa * sb, y_layout)
    # Empty edge slices are left out: MindSpore's StridedSliceGrad fails on zero-sized slices.
    pieces = ([t[..., :start]] if start > 0 else []) + [rotated] + ([t[..., end:]] if end < t.shape[-1] else [])
    return ops.cat(pieces, -1) if len(pieces) > 1 else rotated


class PlainRotary(nn.Cell):
    """Drop-in for ms_rotary.InplacePartialRotaryMul written with built-ins (out of place)."""

    def __init__(self, rotary_mode, partial_slice):
        super().__init__()
        self.rotary_mode = ms_rotary.InplacePartialRotaryMul(rotary_mode, partial_slice).rotary_mode
        self.start, self.end = partial_slice

    def construct(self, x, cos, sin):
        return plain_rotary(x, cos, sin, self.rotary_mode, self.start, self.end)


def rotary_cell(rotary_mode, partial_slice, use_ms_rotary):
    if use_ms_rotary:
        return ms_rotary.InplacePartialRotaryMul(rotary_mode, partial_slice)
    return PlainRotary(rotary_mode, partial_slice)


# --- attention ----------------------------------------------------------------------------------------------
def causal_attention(q, k, v):
    """q, k: [B, S, N, Dqk], v: [B, S, N, Dv] -> [B, S, N*Dv], causal softmax attention."""
    b, s, n, dv = v.shape
    q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    scores = ops.matmul(q, k.transpose(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
    mask = ops.triu(ops.ones((s, s), ms.bool_), diagonal=1)
    scores = ops.masked_fill(scores, mask, -1e9)
    out = ops.matmul(ops.softmax(scores, -1), v)
    return out.transpose(0, 2, 1, 3).reshape(b, s, n * dv)


class RotaryAttention(nn.Cell):
    """Multi-head causal self-attention with partial rotary on q and k (GPT-NeoX / GLM / ChatGLM style)."""

    def __init__(self, d_model, n_heads, head_dim, rotary_mode, partial_slice, use_ms_rotary=True):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim
        # Separate projections: chunks of one fused qkv output are strided views, which the in-place op refuses.
        self.q = nn.Dense(d_model, n_heads * head_dim, has_bias=False)
        self.k = nn.Dense(d_model, n_heads * head_dim, has_bias=False)
        self.v = nn.Dense(d_model, n_heads * head_dim, has_bias=False)
        self.out = nn.Dense(n_heads * head_dim, d_model, has_bias=False)
        self.rope = rotary_cell(rotary_mode, partial_slice, use_ms_rotary)

    def construct(self, x, cos, sin):
        b, s, _ = x.shape
        shape = (b, s, self.n_heads, self.head_dim)
        q = self.rope(self.q(x).reshape(shape), cos, sin)
        k = self.rope(self.k(x).reshape(shape), cos, sin)
        return self.out(causal_attention(q, k, self.v(x).reshape(shape)))


class _SquaredLoss(nn.Cell):
    """The squared sum of the layer's output, and the output itself (an aux value: one compiled graph gives
    the output and the gradients)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def construct(self, x, cos, sin):
        out = self.layer(x, cos, sin)
        return (out ** 2).sum(), out


# --- self-check -----------------------------------------------------------------------------------------------
def self_check(name, make_layer, rope_tables, d_model, seq_len=12, modes=("PYNATIVE_MODE", "GRAPH_MODE"),
               atol=2e-5):
    """Builds the layer with ms_rotary and with plain ops (same weights); outputs and the gradients for
    the input and every weight must agree on a random batch. Prints one line per execution mode; raises
    if they differ."""
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, seq_len, d_model)).astype(np.float32))
    inputs = (x, *rope_tables(seq_len))
    for mode in modes:
        ms.set_context(mode=getattr(ms, mode))
        ms.set_seed(0)
        fast, plain = make_layer(True), make_layer(False)
        for src, dst in zip(fast.trainable_params(), plain.trainable_params()):
            dst.set_data(src.value().copy())
        results = []
        for layer in (fast, plain):
            grad_fn = ms.value_and_grad(_SquaredLoss(layer), grad_position=0, weights=layer.trainable_params(),
                                        has_aux=True)
            (_, out), (grad_x, grad_w) = grad_fn(*inputs)
            results.append([out.asnumpy(), grad_x.asnumpy()] + [g.asnumpy() for g in grad_w])
        worst = max(float(np.abs(a - b).max()) for a, b in zip(*results))
        ok = worst <= atol
        print(f"[self-check] {name} ({mode}): output and {len(results[0]) - 1} gradients match plain MindSpore ops, "
              f"max abs diff {worst:.2e} {'OK' if ok else 'FAILED'}")
        if not ok:
            raise AssertionError(f"{name}: ms_rotary layer differs from the plain-ops layer by {worst}")
    ms.set_context(mode=ms.PYNATIVE_MODE)
