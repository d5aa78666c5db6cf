"""The attention prologue's q/k RMSNorm and rotation, per call, PyNative with nothing recording (CPU; run alone,
two cores are easily saturated):

    python -m benchmarks.qk_norm

- prefill: q [1, 4096, 32, 128], k [1, 4096, 8, 128] fp32, positions 0..4095, Qwen3's per-head norm: the layer
  doing both in one pass (RotaryEmbedding(qk_norm_eps=...)) against the same norm written with MindSpore ops
  (MindSpore 2.10 has no RmsNorm kernel on CPU) followed by the layer, and against the same-bytes floor of one
  read and one write of q and k (copied on two threads into buffers kept between calls, and into buffers
  MindSpore allocates per call as any op's results); the layer with inplace=True against the first floor (each
  reads and writes q and k once). Ratios also from interleaved rounds (median, quartiles):
  30, or 10 against the slow composed norm.
- decode: q [1, 1, 32, 128], k [1, 1, 8, 128] at position 4000, a new positions tensor each step as a decode
  loop makes it: the same three against one built-in `add` on q, and RotaryEmbedding.prologue (the norm, the
  rotation, and k's and v's rows written into a [1, 8192, 8, 128] KV cache, one call), also at prefill, and
  against the same prologue as two calls (the layer's, then the write's: what its one pass replaced).
- decode step (`--decode-step`): one Qwen3-like block (32 q heads, 8 kv heads of 128, a 1024-position KV cache
  in Parameters written with MindSpore's ScatterUpdate, attention over it, projections), the prologue fused
  against composed, GRAPH_MODE and PyNative.
- training step (`--train`): two Qwen3-like attention blocks (q/k/v projections, per-head q/k RMSNorm with
  trainable weights, rotation, causal attention, output projection), forward + backward + SGD, the norm and
  rotation as one layer call against the MindSpore-op norm and the layer, GRAPH_MODE and PyNative, interleaved
  rounds (benchmarks.train_step's timing: graph warm-up past MindSpore's runtime tuning).
Each call is timed in a loop of 100 (decode) or 10 (prefill) with one sync at the end, medians of 5 rounds;
the decode case with MindSpore's ops synchronous (benchmarks.rope_layer.synchronous_ops).
Rows go to runs.csv (case "qk norm ...", benchmarks/runs_csv.py says where)."""
import argparse

import mindspore as ms
import numpy as np
from mindspore import nn, ops

import ms_rotary
from benchmarks.call_overhead import median_seconds
from benchmarks.rope_layer import fresh_copies, interleaved_ratios, synchronous_ops
from benchmarks.run import copy_impls
from benchmarks.runs_csv import append_rows
from benchmarks.train_step import GRAPH_WARMUP_STEPS, LAYERS, Loss, Stack, median_step_seconds
from examples.rope_common import causal_attention

CACHE, D, EPS = 8192, 128, 1e-6


def norm(x, weight):
    """Qwen3's q_norm with MindSpore ops: x / sqrt(mean(x^2) + eps) * weight over each head."""
    return x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + EPS) * weight


