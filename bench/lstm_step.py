#!/usr/bin/env python3
"""PyTorch's answer for one step of a small two-layer LSTM language model, as a fixture.

    python3 bench/lstm_step.py            # -> tests/fixtures/char_lstm/

Its output is committed (made with torch 2.11 on the H200 host) and read by
`tests/support/lstm_step.rs`: bumpgrad's `nn::Embedding` -> `nn::Lstm`
(2 layers) -> `nn::Linear` -> mean cross-entropy over T*B next tokens, time
major, loaded with these weights by name, on the CPU
(`tests/pytorch_models.rs`) and the GPU (`tests/gpu/sequences.rs`), every
tensor within 2e-5 of its scale of this float64 answer.

Writes two safetensors files (float32):

- `weights.safetensors`: the initial `state_dict` of `CharLstm` below
  (`embed.weight`, `rnn.weight_ih_l0`, `rnn.weight_hh_l0`, `rnn.bias_ih_l0`,
  `rnn.bias_hh_l0`, ..._l1, `fc.weight`, `fc.bias`), PyTorch's own
  initialisation;
- `step.safetensors`: `tokens` [T + 1, B] (as float32; inputs are rows 0..T,
  targets rows 1..T+1, each row one time step of B streams), and what one
  forward and backward of the mean cross-entropy gives in float64 from those
  float32 weights: `logits` [T*B, V], `loss`, `h_n`, `c_n` [2, B, H] and
  `grad.<name>` for every parameter.
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import save_step  # noqa: E402

VOCAB, EMBED, HIDDEN, LAYERS, STEPS, BATCH = 11, 6, 8, 2, 4, 3


class CharLstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.LSTM(EMBED, HIDDEN, LAYERS)  # gates i, f, g, o; batch_first=False
        self.fc = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        y, (h, c) = self.rnn(self.embed(tokens))
        return self.fc(y.reshape(-1, HIDDEN)), h, c


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/char_lstm"))
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = CharLstm()
    weights = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    tokens = torch.randint(0, VOCAB, (STEPS + 1, BATCH))

    exact = CharLstm().double()
    exact.load_state_dict({k: v.double() for k, v in weights.items()}, strict=True)
    logits, h, c = exact(tokens[:-1])
    loss = F.cross_entropy(logits, tokens[1:].reshape(-1))
    loss.backward()

    step = {
        "tokens": tokens.float(),
        "logits": logits.detach().float(),
        "loss": loss.detach().float().reshape(1),
        "h_n": h.detach().float(),
        "c_n": c.detach().float(),
    }
    out = save_step(args.out, weights, step, exact)
    print(f"{out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
