#!/usr/bin/env python3
"""Load a bumpgrad checkpoint in PyTorch: proof that the format interoperates.

    python3 scripts/check_checkpoint_torch.py CHECKPOINT [--eval-data data/mnist]
        [--model resnet18|resnet50|squeezenet --width-mult W]
    python3 scripts/check_checkpoint_torch.py CHECKPOINT --model char-lstm|char-rnn
        [--eval-data data/tinyshakespeare/input.txt --seq-len T]
    python3 scripts/check_checkpoint_torch.py CHECKPOINT --model sst-lstm|tree-lstm [--eval-data data/sst]

CHECKPOINT is a ckpt-*.safetensors file, or a directory (its newest one is
taken). The script

1. checks the header metadata (`format`, `version`) with `safetensors`;
2. recomputes the `checksum` entry from the file (the canonical encoding
   documented in src/checkpoint/format.rs), independently of the Rust code;
3. loads the tensors with `safetensors.torch.load_file` and the six
   parameters (and batch-norm buffers) into bench/pytorch_mnist.py's
   `LanternMnistCnn`, or with --model into bench/models.py's network, with
   `load_state_dict(strict=True)` (any missing, unexpected or mis-shaped
   parameter fails);
4. puts every `optimizer.<param>.momentum_buffer` into a `torch.optim.SGD`'s
   state for that parameter, as PyTorch's own SGD keeps it;
5. runs a forward pass, and with --eval-data the MNIST test accuracy, which
   for a trained checkpoint should match what bumpgrad reported.

The text models (`--model char-lstm`, `char-rnn`, `sst-lstm`, `tree-lstm`)
load into bench/models.py's `CharLM`, `SstLstm` and `TreeLstm`, their sizes
read from the tensors' shapes, their optimizer state (AdamW's or Adagrad's)
counted, not loaded. With --eval-data a language model's validation loss
(the corpus's last 10% in the checkpoint's `batch` streams, `--seq-len` at a
time, the state carried from zeros: bumpgrad's evaluation), sst-lstm's
development accuracy (`dev.txt`, the classes the checkpoint's fc layer has)
or tree-lstm's development root accuracy (the directory's `dev.txt`, the
vocabulary the words of its `train.txt`, which must be the embedding's rows
less the unknown word's) is printed beside the figure the run reported;
`--expect X` makes a difference above `--tolerance` a failure.

It prints OK and exits 0, or says what failed and exits 1.

A checkpoint of the model's initial weights comes from the Rust test suite:

    BUMPGRAD_CHECKPOINT_SAMPLE_DIR=/tmp/ckpt cargo test --release --lib \\
        checkpoint::tests::mnist_names_and_shapes_match_a_pytorch_state_dict
    python3 scripts/check_checkpoint_torch.py /tmp/ckpt

Needs torch and safetensors (`python3 -m pip install torch safetensors`).
"""

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

REPO_ROOT = Path(__file__).resolve().parent.parent
# One definition of the PyTorch model: the benchmark's.
sys.path.insert(0, str(REPO_ROOT / "bench"))
from pytorch_mnist import TEST_IMAGES, TEST_LABELS, LanternMnistCnn, evaluate, load_split  # noqa: E402
from models import build  # noqa: E402

FORMAT = "bumpgrad-checkpoint"
VERSION = "1"
OPTIMIZER_PREFIX = "optimizer."
MOMENTUM_SUFFIX = ".momentum_buffer"


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def newest_checkpoint(path: Path) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        fail(f"{path} is neither a checkpoint file nor a directory")
    files = sorted(path.glob("ckpt-*.safetensors"))
    if not files:
        fail(f"{path} holds no ckpt-*.safetensors")
    # Names carry the step zero-padded, so the last in name order is newest.
    return files[-1]


