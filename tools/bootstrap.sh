#!/usr/bin/env bash
# Takes a fresh Debian machine to a built blocklstm, then runs what was asked:
#   tools/bootstrap.sh demo    install what is missing, build, run `blocklstm demo`
#   tools/bootstrap.sh test    install what is missing, build, run the whole test suite (ctest)
#   tools/bootstrap.sh build   install what is missing and build
# Re-running on a built tree only rebuilds what changed: packages are checked, not reinstalled.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
action=${1:-build}
build_dir=${BLOCKLSTM_BUILD_DIR:-$root/build}
venv=$root/.venv

# Debian packages (bookworm versions pinned in the README): compiler, fmt, GoogleTest, Google
# Benchmark, and PoCL (OpenCL on the CPU), which runs the GPU schedules' OpenCL twins in the tests.
apt_packages=(g++ libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev python3 pocl-opencl-icd)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# PyPI toolchain: Halide 21 (C++ headers, libHalide, CMake package), CMake >= 3.28, Ninja.
stamp=$venv/.requirements
if ! cmp -s tools/requirements.txt "$stamp" 2>/dev/null; then
    echo "bootstrap: installing the toolchain into .venv (tools/requirements.txt)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r tools/requirements.txt
    cp tools/requirements.txt "$stamp"
fi
export PATH=$venv/bin:$PATH
halide_dir=$("$venv/bin/python" -c 'import halide, os; print(os.path.join(os.path.dirname(halide.__file__), "lib64", "cmake"))')

if [ ! -f "$build_dir/build.ninja" ]; then
    cmake -G Ninja -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_MAKE_PROGRAM="$venv/bin/ninja" -DCMAKE_PREFIX_PATH="$halide_dir"
fi
jobs=$(nproc)
cmake --build "$build_dir" -j "$jobs"

case "$action" in
    build) ;;
    demo) "$build_dir/tools/blocklstm" demo ;;
    test) cd "$build_dir" && ctest --output-on-failure -j "$jobs" ;;
    *) echo "usage: tools/bootstrap.sh [build|demo|test]" >&2; exit 2 ;;
esac
