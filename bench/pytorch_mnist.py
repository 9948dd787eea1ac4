#!/usr/bin/env python3
"""PyTorch reference for bumpgrad's MNIST CNN benchmark (Lantern's MNIST model).

The model, data handling and optimiser mirror `bumpgrad train`, so that the
two can be timed against each other by bench/cpu_vs_pytorch.py:

    conv 1->10 5x5 (no bias) -> maxpool 2 -> relu
    conv 10->20 5x5 (no bias) -> maxpool 2 -> relu
    flatten 320 -> linear 320->50 -> relu -> dropout 0.5
    linear 50->10 -> log-softmax -> NLL loss (mean over the batch)

PyTorch default initialisation, plain SGD (lr 0.05, momentum 0 by default),
pixels scaled to [0, 1] then normalised with mean 0.1307 / std 0.3081.

stdout carries exactly one JSON object per epoch, in the same shape bumpgrad
prints with --json, e.g.

    {"epoch": 1, "train_loss": 0.41, "test_accuracy": 0.975,
     "seconds": 4.2, "eval_seconds": 0.3, ...}

`seconds` is the training time of the epoch only (test evaluation excluded),
`train_loss` the mean of the epoch's minibatch losses, `test_accuracy` a
fraction in [0, 1]. Everything meant for people goes to stderr.
"""

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# The repository root, so the default data path does not depend on the cwd.
REPO_ROOT = Path(__file__).resolve().parent.parent

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"


def log(*parts):
    """Human-readable progress; stderr keeps stdout pure JSON lines."""
    print(*parts, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def read_idx(data_dir: Path, name: str) -> np.ndarray:
    """Read one IDX file of unsigned bytes, gzipped (`name.gz`) or raw.

    The IDX header is: two zero bytes, a type code (0x08 = ubyte), the number
    of dimensions, then each dimension as a big-endian u32.
    """
    gz_path = data_dir / (name + ".gz")
    raw_path = data_dir / name
    if gz_path.exists():
        with gzip.open(gz_path, "rb") as f:
            data = f.read()
        path = gz_path
    elif raw_path.exists():
        data = raw_path.read_bytes()
        path = raw_path
    else:
        raise FileNotFoundError(
            f"{gz_path} not found (nor {raw_path}); point --data at the "
            "directory holding the four MNIST IDX files"
        )

    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    header_len = 4 + 4 * ndim
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    expected = int(np.prod(dims))
    if len(data) - header_len != expected:
        raise ValueError(
            f"{path}: header says {dims} ({expected} bytes) but the body has "
            f"{len(data) - header_len} bytes"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header_len).reshape(dims)


def load_split(data_dir: Path, images_name: str, labels_name: str, limit=None):
    """Load one split as (N,1,28,28) float32 normalised images and int64 labels.

    Normalising once up front (rather than per batch) keeps the per-step work
    to what bumpgrad does: the data is resident and only indexed.
    """
    images = read_idx(data_dir, images_name)
    labels = read_idx(data_dir, labels_name)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{images_name} has {images.shape[0]} images but {labels_name} "
            f"has {labels.shape[0]} labels"
        )
    if limit is not None:
        if not 0 < limit <= images.shape[0]:
            raise ValueError(f"--train-limit must be in 1..={images.shape[0]}")
        # The first N examples, the same subset bumpgrad's --train-limit keeps.
        images, labels = images[:limit], labels[:limit]

    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    x = ((x - MNIST_MEAN) / MNIST_STD).unsqueeze(1).contiguous()
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

class LanternMnistCnn(nn.Module):
    """Lantern's MNIST CNN, layer for layer as bumpgrad builds it."""

    def __init__(self):
        super().__init__()
        # The convolutions have no bias, as in Lantern's reference model.
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5, bias=False)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5, bias=False)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))  # 28x28 -> 24x24 -> 12x12
        x = F.relu(F.max_pool2d(self.conv2(x), 2))  # 12x12 -> 8x8 -> 4x4
        x = x.flatten(1)                            # 20*4*4 = 320
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


# --------------------------------------------------------------------------
# Training and evaluation
# --------------------------------------------------------------------------