def canonical_checksum(raw: bytes) -> str:
    """The `checksum` metadata entry, recomputed from the file's bytes."""
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})

    h = hashlib.sha256()

    def put_u64(value):
        h.update(struct.pack("<Q", value))

    def put_str(text):
        encoded = text.encode("utf-8")
        put_u64(len(encoded))
        h.update(encoded)

    # Sorted by UTF-8 bytes, as Rust sorts strings.
    signed = sorted(((k, v) for k, v in metadata.items() if k != "checksum"),
                    key=lambda kv: kv[0].encode("utf-8"))
    put_u64(len(signed))
    for key, value in signed:
        put_str(key)
        put_str(value)
    put_u64(len(header))
    for name in sorted(header, key=lambda k: k.encode("utf-8")):
        entry = header[name]
        put_str(name)
        put_str(entry["dtype"])
        put_u64(len(entry["shape"]))
        for dim in entry["shape"]:
            put_u64(dim)
        begin, end = entry["data_offsets"]
        put_u64(begin)
        put_u64(end)
    h.update(data)
    return "sha256:" + h.hexdigest()


TEXT_MODELS = ("char-lstm", "char-rnn", "sst-lstm", "tree-lstm")
# Trees per forward_levels call in tree-lstm's evaluation: the benchmark's
# (bench/tree_vs_pytorch.py); in float64 the figure does not depend on it.
TREE_EVAL_BATCH = 250


def check_text(args):
    """A text model's checkpoint: strict load into bench/models.py's module,
    then its validation figure (see the module's docstring)."""
    import re

    from models import CharLM, SstLstm, TreeLstm

    path = newest_checkpoint(args.checkpoint)
    print(f"checkpoint: {path}")
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    recorded = metadata.get("checksum")
    computed = canonical_checksum(path.read_bytes())
    if computed != recorded:
        fail(f"checksum: the file records {recorded} but hashes to {computed}")
    tensors = load_file(str(path))
    params = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    state = [k for k in tensors if k.startswith(OPTIMIZER_PREFIX)]
    layers = len([k for k in params if k.startswith("rnn.weight_hh_l")])
    hidden = params["tree.left" if args.model == "tree-lstm" else "rnn.weight_hh_l0"].shape[1]
    if args.model == "tree-lstm":
        vocab, embed = params["embedding.weight"].shape
        model = TreeLstm(vocab, params["fc.weight"].shape[0], embed, hidden)
    elif args.model == "sst-lstm":
        vocab, embed = params["embedding.weight"].shape
        model = SstLstm(vocab, params["fc.weight"].shape[0], embed, hidden, layers)
    else:
        vocab = params["decoder.weight"].shape[0]
        embed = params["encoder.weight"].shape[1] if "encoder.weight" in params else 0
        model = CharLM(vocab, embed, hidden, layers, "lstm" if args.model == "char-lstm" else "rnn")
    try:
        model.load_state_dict(params, strict=True)
    except RuntimeError as e:
        fail(f"load_state_dict(strict=True): {e}")
    for name, value in model.state_dict().items():
        if not torch.equal(value, params[name]):
            fail(f"{name} did not load as stored")
    sizes = f"vocabulary {vocab}, embed {embed}, hidden {hidden}" + (f", layers {layers}" if layers else "")
    print(f"model: {args.model} ({sizes}), "
          f"{len(params)} tensors loaded with strict=True; {len(state)} optimizer tensors beside them")
    if not args.eval_data:
        print("OK")
        return
    model = model.double().eval()
    if args.model == "sst-lstm":
        figure, what = sst_dev_accuracy(model, args.eval_data, params["fc.weight"].shape[0]), "development accuracy"
    elif args.model == "tree-lstm":
        figure, what = tree_dev_accuracy(model, args.eval_data, vocab), "development root accuracy"
    else:
        seq_len = args.seq_len
        if seq_len is None:
            found = re.search(r"seq_len\D+(\d+)", metadata.get("config", ""))
            if not found:
                fail("the checkpoint does not say its --seq-len: pass --seq-len")
            seq_len = int(found.group(1))
        figure, what = lm_valid_loss(model, args.eval_data, int(metadata["batch"]), seq_len), "validation loss"
    print(f"{what} {figure:.6f} (float64, in PyTorch)")
    if args.expect is not None:
        if abs(figure - args.expect) > args.tolerance:
            fail(f"{what} {figure:.6f}, bumpgrad reported {args.expect} (tolerance {args.tolerance})")
        print(f"bumpgrad reported {args.expect}: within {args.tolerance}")
    print("OK")


