// The CPU kernels' thread pool (thread_pool.cpp): installed as Halide's do_par_for when the
// library loads (kernels.cpp), unless BLOCKLSTM_THREAD_POOL=halide; the tuner runs its
// JIT-compiled kernels on it too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "HalideRuntime.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#else
#include <thread>
#endif

namespace blocklstm::detail {

// One turn of a spin-wait.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// A parallel loop on the pool (halide_do_par_for's contract). A loop forked from inside a task,
// or while another thread's loop holds the pool, runs on the fallback: Halide's default pool
// where install_thread_pool installed it, else serially in the calling thread.
int pool_do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure);

// Runs `first` and `second` at once, each on one thread of the loops (the caller's and a worker's,
// or two members of the OpenMP team) with every loop it forks run serially on that thread, and
// returns when both are done, rethrowing the exception of the first that threw. Where a loop
// forked now would run on one thread, or on Halide's pool (another thread's loop holds the pool),
// `first`, then `second`.
void run_side_by_side(const std::function<void()> &first, const std::function<void()> &second);

// The threads a loop forked now from this thread would run on (1 inside a task).
int loop_threads();

// Whether BLOCKLSTM_THREAD_POOL=halide is set.
bool thread_pool_switched_off();

// Threads of the pool's loops, the caller included; 0: HL_NUM_THREADS where set, else one per core.
void set_pool_threads(int threads);

// Whether install_thread_pool installed the pool (false: the kernels run on Halide's default one).
bool own_thread_pool();

// On: the loops run on the threads of an OpenMP runtime already loaded in the process (why: in
// thread_pool.cpp); returns its file name, or "" (and nothing changes) when none is loaded.
// Off: back to the pool. Only where install_thread_pool installed the pool.
std::string use_openmp_threads(bool on);

// Runs `body`, an op call on the CPU: where the loops run on OpenMP threads, all of the call's
// loops on one team of them, entered once (one GOMP_parallel a call instead of one a loop), whose
// members spin between the loops until the body returns; elsewhere `body` as it is. The body's
// exception comes back out. Inside a task, or inside another such call, `body` as it is.
void run_in_one_team(const std::function<void()> &body);

// The OpenMP library the loops run on, or "" when they run on the pool.
std::string openmp_library_in_use();

// Called by install_thread_pool with Halide's default do_par_for.
void set_pool_fallback(halide_do_par_for_t halide_default);

// Installs pool_do_par_for as halide_do_par_for, with Halide's default one as the fallback for
// the loops the pool does not take; false (nothing installed) with BLOCKLSTM_THREAD_POOL=halide.
// Inline: only a program that links a Halide runtime calls it (the tuner's libHalide has none).
inline bool install_thread_pool() {
    if (thread_pool_switched_off()) return false;
    set_pool_fallback(halide_set_custom_do_par_for(pool_do_par_for));
    return true;
}

}  // namespace blocklstm::detail
