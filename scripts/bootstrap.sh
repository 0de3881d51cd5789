#!/usr/bin/env bash
# Takes a fresh Debian machine to a built blocklstm, then runs what was asked:
#   scripts/bootstrap.sh demo    install what is missing, build, run `blocklstm demo`
#   scripts/bootstrap.sh test    install what is missing, build, run the whole test suite: ctest on
#                              build/, the sanitizer pass (runtime, tool and tests under ASan and
#                              UBSan, build-sanitize/), the thread-safety suite under TSan
#                              (build-tsan/), then the fuzz targets (build-fuzz/)
#   scripts/bootstrap.sh build   install what is missing and build
#   scripts/bootstrap.sh fuzz [SECONDS]   build and run only the fuzz targets (default 30 s each)
#   scripts/bootstrap.sh install PREFIX   build the library and the tool without the tests (and so
#                              without the tests' check targets) in build-release/, install to PREFIX
# Re-running on a built tree only rebuilds what changed: packages are checked, not reinstalled.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# install's PREFIX as the caller meant it, before the cd below.
if [ "${1:-}" = install ] && [ -n "${2:-}" ]; then set -- install "$(realpath -m -- "$2")"; fi
cd "$root"
action=${1:-build}
build_dir=${BLOCKLSTM_BUILD_DIR:-$root/build}
venv=$root/.venv
jobs=$(nproc)

# Debian packages: compiler, fmt, CLI11 (the tool's arguments); but for `install` (the library
# and tool alone) GoogleTest, Python's headers (the extension) and PoCL (OpenCL on the CPU), which
# runs the GPU schedules' OpenCL twins in the tests; for `test` and `fuzz` also clang with its
# libFuzzer runtime.
apt_packages=(g++ libfmt-dev libcli11-dev python3)
case "$action" in install) ;; *) apt_packages+=(libgtest-dev libgmock-dev python3-dev pocl-opencl-icd) ;; esac  # tests, Python
case "$action" in test | fuzz) apt_packages+=(clang-14 libclang-rt-14-dev) ;; esac
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
if ! cmp -s scripts/requirements.txt "$stamp" 2>/dev/null; then
    echo "bootstrap: installing the toolchain into .venv (scripts/requirements.txt)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
    cp scripts/requirements.txt "$stamp"
fi
export PATH=$venv/bin:$PATH
halide_dir=$("$venv/bin/python" -c 'import halide, os; print(os.path.join(os.path.dirname(halide.__file__), "lib64", "cmake"))')

# The Python package's extension (python/) is built into build/python with the venv's Python.
python_options="-DBLOCKLSTM_PYTHON=ON -DPython_EXECUTABLE=$venv/bin/python"
# For `test`: torch, for the PyTorch suites (PyPI's Linux wheel brings the CUDA libraries: about
# 5.4 GB and 3.5 min on a fresh machine), installed while the kernels build, which need none of it
# (a download, mostly: the build's two jobs keep the cores); waited for before the tests.
test_requirements_pid=""
if [ "$action" = test ] && ! cmp -s python/requirements-test.txt "$venv/.requirements-test"; then
    echo "bootstrap: installing the Python test requirements into .venv (python/requirements-test.txt), beside the build"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt \
        > "$venv/.requirements-test.log" 2>&1 &
    test_requirements_pid=$!
fi
wait_for_test_requirements() {
    [ -n "$test_requirements_pid" ] || return 0
    if ! wait "$test_requirements_pid"; then
        cat "$venv/.requirements-test.log" >&2
        echo "bootstrap: installing python/requirements-test.txt failed" >&2
        return 1
    fi
    test_requirements_pid=""
    cp python/requirements-test.txt "$venv/.requirements-test"
}

