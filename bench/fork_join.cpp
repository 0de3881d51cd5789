// What one parallel loop of the ops' thread pool (runtime/src/thread_pool.cpp) costs beyond its
// tasks: a sequence op forks two or three loops a time step, so at small batches (T,B,I=H 50,8,128:
// 14 us a step) their fork and join are a measurable part of the call (docs/performance.md).
// Each loop here has `tasks` tasks that each spin for `ns` nanoseconds; "ideal" is the tasks' work
// split evenly over the pool's threads.
//   hi=$(.venv/bin/python -c 'import halide, os; print(os.path.join(os.path.dirname(halide.__file__), "include"))')
//   g++ -O2 -std=c++20 -I. -I"$hi" bench/fork_join.cpp runtime/src/thread_pool.cpp -o /tmp/fork_join -lpthread -ldl
//   /tmp/fork_join [threads]          # default 2
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "runtime/src/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

int task_ns = 0;

int spin_task(void *, int, uint8_t *) {
    const auto until = Clock::now() + std::chrono::nanoseconds(task_ns);
    while (Clock::now() < until) {
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    if (threads < 1) {
        std::fprintf(stderr, "usage: fork_join [threads >= 1]\n");
        return 2;
    }
    blocklstm::detail::set_pool_threads(threads);
    for (const int tasks : {2, 8, 16})
        for (const int ns : {0, 250, 1000}) {
            task_ns = ns;
            constexpr int kWarm = 2000, kTimed = 20000;
            for (int i = 0; i < kWarm; ++i) blocklstm::detail::pool_do_par_for(nullptr, spin_task, 0, tasks, nullptr);
            const auto t0 = Clock::now();
            for (int i = 0; i < kTimed; ++i) blocklstm::detail::pool_do_par_for(nullptr, spin_task, 0, tasks, nullptr);
            const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kTimed;
            const double ideal = tasks * ns / 1000.0 / threads;
            std::printf("%2d tasks of %4d ns on %d threads: %.2f us a loop, ideal %.2f, beyond it %.2f\n", tasks, ns,
                        threads, us, ideal, us - ideal);
        }
    return 0;
}
