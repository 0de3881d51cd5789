#!/usr/bin/env bash
# The GPU checks, built here (no GPU needed) and run on a machine with an NVIDIA GPU, to which
# the checkout is copied with the packed binaries:
#   tools/gpu_check.sh pack          here: copy the binaries the checks need into gpu-carry/
#   tools/gpu_check.sh run [--quick] there: the GPU tests, then the cuDNN benchmark
#                                    (tools/peers/gpu_bench.py); logs and tables go to $OUT
#                                    if set, else gpu-carry/results
#   tools/gpu_check.sh pack-tune     here: the tuner and its libHalide (xz, about 45 MB) into
#                                    gpu-carry-tune/ (kept apart from gpu-carry/, which stays small)
#   tools/gpu_check.sh tune [ARGS]   there: `blocklstm tune --device cuda` on the GPU (default
#                                    --minutes 7; ARGS override it), the table and its log to
#                                    $OUT if set, else gpu-carry-tune/results
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
carry=$root/gpu-carry
tune_carry=$root/gpu-carry-tune
build=${BLOCKLSTM_BUILD_DIR:-$root/build}

# carry_lib BINARY SONAME-PREFIX DIR: copies the library BINARY loads under that name into DIR,
# under its soname (xz-compressed when XZ=1): what a bare GPU machine may lack.
carry_lib() {
    local line path
    line=$(ldd "$1" | awk -v l="$2" '$1 ~ "^"l {print $1, $3; exit}')
    path=${line#* }
    [ -f "$path" ] || { echo "gpu_check: $(basename "$1")'s $2 not found (ldd: '$line')" >&2; exit 1; }
    if [ "${XZ:-0}" = 1 ]; then xz -T0 -6 -c "$path" >"$3/${line%% *}.xz"
    else cp -L "$path" "$3/${line%% *}"; fi
}

case "${1:-}" in
pack)
    set -e
    rm -rf "$carry" && mkdir -p "$carry/lib" "$carry/bin"
    cp -a "$build"/runtime/libblocklstm.so.* "$carry/lib/"
    cp "$build/tools/blocklstm" "$carry/bin/"
    carry_lib "$build/tools/blocklstm" libfmt.so "$carry/lib"  # Debian's fmt 9: not in a CUDA image
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
    nvidia-smi --query-gpu=driver_version --format=csv,noheader | sed 's/^/driver /'  # CUDA 13 needs >= 580
    # cuBLAS: the build's libcublas.so.13 (CUDA 13, driver >= 580) is too large to carry; a machine
    # without the toolkit's copy has the one of the nvidia-cublas Python package.
    if [ -z "${BLOCKLSTM_CUBLAS:-}" ] && ! ldconfig -p | grep -q 'libcublas\.so\.13 '; then
        # nvidia-cublas 13 installs under nvidia/cu13/lib, earlier ones under nvidia/cublas/lib.
        pip_cublas=$(python3 -c 'import glob, os, nvidia; print(next(iter(sorted(p for r in nvidia.__path__ for p in glob.glob(os.path.join(r, "**", "libcublas.so.13"), recursive=True))), ""))' 2>/dev/null)
        [ -f "${pip_cublas:-}" ] && export BLOCKLSTM_CUBLAS=$pip_cublas
    fi
    "$carry/bin/blocklstm" list | sed -n '/^CUDA:/,/^CUDA batched products/p'
    status=0
    # Every CUDA variant against the float64 reference and the CPU result; the CLI on the GPU.
    # CUDA_LAUNCH_BLOCKING=1: each kernel's fault is reported by its own launch, not by a later
    # call (the tests also synchronise after every use and stop at the first lost context).
    CUDA_LAUNCH_BLOCKING=1 "$carry/bin/variants_test" --gtest_filter='*cuda*:VariantTable.*' 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[  |SKIP|Failure|exception" || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    CUDA_LAUNCH_BLOCKING=1 "$carry/bin/blocklstm_cli_test" --gtest_filter='*Cuda*:*cuda*' 2>&1 | tee -a "$out/gpu_tests.log" | grep -E "^\[  |SKIP|Failure" || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    "$carry/bin/blocklstm" demo --device cuda 2>&1 | tee "$out/gpu_demo.log" | tail -12
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    shift
    python3 tools/peers/gpu_bench.py --blocklstm "$carry/bin/blocklstm" --out "$out" "$@" || status=1
    exit $status
    ;;
pack-tune)
    set -e
    rm -rf "$tune_carry" && mkdir -p "$tune_carry/lib" "$tune_carry/bin"
    cp "$build/tools/blocklstm-tune" "$tune_carry/bin/"
    # The libraries a bare machine may lack: libHalide (JIT, with LLVM's PTX back end) and fmt.
    XZ=1 carry_lib "$build/tools/blocklstm-tune" libHalide.so "$tune_carry/lib"
    carry_lib "$build/tools/blocklstm-tune" libfmt.so "$tune_carry/lib"
    du -sh "$tune_carry"
    ;;
tune)
    out=${OUT:-$tune_carry/results}
    mkdir -p "$out"
    lib=$(mktemp -d)
    for f in "$tune_carry"/lib/*; do
        case "$f" in *.xz) xz -dc "$f" >"$lib/$(basename "$f" .xz)" ;; *) cp "$f" "$lib/" ;; esac
    done
    nvidia-smi -L
    shift
    # The tuner's defaults first, so that ARGS (e.g. --minutes 20, --families ...) override them.
    LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-} "$tune_carry/bin/blocklstm-tune" --device cuda --minutes 7 \
        --out "$out/cuda.json" --log "$out/cuda.json.csv" "$@" 2>&1 | tee "$out/tune.log"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    echo "usage: tools/gpu_check.sh pack | run [--quick] | pack-tune | tune [blocklstm tune options]" >&2
    exit 2
    ;;
esac
