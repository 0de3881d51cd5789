#!/usr/bin/env bash
# Regenerates the TensorFlow golden files under tests/data/tf/ and the BlockLSTMV2 gradient study
# (tests/golden/v2_gradient_study.txt, tests/data/tf/v2_gradient_study/).
#
#   tests/golden/generate.sh            # all cases + the study
#   tests/golden/generate.sh --list     # print the case names only
#
# Installs tensorflow-cpu and numpy (pinned in requirements.txt) from PyPI into the git-ignored
# tests/golden/.venv on first use; nothing here is needed to build or test blocklstm.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$here/.venv
stamp=$venv/.requirements

if ! cmp -s "$here/requirements.txt" "$stamp" 2>/dev/null; then
    echo "golden: installing $(grep -v '^#' "$here/requirements.txt" | xargs) into $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi

# Quiet TF's start-up chatter; keep its CPU kernels as users get them (oneDNN options untouched).
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
exec "$venv/bin/python" "$here/generate.py" "$@"