def case(name, seq, calls, rows, position):
    rng = np.random.default_rng(0)
    q = ms.Tensor(rng.uniform(-1, 1, (1, seq, 32, D)).astype(np.float32))
    k = ms.Tensor(rng.uniform(-1, 1, (1, seq, 8, D)).astype(np.float32))
    wq, wk = (ms.Tensor(rng.uniform(0.5, 1.5, D).astype(np.float32)) for _ in range(2))
    fused = ms_rotary.RotaryEmbedding(D, None, "half", rope_theta=1000000.0, cache_positions=CACHE, qk_norm_eps=EPS)
    plain = ms_rotary.RotaryEmbedding(D, None, "half", rope_theta=1000000.0, cache_positions=CACHE)
    positions = ms.Tensor(np.arange(position, position + seq))

    def new_positions():  # a decode loop makes each step's positions afresh; prefill's are made once
        return ms.Tensor(np.arange(position, position + seq)) if seq == 1 else positions

    def two_calls(positions):  # with prologue's own handling of the positions
        positions = fused._tensor_positions(positions)
        return fused.prologue_contiguous.construct(q, k, v, positions, positions, k_cache, v_cache, fused.cos_cache,
                                                   fused.sin_cache, wq, wk)

    # The composed norm goes last: MindSpore's CPU ops alternating between q's and k's shapes leave its
    # PyNative runtime slower for a while after (NOTES.md, issue 37), which would tax whatever came next.
    v = ms.Tensor(rng.uniform(-1, 1, (1, seq, 8, D)).astype(np.float32))
    k_cache, v_cache = (ms.Tensor(np.zeros((1, CACHE, 8, D), np.float32)) for _ in range(2))
    implementations = {
        "norm + rotation in one layer call": lambda: fused(q, k, new_positions(), wq, wk),
        "prologue: norm, rotation, k and v into the KV cache, one call":
            lambda: fused.prologue(q, k, v, new_positions(), k_cache, v_cache, None, wq, wk),
        # what the one pass replaced: the layer's call into new q and k, then the write's own call
        "prologue as two calls (the rotation's, then the write's)": lambda: two_calls(new_positions()),
        "the layer alone (no norm)": lambda: plain(q, k, new_positions()),
        "built-in add on q": lambda: q + q,
    }
    if seq > 1:
        # In place the call reads and writes q and k once, like the floor; its own q and k and unit weights, so
        # the repeated norm keeps them where they are (x / rms(x) is a fixed point once normed)
        in_place = ms_rotary.RotaryEmbedding(D, None, "half", rope_theta=1000000.0, cache_positions=CACHE,
                                             qk_norm_eps=EPS, inplace=True)
        q_own, k_own = ms.Tensor(q.asnumpy()), ms.Tensor(k.asnumpy())
        ones = ms.Tensor(np.ones(D, np.float32))
        implementations["norm + rotation in place (inplace=True)"] = lambda: in_place(q_own, k_own, positions, ones,
                                                                                      ones)
        implementations["same-bytes floor (q and k copied, 2 threads)"] = copy_impls(2 * (q.nbytes + k.nbytes))[
            "2-thread memcpy"]
        implementations["same-bytes floor into fresh MindSpore results"] = lambda: fresh_copies(q, k)
    implementations["MindSpore-op norm, then the layer"] = lambda: plain(norm(q, wq), norm(k, wk), new_positions())
    times = {label: median_seconds(fn, calls) for label, fn in implementations.items()}
    ours = times["norm + rotation in one layer call"]
    for label, seconds in times.items():
        print(f"{name}, {label}: {seconds * 1e6:.1f} us per call, {seconds / ours:.2f}x the fused call")
        rows.append((f"qk norm {name}", label, seconds, None))
    print(f"{name}: fused / built-in add = {ours / times['built-in add on q']:.2f}x")
    pairs = {}
    if seq > 1:
        pairs.update({
            "fused / the same-bytes floor": ("norm + rotation in one layer call",
                                             "same-bytes floor (q and k copied, 2 threads)"),
            "fused / the floor into fresh results": ("norm + rotation in one layer call",
                                                     "same-bytes floor into fresh MindSpore results"),
            "fused in place / the same-bytes floor": ("norm + rotation in place (inplace=True)",
                                                      "same-bytes floor (q and k copied, 2 threads)")})
    else:
        pairs["fused / built-in add"] = ("norm + rotation in one layer call", "built-in add on q")
        pairs["prologue / built-in add"] = ("prologue: norm, rotation, k and v into the KV cache, one call",
                                            "built-in add on q")
    pairs["prologue one pass / two calls"] = ("prologue: norm, rotation, k and v into the KV cache, one call",
                                              "prologue as two calls (the rotation's, then the write's)")
    pairs["fused / composed"] = ("norm + rotation in one layer call", "MindSpore-op norm, then the layer")
    for label, (first, second) in pairs.items():
        rounds = 10 if label == "fused / composed" else 30
        quartiles = interleaved_ratios(implementations[first], implementations[second], calls, rounds)
        print(f"{name}: {label}, {rounds} interleaved rounds: median {quartiles[1]:.2f}x "
              f"(quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f})")


