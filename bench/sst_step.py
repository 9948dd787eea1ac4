#!/usr/bin/env python3
"""PyTorch's answer for one step of a small sst-lstm on one length bucket, as a fixture.

    python3 bench/sst_step.py            # -> tests/fixtures/sst_lstm/

Read by `sst_lstm_matches_pytorchs_float64_step` in `tests/sentences.rs`
(which skips, saying so, while the fixture is absent): bumpgrad's
`sst-lstm` (`SstLstm` of `bench/models.py`: embedding -> LSTM -> linear
from each sentence's state at its own last word), loaded with these weights
by name, runs one batch of one bucket, `[T, B]` right-padded ids with a
padding row of length 0 that weighs nothing, and the backward of the mean
cross-entropy over the batch's sentences; every tensor must land within
1e-4 of its scale of this float64 answer.

Writes two safetensors files (float32):

- `weights.safetensors`: the initial `state_dict` of `SstLstm` (PyTorch's own
  initialisation): `embedding.weight`, `rnn.weight_ih_l0`,
  `rnn.weight_hh_l0`, `rnn.bias_ih_l0`, `rnn.bias_hh_l0`, `fc.weight`,
  `fc.bias`;
- `step.safetensors`: `tokens` [T, B] (as float32, time major, zeros after
  each sentence; the last row of the batch, length 0, is padding), `lengths`
  [B] and `labels` [B] (as float32), and in float64 from those float32
  weights: `logits` [B - 1, classes] of the real rows, `loss` (their mean
  cross-entropy) and `grad.<name>` for every parameter.
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import SstLstm, save_step  # noqa: E402

VOCAB, CLASSES, EMBED, HIDDEN, STEPS = 13, 5, 6, 8, 7
# Three sentences of the bucket of length 7 (one fills it) and a padding row.
LENGTHS = [7, 3, 5, 0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/sst_lstm"))
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = SstLstm(VOCAB, CLASSES, EMBED, HIDDEN)
    weights = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    batch = len(LENGTHS)
    tokens = torch.zeros(STEPS, batch, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        tokens[:n, b] = torch.randint(1, VOCAB, (n,))
    labels = torch.randint(0, CLASSES, (batch,))
    labels[-1] = 0
    real = [b for b, n in enumerate(LENGTHS) if n > 0]

    exact = SstLstm(VOCAB, CLASSES, EMBED, HIDDEN).double()
    exact.load_state_dict({k: v.double() for k, v in weights.items()}, strict=True)
    logits = exact(tokens[:, real], torch.tensor([LENGTHS[b] for b in real]))
    loss = F.cross_entropy(logits, labels[real])
    loss.backward()

    step = {
        "tokens": tokens.float(),
        "lengths": torch.tensor(LENGTHS, dtype=torch.float32),
        "labels": labels.float(),
        "logits": logits.detach().float(),
        "loss": loss.detach().float().reshape(1),
    }
    out = save_step(args.out, weights, step, exact)
    print(f"{out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
