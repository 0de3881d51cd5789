#!/usr/bin/env bash
# The CPU peer benchmark: blocklstm's BlockLSTM / BlockLSTMGrad (V1 and V2, peephole on and off,
# float32 and float16) against oneDNN's LSTM, TensorFlow's tf.raw_ops.BlockLSTM / BlockLSTMGrad
# and PyTorch's nn.LSTM, on this machine, interleaved, 2 threads each. See bench.py for the method.
#
#   bench/run.sh            the full run: shapes T,B,I=H 100,64,512; 200,16,256; 100,32,256;
#                       50,8,128 and the small batches 100,1,512; 100,8,256; 500,1,128, 5 rounds. Writes docs/results/latest.{md,csv,png}
#                       and updates docs/performance.md's table between <!-- peers:begin --> and
#                       <!-- peers:end --> when both lines are there.
#   bench/run.sh --quick    a check that the harness works: the smallest shape, 1 round
#                       (unless --shapes / --rounds say otherwise);
#                       writes build/peers/quick.{md,csv,png} (git-ignored).
#   bench/run.sh [--quick] [bench.py options]   e.g. --rounds 3, --skip torch,
#                       --shapes '100,64,512', --dtypes float32, --threads 2.
#                       While tuning: bench/run.sh --quick --skip tf,torch,ours_v2
#                       --shapes '100,64,512;50,8,128' --rounds 3 (ours vs oneDNN only).
#
# It installs what it needs when missing: Debian's libdnnl-dev (oneDNN 2.6.3; apt-get, as root or
# through sudo), a virtual environment bench/.venv (git-ignored) with the pinned
# bench/requirements.txt (tensorflow-cpu, torch, numpy, matplotlib: about 7 GB, as PyPI's
# Linux torch wheel brings the CUDA libraries), and the blocklstm build (scripts/bootstrap.sh build
# when build/ is not configured yet). It rebuilds `blocklstm` (incrementally) and the oneDNN
# harness before each run, so a schedule change is measured by simply running it again.
# Environment: BLOCKLSTM_BUILD_DIR (default build/), BLOCKLSTM_JOBS (build jobs, default 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
peers=$root/bench
build_dir=${BLOCKLSTM_BUILD_DIR:-$root/build}
jobs=${BLOCKLSTM_JOBS:-2}
venv=$peers/.venv

quick=0
for a in "$@"; do [ "$a" = "--quick" ] && quick=1; done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

# ---- oneDNN (Debian) ---------------------------------------------------------------------------
if ! dpkg-query -W -f='${Status}' libdnnl-dev 2>/dev/null | grep -q "install ok installed"; then
    echo "peers: installing libdnnl-dev (oneDNN)"
    if ! apt-cache show libdnnl-dev >/dev/null 2>&1; then $sudo apt-get update -qq; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libdnnl-dev g++ >/dev/null \
        || { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libdnnl-dev g++ >/dev/null; }
fi

# ---- Python peers (PyPI) -----------------------------------------------------------------------
stamp=$venv/.requirements
if ! cmp -s "$peers/requirements.txt" "$stamp" 2>/dev/null; then
    echo "peers: installing bench/requirements.txt into bench/.venv (several GB, once)"
    python3 -c 'import venv, ensurepip' 2>/dev/null || {
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    }
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$peers/requirements.txt"
    cp "$peers/requirements.txt" "$stamp"
fi

# ---- blocklstm and the oneDNN harness ----------------------------------------------------------
if [ ! -f "$build_dir/build.ninja" ]; then
    echo "peers: $build_dir is not configured: scripts/bootstrap.sh build"
    BLOCKLSTM_BUILD_DIR=$build_dir "$root/scripts/bootstrap.sh" build
fi
echo "peers: building blocklstm (incremental)"
"$root/.venv/bin/cmake" --build "$build_dir" --target blocklstm_cli -j "$jobs" >/dev/null
mkdir -p "$build_dir/peers"
onednn=$build_dir/peers/onednn_lstm
if [ ! -x "$onednn" ] || [ "$peers/onednn_lstm.cpp" -nt "$onednn" ]; then
    echo "peers: building the oneDNN harness"
    g++ -O2 -std=c++17 -fopenmp -Wall -Wextra "$peers/onednn_lstm.cpp" -ldnnl -o "$onednn"
fi

# ---- run ---------------------------------------------------------------------------------------
if [ $quick -eq 1 ]; then
    out=(--out "$build_dir/peers" --name quick)
else
    out=(--out "$root/docs/results" --name latest --readme "$root/docs/performance.md")
fi
cmdline="bench/run.sh"  # as a shell takes it back: an argument with ';' or spaces in quotes
for a in "$@"; do
    case $a in *[\;\ \&\|\*\?]*) cmdline+=" '$a'" ;; *) cmdline+=" $a" ;; esac
done
exec "$venv/bin/python" "$peers/bench.py" --cli "$build_dir/tools/blocklstm" --onednn "$onednn" \
    --python "$venv/bin/python" "${out[@]}" --command "$cmdline" "$@"
