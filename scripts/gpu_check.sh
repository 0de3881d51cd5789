#!/usr/bin/env bash
# The GPU checks, built here (no GPU needed) and run on a machine with an NVIDIA GPU, to which
# the checkout is copied with the packed binaries:
#   scripts/gpu_check.sh pack          here: copy the binaries the checks need into gpu-carry/
#   scripts/gpu_check.sh run [--quick] there: the GPU tests, then the cuDNN benchmark
#                                    (bench/gpu_bench.py); logs and tables go to $OUT
#                                    if set, else gpu-carry/results
#   scripts/gpu_check.sh session [SECONDS]  there: one GPU session's checks in order of priority
#                                    within SECONDS (default 420): tests, the Python suite's CUDA
#                                    cases, the cuDNN benchmark (the default path and cuBLASLt
#                                    timed as graphs), sanitize on the split kernels, the module
#                                    against nn.LSTM; a part that would not fit is skipped, saying
#                                    so; nothing run where the build finds no CUDA device; the
#                                    parts' logs in session_logs.tgz under $OUT (or
#                                    gpu-carry/results), the two tables beside it
#   scripts/gpu_check.sh tests         there: the GPU tests alone (run's first half)
#   scripts/gpu_check.sh bench [ARGS]  there: the cuDNN benchmark alone (run's second half; ARGS
#                                    go to bench/gpu_bench.py)
#   scripts/gpu_check.sh cpu           there: the CPU test suites on the GPU machine's host CPU, once
#                                    per CPU target it can run (its AVX-512, where ours has none)
#   scripts/gpu_check.sh python [ARGS]  there: the Python package built against the packed library
#                                    (python/ on its own: nanobind, CMake and Ninja of the machine's
#                                    python3), then python/tests with pytest ARGS, torch's CUDA cases
#                                    included, with BLOCKLSTM_CUDA_SEQ_LENGTHS=1
#   scripts/gpu_check.sh module-bench [ARGS]  there: blocklstm.torch.LSTM against nn.LSTM (cuDNN)
#                                    on the GPU (bench/torch_lstm_bench.py --device cuda ARGS), the
#                                    package built as `python` builds it
#   scripts/gpu_check.sh pack-ab TABLE|KNOB=VALUE [DIR]  here: a second build with the tuning
#                                    table TABLE (or the CUDA table with KNOB so), its tool and
#                                    variants_test packed into DIR (gpu-carry-ab/)
#   scripts/gpu_check.sh ab DIR [ROUNDS]  there: this pack against the one in DIR (an A/B build),
#                                    `blocklstm bench` alternately (AB_* choose what), to $OUT/ab.md
#   scripts/gpu_check.sh variants [FILTER]  there: the CUDA variant cases alone (FILTER, default
#                                    all), e.g. of an A/B build (GPU_CARRY)
#   scripts/gpu_check.sh sanitize [FILTER]  there: the CUDA variant tests under compute-sanitizer
#                                    (FILTER: those cases only, memcheck and initcheck)
#   scripts/gpu_check.sh profile [T,B,H]  there: each kernel's GPU time in one call (ncu) against
#                                    the call's wall time
#   scripts/gpu_check.sh cpu-peers [ARGS]  there: ours against oneDNN on the host CPU
#                                    (bench/bench.py ARGS), with the packed oneDNN harness
#   scripts/gpu_check.sh pack-tune     here: the tuner and its libHalide (xz, about 45 MB) into
#                                    gpu-carry-tune/ (kept apart from gpu-carry/, which stays small)
#   scripts/gpu_check.sh tune [ARGS]   there: `blocklstm tune --device cuda` on the GPU (default
#                                    --minutes 7; ARGS override it), the table and its log to
#                                    $OUT if set, else gpu-carry-tune/results
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
carry=${GPU_CARRY:-$root/gpu-carry}  # GPU_CARRY: another packed build (an A/B run)
tune_carry=$root/gpu-carry-tune
build=${BLOCKLSTM_BUILD_DIR:-$root/build}

