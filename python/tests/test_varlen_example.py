"""examples/varlen_classify.py: a two-layer bidirectional peephole LSTM learns to classify packed
variable-length sequences; the loss falls and held-out accuracy is high."""
import json
import os
import pathlib
import subprocess
import sys

from conftest import import_torch

import_torch("the variable-length example")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "varlen_classify.py"


def test_variable_length_classifier_learns():
    run = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "100"], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["last_loss"] < 0.3 * result["first_loss"], result
    assert result["accuracy"] >= 0.9, result