# configure_and_build DIR [-DNAME=VALUE...]: configures DIR once, and again when its cache holds
# another value of an option given (a tree configured with the tests or Python off, say), then
# builds what changed (of the targets in $build_targets when set, else everything).
configure_and_build() {
    local dir=$1 option stale=""
    shift
    for option in "$@"; do
        option=${option#-D}
        grep -q -x -E "${option%%=*}(:[A-Z]+)?=${option#*=}" "$dir/CMakeCache.txt" 2>/dev/null || stale=$option
    done
    if [ ! -f "$dir/build.ninja" ] || [ -n "$stale" ]; then
        [ -f "$dir/build.ninja" ] && echo "bootstrap: $dir is configured without $stale: configuring it again"
        cmake -G Ninja -S "$root" -B "$dir" -DCMAKE_MAKE_PROGRAM="$venv/bin/ninja" \
            -DCMAKE_PREFIX_PATH="$halide_dir" "$@"
    fi
    cmake --build "$dir" -j "$jobs" ${build_targets:+--target $build_targets}
}

# run_suites DIR LABEL...: ctest in DIR, after checking that it has tests of every LABEL (a suite
# left out of the build fails the run rather than passing unseen); no test at all is an error.
run_suites() {
    local dir=$1 label count
    shift
    for label in "$@"; do
        count=$(cd "$dir" && ctest -N -L "^$label\$" | sed -n 's/^Total Tests: //p')
        if [ "${count:-0}" -eq 0 ]; then
            echo "bootstrap: $dir has no tests labelled $label: that suite is not built there" >&2
            return 1
        fi
    done
    (cd "$dir" && ctest --output-on-failure --no-tests=error -j "$jobs" ${ctest_args[@]+"${ctest_args[@]}"})
}

# The fuzz targets (tests/fuzz, built with clang against build/'s libblocklstm), each for
# $1 seconds from the seed corpus in tests/fuzz/corpus plus tests/fuzz/regressions (crashes
# found earlier). New inputs go to build-fuzz/corpus, crashes to build-fuzz/crashes.
fuzz() {
    local seconds=$1 fuzz_dir=$root/build-fuzz
    if [ ! -f "$fuzz_dir/build.ninja" ]; then
        cmake -G Ninja -S "$root/tests/fuzz" -B "$fuzz_dir" -DCMAKE_MAKE_PROGRAM="$venv/bin/ninja" \
            -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DBLOCKLSTM_LIBRARY="$build_dir/runtime/libblocklstm.so"
    fi
    cmake --build "$fuzz_dir" -j "$jobs"
    for target in npy run_inputs; do
        local corpus=${target%_inputs}
        mkdir -p "$fuzz_dir/corpus/$corpus" "$fuzz_dir/crashes"
        local seeds=("$root/tests/fuzz/corpus/$corpus")
        [ -d "$root/tests/fuzz/regressions/$corpus" ] && seeds+=("$root/tests/fuzz/regressions/$corpus")
        echo "bootstrap: fuzzing fuzz_$target for ${seconds} s"
        "$fuzz_dir/fuzz_$target" -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
            -artifact_prefix="$fuzz_dir/crashes/$target-" "$fuzz_dir/corpus/$corpus" "${seeds[@]}" \
            > "$fuzz_dir/fuzz_$target.log" 2>&1 || {
            tail -n 60 "$fuzz_dir/fuzz_$target.log"
            echo "bootstrap: fuzz_$target failed; the input is in $fuzz_dir/crashes (add it to tests/fuzz/regressions/$corpus once fixed)" >&2
            return 1
        }
        grep -E "^stat::number_of_executed_units|^Done" "$fuzz_dir/fuzz_$target.log" || true
    done
}

case "$action" in
    build | demo) configure_and_build "$build_dir" -DCMAKE_BUILD_TYPE=Release $python_options ;;
    test) configure_and_build "$build_dir" -DCMAKE_BUILD_TYPE=Release -DBLOCKLSTM_BUILD_TESTS=ON $python_options ;;
    fuzz)
        configure_and_build "$build_dir" -DCMAKE_BUILD_TYPE=Release $python_options
        fuzz "${2:-30}"
        exit 0
        ;;
    install)
        [ -n "${2:-}" ] || { echo "usage: scripts/bootstrap.sh install PREFIX" >&2; exit 2; }
        release_dir=${BLOCKLSTM_RELEASE_BUILD_DIR:-$root/build-release}
        configure_and_build "$release_dir" -DCMAKE_BUILD_TYPE=Release -DBLOCKLSTM_BUILD_TESTS=OFF \
            -DBLOCKLSTM_CPU_CHECK_TARGETS=
        cmake --install "$release_dir" --prefix "$2"
        exit 0
        ;;
    *) echo "usage: scripts/bootstrap.sh [build|demo|test|fuzz [SECONDS]|install PREFIX]" >&2; exit 2 ;;
esac

# The suites (ctest labels) the test command must find in a build tree: the kernel suites, which
# also run once per CPU target (cpu_targets), and the golden and CLI ones.
suites="reference variants finite_diff tf_cases bad_input thread_safety ops golden cli"
cpu_suites=cpu_targets