# carry_lib BINARY SONAME-PREFIX DIR: copies the library BINARY loads under that name into DIR,
# under its soname (xz-compressed when XZ=1): what a bare GPU machine may lack.
carry_lib() {
    local line path
    line=$(ldd "$1" | awk -v l="$2" '$1 ~ "^"l {print $1, $3; exit}')
    path=${line#* }
    [ -f "$path" ] || { echo "gpu_check: $(basename "$1")'s $2 not found (ldd: '$line')" >&2; exit 1; }
    if [ "${XZ:-0}" = 1 ]; then xz -T0 -9e -c "$path" >"$3/${line%% *}.xz"
    else cp -L "$path" "$3/${line%% *}"; fi
}

# run_logged LOG PATTERN COMMAND...: runs COMMAND with its output appended to LOG, shows the lines
# matching PATTERN, and returns COMMAND's exit status, also when it dies before printing anything
# (a loader error, an early crash) and so when no line matches.
run_logged() {
    local log=$1 pattern=$2 part rc
    shift 2
    part=$(mktemp)
    "$@" >"$part" 2>&1
    rc=$?
    cat "$part" >>"$log"
    grep -E "$pattern" "$part"
    rm -f "$part"
    [ "$rc" -eq 0 ] || echo "gpu_check: $(basename "$1") exited with status $rc" | tee -a "$log"
    return "$rc"
}

# gpu_tests OUT: every CUDA variant against the float64 reference and the CPU result, the CLI on
# the GPU, the demo on the GPU; returns non-zero when any of them failed or skipped everything
# (exit 77: no CUDA device, on a machine that should have one).
gpu_tests() {
    local out=$1 status=0
    # bfloat16 on CUDA: built, off by default until a GPU run shows it right; the tests run it.
    export BLOCKLSTM_CUDA_BF16=1
    : >"$out/gpu_tests.log"
    # CUDA_LAUNCH_BLOCKING=1: each kernel's fault is reported by its own launch, not by a later
    # call (the tests also synchronise after every use and stop at the first lost context).
    CUDA_LAUNCH_BLOCKING=1 run_logged "$out/gpu_tests.log" "^\[  |SKIP|Failure|exception" \
        "$carry/bin/variants_test" --gtest_filter='*cuda*:VariantTable.*' || status=1
    # cuBLASLt's candidates timed as CUDA graphs (off by default until a GPU run compares it).
    echo "variants_test, split steps' cases, BLOCKLSTM_CUDA_LT_TIMING=graph:" | tee -a "$out/gpu_tests.log"
    BLOCKLSTM_CUDA_LT_TIMING=graph run_logged "$out/gpu_tests.log" "^\[  (PASSED|FAILED|SKIPPED) |Failure|exception|warning" \
        "$carry/bin/variants_test" --gtest_filter='*gates__cuda*:seq_bwd_reduce_split__cuda*:CudaGraphs.*' || status=1
    # Threads on streams of their own, fused steps and split steps as graphs: the bits of each call alone.
    run_logged "$out/gpu_tests.log" "^\[  (PASSED|FAILED|SKIPPED) |Failure" \
        "$carry/bin/thread_safety_test" --gtest_filter='*cuda*' || status=1
    # TF's golden cases on the GPU, fused and split steps, within TF's own rounding budget.
    BLOCKLSTM_TF_GOLDEN_DIR=$root/tests/data/tf run_logged "$out/gpu_tests.log" "^\[  (PASSED|FAILED|SKIPPED) |Failure" \
        "$carry/bin/tf_golden_test" --gtest_filter='*cuda*' || status=1
    CUDA_LAUNCH_BLOCKING=1 run_logged "$out/gpu_tests.log" "^\[  |SKIP|Failure" \
        "$carry/bin/blocklstm_cli_test" --gtest_filter='*Cuda*:*cuda*' || status=1
    # seq_lengths on CUDA tensors, with the switch that keeps them off until this run shows them right
    BLOCKLSTM_CUDA_SEQ_LENGTHS=1 CUDA_LAUNCH_BLOCKING=1 run_logged "$out/gpu_tests.log" "^\[  |SKIP|Failure" \
        "$carry/bin/seq_lengths_test" --gtest_filter='*Cuda*' || status=1
    : >"$out/gpu_demo.log"
    run_logged "$out/gpu_demo.log" "." "$carry/bin/blocklstm" demo --device cuda >/dev/null || status=1
    tail -12 "$out/gpu_demo.log"
    # Last, what has run on a GPU before (a run short of time loses these first): the same
    # cases again with each switch of the default CUDA path off, the time loops without CUDA
    # graphs (by default the cases, which share shapes, capture and update graphs rather than run
    # directly), and the split steps' products on cublasGemmEx instead of cuBLASLt.
    echo "variants_test, CUDA cases, BLOCKLSTM_CUDA_GRAPHS=0:" | tee -a "$out/gpu_tests.log"
    BLOCKLSTM_CUDA_GRAPHS=0 run_logged "$out/gpu_tests.log" "^\[  (PASSED|FAILED|SKIPPED) |Failure|exception|warning" \
        "$carry/bin/variants_test" --gtest_filter='*cuda*' || status=1
    echo "variants_test, split steps' cases, BLOCKLSTM_CUDA_LT=0:" | tee -a "$out/gpu_tests.log"
    BLOCKLSTM_CUDA_LT=0 run_logged "$out/gpu_tests.log" "^\[  (PASSED|FAILED|SKIPPED) |Failure|exception|warning" \
        "$carry/bin/variants_test" --gtest_filter='*gates__cuda*:seq_bwd_reduce_split__cuda*:CudaGraphs.*' || status=1
    return $status
}

# cuBLAS: the build's libcublas.so.13 (CUDA 13, driver >= 580) is too large to carry; a machine
# without the toolkit's copy has the one of the nvidia-cublas Python package (and its cuBLASLt
# beside it, which the library finds there).
find_cublas() {
    if [ -z "${BLOCKLSTM_CUBLAS:-}" ] && ! ldconfig -p | grep -q 'libcublas\.so\.13 '; then
        # nvidia-cublas 13 installs under nvidia/cu13/lib, earlier ones under nvidia/cublas/lib.
        pip_cublas=$(python3 -c 'import glob, os, nvidia; print(next(iter(sorted(p for r in nvidia.__path__ for p in glob.glob(os.path.join(r, "**", "libcublas.so.13"), recursive=True))), ""))' 2>/dev/null)
        [ -f "${pip_cublas:-}" ] && export BLOCKLSTM_CUBLAS=$pip_cublas
    fi
    return 0
}

# unpack_libs DIR: the carried libraries, decompressed into a fresh folder; prints the folder.
unpack_libs() {
    local lib f
    lib=$(mktemp -d)
    for f in "$1"/lib/*; do
        case "$f" in *.xz) xz -dc "$f" >"$lib/$(basename "$f" .xz)" ;; *) cp "$f" "$lib/" ;; esac
    done
    echo "$lib"
}

case "${1:-}" in
pack)
    set -e
    rm -rf "$carry" && mkdir -p "$carry/lib" "$carry/bin"
    cp "$build/tools/blocklstm" "$carry/bin/"
    XZ=1 carry_lib "$build/tools/blocklstm" libblocklstm.so "$carry/lib"
    carry_lib "$build/tools/blocklstm" libfmt.so "$carry/lib"  # Debian's fmt 9: not in a CUDA image
    # The CPU peer benchmark's oneDNN harness (bench/run.sh builds it) and Debian's oneDNN.
    if [ -x "$build/peers/onednn_lstm" ]; then
        cp "$build/peers/onednn_lstm" "$carry/bin/"
        XZ=1 carry_lib "$build/peers/onednn_lstm" libdnnl.so "$carry/lib"
        carry_lib "$build/peers/onednn_lstm" libgomp.so "$carry/lib"
    fi
    for t in variants finite_diff tf_cases bad_input thread_safety ops seq_lengths; do cp "$build/tests/${t}_test" "$carry/bin/"; done
    cp "$build/tests/cli/blocklstm_cli_test" "$carry/bin/"
    cp "$build/tests/golden/tf_golden_test" "$carry/bin/"
    du -sh "$carry"
    ;;
pack-ab)
    # here: the B side of an A/B on the GPU (a tuning table's knob, say): a second build, in
    # ${AB_BUILD:-build-ab}/, with the tuning table(s) $2 (BLOCKLSTM_TUNING; or KNOB=VALUE: the
    # checked-in CUDA table with that knob so) and otherwise the configuration of $build (its CPU
    # targets, CUDA on), only the tool and variants_test, packed into ${3:-gpu-carry-ab}/ for `ab`
    # and, as GPU_CARRY, `variants` there.
    set -e
    dir=${3:-$root/gpu-carry-ab}
    ab_build=${AB_BUILD:-$root/build-ab}
    mkdir -p "$ab_build"
    if [[ ${2:-} =~ ^([a-z_0-9]+)=([0-9]+)$ ]]; then
        python3 - "$root/schedules/tuned/cuda.json" "$ab_build/cuda.json" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))  # a knob no schedule reads: the build refuses the table, naming it
table["knobs"][sys.argv[3]] = int(sys.argv[4])
table["notes"][sys.argv[3]] = "the B side of an A/B (scripts/gpu_check.sh pack-ab)"
json.dump(table, open(sys.argv[2], "w"), indent=2)
PY
        set -- "$1" "$ab_build/cuda.json" "${3:-}"
    fi
    [ -f "${2:-}" ] || { echo "gpu_check: pack-ab TABLE.json|KNOB=VALUE [DIR]: no such table '${2:-}'" >&2; exit 2; }
    table=$(realpath "$2")
    cached() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
    cmake=$(cached CMAKE_COMMAND)  # the CMake that configured $build (the toolchain's, >= 3.28)
    "$cmake" -G Ninja -S "$root" -B "$ab_build" -DCMAKE_MAKE_PROGRAM="$(cached CMAKE_MAKE_PROGRAM)" \
        -DCMAKE_PREFIX_PATH="$(cached CMAKE_PREFIX_PATH)" -DBLOCKLSTM_CPU_TARGETS="$(cached BLOCKLSTM_CPU_TARGETS)" \
        -DBLOCKLSTM_CPU_CHECK_TARGETS="$(cached BLOCKLSTM_CPU_CHECK_TARGETS)" -DBLOCKLSTM_CUDA=ON \
        -DBLOCKLSTM_PYTHON=OFF -DBLOCKLSTM_TUNING="$table" >/dev/null
    "$cmake" --build "$ab_build" --target blocklstm_cli variants_test
    rm -rf "$dir" && mkdir -p "$dir/lib" "$dir/bin"
    cp "$ab_build/tools/blocklstm" "$ab_build/tests/variants_test" "$dir/bin/"
    XZ=1 carry_lib "$ab_build/tools/blocklstm" libblocklstm.so "$dir/lib"
    carry_lib "$ab_build/tools/blocklstm" libfmt.so "$dir/lib"
    du -sh "$dir"
    ;;
session)
    # Few files come back ($OUT): every part's logs go into session_logs.tgz, with the two tables
    # (bench, module-bench) beside it.
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    logs=$(mktemp -d)
    budget=${2:-420}
    start=$SECONDS
    status=0
    bundle() {
        cp "$logs"/bench/gpu_latest.md "$logs"/bench/gpu_latest.csv "$logs"/module/module_bench.md "$out/" 2>/dev/null
        tar -C "$logs" -czf "$out/session_logs.tgz" .
    }
    trap bundle EXIT
    # No device, no session: say why at once (a rerun then has the time this one would have spent).
    if ! LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-} "$carry/bin/blocklstm" list >"$logs/list.log" 2>&1 ||
        ! grep -q -E '^CUDA: [1-9][0-9]* device' "$logs/list.log"; then
        nvidia-smi -L
        sed -n '/^CUDA/,$p' "$logs/list.log" | head -20
        echo "gpu_check: session: the packed build finds no CUDA device (above): nothing run"
        exit 1
    fi
    grep -E '^CUDA' "$logs/list.log"
    # part NAME LIMIT ARGS...: this script with ARGS, for at most LIMIT seconds and what is left.
    part() {
        local name=$1 limit=$2 left rc
        shift 2
        left=$((budget - (SECONDS - start)))
        if [ "$left" -lt 20 ]; then echo "== $name: skipped, ${left} s left"; return; fi
        [ "$limit" -gt "$left" ] && limit=$left
        echo "== $name (at $((SECONDS - start)) s, up to $limit s)"
        OUT=$logs/$name timeout "$limit" "$0" "$@" >"$logs/$name.log" 2>&1
        rc=$?
        [ $rc -eq 0 ] || status=1
        echo "== $name: exit $rc$([ $rc -eq 124 ] && echo ' (out of time)') at $((SECONDS - start)) s"
        grep -E '^(gpu_check|compute-sanitizer)|^\[  (PASSED|FAILED) |FAILED|passed|failed|^\| ' "$logs/$name.log" | tail -40
    }
    part tests 170 tests
    part python 110 python -k cuda --maxfail=10
    part bench 120 bench --reps 10 --paths graphs,graphs_lt_graph
    part sanitize 40 sanitize '*gates__cuda*TF_defaults_odd_sizes*:seq_bwd_reduce_split__cuda*TF_defaults_odd_sizes*:CudaGraphs.*'
    part module 60 module-bench --rounds 2
    exit $status
    ;;
run | tests | bench)
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-}
    export BLOCKLSTM_CLI=$carry/bin/blocklstm
    nvidia-smi -L
    nvidia-smi --query-gpu=driver_version --format=csv,noheader | sed 's/^/driver /'  # CUDA 13 needs >= 580
    find_cublas
    "$carry/bin/blocklstm" list | sed -n '/^CUDA:/,/^CUDA graphs/p'
    status=0
    if [ "$1" != bench ]; then
        gpu_tests "$out" || status=1
        [ "$1" = tests ] && { echo "gpu_check: GPU tests $([ $status -eq 0 ] && echo passed || echo FAILED)"; exit $status; }
    fi
    shift
    python3 bench/gpu_bench.py --blocklstm "$carry/bin/blocklstm" --out "$out" "$@" || status=1
    exit $status
    ;;
cpu)
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-}
    lscpu | grep -E '^(Model name|CPU\(s\)|Flags)' | sed -E 's/^(Flags: *).*/\1'"$(grep -o -w -E 'avx512(f|cd|dq|bw|vl|_fp16|_bf16)' /proc/cpuinfo | sort -u | tr '\n' ' ')"'/'
    "$carry/bin/blocklstm" list | sed -n '/^CPU targets/,/^CPU target in use/p'
    status=0
    logs=$(mktemp -d)  # some 30 logs, returned as one archive ($OUT returns few files)
    # Each target this CPU runs (the list's "runs here"), each suite's CPU cases pinned to it; the
    # targets side by side (a host of 16 cores), each suite's exit code in its own file.
    targets=$("$carry/bin/blocklstm" list | awk '/^CPU targets/{on=1; next} /^Tuning/{on=0} on && /runs here/{print $1}')
    for target in $targets; do
        for t in variants finite_diff tf_cases bad_input thread_safety ops; do
            BLOCKLSTM_CPU_TARGET=$target "$carry/bin/${t}_test" --gtest_filter=-*cuda* >"$logs/${target}_${t}.log" 2>&1
            echo $? >"$logs/${target}_${t}.rc"
        done &
    done
    wait
    for target in $targets; do
        for t in variants finite_diff tf_cases bad_input thread_safety ops; do
            rc=$(cat "$logs/${target}_${t}.rc")
            echo "$target $t: $(grep -E '^\[  (PASSED|FAILED) ' "$logs/${target}_${t}.log" | tr '\n' ' ')exit $rc"
            [ "$rc" -eq 0 ] || { status=1; grep -E -m5 -B2 'Failure|FAILED' "$logs/${target}_${t}.log"; }
        done
    done
    rm -f "$logs"/*.rc && tar -C "$logs" -czf "$out/cpu_logs.tgz" .
    exit $status
    ;;
python | module-bench)
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    lib=$(unpack_libs "$carry")
    export LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-}
    find_cublas
    pyb=$carry/python-build  # built once for both commands (Ninja: again only what changed)
    { cmake -S "$root/python" -B "$pyb" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
          -DBLOCKLSTM_LIBRARY="$(ls "$lib"/libblocklstm.so.* | head -1)" && cmake --build "$pyb"; } >>"$out/python_build.log" 2>&1 ||
        { tail -30 "$out/python_build.log"; echo "gpu_check: the Python package did not build"; exit 1; }
    command=$1
    shift
    # The module's CUDA path with lengths, behind that switch until this run shows it right.
    export BLOCKLSTM_CUDA_SEQ_LENGTHS=1
    if [ "$command" = module-bench ]; then
        PYTHONPATH=$pyb PYTHONUNBUFFERED=1 python3 bench/torch_lstm_bench.py --device cuda "$@" 2>&1 | tee "$out/module_bench.md"
    else
        PYTHONPATH=$pyb python3 -m pytest -q -ra -p no:cacheprovider "$root/python/tests" "$@" 2>&1 | tee "$out/python_tests.log"
    fi
    exit "${PIPESTATUS[0]}"
    ;;
ab)
    # An A/B of two packed builds (a knob of the CUDA table, say): `blocklstm bench --device cuda`
    # of each op, dtype, peephole setting and T,B,H, alternately with this pack and the one in
    # folder $2, ROUNDS ($3, default 3) times, a process each (20 calls, median ms); AB_OPS,
    # AB_DTYPES, AB_SHAPES ("T,B,H;...") and AB_PEEPHOLES ("0 1") choose. The table goes to
    # $OUT/ab.md.
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    carry_b=$2
    libs_a=$(unpack_libs "$carry") libs_b=$(unpack_libs "$carry_b")
    find_cublas
    rows=$(mktemp)
    IFS=';' read -r -a shapes <<<"${AB_SHAPES:-1024,16,768;200,16,256;100,64,512}"
    for round in $(seq "${3:-3}"); do
        for shape in "${shapes[@]}"; do
            IFS=, read -r T B H <<<"$shape"
            for op in ${AB_OPS:-BlockLSTMGrad}; do
                for dtype in ${AB_DTYPES:-float32 float16}; do
                    for peephole in ${AB_PEEPHOLES:-0}; do
                        for side in a b; do
                            if [ $side = a ]; then bin=$carry/bin/blocklstm libs=$libs_a; else bin=$carry_b/bin/blocklstm libs=$libs_b; fi
                            ms=$(LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-} "$bin" bench "$op" --time "$T" --batch "$B" --input "$H" --cell "$H" \
                                 --dtype "$dtype" --device cuda --reps 20 --warmup 3 $([ "$peephole" = 1 ] && echo --use-peephole) |
                                 sed -n 's/^median_ms=\([0-9.]*\).*/\1/p')
                            echo "$op $shape $dtype $peephole $side ${ms:-failed}" >>"$rows"
                        done
                    done
                done
            done
        done
    done
    python3 - "$rows" "$carry" "$carry_b" <<'PY' | tee "$out/ab.md"
import collections, statistics, sys
cells = collections.defaultdict(lambda: {"a": [], "b": []})
for line in open(sys.argv[1]):
    op, shape, dtype, peephole, side, ms = line.split()
    cells[(op, shape, dtype, peephole)][side].append(ms)
print(f"A = {sys.argv[2]}, B = {sys.argv[3]}: median ms of 20 calls, a process each, A and B alternately\n")
print("| op | T,B,H | dtype | peephole | A | B | B / A (medians) |\n|---|---|---|---|---|---|---|")
for (op, shape, dtype, peephole), v in cells.items():
    def med(xs):
        xs = [float(x) for x in xs if x != "failed"]
        return statistics.median(xs) if xs else float("nan")
    print(f"| {op} | {shape} | {dtype} | {'yes' if peephole == '1' else 'no'} | {' '.join(v['a'])} | {' '.join(v['b'])} | {med(v['b']) / med(v['a']):.2f} |")
PY
    ;;
variants)
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-}
    find_cublas
    : >"$out/variants.log"
    CUDA_LAUNCH_BLOCKING=1 run_logged "$out/variants.log" "^\[  (PASSED|FAILED|SKIPPED) |Failure|exception" \
        "$carry/bin/variants_test" --gtest_filter="${2:-*cuda*}"
    ;;
