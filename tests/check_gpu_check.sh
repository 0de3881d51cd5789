#!/usr/bin/env bash
# scripts/gpu_check.sh tests, on a fake GPU machine: a test binary that dies before printing anything
# (or exits 77, every case skipped) must fail the check; binaries that pass must pass it.
#   tests/check_gpu_check.sh WORK
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$1
rm -rf "$work" && mkdir -p "$work/carry/bin" "$work/carry/lib" "$work/path"
: >"$work/carry/lib/libplaceholder.so"
fake() {  # fake NAME BODY: an executable shell script
    printf '#!/bin/sh\n%s\n' "$2" >"$1" && chmod +x "$1"
}
fake "$work/path/nvidia-smi" 'echo "GPU 0: a fake NVIDIA GPU"'
fake "$work/carry/bin/blocklstm" 'echo "CUDA: a fake device"; echo "demo: loss falls"'
fake "$work/carry/bin/blocklstm_cli_test" 'echo "[  PASSED  ] 1 test."'
fake "$work/carry/bin/seq_lengths_test" 'echo "[  PASSED  ] 1 test."'
fake "$work/carry/bin/thread_safety_test" 'echo "[  PASSED  ] 1 test."'
fake "$work/carry/bin/tf_golden_test" 'echo "[  PASSED  ] 1 test."'
# check NAME EXPECTED VARIANTS-TEST-BODY: gpu_check.sh tests must exit EXPECTED (0 or non-zero).
check() {
    fake "$work/carry/bin/variants_test" "$3"
    local out
    out=$(PATH=$work/path:$PATH GPU_CARRY=$work/carry OUT=$work/out-$1 "$root/scripts/gpu_check.sh" tests 2>&1)
    local rc=$?
    if { [ "$2" = 0 ] && [ $rc -ne 0 ]; } || { [ "$2" != 0 ] && [ $rc -eq 0 ]; }; then
        echo "gpu_check.sh tests with a variants_test that $1: expected $([ "$2" = 0 ] && echo success || echo failure), got exit $rc:"
        echo "$out"
        exit 1
    fi
    echo "a variants_test that $1: gpu_check.sh tests exits $rc, as it must"
}
check "passes" 0 'echo "[  PASSED  ] 3 tests."'
check "dies before printing" 1 'kill -SEGV $$'
check "fails to load, on stderr" 1 'echo "error while loading shared libraries: libblocklstm.so.0" >&2; exit 127'
check "skips every case (exit 77)" 1 'echo "[  SKIPPED ] 3 tests"; exit 77'

# session: where the packed build finds no CUDA device it runs no part, says so and fails at once,
# its archive of logs written all the same.
fake "$work/carry/bin/blocklstm" 'echo "CUDA: no device (no CUDA driver (libcuda.so.1 not found))"'
out=$(PATH=$work/path:$PATH GPU_CARRY=$work/carry OUT=$work/out-session "$root/scripts/gpu_check.sh" session 60 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! grep -q "nothing run" <<<"$out" || grep -q '^== ' <<<"$out" ||
    [ ! -f "$work/out-session/session_logs.tgz" ]; then
    echo "gpu_check.sh session without a CUDA device: expected a failure at once, saying so, no part run and session_logs.tgz written; got exit $rc:"
    echo "$out"
    exit 1
fi
echo "a packed build that finds no CUDA device: gpu_check.sh session exits $rc at once, as it must"

# ab: each cell's medians of the two packs, and B's over A's.
mkdir -p "$work/carry-b/bin" "$work/carry-b/lib"
: >"$work/carry-b/lib/libplaceholder.so"
fake "$work/carry/bin/blocklstm" 'echo "median_ms=2.0 gflops=1"'
fake "$work/carry-b/bin/blocklstm" 'echo "median_ms=1.0 gflops=2"'
out=$(AB_SHAPES='10,2,4' AB_DTYPES=float32 GPU_CARRY=$work/carry OUT=$work/out-ab \
      "$root/scripts/gpu_check.sh" ab "$work/carry-b" 2 2>&1)
if ! grep -q -F '| BlockLSTMGrad | 10,2,4 | float32 | no | 2.0 2.0 | 1.0 1.0 | 0.50 |' "$work/out-ab/ab.md" 2>/dev/null; then
    echo "gpu_check.sh ab: expected the row of A's 2.0 ms and B's 1.0 ms (0.50) in ab.md; got:"
    echo "$out"
    exit 1
fi
echo "gpu_check.sh ab: B / A of two packs' medians, as it must"
