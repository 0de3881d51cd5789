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