sanitize)
    # compute-sanitizer over the CUDA variant tests (some ten times slower): memcheck (out-of-bounds
    # and misaligned device accesses, leaks) on three shapes per kernel, racecheck on the kernel
    # with shared memory (the transpose's tile), initcheck (reads of device memory nothing wrote:
    # the workspaces are not zeroed) on one shape per kernel.
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-}
    find_cublas
    export BLOCKLSTM_CUDA_BF16=1  # the bfloat16 kernels too (gpu_tests)
    declare -A cases=([memcheck]='*cuda*TF_defaults_odd_sizes*:*cuda*multi_block_GEMMs*:*cuda*B_1_L_T*:CudaGraphs.*'
                      [racecheck]='transpose__cuda*' [initcheck]='*cuda*TF_defaults_odd_sizes*')
    tools=(memcheck racecheck initcheck)
    # A filter given (e.g. the kernels a change touched): memcheck and initcheck on those cases.
    [ -n "${2:-}" ] && cases[memcheck]=$2 && cases[initcheck]=$2 && tools=(memcheck initcheck)
    status=0
    for tool in "${tools[@]}"; do
        extra=()
        [ $tool = memcheck ] && extra=(--leak-check full)
        # Under the sanitizer every allocation moves: CudaGraphs' calls find no graph to launch again.
        BLOCKLSTM_TEST_ALLOCATIONS_MOVE=1 compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 3 \
            "$carry/bin/variants_test" --gtest_filter="${cases[$tool]}" >"$out/sanitize_$tool.log" 2>&1
        rc=$?
        echo "compute-sanitizer $tool: exit $rc; $(grep -E '^========= (ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY)' "$out/sanitize_$tool.log" | tr '\n' ' ')$(grep -E '^\[  (PASSED|FAILED) ' "$out/sanitize_$tool.log" | tr '\n' ' ')"
        [ $rc -eq 0 ] || { status=1; grep -m 20 -E '^=========' "$out/sanitize_$tool.log"; }
    done
    exit $status
    ;;
