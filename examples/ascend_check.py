"""First call on a device: every mode and dtype pair of the forward and the backward, on two slices, checked
against the numpy kernel (ms_rotary/numpy_kernel.py, fp32 on the host); then RotaryEmbedding, whose kernel
reads cos/sin rows by position from its cache, with q and k and its gradient, every mode, M-RoPE (both section
layouts) and (q, cache) dtype pair, checked against the numpy kernel on the rows the positions pick (each
lane's at its channel's position). On a 950 the 64-lane slice runs the register-based kernel (M-RoPE and
quarter mode: the memory-based one) and the 24-lane one the memory-based kernel; elsewhere both run the
memory-based one.

    python examples/ascend_check.py                 # on an Ascend device, after kernel/ascend/build.sh
    python examples/ascend_check.py --device CPU    # the same check of the compiled CPU kernel

Prints one line per case and `ascend check: N/N cases agree on <device>`; exits 1 on any difference, 2 when
the device cannot be used.
"""
import argparse
import itertools
import sys

import mindspore as ms
import numpy as np

import ms_rotary
from ms_rotary import numpy_kernel

DTYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}
# One unit in the last place at |value| 2 (fp16, bf16): the device may fuse a multiply-add where numpy rounds.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
DY_SHAPE = (2, 16, 4, 128)
SLICES = ((32, 96), (8, 32))  # 32 pairs a segment (16 for quarters): the 950's register kernel; 12: not


def tensor(values, dtype):
    return ms.Tensor(values.astype(np.float32)).astype(DTYPES[dtype])


def host(t):
    return t.astype(ms.float32).asnumpy()


def check_case(mode, dy_dtype, cos_dtype, backward, start, end, rng):
    dy = rng.uniform(-1, 1, DY_SHAPE)
    cos = rng.uniform(-1, 1, (1, DY_SHAPE[1], 1, end - start))  # paired lanes differ: a wrong pairing shows
    sin = rng.uniform(-1, 1, cos.shape)
    dy_t, cos_t, sin_t = tensor(dy, dy_dtype), tensor(cos, cos_dtype), tensor(sin, cos_dtype)
    rotated = numpy_kernel.rotate(host(dy_t), host(cos_t), host(sin_t), mode, start, end, conjugate=backward)
    expected = host(tensor(rotated, dy_dtype))  # rounded once to dy's dtype, as the kernels store it
    if backward:
        got = host(ms_rotary.InplacePartialRotaryMulGrad(mode, [start, end])(dy_t, cos_t, sin_t))
    else:
        got = host(ms_rotary.PartialRotaryMul(mode, [start, end])(dy_t, cos_t, sin_t))
    return float(np.max(np.abs(got - expected)))


# RotaryEmbedding: prompts at 0.., a decode step's positions and packed sequences that restart; M-RoPE's
# height and width channels and quarter mode's block positions differ from them.
LAYER_POSITIONS = np.array([list(range(16)), [40, 41, 42, 43, 0, 1, 2, 3, 4, 0, 1, 2, 62, 63, 7, 7]])
LAYER_CACHE = 64
# name: (rotary mode, M-RoPE interleaved or not, None for one position channel)
LAYER_KINDS = {"half": (0, None), "interleave": (1, None), "interleave-half": (3, None),
               "M-RoPE": (0, False), "M-RoPE interleaved": (0, True), "quarter": (2, None)}