def sync(device: torch.device):
    """Wait for queued GPU work so wall-clock timings cover it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(model, optimizer, x, y, batch, generator, device):
    """One pass over (x, y) in a shuffled order; returns (mean loss, steps)."""
    model.train()
    n = x.shape[0]
    # The permutation is drawn on the CPU from a seeded generator so the order
    # is the same whichever device trains.
    order = torch.randperm(n, generator=generator).to(device)
    # Summing on the device avoids a host sync per step (matters on CUDA).
    loss_sum = torch.zeros((), device=device)
    steps = 0
    # A final partial batch is kept (DataLoader's drop_last=False behaviour);
    # with the default sizes (60000 / 100) there is none.
    for start in range(0, n, batch):
        idx = order[start:start + batch]
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()
        steps += 1
    return (loss_sum / steps).item(), steps


@torch.no_grad()
def evaluate(model, x, y, batch):
    """Test accuracy (fraction) and mean NLL, with dropout off (eval mode)."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    nll_sum = torch.zeros((), device=x.device)
    for start in range(0, x.shape[0], batch):
        out = model(x[start:start + batch])
        target = y[start:start + batch]
        nll_sum += F.nll_loss(out, target, reduction="sum")
        correct += (out.argmax(dim=1) == target).sum()
    n = x.shape[0]
    return correct.item() / n, nll_sum.item() / n


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train Lantern's MNIST CNN in PyTorch; print one JSON "
                    "object per epoch on stdout (bumpgrad's --json format).",
    )
    p.add_argument("--data", type=Path, default=REPO_ROOT / "data" / "mnist",
                   help="directory with the four MNIST IDX files, gzipped or "
                        "raw (default: data/mnist under the repository root)")
    p.add_argument("--epochs", type=int, default=4,
                   help="number of training epochs (default: 4)")
    p.add_argument("--batch", type=int, default=100,
                   help="minibatch size (default: 100)")
    p.add_argument("--lr", type=float, default=0.05,
                   help="SGD learning rate (default: 0.05)")
    p.add_argument("--momentum", type=float, default=0.0,
                   help="SGD momentum (default: 0, plain SGD)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra- and inter-op CPU threads (torch.set_num_threads"
                        " and set_num_interop_threads); default: PyTorch's own")
    p.add_argument("--seed", type=int, default=1,
                   help="seed for initialisation and dropout; epoch e is "
                        "shuffled by a generator seeded with seed+e (default: 1)")
    p.add_argument("--train-limit", type=int, default=None, metavar="N",
                   help="train on the first N training examples only "
                        "(test set is always the full 10,000)")
    p.add_argument("--eval-batch", type=int, default=1000,
                   help="batch size for test evaluation; it does not affect "
                        "the result, only eval_seconds (default: 1000)")
    p.add_argument("--channels-last", action="store_true",
                   help="run the convolutions in channels_last (NHWC) memory "
                        "format; off by default to stay the plain NCHW port")
    p.add_argument("--device", default="cpu",
                   help="torch device: cpu (default), cuda or cuda:N")
    args = p.parse_args(argv)
    for name in ("epochs", "batch", "eval_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)

    # Thread counts must be fixed before any parallel work starts; PyTorch
    # refuses to change the inter-op pool once it has been used.
    if args.threads is not None:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(args.threads)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda requested but torch.cuda.is_available() is False")

    # One seed covers initialisation and the dropout masks (the global RNG);
    # the shuffles use their own per-epoch generators below.
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    x_train, y_train = load_split(args.data, TRAIN_IMAGES, TRAIN_LABELS, args.train_limit)
    x_test, y_test = load_split(args.data, TEST_IMAGES, TEST_LABELS)
    # Resident on the training device as single tensors; batches are indexed.
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test, y_test = x_test.to(device), y_test.to(device)
    load_seconds = time.perf_counter() - t0

    model = LanternMnistCnn().to(device)
    if args.channels_last:
        # oneDNN's NHWC kernels use both cores far better than the default
        # NCHW path on small convolutions; opt-in, so the default stays the
        # straightforward port. With one input channel the images are already
        # NHWC-contiguous, so batches indexed out of them keep the format.
        model = model.to(memory_format=torch.channels_last)
        x_train = x_train.contiguous(memory_format=torch.channels_last)
        x_test = x_test.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    log(f"pytorch {torch.__version__} on {device}, "
        f"threads intra={torch.get_num_threads()} inter={torch.get_num_interop_threads()}")
    log(f"data {args.data}: {x_train.shape[0]} train / {x_test.shape[0]} test "
        f"examples, loaded in {load_seconds:.2f} s")
    log(f"epochs {args.epochs}, batch {args.batch}, lr {args.lr}, "
        f"momentum {args.momentum}, seed {args.seed}, "
        f"memory format {'channels_last' if args.channels_last else 'NCHW'}")

    for epoch in range(1, args.epochs + 1):
        generator = torch.Generator().manual_seed(args.seed + epoch)

        sync(device)
        t_train = time.perf_counter()
        train_loss, steps = train_epoch(model, optimizer, x_train, y_train,
                                        args.batch, generator, device)
        sync(device)
        seconds = time.perf_counter() - t_train

        t_eval = time.perf_counter()
        test_accuracy, test_loss = evaluate(model, x_test, y_test, args.eval_batch)
        sync(device)
        eval_seconds = time.perf_counter() - t_eval

        record = {
            "epoch": epoch,
            "train_loss": train_loss,
            "test_accuracy": test_accuracy,
            "test_loss": test_loss,
            "seconds": seconds,
            "eval_seconds": eval_seconds,
            "steps": steps,
            "train_examples": x_train.shape[0],
            "framework": "pytorch",
            "torch_version": torch.__version__,
            "device": str(device),
            "channels_last": args.channels_last,
            "threads": torch.get_num_threads(),
        }
        # Flushed per epoch so a driver reading the pipe sees it at once.
        print(json.dumps(record), flush=True)
        log(f"epoch {epoch}: train loss {train_loss:.4f}, test accuracy "
            f"{100 * test_accuracy:.2f}%, train {seconds:.2f} s "
            f"({x_train.shape[0] / seconds:.0f} ex/s), eval {eval_seconds:.2f} s")


if __name__ == "__main__":
    main()
