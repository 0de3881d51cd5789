#!/usr/bin/env bash
# A/B of the CPU batched GEMM schedules of git revisions (and of the working tree, "."),
# interleaved in one process, with oneDNN's sgemm beside them (bench/gemm_ab.cpp):
#
#   bench/gemm_ab.sh [--rounds N] REV... [-- 'tn M N K'...]
#   e.g. bench/gemm_ab.sh HEAD~1 .       (default shapes: the products of BlockLSTMGrad and
#                                              of the input projection at the benchmark shapes)
#
# Each revision's generator is built in a git worktree under build/gemm_ab/ (git-ignored) and run
# for gemm_tn / gemm_nn, float32, for BLOCKLSTM_AB_TARGET (default x86-64-linux-avx2-fma-f16c), with
# the revision's table of that target's vector width (BLOCKLSTM_AB_TABLE names another).
# GEMM_AB_THREADS=1 times one core (default 2).
# Needs the main build (scripts/bootstrap.sh build) for Halide's runtime, and libdnnl-dev.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BLOCKLSTM_BUILD_DIR:-$root/build}
work=$root/build/gemm_ab
target=${BLOCKLSTM_AB_TARGET:-x86-64-linux-avx2-fma-f16c}-no_runtime
export PATH=$root/.venv/bin:$PATH
rounds=4
revs=()
shapes=()
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --) shift; shapes=("$@"); break ;;
        *) revs+=("$1"); shift ;;
    esac
done
[ ${#revs[@]} -gt 0 ] || { echo "usage: $0 [--rounds N] REV... [-- 'tn M N K'...]" >&2; exit 2; }
if [ ${#shapes[@]} -eq 0 ]; then  # T,B,I=H 100,64,512 / 100,32,256 / 50,8,128
    shapes=("tn 512 2048 6400" "nn 6400 512 2048" "tn 256 1024 3200" "nn 3200 256 1024"
            "tn 128 512 400" "nn 400 128 512" "nn 400 512 128")
fi
runtime=$build_dir/generators/libblocklstm_halide_runtime.a
[ -f "$runtime" ] || { echo "gemm_ab: no $runtime; run scripts/bootstrap.sh build first" >&2; exit 1; }
mkdir -p "$work"
libs=()
for rev in "${revs[@]}"; do
    if [ "$rev" = "." ]; then
        name=worktree; src=$root
    else
        sha=$(git -C "$root" rev-parse --short "$rev"); name=$sha; src=$work/src-$sha
        [ -d "$src" ] || git -C "$root" worktree add -f --detach "$src" "$sha" >/dev/null
    fi
    gen_build=$work/build-$name
    if [ ! -f "$gen_build/build.ninja" ]; then
        cmake -S "$src" -B "$gen_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKLSTM_CUDA=OFF \
            -DBLOCKLSTM_BUILD_TESTS=OFF -DBLOCKLSTM_BUILD_TOOLS=OFF >"$work/cmake-$name.log" 2>&1 \
            || { tail -20 "$work/cmake-$name.log"; exit 1; }
    fi
    ninja -C "$gen_build" blocklstm_generators >"$work/ninja-$name.log" 2>&1 \
        || { tail -20 "$work/ninja-$name.log"; exit 1; }
    out=$work/gen-$name
    mkdir -p "$out"
    # The revision's own tuning table for the target's vector width (as generators/CMakeLists.txt
    # picks it), as the generator params `tuning_table` and `tuning` (knob:value,...).
    case $target in *avx512*) table=x86-64-avx512 ;; *avx2*) table=x86-64-avx2 ;; *) table=x86-64-sse41 ;; esac
    table=${BLOCKLSTM_AB_TABLE:-$table}  # another table of the same vector width, e.g. x86-64-avx512-zen4
    knobs=$(python3 -c 'import json, sys; k = json.load(open(sys.argv[1]))["knobs"]; print(",".join(f"{n}:{k[n]}" for n in sorted(k)))' \
        "$src/schedules/tuned/$table.json")
    for form in tn nn; do
        "$gen_build/generators/blocklstm_generators" -g gemm -f gemm_$form -e object -o "$out" \
            target="$target" dtype=float32 form=$form tuning_table=$table tuning="$knobs"
    done
    g++ -shared -o "$work/$name.so" "$out/gemm_tn.o" "$out/gemm_nn.o"
    libs+=("$work/$name.so")
done
hi=$(python3 -c 'import halide, os; print(os.path.join(os.path.dirname(halide.__file__), "include"))')
g++ -O2 -std=c++17 -I"$hi" "$root/bench/gemm_ab.cpp" -Wl,--whole-archive "$runtime" \
    -Wl,--no-whole-archive -rdynamic -ldnnl -lpthread -ldl -o "$work/gemm_ab"
threads=${GEMM_AB_THREADS:-2}
echo "gemm_ab: $(nproc) cores, $threads threads each, best of $rounds interleaved rounds"
GEMM_AB_THREADS=$threads OMP_NUM_THREADS=$threads "$work/gemm_ab" "$rounds" "${libs[@]}" "${shapes[@]}"
