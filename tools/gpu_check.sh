#!/usr/bin/env bash
# The GPU checks, built here (no GPU needed) and run on a lent GPU machine (the `device` tool):
#   tools/gpu_check.sh pack          here: copy the binaries the checks need into gpu-carry/
#   tools/gpu_check.sh run [--quick] there: the GPU tests, then the cuDNN benchmark
#                                    (tools/peers/gpu_bench.py); logs and tables go to $OUT
#                                    (or gpu-carry/results)
# A device call: carry ["gpu-carry"], command "tools/gpu_check.sh run".
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
carry=$root/gpu-carry
build=${BLOCKLSTM_BUILD_DIR:-$root/build}

case "${1:-}" in
pack)
    rm -rf "$carry" && mkdir -p "$carry/lib" "$carry/bin"
    cp -a "$build"/runtime/libblocklstm.so* "$carry/lib/"
    cp "$build/tools/blocklstm" "$carry/bin/"
    for t in variants_test bad_input_test thread_safety_test; do cp "$build/tests/$t" "$carry/bin/"; done
    cp "$build/tests/cli/blocklstm_cli_test" "$carry/bin/"
    du -sh "$carry"
    ;;
run)
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$carry/lib:${LD_LIBRARY_PATH:-}
    export BLOCKLSTM_CLI=$carry/bin/blocklstm
    nvidia-smi -L
    status=0
    # Every CUDA variant against the float64 reference and the CPU result; the CLI on the GPU.
    "$carry/bin/variants_test" --gtest_filter='*cuda*:VariantTable.*' 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[  |SKIP|Failure|exception" || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    "$carry/bin/blocklstm_cli_test" --gtest_filter='*Cuda*:*cuda*' 2>&1 | tee -a "$out/gpu_tests.log" | grep -E "^\[  |SKIP|Failure" || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    "$carry/bin/blocklstm" demo --device cuda 2>&1 | tee "$out/gpu_demo.log" | tail -12
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    shift
    python3 tools/peers/gpu_bench.py --blocklstm "$carry/bin/blocklstm" --out "$out" "$@" || status=1
    exit $status
    ;;
*)
    echo "usage: tools/gpu_check.sh pack | run [--quick]" >&2
    exit 2
    ;;
esac
