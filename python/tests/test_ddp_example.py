"""examples/ddp_train.py: two processes (gloo, loopback) train a peephole LSTM; the loss falls and
both processes end with identical weights."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import import_torch

torch = import_torch("the DDP example")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"


def test_ddp_training_converges_with_identical_weights(tmp_path):
    run = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "40", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in (0, 1):
        losses = json.loads((tmp_path / f"losses_rank{rank}.json").read_text())
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert last < 0.5 * first, (rank, first, last)
    w0 = torch.load(tmp_path / "weights_rank0.pt")
    w1 = torch.load(tmp_path / "weights_rank1.pt")
    assert w0.keys() == w1.keys() and "lstm.weight_ci_l0" in w0
    for k in w0:
        assert torch.equal(w0[k], w1[k]), k
