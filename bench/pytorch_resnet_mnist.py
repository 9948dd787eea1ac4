#!/usr/bin/env python3
"""PyTorch's test accuracy for bench/models.py's networks trained on MNIST with
bumpgrad's settings: the figure `bumpgrad train --model resnet18 --data
data/mnist` is held to (issue 13: within 0.3 points).

    python3 bench/pytorch_resnet_mnist.py --model resnet18 --epochs 2 --batch 128 \\
        --lr 0.05 --momentum 0.9 --weight-decay 5e-4

Same data handling as bumpgrad: the IDX files of data/mnist, pixels scaled to
[0, 1] and normalised with MNIST's mean and std, no augmentation, the training
set reshuffled every epoch, the last partial batch kept; SGD with momentum and
L2 weight decay on every parameter (batch-norm included), constant rate; mean
cross-entropy; evaluation in eval mode (running statistics). One JSON line per
epoch on stdout, like `bumpgrad train --json`.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from models import build
from pytorch_mnist import REPO_ROOT, TEST_IMAGES, TEST_LABELS, TRAIN_IMAGES, TRAIN_LABELS, load_split


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--width-mult", type=float, default=1.0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default=str(REPO_ROOT / "data" / "mnist"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--train-limit", type=int, default=None, metavar="N",
                   help="train on the first N training images (bumpgrad's --train-limit)")
    p.add_argument("--test-limit", type=int, default=None, metavar="N",
                   help="evaluate on the first N test images")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's)")
    args = p.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)

    def split(images, labels):
        x, y = load_split(Path(args.data), images, labels)  # normalised [N, 1, 28, 28], int64
        return x.to(dev), y.to(dev)

    train_x, train_y = split(TRAIN_IMAGES, TRAIN_LABELS)
    test_x, test_y = split(TEST_IMAGES, TEST_LABELS)
    train_x, train_y = train_x[: args.train_limit], train_y[: args.train_limit]
    test_x, test_y = test_x[: args.test_limit], test_y[: args.test_limit]
    model = build(args.model, 10, 1, args.width_mult).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    for epoch in range(1, args.epochs + 1):
        model.train()
        start = time.time()
        order = torch.randperm(len(train_x), device=dev)
        losses = []
        for i in range(0, len(order), args.batch):
            idx = order[i : i + args.batch]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        train_loss = torch.stack(losses).mean().item()
        seconds = time.time() - start
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test_x), 1000):
                correct += (model(test_x[i : i + 1000]).argmax(1) == test_y[i : i + 1000]).sum().item()
        acc = correct / len(test_x)
        print(json.dumps({"epoch": epoch, "train_loss": train_loss, "test_accuracy": acc, "seconds": seconds}))
        print(f"epoch {epoch}: loss {train_loss:.4f}, test accuracy {100 * acc:.2f}%", file=sys.stderr)


if __name__ == "__main__":
    main()