def lm_valid_loss(model, corpus, streams, seq_len):
    """bumpgrad's validation loss: the last 10% of the corpus's bytes as ids
    of its sorted distinct bytes, cut into `streams` contiguous streams read
    `seq_len` at a time, the state carried from zeros; the mean over windows
    of each window's mean cross-entropy per token."""
    data = Path(corpus).read_bytes()
    vocab = sorted(set(data))
    index = {b: i for i, b in enumerate(vocab)}
    cut = len(data) // 10 * 9 + len(data) % 10 * 9 // 10
    tokens = torch.tensor([index[b] for b in data[cut:]], dtype=torch.long)
    count = (len(tokens) - 1) // streams // seq_len
    n = streams * count * seq_len
    x = tokens[:n].view(streams, count, seq_len).permute(1, 2, 0)
    y = tokens[1:n + 1].view(streams, count, seq_len).permute(1, 2, 0)
    state, total = None, 0.0
    with torch.no_grad():
        for k in range(count):
            logits, state = model(x[k], state)
            total += torch.nn.functional.cross_entropy(logits, y[k].reshape(-1)).item()
    return total / count


def sst_dev_accuracy(model, sst, classes):
    """Root accuracy on `dev.txt`, the vocabulary drawn from the training
    sentences kept (id 0 the unknown word), neutral roots dropped for 2
    classes, as bumpgrad's treebank reader does."""
    from sst_vs_pytorch import SST, encode, read_split

    if Path(sst).resolve() != SST.resolve():
        fail(f"sst-lstm is checked on {SST} (bench/sst_vs_pytorch.py reads it), not {sst}")
    train, dev = read_split("train", classes), read_split("dev", classes)
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for words, _ in train for w in words}))}
    right = 0
    with torch.no_grad():
        for tokens, label in encode(dev, vocab):
            logits = model(torch.tensor(tokens).view(-1, 1), torch.tensor([len(tokens)]))
            right += int(logits.argmax(1).item() == label)
    return right / len(dev)