class NormedAttention(nn.Cell):
    """Qwen3's attention prologue and the rest of a block: q_norm/k_norm per head before the rotation."""

    def __init__(self, d_model, heads, fused):
        super().__init__()
        self.heads, self.fused = heads, fused
        self.q, self.k, self.v = (nn.Dense(d_model, heads * D, has_bias=False) for _ in range(3))
        self.out = nn.Dense(heads * D, d_model, has_bias=False)
        self.q_weight = ms.Parameter(ms.Tensor(np.ones(D, np.float32)), name="q_norm_weight")
        self.k_weight = ms.Parameter(ms.Tensor(np.ones(D, np.float32)), name="k_norm_weight")
        self.rope = ms_rotary.RotaryEmbedding(D, None, "half", rope_theta=1000000.0, cache_positions=4096,
                                              qk_norm_eps=EPS if fused else None)

    def construct(self, x, positions):
        b, s, _ = x.shape
        shape = (b, s, self.heads, D)
        q, k = self.q(x).reshape(shape), self.k(x).reshape(shape)
        if self.fused:
            q, k = self.rope(q, k, positions, self.q_weight, self.k_weight)
        else:
            q, k = self.rope(norm(q, self.q_weight), norm(k, self.k_weight), positions)
        return self.out(causal_attention(q, k, self.v(x).reshape(shape)))


class DecodeBlock(nn.Cell):
    """One Qwen3-like attention block's decode step over a KV cache held in Parameters: projections, the
    prologue (q/k norm, rotation), k and v written at the token's position with MindSpore's ScatterUpdate (the
    same in both variants: ms_rotary does not write caches yet), attention over the cache (masked past the
    token), output projection."""

    def __init__(self, d_model, heads, kv_heads, cache, fused):
        super().__init__()
        self.heads, self.kv_heads, self.fused = heads, kv_heads, fused
        self.q = nn.Dense(d_model, heads * D, has_bias=False)
        self.k, self.v = (nn.Dense(d_model, kv_heads * D, has_bias=False) for _ in range(2))
        self.out = nn.Dense(heads * D, d_model, has_bias=False)
        self.q_weight = ms.Parameter(ms.Tensor(np.ones(D, np.float32)), name="q_norm_weight")
        self.k_weight = ms.Parameter(ms.Tensor(np.ones(D, np.float32)), name="k_norm_weight")
        self.k_cache = ms.Parameter(ms.Tensor(np.zeros((cache, kv_heads, D), np.float32)), name="k_cache")
        self.v_cache = ms.Parameter(ms.Tensor(np.zeros((cache, kv_heads, D), np.float32)), name="v_cache")
        self.update = ops.ScatterUpdate()
        self.slots = ms.Tensor(np.arange(cache))
        self.rope = ms_rotary.RotaryEmbedding(D, None, "half", rope_theta=1000000.0, cache_positions=cache,
                                              qk_norm_eps=EPS if fused else None)

    def construct(self, x, position):
        q = self.q(x).reshape(1, 1, self.heads, D)
        k = self.k(x).reshape(1, 1, self.kv_heads, D)
        if self.fused:
            q, k = self.rope(q, k, position, self.q_weight, self.k_weight)
        else:
            q, k = self.rope(norm(q, self.q_weight), norm(k, self.k_weight), position)
        self.update(self.k_cache, position, k.reshape(1, self.kv_heads, D))
        self.update(self.v_cache, position, self.v(x).reshape(1, self.kv_heads, D))
        group = self.heads // self.kv_heads
        keys = ops.repeat_interleave(self.k_cache, group, 1).transpose(1, 0, 2)  # [N, P, D]
        values = ops.repeat_interleave(self.v_cache, group, 1).transpose(1, 0, 2)
        scores = ops.matmul(q.reshape(self.heads, 1, D), keys.transpose(0, 2, 1)) / np.sqrt(D)  # [N, 1, P]
        scores = ops.where((self.slots <= position).reshape(1, 1, -1), scores, -1e9)
        attended = ops.matmul(ops.softmax(scores, -1), values)  # [N, 1, D]
        return self.out(attended.reshape(1, 1, self.heads * D))