case "$action" in
    demo) "$build_dir/tools/blocklstm" demo ;;
    test)
        wait_for_test_requirements
        echo "bootstrap: CPU targets (ctest runs every kernel suite once per target this CPU runs):"
        "$build_dir/tools/blocklstm" list | sed -n '/^CPU targets/,/^CPU target in use/p'
        # The test requirements are installed: a torch that fails to import fails the Python suites.
        export BLOCKLSTM_REQUIRE_TORCH=1
        ctest_args=()
        run_suites "$build_dir" $suites $cpu_suites harness python consumer gpu_schedules

        # The sanitizer pass: the same suites, with the runtime, the tool and the tests built with
        # ASan and UBSan, over kernels for one CPU target and without CUDA (nothing runs it here).
        # The sanitizers see the C++, not the generated kernels, so the pass links build/'s
        # (BLOCKLSTM_KERNELS_FROM) instead of generating them again. consumer.find_package cannot
        # run there: it links the sanitized library into an unsanitized program, and ASan must be
        # the first library a program loads.
        echo "bootstrap: sanitizer pass (ASan + UBSan; skipped there: consumer.find_package, an unsanitized program, and the tuner)"
        # The trees below link build/'s kernels, unless build/ was configured with tuning tables
        # of its own (BLOCKLSTM_TUNING): its kernels are then not the checked-in tables' that these
        # trees' one target reads, and they generate their own.
        kernels_from=$build_dir
        grep -q -E '^BLOCKLSTM_TUNING(:[A-Z]+)?=.' "$build_dir/CMakeCache.txt" && kernels_from=""
        sanitize_dir=${BLOCKLSTM_SANITIZE_BUILD_DIR:-$root/build-sanitize}
        # The tuner is left out (BLOCKLSTM_BUILD_TUNER=OFF): its end-to-end runs took 80 s, 79 s and
        # 22 s under ASan, their time the search's kernels compiling inside libHalide, which is not
        # sanitized, and its build a minute; it is a developer's tool, not what applications link,
        # and its search and table code stays under ASan in the TuneSearch tests.
        configure_and_build "$sanitize_dir" -DCMAKE_BUILD_TYPE=Debug \
            -DBLOCKLSTM_SANITIZE=address,undefined -DBLOCKLSTM_CUDA=OFF -DBLOCKLSTM_BUILD_TUNER=OFF \
            -DBLOCKLSTM_CPU_TARGETS=sse41 -DBLOCKLSTM_CPU_CHECK_TARGETS= -DBLOCKLSTM_KERNELS_FROM="$kernels_from"
        ctest_args=(-E '^consumer\.')
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            run_suites "$sanitize_dir" $suites harness gpu_schedules

        # ThreadSanitizer over the thread-safety suite (threads sharing inputs and the host cache,
        # the thread count changed between calls) and the thread pool's test: the runtime and the
        # suite built with TSan over build/'s kernels for one CPU target; only the suite is built.
        # TSan sees the runtime's own C++, not the generated kernels; Halide's thread pool orders
        # its threads with atomics TSan cannot see, so its reports are suppressed (tests/tsan.supp).
        echo "bootstrap: ThreadSanitizer pass (the thread_safety suite, build-tsan/)"
        tsan_dir=${BLOCKLSTM_TSAN_BUILD_DIR:-$root/build-tsan}
        build_targets="thread_safety_test thread_pool_test" configure_and_build "$tsan_dir" -DCMAKE_BUILD_TYPE=Debug \
            -DBLOCKLSTM_SANITIZE=thread -DBLOCKLSTM_CUDA=OFF -DBLOCKLSTM_OPENCL_CHECK=OFF \
            -DBLOCKLSTM_BUILD_TOOLS=OFF -DBLOCKLSTM_CPU_TARGETS=sse41 -DBLOCKLSTM_CPU_CHECK_TARGETS= \
            -DBLOCKLSTM_KERNELS_FROM="$kernels_from"
        # thread_pool.halide_pool is left out: there every loop runs on Halide's pool, whose
        # ordering TSan cannot see (above), and a task's stack data reads as racing with the next;
        # so are the loops on OpenMP's threads (libgomp is not built with TSan either).
        ctest_args=(-L '^thread_safety$' -E '^thread_pool\.(halide|openmp)_pool$|^ThreadPool\.(RunsOnOpenMPThreadsWhenChosen|OneTeamRunsEveryLoopOfACall|OneTeamMemberHeldUntilTheCallEndsLeavesTheTeam)$|^Threads\.ThreadPoolChoice$')
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp \
            run_suites "$tsan_dir" thread_safety

        fuzz "${BLOCKLSTM_FUZZ_SECONDS:-30}"
        ;;
esac
