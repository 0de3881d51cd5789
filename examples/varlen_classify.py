"""Sequence classification on variable-length batches with blocklstm.torch.LSTM: a two-layer
bidirectional peephole LSTM reads sequences of 5 to 40 steps, each batch packed as nn.LSTM takes
it, and learns which of two signals (a slow or a fast sine, in noise) a sequence carries; its
final states (both directions of the last layer) feed a linear classifier. Runs in seconds on a
CPU.

    python examples/varlen_classify.py [--steps N] [--batch B] [--seed S] [--padded]

--padded passes padded batches with lengths= instead of packing them. Prints the loss every 20
steps and, last, one JSON line: {"first_loss", "last_loss", "accuracy"} (held-out accuracy).
"""
import argparse
import json
import math

import torch
from torch import nn

import blocklstm.torch as bt


def batch(B, generator):
    """B sequences of 5-40 steps with 2 features: sin(w t + phase) + noise and the step's place in
    the sequence; label 1 for the fast signal. Returned padded [T_max, B, 2] with their lengths."""
    lengths = torch.randint(5, 41, (B,), generator=generator)
    labels = torch.randint(0, 2, (B,), generator=generator)
    T = int(lengths.max())
    t = torch.arange(T, dtype=torch.float32)[:, None]
    omega = torch.where(labels == 1, 1.1, 0.35)[None, :].float()
    phase = 2 * math.pi * torch.rand(1, B, generator=generator)
    signal = torch.sin(omega * t + phase) + 0.3 * torch.randn(T, B, generator=generator)
    x = torch.stack([signal, t.expand(T, B) / 40], 2)
    x = x * (t < lengths[None, :]).float()[:, :, None]  # zeros past each length
    return x, lengths, labels


class Classifier(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.lstm = bt.LSTM(2, hidden, num_layers=2, bidirectional=True, dropout=0.1, peephole=True)
        self.out = nn.Linear(2 * hidden, 2)

    def forward(self, x, lengths, padded):
        if padded:
            _, (h_n, _) = self.lstm(x, lengths=lengths)
        else:
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
            _, (h_n, _) = self.lstm(packed)
        return self.out(torch.cat([h_n[-2], h_n[-1]], 1))  # the last layer, both directions


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--padded", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for step in range(args.steps):
        x, lengths, labels = batch(args.batch, g)
        loss = nn.functional.cross_entropy(model(x, lengths, args.padded), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        x, lengths, labels = batch(512, torch.Generator().manual_seed(args.seed + 1))
        accuracy = (model(x, lengths, args.padded).argmax(1) == labels).float().mean().item()
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    print(json.dumps({"first_loss": first, "last_loss": last, "accuracy": accuracy}))


if __name__ == "__main__":
    main()