def tree_dev_accuracy(model, treebank, rows):
    """Root accuracy on `dev.txt`, the vocabulary the distinct words of every
    tree of `train.txt` (id 0 the unknown word), as bumpgrad's tree task and
    bench/tree_vs_pytorch.py build it."""
    from models import read_tree

    def read(split):
        path = Path(treebank) / f"{split}.txt"
        if not path.is_file():
            fail(f"tree-lstm is checked on a treebank directory with {split}.txt: {path} is missing")
        return [read_tree(line.strip()) for line in path.read_text().splitlines() if line.strip()]

    train, dev = read("train"), read("dev")
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for words, _ in train for w in words}))}
    # Another treebank's words would load and score without complaint, each
    # id naming a different word's embedding.
    if rows != len(vocab) + 1:
        fail(f"the checkpoint's embedding has {rows} rows, but {treebank}/train.txt's {len(vocab)} words and "
             f"the unknown word make {len(vocab) + 1}: not the treebank the run trained on")
    right = 0
    with torch.no_grad():
        for i in range(0, len(dev), TREE_EVAL_BATCH):
            trees = dev[i:i + TREE_EVAL_BATCH]
            logits = model.forward_levels([(torch.tensor([vocab.get(w, 0) for w in words], dtype=torch.long), nodes)
                                           for words, nodes in trees])
            # Post-order puts each tree's root last among its nodes.
            roots = torch.tensor([len(nodes) for _, nodes in trees]).cumsum(0) - 1
            labels = torch.tensor([nodes[-1][0] for _, nodes in trees])
            right += int((logits[roots].argmax(1) == labels).sum())
    return right / len(dev)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a ckpt-*.safetensors file, or a directory of them")
    parser.add_argument("--eval-data", type=Path, help="MNIST directory: also report test accuracy")
    parser.add_argument("--eval-limit", type=int, default=None, help="evaluate on the first N test images")
    parser.add_argument("--model", default="mnist-cnn",
                        help="the network that wrote it: mnist-cnn, or resnet18/resnet50/squeezenet "
                             "(bench/models.py) for MNIST's 1-channel images")
    parser.add_argument("--width-mult", type=float, default=1.0, help="the run's --width-mult")
    parser.add_argument("--seq-len", type=int, help="a language model's --seq-len (default: the checkpoint's)")
    parser.add_argument("--expect", type=float,
                        help="text models: the validation loss (or development accuracy) bumpgrad reported")
    parser.add_argument("--tolerance", type=float, default=1e-3, help="how far from --expect passes")
    args = parser.parse_args(argv)
    if args.model in TEXT_MODELS:
        return check_text(args)

    path = newest_checkpoint(args.checkpoint)
    print(f"checkpoint: {path}")

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        fail(f"format {metadata.get('format')!r} version {metadata.get('version')!r}, "
             f"expected {FORMAT!r} version {VERSION!r}")
    print("metadata: " + ", ".join(f"{k}={metadata[k]}" for k in ("epoch", "step", "seed")))
    print(f"config: {metadata.get('config')}")
    extra = {k: v for k, v in metadata.items()
             if k not in ("format", "version", "epoch", "step", "seed", "config", "checksum")}
    if extra:
        print(f"extra: {extra}")

    recorded = metadata.get("checksum")
    computed = canonical_checksum(path.read_bytes())
    if computed != recorded:
        fail(f"checksum: the file records {recorded} but hashes to {computed}")
    print(f"checksum: {computed} (recomputed in Python)")

    tensors = load_file(str(path))
    params = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    optimizer_state = {k: v for k, v in tensors.items() if k.startswith(OPTIMIZER_PREFIX)}

    if args.model == "mnist-cnn":
        model = LanternMnistCnn()
    else:
        model = build(args.model, 10, 1, args.width_mult)
    expected = model.state_dict()
    try:
        model.load_state_dict(params, strict=True)
    except RuntimeError as e:
        fail(f"load_state_dict(strict=True): {e}")
    for name, value in model.state_dict().items():
        # num_batches_tracked is int64 in PyTorch, float32 in the file.
        if not torch.equal(value, params[name].to(value.dtype)):
            fail(f"{name} did not load as stored")
        if len(expected) <= 12:
            print(f"  {name:<14} {list(value.shape)} {value.dtype} (state_dict: {list(expected[name].shape)})")

    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    print(f"model: {args.model}, {len(params)} tensors loaded with strict=True")
    by_name = dict(model.named_parameters())
    for key, buffer in optimizer_state.items():
        if not key.endswith(MOMENTUM_SUFFIX):
            fail(f"unknown optimizer state {key}")
        param_name = key[len(OPTIMIZER_PREFIX):-len(MOMENTUM_SUFFIX)]
        param = by_name.get(param_name)
        if param is None or param.shape != buffer.shape:
            fail(f"{key} {list(buffer.shape)} has no parameter of that shape")
        sgd.state[param]["momentum_buffer"] = buffer.clone()
    print(f"optimizer: {len(optimizer_state)} momentum buffers loaded into torch.optim.SGD")

    model.eval()
    with torch.no_grad():
        out = model(torch.zeros(2, 1, 28, 28))
    if out.shape != (2, 10) or not torch.isfinite(out).all():
        fail(f"forward pass gave {out.shape}, finite: {bool(torch.isfinite(out).all())}")

    if args.eval_data:
        x, y = load_split(args.eval_data, TEST_IMAGES, TEST_LABELS, args.eval_limit)
        with torch.no_grad():
            # The MNIST CNN's forward ends in log-softmax; the others give logits.
            scored = model if args.model == "mnist-cnn" else torch.nn.Sequential(model, torch.nn.LogSoftmax(dim=1))
            accuracy, nll = evaluate(scored, x, y, 1000)
        print(f"test accuracy {accuracy:.4f}, mean NLL {nll:.4f} on {x.shape[0]} images")

    print("OK")


if __name__ == "__main__":
    main()