profile)
    # Where one call's time goes: each kernel's GPU time (Nsight Compute's gpu__time_duration,
    # clocks and caches as found: by default ncu locks base clocks and flushes the L2 before each
    # kernel, which made the kernels' sum 1.4-1.8x the calls' wall time on an H100) in BlockLSTM and BlockLSTMGrad at T,B,I=H (default 100,64,512), float32 and
    # float16, per call, against the call's wall time (blocklstm bench without the profiler).
    # Per call: a step kernel runs T times a call; BlockLSTMGrad's bench also runs BlockLSTM for
    # its activations, whose kernels are subtracted by name.
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-}
    IFS=, read -r T B H <<<"${2:-100,64,512}"
    for dtype in float32 float16; do
        for op in BlockLSTM BlockLSTMGrad; do
            args=(bench "$op" --time "$T" --batch "$B" --input "$H" --cell "$H" --dtype $dtype --device cuda)
            wall=$("$carry/bin/blocklstm" "${args[@]}" | sed -n 's/^median_ms=\([0-9.]*\).*/\1/p')
            ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv "$carry/bin/blocklstm" "${args[@]}" \
                --warmup 1 --reps 1 >"$out/profile_${op}_$dtype.csv" 2>/dev/null
            python3 - "$op $dtype $T,$B,$H" "$wall" "$out/profile_${op}_$dtype.csv" \
                $([ $op = BlockLSTMGrad ] && echo "$out/profile_BlockLSTM_$dtype.csv") <<'PY'
