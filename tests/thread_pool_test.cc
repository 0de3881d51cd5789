// The CPU kernels' thread pool (runtime/src/thread_pool.cpp), built into this program with a Halide
// runtime of its own and driven through halide_do_par_for as the kernels call it: every task of
// every loop runs exactly once, for any loop size and thread count, from several callers at once,
// from inside a task, after the workers went to sleep; a task's error comes back. Also run under
// ThreadSanitizer (scripts/bootstrap.sh test), which sees the pool's atomics, and with
// BLOCKLSTM_THREAD_POOL=openmp, where every loop runs on the OpenMP runtime this program links
// (GNU libgomp), as in a process with PyTorch; an op call's loops on one OpenMP team.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include <omp.h>

#include "HalideRuntime.h"
#include "runtime/src/thread_pool.h"
#include "runtime/src/zero_ranges.h"

namespace blocklstm::detail {
extern void (*team_member_before_serve)();  // thread_pool.cpp, built here with its test hooks
}

namespace {

using blocklstm::detail::own_thread_pool;

const bool installed = blocklstm::detail::install_thread_pool();  // as the library does when it loads

// As blocklstm::set_num_threads: the pool and Halide's (which runs loops the pool passes on).
void set_pool_threads(int threads) {
    blocklstm::detail::set_pool_threads(threads);
    halide_set_num_threads(threads);
}

// Counts how often each task index of [min, min + size) ran.
struct Counts {
    int min;
    std::vector<std::atomic<int>> runs;
    Counts(int min, int size) : min(min), runs(size) {}
    static int task(void *, int i, uint8_t *closure) {
        auto *c = reinterpret_cast<Counts *>(closure);
        c->runs.at(i - c->min).fetch_add(1);
        return 0;
    }
    ::testing::AssertionResult each_once() const {
        for (size_t i = 0; i < runs.size(); ++i)
            if (runs[i].load() != 1)
                return ::testing::AssertionFailure() << "task " << min + int(i) << " ran " << runs[i].load() << " times";
        return ::testing::AssertionSuccess();
    }
};

int par_for(Counts &c) {
    return halide_do_par_for(nullptr, Counts::task, c.min, int(c.runs.size()), reinterpret_cast<uint8_t *>(&c));
}

// Eight loops of 16 tasks, each forked from a task of an outer loop: every task once.
::testing::AssertionResult nested_loops_each_once() {
    struct Outer {
        std::vector<std::unique_ptr<Counts>> inner;
        static int task(void *, int i, uint8_t *closure) {
            return par_for(*reinterpret_cast<Outer *>(closure)->inner.at(i));
        }
    } outer;
    for (int i = 0; i < 8; ++i) outer.inner.push_back(std::make_unique<Counts>(0, 16));
    if (const int r = halide_do_par_for(nullptr, Outer::task, 0, 8, reinterpret_cast<uint8_t *>(&outer)))
        return ::testing::AssertionFailure() << "the outer loop returned " << r;
    for (int i = 0; i < 8; ++i)
        if (auto once = outer.inner[i]->each_once(); !once) return once << " (the loop of outer task " << i << ")";
    return ::testing::AssertionSuccess();
}

bool pool_is(const char *name) {
    const char *env = std::getenv("BLOCKLSTM_THREAD_POOL");
    return env && std::strcmp(env, name) == 0;
}
bool switched_off() { return pool_is("halide"); }

TEST(ThreadPool, InstalledUnlessSwitchedOff) {
    EXPECT_EQ(installed, !switched_off());
    EXPECT_EQ(own_thread_pool(), !switched_off()) << "BLOCKLSTM_THREAD_POOL=" << (switched_off() ? "halide" : "(unset)");
    // BLOCKLSTM_THREAD_POOL=openmp: the OpenMP runtime this program links, found when the pool was installed
    EXPECT_EQ(blocklstm::detail::openmp_library_in_use().rfind("libgomp", 0) == 0, pool_is("openmp"))
        << "OpenMP library in use: '" << blocklstm::detail::openmp_library_in_use() << "'";
}

TEST(ThreadPool, EveryTaskRunsOnceForAnySizeAndThreadCount) {
    for (int threads : {1, 2, 3, 8, 0}) {
        set_pool_threads(threads);
        for (int size : {0, 1, 2, 3, 7, 8, 9, 64, 1000})
            for (int min : {0, -5, 17}) {
                SCOPED_TRACE("threads " + std::to_string(threads) + ", tasks [" + std::to_string(min) + ", " +
                             std::to_string(min + size) + ")");
                Counts c(min, size);
                ASSERT_EQ(par_for(c), 0);
                EXPECT_TRUE(c.each_once());
            }
    }
    set_pool_threads(0);
}

// Many short loops back to back: the publish / unpublish protocol, 20,000 times (under TSan too).
TEST(ThreadPool, ManyShortLoopsBackToBack) {
    set_pool_threads(3);
    for (int k = 0; k < 20000; ++k) {
        Counts c(k % 5, 1 + k % 4);
        ASSERT_EQ(par_for(c), 0);
        ASSERT_TRUE(c.each_once()) << "loop " << k;
    }
    set_pool_threads(0);
}

// A loop forked from inside a task (Halide nests parallel loops where a schedule asks) runs whole.
TEST(ThreadPool, NestedLoopsRunEveryTask) {
    set_pool_threads(2);
    EXPECT_TRUE(nested_loops_each_once());
    set_pool_threads(0);
}

// Callers on several threads at once: one holds the pool, the others run on Halide's.
TEST(ThreadPool, ConcurrentCallersEachRunTheirTasks) {
    set_pool_threads(2);
    std::atomic<int> failures{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t)
        callers.emplace_back([&failures, t] {
            for (int k = 0; k < 300; ++k) {
                Counts c(t, 1 + (k + t) % 33);
                if (par_for(c) != 0 || !c.each_once()) failures.fetch_add(1);
            }
        });
    for (auto &c : callers) c.join();
    EXPECT_EQ(failures.load(), 0) << "loops with a task run other than once";
    set_pool_threads(0);
}

// The first nonzero result of a task is the loop's result (the pool may skip the tasks after it).
TEST(ThreadPool, TaskErrorIsReturned) {
    set_pool_threads(2);
    struct Failing {
        Counts counts{0, 40};
        static int task(void *uc, int i, uint8_t *closure) {
            auto *f = reinterpret_cast<Failing *>(closure);
            Counts::task(uc, i, reinterpret_cast<uint8_t *>(&f->counts));
            return i == 13 ? -7 : 0;
        }
    } f;
    EXPECT_EQ(halide_do_par_for(nullptr, Failing::task, 0, 40, reinterpret_cast<uint8_t *>(&f)), -7);
    EXPECT_EQ(f.counts.runs[13].load(), 1);
    for (int i = 0; i < 40; ++i) EXPECT_LE(f.counts.runs[i].load(), 1) << "task " << i;
    set_pool_threads(0);
}

// After the workers have gone to sleep (they spin 100 µs after a loop), a loop still gets them:
// each of its two tasks waits for the other to start, so it completes only with two threads on it.
TEST(ThreadPool, SleepingWorkersWakeForTheNextLoop) {
    set_pool_threads(2);
    struct Meet {
        std::atomic<int> arrived{0};
        std::atomic<bool> timed_out{false};
        static int task(void *, int, uint8_t *closure) {
            auto *m = reinterpret_cast<Meet *>(closure);
            m->arrived.fetch_add(1);
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (m->arrived.load() < 2)
                if (std::chrono::steady_clock::now() > until) {
                    m->timed_out = true;
                    break;
                }
            return 0;
        }
    };
    for (int round = 0; round < 3; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        Meet m;
        ASSERT_EQ(halide_do_par_for(nullptr, Meet::task, 0, 2, reinterpret_cast<uint8_t *>(&m)), 0);
        EXPECT_FALSE(m.timed_out.load()) << "round " << round << ": no second thread took a task within 20 s";
    }
    set_pool_threads(0);
}

// A loop's tasks on an OpenMP team: the threads that ran them, and how many ran outside a parallel
// region.
struct Team {
    std::mutex m;
    std::set<std::thread::id> ids;
    std::atomic<int> outside_openmp{0};
    static int task(void *, int, uint8_t *closure) {
        auto *t = reinterpret_cast<Team *>(closure);
        if (!omp_in_parallel()) t->outside_openmp.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // time for every member to take one
        std::lock_guard<std::mutex> lock(t->m);
        t->ids.insert(std::this_thread::get_id());
        return 0;
    }
};

// Chosen, the OpenMP threads run the loops: every task inside an OpenMP parallel region, on a team
// of set_pool_threads' size where one was set, else of OpenMP's (omp_set_num_threads), and every
// task once; switched back, none in a parallel region.
TEST(ThreadPool, RunsOnOpenMPThreadsWhenChosen) {
    if (switched_off()) GTEST_SKIP() << "BLOCKLSTM_THREAD_POOL=halide: the loops run on Halide's pool";
    ASSERT_EQ(blocklstm::detail::use_openmp_threads(true).rfind("libgomp", 0), 0u) << "the libgomp this program links";
    for (auto [pool_threads, omp_threads, want] : {std::tuple{3, 2, 3}, {0, 3, 3}, {0, 2, 2}}) {
        set_pool_threads(pool_threads);
        omp_set_num_threads(omp_threads);
        SCOPED_TRACE("set_pool_threads(" + std::to_string(pool_threads) + "), omp_set_num_threads(" +
                     std::to_string(omp_threads) + ")");
        Team team;
        ASSERT_EQ(halide_do_par_for(nullptr, Team::task, 0, 24, reinterpret_cast<uint8_t *>(&team)), 0);
        EXPECT_EQ(team.outside_openmp.load(), 0);
        EXPECT_EQ(int(team.ids.size()), want);
        Counts c(5, 1000);
        ASSERT_EQ(par_for(c), 0);
        EXPECT_TRUE(c.each_once());
    }
    blocklstm::detail::use_openmp_threads(false);
    EXPECT_EQ(blocklstm::detail::openmp_library_in_use(), "");
    Team team;
    ASSERT_EQ(halide_do_par_for(nullptr, Team::task, 0, 8, reinterpret_cast<uint8_t *>(&team)), 0);
    EXPECT_EQ(team.outside_openmp.load(), 8) << "switched back: the library's own pool";
    if (pool_is("openmp")) blocklstm::detail::use_openmp_threads(true);
    set_pool_threads(0);
}

// run_in_one_team (an op call): with the OpenMP threads chosen, the body runs in the calling thread
// as member 0 of one OpenMP team and every loop it forks runs on that team: each task inside the
// parallel region, on the team's two threads, once, over thousands of loops back to back; a nested
// call, a loop forked from a task and a task's error behave as on the pool; the body's exception
// comes back out of the call; two callers at once each get a team. Switched back, the body runs
// outside any parallel region.
TEST(ThreadPool, OneTeamRunsEveryLoopOfACall) {
    if (switched_off()) GTEST_SKIP() << "BLOCKLSTM_THREAD_POOL=halide: the loops run on Halide's pool";
    using blocklstm::detail::run_in_one_team;
    ASSERT_EQ(blocklstm::detail::use_openmp_threads(true).rfind("libgomp", 0), 0u) << "the libgomp this program links";
    set_pool_threads(2);
    const std::thread::id caller = std::this_thread::get_id();
    bool body_ran = false;
    run_in_one_team([&] {
        body_ran = true;
        EXPECT_EQ(std::this_thread::get_id(), caller) << "the body runs in the calling thread";
        EXPECT_TRUE(omp_in_parallel()) << "the body runs inside the team's parallel region";
        EXPECT_EQ(omp_get_thread_num(), 0);
        for (int k = 0; k < 5000; ++k) {
            Counts c(k % 7, k % 37);
            ASSERT_EQ(par_for(c), 0);
            ASSERT_TRUE(c.each_once()) << "loop " << k;
        }
        Team team;
        ASSERT_EQ(halide_do_par_for(nullptr, Team::task, 0, 24, reinterpret_cast<uint8_t *>(&team)), 0);
        EXPECT_EQ(team.outside_openmp.load(), 0);
        EXPECT_EQ(int(team.ids.size()), 2) << "the caller and the team's other member";
        run_in_one_team([&] {  // nested: the same team
            Counts c(0, 100);
            EXPECT_EQ(par_for(c), 0);
            EXPECT_TRUE(c.each_once()) << "a nested call's loop";
        });
        EXPECT_TRUE(nested_loops_each_once()) << "loops forked from tasks";
        auto failing = [](void *, int i, uint8_t *) { return i == 13 ? -7 : 0; };
        EXPECT_EQ(halide_do_par_for(nullptr, failing, 0, 40, nullptr), -7);
    });
    EXPECT_TRUE(body_ran);

    EXPECT_THROW(
        {
            try {
                run_in_one_team([] {
                    Counts c(0, 10);
                    par_for(c);
                    throw std::runtime_error("from the body");
                });
            } catch (const std::runtime_error &e) {
                EXPECT_STREQ(e.what(), "from the body");
                throw;
            }
        },
        std::runtime_error);

    std::atomic<int> failures{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 2; ++t)
        callers.emplace_back([&failures, t] {
            run_in_one_team([&] {
                for (int k = 0; k < 500; ++k) {
                    Counts c(t, 1 + (k + t) % 33);
                    if (par_for(c) != 0 || !c.each_once()) failures.fetch_add(1);
                }
            });
        });
    for (auto &c : callers) c.join();
    EXPECT_EQ(failures.load(), 0) << "loops of two calls at once with a task run other than once";

    blocklstm::detail::use_openmp_threads(false);
    run_in_one_team([] {
        EXPECT_FALSE(omp_in_parallel()) << "switched back: the body as it is";
        Counts c(0, 64);
        EXPECT_EQ(par_for(c), 0);
        EXPECT_TRUE(c.each_once());
    });
    if (pool_is("openmp")) blocklstm::detail::use_openmp_threads(true);
    set_pool_threads(0);
}

// A team member held between seeing a loop's epoch and serving the loop until the call is over
// (as a preempted thread is) still leaves the team: serve reads the epoch again, which by then is
// the caller's final one, so a member that had read `done` before that read waited for an epoch
// that never came, and the caller for it in the team's barrier (an example under a loaded ctest
// hung so). The test hook holds the member there; a hang is reported by the watchdog.
TEST(ThreadPool, OneTeamMemberHeldUntilTheCallEndsLeavesTheTeam) {
    if (switched_off()) GTEST_SKIP() << "BLOCKLSTM_THREAD_POOL=halide: the loops run on Halide's pool";
    using blocklstm::detail::run_in_one_team;
    ASSERT_EQ(blocklstm::detail::use_openmp_threads(true).rfind("libgomp", 0), 0u) << "the libgomp this program links";
    set_pool_threads(2);
    static std::atomic<int> held;
    static std::atomic<bool> body_returned;
    held = 0;
    body_returned = false;
    blocklstm::detail::team_member_before_serve = [] {
        if (held.fetch_add(1) != 0) return;
        while (!body_returned.load()) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the caller's final epoch meanwhile
    };
    std::atomic<bool> finished{false};
    std::thread watchdog([&] {
        for (int s = 0; s < 100 && !finished.load(); ++s) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!finished.load()) {
            std::fprintf(stderr, "OneTeamMemberHeldUntilTheCallEndsLeavesTheTeam: the call has not ended after 10 s: "
                                 "the held member never left the team\n");
            std::abort();
        }
    });
    run_in_one_team([&] {
        Counts c(0, 2);  // the caller runs the held member's share too
        EXPECT_EQ(par_for(c), 0);
        EXPECT_TRUE(c.each_once());
        while (held.load() == 0) std::this_thread::yield();  // the member saw the loop's epoch
        body_returned = true;
    });
    finished = true;
    watchdog.join();
    blocklstm::detail::team_member_before_serve = nullptr;
    EXPECT_EQ(held.load(), 1) << "the member served once more after the hold: the call's final epoch";
    if (!pool_is("openmp")) blocklstm::detail::use_openmp_threads(false);
    set_pool_threads(0);
}

