"""The main demo: train a tiny decoder-only LM whose attention uses ms_rotary, on CPU, in about a minute.

Task (built in, synthetic): copy. Each sequence is K random payload tokens, a separator, then the same K
tokens; the loss counts only the copied half. A model that ignores earlier tokens can only guess among the
vocab - 2 payload tokens, a loss of ln(vocab - 2) ("chance level"); it falls towards 0 once attention learns
to look back K+1 positions, which rotary position embedding makes easy.

For each rotary mode the demo first checks the attention layer against the same layer written with plain
MindSpore ops (output and every gradient), then trains, then measures how many tokens of fresh sequences the
model copies. The last line is the verdict.

    python examples/train_tiny_lm.py --mode half            # GPT-NeoX partial rotary (default)
    python examples/train_tiny_lm.py --mode interleave       # GLM-4
    python examples/train_tiny_lm.py --mode quarter          # ChatGLM-6B 2D
    python examples/train_tiny_lm.py --mode interleave-half  # DeepSeek MLA
    python examples/train_tiny_lm.py --mode all              # each in turn

Data parallel on 2 CPU processes with MindSpore's launcher (each rank trains on its half of every batch; the
gradients are averaged across ranks, so the weights match a single process trained on the whole batch):

    msrun --worker_num=2 --local_worker_num=2 --join=True examples/train_tiny_lm.py --data-parallel
"""
import argparse
import sys
import time

import chatglm_2d_quarter
import deepseek_mla_interleave_half
import glm4_interleave
import gpt_neox_half
import mindspore as ms
import numpy as np
from mindspore import mint, nn
from rope_common import self_check
from tqdm import tqdm

LAYERS = {
    "half": gpt_neox_half,
    "interleave": glm4_interleave,
    "quarter": chatglm_2d_quarter,
    "interleave-half": deepseek_mla_interleave_half,
}
D_MODEL = 64  # every example layer maps 64 -> 64
SEPARATOR = 1


class Block(nn.Cell):
    def __init__(self, attention):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm((D_MODEL,)), nn.LayerNorm((D_MODEL,))
        self.attention = attention
        self.mlp = nn.SequentialCell(nn.Dense(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Dense(4 * D_MODEL, D_MODEL))

    def construct(self, h, cos, sin):
        h = h + self.attention(self.norm1(h), cos, sin)
        return h + self.mlp(self.norm2(h))


class TinyLM(nn.Cell):
    def __init__(self, layer_module, vocab, n_layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, D_MODEL)
        self.blocks = nn.CellList([Block(layer_module.build_attention()) for _ in range(n_layers)])
        self.norm = nn.LayerNorm((D_MODEL,))
        self.head = nn.Dense(D_MODEL, vocab, has_bias=False)

    def construct(self, tokens, cos, sin):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h, cos, sin)
        return self.head(self.norm(h))


class CopyLoss(nn.Cell):
    """Mean cross-entropy over the copied half of each sequence."""

    def __init__(self, model, vocab):
        super().__init__()
        self.model, self.vocab = model, vocab
        self.ce = nn.CrossEntropyLoss(reduction="none")

    def construct(self, tokens, targets, mask, cos, sin):
        logits = self.model(tokens, cos, sin)
        losses = self.ce(logits.reshape(-1, self.vocab), targets.reshape(-1))
        return (losses * mask.reshape(-1)).sum() / mask.sum()


def copy_batch(rng, batch, copy_len, vocab):
    payload = rng.integers(SEPARATOR + 1, vocab, (batch, copy_len))
    sequence = np.concatenate([payload, np.full((batch, 1), SEPARATOR), payload], 1)
    tokens, targets = sequence[:, :-1], sequence[:, 1:]
    mask = np.zeros(targets.shape, np.float32)
    mask[:, copy_len:] = 1.0  # predict the copy, not the random payload
    return ms.Tensor(tokens, ms.int32), ms.Tensor(targets, ms.int32), ms.Tensor(mask)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=[*LAYERS, "all"], default="half", help="rotary mode (attention style)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--copy-len", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--pynative", action="store_true", help="run eagerly instead of GRAPH_MODE")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-loss", action=argparse.BooleanOptionalAction, default=True,
                        help="exit 1 unless the loss falls by half, and measure the copy accuracy (off for short "
                        "runs)")
    parser.add_argument("--self-check", action=argparse.BooleanOptionalAction, default=True,
                        help="first check the layer against plain MindSpore ops")
    parser.add_argument("--data-parallel", action="store_true", help="one rank of an msrun data-parallel job")
    parser.add_argument("--save-weights", metavar="PATH", help="write the trained weights to PATH (.npz); "
                        "{rank} in PATH becomes the process's rank")
    args = parser.parse_args(argv)
    ms.set_device("CPU")
    if args.data_parallel:
        join_data_parallel_job()
    modes = list(LAYERS) if args.mode == "all" else [args.mode]
    failed = [mode for mode in modes if not train(args, mode) and args.check_loss]
    matched = " each layer matched plain MindSpore ops and" if args.self_check else ""
    if failed:
        print(f"FAILED: the loss did not fall by half for {failed}")
    elif args.check_loss:
        print(f"PASSED: {len(modes)} rotary mode(s) {modes}:{matched} trained (loss fell by more than half)")
    else:
        print(f"done: {len(modes)} rotary mode(s) {modes}:{matched} trained (loss not checked)")
    return 1 if failed else 0


