"""Rotary modes and the lane pairs each rotates: the one statement of the math shared by the numpy kernel,
the cos/sin gradients and layouts.py. The C++ and Ascend kernels read the same table from
kernel/common/rotary_rules.h (kModeLayouts); tests/test_backend.py holds the two equal."""
import numpy as np

MODE_NAMES = ("half", "interleave", "quarter", "interleave-half")

# Pair k of a slice of length L (h = L/2): lanes (a, b) in x's layout and in y's layout.
# cos/sin follow y's layout. Quarter is half applied to each half of the slice.
#   forward : y[ya] = x[xa]*c[ya] - x[xb]*s[ya];    y[yb] = x[xb]*c[yb] + x[xa]*s[yb]
#   backward: dx[xa] = dy[ya]*c[ya] + dy[yb]*s[yb];  dx[xb] = dy[yb]*c[yb] - dy[ya]*s[ya]


def _halves(length):
    k = np.arange(length // 2)
    return k, k + length // 2


def _pairs(length):
    k = np.arange(length // 2)
    return 2 * k, 2 * k + 1


def _quarters(length):
    a, b = _halves(length // 2)
    return np.concatenate([a, a + length // 2]), np.concatenate([b, b + length // 2])


MODE_LAYOUTS = {  # mode: (x layout, y layout)
    0: ("halves", "halves"),
    1: ("pairs", "pairs"),
    2: ("quarters", "quarters"),
    3: ("pairs", "halves"),
}
_LANES = {"halves": _halves, "pairs": _pairs, "quarters": _quarters}


def lane_pairs(mode, length):
    """(xa, xb, ya, yb) index arrays of the pairs `mode` rotates in a slice of `length` lanes."""
    x_layout, y_layout = MODE_LAYOUTS[mode]
    xa, xb = _LANES[x_layout](length)
    ya, yb = _LANES[y_layout](length)
    return xa, xb, ya, yb
