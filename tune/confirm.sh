#!/usr/bin/env bash
# Confirms a tuned table on a build with it (the kernels compiled ahead of time, as shipped;
# `blocklstm tune` times the ops with its kernels JIT-compiled): builds the library with the table
# (the table's CPU target only, no CUDA, no tests: about 3 minutes on 2 cores), then times
# BlockLSTM and BlockLSTMGrad (plain and with peepholes) with that build and with the current one
# in pairs of calls in one process at each shape, both pinned to the table's CPU target.
#   tune/confirm.sh TABLE.json [--shapes 'T,B,I,H;...'] [--pairs N] [--threads N]
#                         [--build DIR] [--tuned-build DIR]
# --build: the current build (default build/); --tuned-build: where to build with the table
# (default build-tuned/; an existing build there is updated); --pairs: pairs of calls at
# 100,64,512,512 (default 10), more at smaller shapes. Prints each build's median time per op and
# shape and tuned / current: below 1 the tuned table is faster.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '7,8p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
[ $# -ge 1 ] || usage
[ -f "$1" ] || { echo "confirm.sh: TABLE: no such file: $1" >&2; exit 2; }
table_file=$(realpath "$1")
shift
shapes="100,64,512,512;200,16,256,256;100,32,256,256;50,8,128,128"
pairs=10
threads=$(nproc)
build=$root/build
tuned_build=$root/build-tuned
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "confirm.sh: $1 needs a value" >&2; usage; }
    case "$1" in
    --shapes) shapes=$2 ;;
    --pairs) pairs=$2 ;;
    --threads) threads=$2 ;;
    --build) build=$(realpath "$2") ;;
    --tuned-build) tuned_build=$(realpath -m "$2") ;;
    *) echo "confirm.sh: unknown argument '$1'" >&2; usage ;;
    esac
    shift 2
done
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "confirm.sh: --pairs: expected a positive integer, got '$pairs'" >&2; exit 2; }
[ -x "$build/tools/blocklstm" ] || { echo "confirm.sh: --build: no built tool at $build/tools/blocklstm" >&2; exit 2; }

python=$root/.venv/bin/python
[ -x "$python" ] || python=python3
table=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["table"])' "$table_file")
# The CPU target that runs the table (the first of schedules/cpu_targets.json's targets whose table
# it is), which both builds are pinned to.
target=$("$python" -c 'import json, sys
print(next((t["name"] for t in json.load(open(sys.argv[1]))["targets"] if t["table"] == sys.argv[2]), ""))' \
    "$root/schedules/cpu_targets.json" "$table")
[ -n "$target" ] || { echo "confirm.sh: $table_file is table '$table', which no CPU target of schedules/cpu_targets.json runs" >&2; exit 2; }
pin=$target

# The tuned build: the current build's Halide, the table's target only.
if [ ! -f "$tuned_build/CMakeCache.txt" ]; then
    prefix=$(sed -n 's/^CMAKE_PREFIX_PATH:[A-Z]*=//p' "$build/CMakeCache.txt")
    PATH=$root/.venv/bin:$PATH cmake -G Ninja -S "$root" -B "$tuned_build" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" -DBLOCKLSTM_CPU_TARGETS="$target" -DBLOCKLSTM_CUDA=OFF \
        -DBLOCKLSTM_OPENCL_CHECK=OFF -DBLOCKLSTM_BUILD_TESTS=OFF -DBLOCKLSTM_TUNING="$table_file" >/dev/null
else
    PATH=$root/.venv/bin:$PATH cmake "$tuned_build" -DBLOCKLSTM_TUNING="$table_file" \
        -DBLOCKLSTM_CPU_TARGETS="$target" >/dev/null
fi
echo "confirm.sh: building $tuned_build with $table_file"
if ! PATH=$root/.venv/bin:$PATH cmake --build "$tuned_build" --target blocklstm_cli >"$tuned_build/confirm-build.log" 2>&1; then
    tail -20 "$tuned_build/confirm-build.log" >&2
    echo "confirm.sh: the build with $table_file failed (log: $tuned_build/confirm-build.log)" >&2
    exit 1
fi

# Both libraries in one process (bench/builds_ab.cpp): the same call through the current one and
# then the tuned one, the order swapped every pair, an op's ratio the geometric mean of the two
# orders' median ratios. Builds timed in processes of their own, the least of 3 alternations,
# moved a row by up to 15 % on a 2-vCPU VM (docs/tuning.md, 2026-12-08): the pairs meet the same
# spells of the machine. Each build's library copied apart, as builds_ab loads each once.
bench_log=$tuned_build/confirm-bench.log
ab=$tuned_build/builds_ab
cp "$(readlink -f "$build/runtime/libblocklstm.so")" "$tuned_build/ab_current.so"
cp "$(readlink -f "$tuned_build/runtime/libblocklstm.so")" "$tuned_build/ab_tuned.so"
if ! "${CXX:-c++}" -O2 -std=c++17 -I"$root/runtime/include" "$root/bench/builds_ab.cpp" -L"$build/runtime" -lblocklstm \
        -ldl -Wl,-rpath,"$build/runtime" -o "$ab" 2>"$bench_log"; then
    cat "$bench_log" >&2
    echo "confirm.sh: compiling bench/builds_ab.cpp failed" >&2
    exit 1
fi
echo "Tuned ($tuned_build) against current ($build), $target, $threads threads, in pairs of calls (medians, ms;"
echo "ratio: tuned / current, the geometric mean of the two orders' median ratios):"
printf '  %-24s %-16s %10s %10s %8s %6s\n' op "T,B,I,H" current tuned ratio pairs
read -r -a shape_list <<<"${shapes//;/ }"  # separated by ';' or spaces, as `blocklstm tune` takes them
for op in BlockLSTM BlockLSTMGrad "BlockLSTMGrad peephole"; do
    for shape in "${shape_list[@]}"; do
        IFS=',' read -r T B I H <<<"$shape"
        # --pairs at 100,64,512,512, more where a call is smaller (up to 25 times: 50,8,128,128)
        n=$("$python" -c 'import sys; p, T, B, I, H = map(int, sys.argv[1:]); print(p * min(25, max(1, 100 * 64 * 512 * 1024 // (T * B * H * (I + H)))))' \
            "$pairs" "$T" "$B" "$I" "$H")
        kind=forward
        [ "$op" = BlockLSTM ] || kind=backward
        peephole=0
        [ "$op" = "BlockLSTMGrad peephole" ] && peephole=1
        if ! line=$(BLOCKLSTM_CPU_TARGET=$pin AB_INPUT=$I AB_THREADS=$threads AB_PEEPHOLE=$peephole \
                    "$ab" "$tuned_build/ab_current.so" "$tuned_build/ab_tuned.so" "$kind" "$T" "$B" "$H" "$n" 2>"$bench_log"); then
            cat "$bench_log" >&2
            echo "confirm.sh: builds_ab $kind $T $B $H failed" >&2
            exit 1
        fi
        # "...: A <ms> ms, B <ms> ms; ... geometric mean <ratio>"
        read -r cur tun ratio <<<"$(sed -E 's/.*: A ([0-9.]+) ms, B ([0-9.]+) ms;.*geometric mean ([0-9.]+)$/\1 \2 \3/' <<<"$line")"
        printf '  %-24s %-16s %10.3f %10.3f %7.3fx %6d\n' "$op" "$shape" "$cur" "$tun" "$ratio" "$n"
    done
done