def decode_steps(rows, steps=20, rounds=5, heads=32, kv_heads=8, cache=1024):
    print("| exec | fused step | composed step | composed / fused |")
    print("|---|---|---|---|")
    x = ms.Tensor(np.random.default_rng(0).standard_normal((1, 1, 1024)).astype(np.float32))
    for exec_mode in ("GRAPH_MODE", "PYNATIVE_MODE"):
        ms.set_context(mode=getattr(ms, exec_mode))
        made = {}
        for name, fused in (("fused", True), ("composed", False)):
            block = DecodeBlock(1024, heads, kv_heads, cache, fused)
            made[name] = (lambda block: lambda: block(x, ms.Tensor(np.array([500]))))(block)
        times = median_step_seconds(made, steps, rounds, GRAPH_WARMUP_STEPS if exec_mode == "GRAPH_MODE" else 2)
        print(f"| {exec_mode} | {times['fused'] * 1e3:.2f} ms | {times['composed'] * 1e3:.2f} ms | "
              f"{times['composed'] / times['fused']:.2f}x |", flush=True)
        rows += [(f"qk norm decode step Qwen3-like N={heads}/{kv_heads} D={D} cache {cache} {exec_mode}", name,
                  seconds, None) for name, seconds in times.items()]
    ms.set_context(mode=ms.PYNATIVE_MODE)


def train_steps(rows, steps=5, rounds=5, seq=512, heads=8):
    print("| exec | fused step | composed step | composed / fused |")
    print("|---|---|---|---|")
    x = ms.Tensor(np.random.default_rng(0).standard_normal((1, seq, heads * D)).astype(np.float32))
    positions = ms.Tensor(np.arange(seq))
    for exec_mode in ("GRAPH_MODE", "PYNATIVE_MODE"):
        ms.set_context(mode=getattr(ms, exec_mode))
        made = {}
        for name, fused in (("fused", True), ("composed", False)):
            block = Stack([NormedAttention(heads * D, heads, fused) for _ in range(LAYERS)])
            step = nn.TrainOneStepCell(Loss(block), nn.SGD(block.trainable_params(), learning_rate=1e-3))
            made[name] = (lambda step: lambda: step(x, positions))(step)
        times = median_step_seconds(made, steps, rounds, GRAPH_WARMUP_STEPS if exec_mode == "GRAPH_MODE" else 2)
        print(f"| {exec_mode} | {times['fused'] * 1e3:.1f} ms | {times['composed'] * 1e3:.1f} ms | "
              f"{times['composed'] / times['fused']:.2f}x |", flush=True)
        rows += [(f"qk norm train step Qwen3-like S={seq} N={heads} D={D} x{LAYERS} {exec_mode}", name, seconds,
                  None) for name, seconds in times.items()]
    ms.set_context(mode=ms.PYNATIVE_MODE)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", action="store_true", help="the training steps instead of the per-call cases")
    parser.add_argument("--decode-step", action="store_true", help="a whole block's decode step instead")
    args = parser.parse_args()
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rows = []
    if args.train:
        train_steps(rows)
    elif args.decode_step:
        decode_steps(rows)
    else:
        with synchronous_ops():
            case("decode [1, 1, 32|8, 128] at position 4000", 1, 100, rows, 4000)
        case("prefill [1, 4096, 32|8, 128]", 4096, 10, rows, 0)
    append_rows(rows)


if __name__ == "__main__":
    main()
