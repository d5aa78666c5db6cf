"""The lane layouts of modes.MODE_LAYOUTS with MindSpore ops: a slice split into the a and b lanes of its
pairs, in pair order (SPLIT), and merged back (MERGE). Slicing and ops.concat only: MindSpore 2.10's PyNative
autograd of mint.cat(mint.split(...)) is wrong on CPU. One straight-line function per layout: MindSpore's
graph-mode second-order autodiff fails on a function with a branch ("The func graph is empty")."""
from mindspore import ops


def _split_halves(t):
    half = t.shape[-1] // 2
    return t[..., :half], t[..., half:]


def _split_pairs(t):
    return t[..., 0::2], t[..., 1::2]


def _split_quarters(t):  # halves of each half
    half, quarter = t.shape[-1] // 2, t.shape[-1] // 4
    return (ops.concat((t[..., :quarter], t[..., half:half + quarter]), -1),
            ops.concat((t[..., quarter:half], t[..., half + quarter:]), -1))


def _merge_halves(a, b):
    return ops.concat((a, b), -1)


def _merge_pairs(a, b):  # not ops.stack: graph-mode second-order autodiff fails on it in MindSpore 2.10
    pairs = ops.concat((ops.expand_dims(a, -1), ops.expand_dims(b, -1)), -1)
    return pairs.reshape(a.shape[:-1] + (2 * a.shape[-1],))


def _merge_quarters(a, b):
    quarter = a.shape[-1] // 2
    return ops.concat((a[..., :quarter], b[..., :quarter], a[..., quarter:], b[..., quarter:]), -1)


SPLIT = {"halves": _split_halves, "pairs": _split_pairs, "quarters": _split_quarters}  # t -> (a, b)
MERGE = {"halves": _merge_halves, "pairs": _merge_pairs, "quarters": _merge_quarters}  # (a, b) -> t
