#!/usr/bin/env python3
"""PyTorch's answer for one step of a small Tree-LSTM over a few trees, as a fixture.

    python3 bench/tree_step.py            # -> tests/fixtures/tree_lstm/

Read by `tests/support/tree_step.rs` (the CPU test in `tests/trees.rs`, the
GPU test in `tests/gpu/sequences.rs`; both skip, saying so, while the
fixture is absent): bumpgrad's `nn::TreeLstm` between an embedding and a
classifier (`TreeLstm` of `bench/models.py`), loaded with these weights by
name, runs the trees of `TREES` (the same lines as the Rust test's) one
node at a time and level by level, and the backward of the cross-entropy
summed over every node; every tensor must land within 1e-4 of its scale of
this float64 answer.

Writes two safetensors files (float32):

- `weights.safetensors`: the initial `state_dict` (`embedding.weight`,
  `tree.leaf.weight`, `tree.leaf.bias`, `tree.left`, `tree.right`,
  `tree.bias`, `fc.weight`, `fc.bias`);
- `step.safetensors`: `words` [leaves] (every tree's leaves' ids, tree by
  tree, as float32) and `labels` [nodes] (every node's, tree by tree in
  post-order), and in float64 from those float32 weights: `logits` [nodes,
  classes], `loss` (summed over the nodes) and `grad.<name>` for every
  parameter.
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import TreeLstm, read_tree, save_step  # noqa: E402

VOCAB, CLASSES, EMBED, HIDDEN = 11, 5, 6, 4
TREES = [
    "(3 (2 It) (4 (2 's) (2 fine)))",
    "(1 bad)",
    "(2 (2 (1 a) (3 b)) (2 (0 c) (4 (2 d) (1 e))))",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/tree_lstm"))
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = TreeLstm(VOCAB, CLASSES, EMBED, HIDDEN)
    weights = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    trees = []
    for line in TREES:
        words, nodes = read_tree(line)
        trees.append((torch.randint(0, VOCAB, (len(words),)), nodes))
    labels = torch.tensor([label for _, nodes in trees for label, *_ in nodes])

    exact = TreeLstm(VOCAB, CLASSES, EMBED, HIDDEN).double()
    exact.load_state_dict({k: v.double() for k, v in weights.items()}, strict=True)
    logits = exact(trees)
    loss = F.cross_entropy(logits, labels, reduction="sum")
    loss.backward()

    step = {
        "words": torch.cat([ids for ids, _ in trees]).float(),
        "labels": labels.float(),
        "logits": logits.detach().float(),
        "loss": loss.detach().float().reshape(1),
    }
    out = save_step(args.out, weights, step, exact)
    print(f"{out}: loss {loss.item():.6f}, {len(labels)} nodes")


if __name__ == "__main__":
    main()