def join_data_parallel_job():
    """Under msrun: join the process group; TrainOneStepCell then averages gradients across ranks."""
    from mindspore.communication import init
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)


def rank_and_size():
    if ms.get_auto_parallel_context("parallel_mode") != ms.ParallelMode.DATA_PARALLEL:
        return 0, 1
    from mindspore.communication import get_group_size, get_rank
    return get_rank(), get_group_size()


def local_rows(tensors, rank, size):
    """This rank's share of a global batch (every rank draws the same global batch from the same seed)."""
    rows = tensors[0].shape[0]
    if rows % size:
        raise SystemExit(f"--batch {rows} must divide over {size} ranks")
    share = rows // size
    return [t[rank * share:(rank + 1) * share] for t in tensors]


def copy_accuracy(model, rng, args, cos, sin):
    """The share of copied-half tokens the model predicts right (argmax) on fresh sequences."""
    tokens, targets, mask = copy_batch(rng, 256, args.copy_len, args.vocab)
    predicted = model(tokens, cos, sin).asnumpy().argmax(-1)
    copied = mask.asnumpy() > 0
    return float((predicted == targets.asnumpy())[copied].mean())


def train(args, mode):
    """Trains one model; True when the loss fell by more than half."""
    ms.set_context(mode=ms.PYNATIVE_MODE if args.pynative else ms.GRAPH_MODE)
    ms.set_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    layer_module = LAYERS[mode]
    cos, sin = layer_module.rope_tables(2 * args.copy_len)
    rank, size = rank_and_size()
    exec_mode = "PYNATIVE_MODE" if args.pynative else "GRAPH_MODE"
    print(f"ms_rotary demo: rotary mode {mode!r}, {layer_module.__doc__.split(':')[0]}"
          + (f"; rank {rank} of {size}, data parallel" if size > 1 else ""))
    if args.self_check:
        self_check(layer_module.TITLE, layer_module.build_attention, layer_module.rope_tables, D_MODEL,
                   modes=(exec_mode,))
    ms.set_context(mode=getattr(ms, exec_mode))
    ms.set_seed(args.seed)
    model = TinyLM(layer_module, args.vocab, args.layers)
    # mint.optim.Adam: nn.Adam builds a deprecated sparse variant whose warning would open the log
    optimizer = mint.optim.Adam(model.trainable_params(), lr=args.lr)
    step = nn.TrainOneStepCell(CopyLoss(model, args.vocab), optimizer)
    print(f"copy task: vocab {args.vocab}, {args.copy_len} tokens to copy; chance level ln({args.vocab - 2}) = "
          f"{np.log(args.vocab - 2):.3f}, a perfect copy 0; {exec_mode}, {args.steps} steps of batch {args.batch}")
    history, started = [], time.perf_counter()
    # The progress bar only on a terminal: in a log it would be one line of carriage returns.
    with tqdm(range(1, args.steps + 1), unit="step", dynamic_ncols=True, disable=not sys.stderr.isatty()) as bar:
        for index in bar:
            batch = local_rows(copy_batch(rng, args.batch, args.copy_len, args.vocab), rank, size)
            loss = float(step(*batch, cos, sin).asnumpy())
            history.append(loss)
            bar.set_postfix(loss=f"{loss:.4f}")
            if index == 1 or index % 50 == 0:
                bar.write(f"step {index:4d}  loss {loss:.4f}")
    first, last = np.mean(history[:10]), np.mean(history[-10:])
    copies = f"; copies {copy_accuracy(model, rng, args, cos, sin):.0%} of the tokens of 256 fresh sequences" \
        if args.check_loss else ""
    print(f"[{mode}] loss {first:.4f} -> {last:.4f} (mean of the first and last 10 steps) in "
          f"{time.perf_counter() - started:.1f} s{copies}")
    if args.save_weights:
        path = args.save_weights.replace("{rank}", str(rank)).replace(".npz", f"_{mode}.npz")
        np.savez(path, **{p.name: p.asnumpy() for p in model.trainable_params()})
    return last < 0.5 * first


if __name__ == "__main__":
    sys.exit(main())
