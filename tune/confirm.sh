#!/usr/bin/env bash
# Confirms a tuned table on the real ops, since `blocklstm tune`'s end-to-end figures are
# estimates from kernels timed one at a time: builds the library with the table (the table's CPU
# target only, no CUDA, no tests: about 3 minutes on 2 cores), then times BlockLSTM and
# BlockLSTMGrad (plain and with peepholes) with that build and with the current one, alternated,
# at each shape, both pinned to the table's CPU target.
#   tune/confirm.sh TABLE.json [--shapes 'T,B,I,H;...'] [--rounds N] [--threads N]
#                         [--build DIR] [--tuned-build DIR]
# --build: the current build (default build/); --tuned-build: where to build with the table
# (default build-tuned/; an existing build there is updated). Prints each build's best time per
# op and shape and tuned / current: below 1 the tuned table is faster.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '7,8p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
[ $# -ge 1 ] || usage
[ -f "$1" ] || { echo "confirm.sh: TABLE: no such file: $1" >&2; exit 2; }
table_file=$(realpath "$1")
shift
shapes="100,64,512,512;200,16,256,256;100,32,256,256;50,8,128,128"
rounds=3
threads=$(nproc)
build=$root/build
tuned_build=$root/build-tuned
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "confirm.sh: $1 needs a value" >&2; usage; }
    case "$1" in
    --shapes) shapes=$2 ;;
    --rounds) rounds=$2 ;;
    --threads) threads=$2 ;;
    --build) build=$(realpath "$2") ;;
    --tuned-build) tuned_build=$(realpath -m "$2") ;;
    *) echo "confirm.sh: unknown argument '$1'" >&2; usage ;;
    esac
    shift 2
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "confirm.sh: --rounds: expected a positive integer, got '$rounds'" >&2; exit 2; }
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

bench_log=$tuned_build/confirm-bench.log
best_ms() {  # best_ms BIN OP ARGS...: the fastest call of one `blocklstm bench`
    "$1" bench "${@:2}" --threads "$threads" --cpu-target "$pin" 2>"$bench_log" | awk '/^  min /{print $2}'
}
echo "Tuned ($tuned_build) against current ($build), $target, $threads threads, best of $rounds alternations, ms:"
printf '  %-24s %-16s %10s %10s %8s\n' op "T,B,I,H" current tuned ratio
read -r -a shape_list <<<"${shapes//;/ }"  # separated by ';' or spaces, as `blocklstm tune` takes them
for op in BlockLSTM BlockLSTMGrad "BlockLSTMGrad --use-peephole"; do
    for shape in "${shape_list[@]}"; do
        IFS=',' read -r T B I H <<<"$shape"
        args=($op --time "$T" --batch "$B" --input "$I" --cell "$H")
        cur=inf tun=inf
        for _ in $(seq "$rounds"); do
            c=$(best_ms "$build/tools/blocklstm" "${args[@]}") || c=
            [ -n "$c" ] && t=$(best_ms "$tuned_build/tools/blocklstm" "${args[@]}") || t=
            if [ -z "$c" ] || [ -z "$t" ]; then
                cat "$bench_log" >&2
                echo "confirm.sh: blocklstm bench ${args[*]} failed" >&2
                exit 1
            fi
            read -r cur tun <<<"$("$python" -c 'import sys; a = sys.argv[1:]; print(min(float(a[0]), float(a[2])), min(float(a[1]), float(a[3])))' "$cur" "$tun" "$c" "$t")"
        done
        "$python" -c 'import sys; o, s, c, t = sys.argv[1:]; print("  %-24s %-16s %10.3f %10.3f %7.3fx" % (o, s, float(c), float(t), float(t) / float(c)))' \
            "${op/ --use-peephole/ peephole}" "$shape" "$cur" "$tun"
    done
done