// run_side_by_side: both bodies at once on two threads (each waits until the other has started),
// each loop forked inside one run whole on that body's own thread, loop_threads 1 there and 2
// outside; an exception of either comes back out after both ran. With Halide's pool (switched
// off) the bodies run one after the other.
TEST(ThreadPool, SideBySideRunsBothBodiesAtOnceAndTheirLoopsOnTheirThread) {
    set_pool_threads(2);
    EXPECT_EQ(blocklstm::detail::loop_threads(), switched_off() ? 1 : 2);
    std::atomic<int> started{0};
    struct Body {
        std::atomic<int> &started;
        bool met_the_other = false, loop_on_own_thread = false;
        int threads_inside = 0;
        void operator()() {
            started.fetch_add(1);
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (!switched_off() && started.load() < 2 && std::chrono::steady_clock::now() < until)
                std::this_thread::yield();
            met_the_other = started.load() == 2;
            threads_inside = blocklstm::detail::loop_threads();
            struct Where {
                std::thread::id body = std::this_thread::get_id();
                std::atomic<int> elsewhere{0}, runs{0};
                static int task(void *, int, uint8_t *closure) {
                    auto *w = reinterpret_cast<Where *>(closure);
                    if (std::this_thread::get_id() != w->body) w->elsewhere.fetch_add(1);
                    w->runs.fetch_add(1);
                    return 0;
                }
            } where;
            halide_do_par_for(nullptr, Where::task, 0, 64, reinterpret_cast<uint8_t *>(&where));
            loop_on_own_thread = where.runs.load() == 64 && where.elsewhere.load() == 0;
        }
    };
    Body first{started}, second{started};
    blocklstm::detail::run_side_by_side([&] { first(); }, [&] { second(); });
    for (const Body *b : {&first, &second}) {
        EXPECT_TRUE(b->met_the_other || switched_off()) << "the bodies did not run at once";
        EXPECT_TRUE(b->loop_on_own_thread || switched_off()) << "a body's loop ran elsewhere or not whole";
        EXPECT_EQ(b->threads_inside, 1);
    }
    bool second_ran = false;
    EXPECT_THROW(blocklstm::detail::run_side_by_side([] { throw std::runtime_error("first"); },
                                                     [&] { second_ran = true; }),
                 std::runtime_error);
    EXPECT_TRUE(second_ran);
    // Inside the tasks of a loop (where a loop would go to Halide's pool): on the task's thread,
    // first then second.
    struct Inside {
        struct Record {
            std::thread::id task_thread;
            std::vector<std::pair<int, std::thread::id>> order;
        } records[2];
        static int task(void *, int i, uint8_t *closure) {
            Record *r = &reinterpret_cast<Inside *>(closure)->records[i];
            r->task_thread = std::this_thread::get_id();
            blocklstm::detail::run_side_by_side([r] { r->order.push_back({1, std::this_thread::get_id()}); },
                                                [r] { r->order.push_back({2, std::this_thread::get_id()}); });
            return 0;
        }
    } inside;
    ASSERT_EQ(halide_do_par_for(nullptr, Inside::task, 0, 2, reinterpret_cast<uint8_t *>(&inside)), 0);
    for (const auto &r : inside.records) {
        ASSERT_EQ(r.order.size(), 2u);
        EXPECT_EQ(r.order[0].first, 1);
        EXPECT_EQ(r.order[1].first, 2);
        if (!switched_off())  // Halide's pool may run a task's nested loop elsewhere
            for (const auto &[body, id] : r.order) EXPECT_EQ(id, r.task_thread) << "body " << body;
    }
    set_pool_threads(0);
}