import csv, sys, collections
scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}
def kernels(path):  # name -> [launches, ms] over the whole profiled run
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    col = {n: i for i, n in enumerate(rows[0])}
    per = collections.defaultdict(lambda: [0.0, 0.0])
    for r in rows[1:]:
        k = per[r[col["Kernel Name"]][:60]]
        k[0] += 1
        k[1] += float(r[col["Metric Value"]].replace(",", "")) * scale[r[col["Metric Unit"]]]
    return per
T = int(sys.argv[1].split()[-1].split(",")[0])
def per_call(per):  # a step kernel runs T times a call: the most launched kernel counts the calls
    calls = max(c for c, t in per.values()) / T
    return {n: [c / calls, t / calls] for n, (c, t) in per.items()}, calls
per = kernels(sys.argv[3])
if len(sys.argv) > 4:  # less the forward calls that made the activations (by kernel name)
    fwd, _ = per_call(kernels(sys.argv[4]))
    step = max(fwd, key=lambda n: fwd[n][0])
    fwd_calls = per.get(step, [0, 0])[0] / T
    for name, (c, t) in fwd.items():
        if name in per:
            per[name] = [per[name][0] - c * fwd_calls, per[name][1] - t * fwd_calls]
    per = {n: v for n, v in per.items() if v[0] > 0.5}