def layer_positions(kind):
    """Positions in the form the layer takes for `kind`, and as [channels, B, S]."""
    if kind.startswith("M-RoPE"):
        channels = np.stack([LAYER_POSITIONS, LAYER_POSITIONS // 2, (LAYER_POSITIONS * 5) % LAYER_CACHE])
        return channels, channels
    if kind == "quarter":
        channels = np.stack([LAYER_POSITIONS, LAYER_POSITIONS // 4])
        return np.moveaxis(channels, 0, -1), channels
    return LAYER_POSITIONS, LAYER_POSITIONS[None]


def check_layer_case(kind, dy_dtype, cache_dtype, start, end, rng):
    """max |device - numpy| over q_rot, k_rot and the gradient of q (the layer's backward, applied to w)."""
    mode, interleaved = LAYER_KINDS[kind]
    pairs = (end - start) // 2
    sections = (pairs - 2 * (pairs * 3 // 8), pairs * 3 // 8, pairs * 3 // 8) if interleaved is not None else None
    layer = ms_rotary.RotaryEmbedding(DY_SHAPE[3], (start, end), mode, rope_theta=10000.0,
                                      cache_positions=LAYER_CACHE, cache_dtype=DTYPES[cache_dtype],
                                      mrope_section=sections, mrope_interleaved=bool(interleaved))
    taken, channels = layer_positions(kind)
    batch, seq = LAYER_POSITIONS.shape
    q, k, w = (tensor(rng.uniform(-1, 1, (batch, seq, heads, DY_SHAPE[3])), dy_dtype) for heads in (4, 2, 4))
    positions = ms.Tensor(taken)
    lanes = np.zeros(end - start, np.int64) if layer.rotate_q.call.cache.lane_channels is None else \
        np.array(layer.rotate_q.call.cache.lane_channels)
    cos, sin = (np.take_along_axis(host(t)[0, :, 0][channels], lanes.reshape(1, 1, 1, -1), 0)[0][:, :, None]
                for t in (layer.cos_cache, layer.sin_cache))  # each lane at its channel's position
    q_rot, k_rot = layer(q, k, positions)
    _, rotate_back = ms.vjp(lambda q: layer(q, None, positions), q)
    (dq,) = rotate_back(w)
    errors = []
    for got, source, backward in ((q_rot, q, False), (k_rot, k, False), (dq, w, True)):
        rotated = numpy_kernel.rotate(host(source), cos, sin, mode, start, end, conjugate=backward)
        errors.append(float(np.max(np.abs(host(got) - host(tensor(rotated, dy_dtype))))))
    return max(errors)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="Ascend", choices=["Ascend", "CPU"])
    parser.add_argument("--device-id", type=int, default=0)
    args = parser.parse_args()
    try:
        ms.set_device(args.device, args.device_id)
        ms.Tensor(np.ones(1, np.float32)).asnumpy()
    except (RuntimeError, ValueError) as error:
        print(f"ascend check: cannot use device {args.device}: {error}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    cases = list(itertools.product(SLICES, range(4), DTYPES, DTYPES, (False, True)))
    agree = 0
    for (start, end), mode, dy_dtype, cos_dtype, backward in cases:
        error = check_case(mode, dy_dtype, cos_dtype, backward, start, end, rng)
        ok = error <= TOLERANCE[dy_dtype]
        agree += ok
        print(f"{'ok  ' if ok else 'DIFF'} slice [{start}, {end}) mode {mode} ({ms_rotary.MODE_NAMES[mode]}), "
              f"dy {dy_dtype}, cos {cos_dtype}, {'backward' if backward else 'forward'}: "
              f"max |device - numpy| {error:.2e}")
    layer_cases = list(itertools.product(SLICES, LAYER_KINDS, DTYPES, DTYPES))
    for (start, end), kind, dy_dtype, cache_dtype in layer_cases:
        error = check_layer_case(kind, dy_dtype, cache_dtype, start, end, rng)
        ok = error <= TOLERANCE[dy_dtype]
        agree += ok
        print(f"{'ok  ' if ok else 'DIFF'} RotaryEmbedding slice [{start}, {end}) {kind}, q/k {dy_dtype}, cache "
              f"{cache_dtype}, q and k forward, q backward: max |device - numpy| {error:.2e}")
    total = len(cases) + len(layer_cases)
    print(f"ascend check: {agree}/{total} cases agree on {args.device}")
    return 0 if agree == total else 1


if __name__ == "__main__":
    sys.exit(main())