// A pool of n threads runs a loop on n threads (the caller and n - 1 workers), never more.
TEST(ThreadPool, UsesTheThreadCount) {
    if (switched_off()) GTEST_SKIP() << "BLOCKLSTM_THREAD_POOL=halide: the loops run on Halide's pool, whose size this test does not check";
    for (int threads : {1, 2, 4}) {
        set_pool_threads(threads);
        struct Who {
            std::mutex m;
            std::set<std::thread::id> ids;
            static int task(void *, int, uint8_t *closure) {
                auto *w = reinterpret_cast<Who *>(closure);
                std::this_thread::sleep_for(std::chrono::milliseconds(2));  // time for every worker to join
                std::lock_guard<std::mutex> lock(w->m);
                w->ids.insert(std::this_thread::get_id());
                return 0;
            }
        } who;
        ASSERT_EQ(halide_do_par_for(nullptr, Who::task, 0, 64, reinterpret_cast<uint8_t *>(&who)), 0);
        EXPECT_LE(int(who.ids.size()), threads) << "threads " << threads;
        EXPECT_GE(int(who.ids.size()), std::min(threads, 2)) << "threads " << threads;
    }
    set_pool_threads(0);
}

// ByteRanges (runtime/src/zero_ranges.h): the zeros past each row's length, ranges of any size
// and alignment cut into any number of tasks, zero exactly their bytes and nothing beside them.
TEST(ThreadPool, ByteRangesZeroTheirBytesOnly) {
    set_pool_threads(3);
    std::vector<unsigned char> memory(1 << 16, 0xab);
    // (offset, bytes): one byte, a line's worth off its alignment, past a line, whole lines, a
    // range right after another, a big one
    const std::vector<std::pair<int64_t, int64_t>> ranges = {{3, 1}, {65, 64}, {200, 131}, {512, 1024},
                                                             {1536, 7}, {4099, 20000}, {30000, 0}};
    for (int64_t tasks : {1, 2, 3, 5, 64}) {
        std::fill(memory.begin(), memory.end(), 0xab);
        blocklstm::detail::ByteRanges z;
        std::vector<bool> zeroed(memory.size(), false);
        for (auto [offset, bytes] : ranges) {
            z.add(memory.data() + offset, bytes);
            for (int64_t k = 0; k < bytes; ++k) zeroed[offset + k] = true;
        }
        z.zero_on_host(tasks);
        for (std::size_t k = 0; k < memory.size(); ++k)
            ASSERT_EQ(int(memory[k]), zeroed[k] ? 0 : 0xab) << "byte " << k << ", " << tasks << " tasks";
    }
    blocklstm::detail::ByteRanges none;
    none.zero_on_host();  // no range: no loop
    EXPECT_EQ(blocklstm::detail::ByteRanges::zero_tasks(1 << 10), 1);
    EXPECT_EQ(blocklstm::detail::ByteRanges::zero_tasks(int64_t{1} << 30), blocklstm::detail::loop_threads());
    set_pool_threads(0);
}

}  // namespace