per, calls = per_call(per)
gpu = sum(t for c, t in per.values())
n = sum(c for c, t in per.values())
wall = float(sys.argv[2])
print(f"{sys.argv[1]}: wall {wall:.3f} ms per call (median), {n:.0f} kernels, their GPU time {gpu:.3f} ms "
      f"({100 * gpu / wall:.0f} % of the wall time; {calls:.0f} calls profiled)")
for name, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[:6]:
    print(f"  {t:8.3f} ms  {c:5.0f} x {1e3 * t / c:7.1f} us  {name}")
PY
        done
    done
    ;;
cpu-peers)
    # The CPU peer benchmark (bench/bench.py: ours against oneDNN, 2 threads each) on the
    # host CPU, with the carried build; ARGS go to bench.py (e.g. --shapes, --rounds).
    out=${OUT:-$carry/results}
    mkdir -p "$out"
    [ -x "$carry/bin/onednn_lstm" ] || { echo "gpu_check: no oneDNN harness packed (bench/run.sh builds it)" >&2; exit 1; }
    export LD_LIBRARY_PATH=$(unpack_libs "$carry"):${LD_LIBRARY_PATH:-}
    shift
    python3 bench/bench.py --cli "$carry/bin/blocklstm" --onednn "$carry/bin/onednn_lstm" \
        --out "$out" --name cpu_peers --skip tf,torch,ours_v2 --command "scripts/gpu_check.sh cpu-peers $*" "$@"
    ;;
pack-tune)
    set -e
    rm -rf "$tune_carry" && mkdir -p "$tune_carry/lib" "$tune_carry/bin"
    cp "$build/tools/blocklstm-tune" "$tune_carry/bin/"
    # The libraries a bare machine may lack: libHalide (JIT, with LLVM's PTX back end) and fmt.
    XZ=1 carry_lib "$build/tools/blocklstm-tune" libHalide.so "$tune_carry/lib"
    XZ=1 carry_lib "$build/tools/blocklstm-tune" libblocklstm.so "$tune_carry/lib"  # the CPU targets
    carry_lib "$build/tools/blocklstm-tune" libfmt.so "$tune_carry/lib"
    # Halide's autoscheduler plugins (--baseline autoschedulers), found beside libHalide.
    halide_lib=$(ldd "$build/tools/blocklstm-tune" | awk '/libHalide/{print $3}')
    cp "$(dirname "$(readlink -f "$halide_lib")")"/libautoschedule_*.so "$tune_carry/lib/"
    du -sh "$tune_carry"
    ;;
tune)
    out=${OUT:-$tune_carry/results}
    mkdir -p "$out"
    lib=$(unpack_libs "$tune_carry")
    nvidia-smi -L
    shift
    # The tuner's defaults first, so that ARGS (e.g. --minutes 20, --families ...) override them.
    LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-} "$tune_carry/bin/blocklstm-tune" --device cuda --minutes 7 \
        --out "$out/cuda.json" --log "$out/cuda.json.csv" "$@" 2>&1 | tee "$out/tune.log"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    echo "usage: scripts/gpu_check.sh pack | run [--quick] | session [SECONDS] | tests | bench [ARGS] | python [ARGS] | module-bench [ARGS] | pack-ab TABLE|KNOB=VALUE [DIR] | ab DIR [ROUNDS] | variants [FILTER] | sanitize [FILTER] | profile [T,B,H] | cpu | cpu-peers [ARGS] | pack-tune | tune [blocklstm tune options]" >&2
    exit 2
    ;;
esac
