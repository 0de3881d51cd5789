// The CPU kernels' parallel loops (halide_do_par_for) on a fork/join pool of our own. A sequence
// op forks twice per time step (the step's product, then its gate math), so a fork's cost is paid
// 2·T times a call: Halide's default pool wakes its workers through a mutex and a condition
// variable and spins with sched_yield, which was 38-45 % of BlockLSTM's samples at T,B,I=H
// 50,8,128 and 500,1,128 on 2 threads (perf, Zen 5: __schedule, sched_yield, halide_mutex_*).
// Here a fork publishes the loop in one atomic store, the workers spin on it (pause) for a while
// after each loop and only then sleep, and the tasks are claimed with one atomic add each.
//
// BLOCKLSTM_THREAD_POOL=halide keeps Halide's default pool (read once, at load). A loop forked
// from inside a task, or while another thread's loop holds the pool, runs on Halide's pool as
// before (the pool serves one caller at a time); in the tuner, which times JIT-compiled kernels
// on this pool too, it runs serially.
//
// set_thread_pool("openmp") runs the loops on the threads of an OpenMP runtime the process has
// loaded (PyTorch's libgomp, for one) instead: that runtime's workers spin for milliseconds after
// each of its own loops (libgomp: 300,000 pauses, ~5 ms on a Zen 5), and on 2 vCPUs a spinning
// worker halves what this pool's worker gets (a 9 ms BlockLSTMV2 call took 14 ms right after a
// torch op). The same loop protocol (shares, stealing) runs inside GOMP_parallel, the entry point
// that GNU libgomp, LLVM's libomp and Intel's libiomp5 all export.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <dlfcn.h>
#include <link.h>

#include "HalideRuntime.h"
#include "runtime/src/thread_pool.h"

namespace blocklstm::detail {
namespace {

// How long a worker spins for the next loop before it sleeps: a step's two loops are a few
// microseconds apart, and a call's next step follows at once, so 100 µs covers the gaps inside
// a call; between calls (or when the process does other work) the workers sleep.
constexpr auto kSpin = std::chrono::microseconds(100);

// A participant's share of a loop's tasks, on a cache line of its own: it claims its tasks without
// touching another core's line (one claim from a shared counter is a line moving between cores,
// 0.22 µs one way on the 2-vCPU Zen 5 VM: more than a task of a batch-1 step product).
struct alignas(64) Share {
    std::atomic<int> next{0};
    int end = 0;
};

// One parallel loop: tasks [min, min + size) split into one contiguous share per participant
// (the caller is participant 0, worker w is w + 1); a participant done with its own share takes
// tasks from the others', so a late worker delays nothing.
struct Loop {
    halide_task_t task;
    void *user_context;
    uint8_t *closure;
    Share *shares;
    int parts;
    std::atomic<int> result{0};  // the first nonzero a task returned

    // Stops claiming after a task fails, as Halide's pool does.
    void run(int part) {
        for (int k = 0; k < parts && result.load(std::memory_order_relaxed) == 0; ++k) {
            Share &share = shares[(part + k) % parts];
            for (int i = share.next.fetch_add(1, std::memory_order_relaxed); i < share.end;
                 i = share.next.fetch_add(1, std::memory_order_relaxed)) {
                const int r = task(user_context, i, closure);
                if (r != 0) {
                    int none = 0;
                    result.compare_exchange_strong(none, r);
                    return;
                }
            }
        }
    }
};

thread_local bool in_task = false;  // a worker, or a caller running its own loop's tasks
thread_local bool serial_loops = false;  // inside run_side_by_side: every loop in this thread

// The loop in the calling thread, to its first failing task.
int run_serially(void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
    for (int i = min; i < min + size; ++i)
        if (const int r = task(user_context, i, closure)) return r;
    return 0;
}

// Tasks [min, min + size) in `parts` contiguous shares.
void split_into_shares(Share *shares, int parts, int min, int size) {
    for (int p = 0; p < parts; ++p) {
        shares[p].next.store(min + static_cast<int>(int64_t(size) * p / parts), std::memory_order_relaxed);
        shares[p].end = min + static_cast<int>(int64_t(size) * (p + 1) / parts);
    }
}

// Where a caller publishes its loops to participants that spin on `epoch` (the pool's workers, a
// team's members): the caller runs share 0, then unpublishes the loop and waits until no
// participant holds it, so the next loop may overwrite it.
struct LoopBoard {
    // What the participants spin on and then read, written by the caller, apart from what they
    // write: one cache line, so a participant that sees the epoch move has the loop too (a loop on
    // the caller's stack was one more line to fetch: the fork to the worker's first task took 0.34
    // instead of 0.27 us on a 2-vCPU Xeon VM).
    alignas(64) std::atomic<Loop *> loop{nullptr};
    std::atomic<uint64_t> epoch{0};
    Loop posted{};
    alignas(64) std::atomic<int> active{0};

    // The caller's side: runs the tasks [min, min + size) split into `shares`; `published` runs
    // right after the loop is published (the pool wakes its sleepers there).
    template <typename Published>
    int run(halide_task_t task, void *user_context, uint8_t *closure, Share *shares, int parts, int min, int size,
            Published published) {
        split_into_shares(shares, parts, min, size);
        Loop &l = posted;
        l.task = task;
        l.user_context = user_context;
        l.closure = closure;
        l.shares = shares;
        l.parts = parts;
        l.result.store(0, std::memory_order_relaxed);
        loop.store(&l, std::memory_order_seq_cst);
        epoch.fetch_add(1, std::memory_order_seq_cst);
        published();
        in_task = true;
        l.run(0);
        in_task = false;
        // A participant counts itself in `active` before it reads `loop`, so once `active` is 0
        // after the store of nullptr, no participant can reach this loop.
        loop.store(nullptr, std::memory_order_seq_cst);
        while (active.load(std::memory_order_seq_cst) != 0) cpu_relax();
        return l.result.load(std::memory_order_relaxed);
    }

    // A participant's side, once the epoch has moved past `seen`: its share of the loop published
    // now, if any (participant `index` + 1; the caller is 0). Returns the epoch it served.
    uint64_t serve(int index) {
        const uint64_t now = epoch.load(std::memory_order_seq_cst);
        active.fetch_add(1, std::memory_order_seq_cst);
        Loop *l = loop.load(std::memory_order_seq_cst);
        if (l && index + 1 < l->parts) l->run(index + 1);
        active.fetch_sub(1, std::memory_order_seq_cst);
        return now;
    }
};

static_assert(sizeof(std::atomic<Loop *>) + sizeof(std::atomic<uint64_t>) + sizeof(Loop) <= 64,
              "a loop's fields share the cache line of the epoch its participants spin on");

int default_threads() {
    if (const char *env = std::getenv("HL_NUM_THREADS")) {
        const int n = std::atoi(env);
        if (n > 0) return n;
    }
    const unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? static_cast<int>(n) : 1;
}

class Pool {
public:
    // Returns false when the loop should go to the fallback instead (see the top of the file).
    bool run(void *user_context, halide_task_t task, int min, int size, uint8_t *closure, int *result) {
        if (in_task) return false;
        std::unique_lock<std::mutex> caller(caller_, std::try_to_lock);
        if (!caller.owns_lock()) return false;
        const int workers = threads_.load(std::memory_order_relaxed) - 1;
        if (size <= 1 || workers <= 0) {
            *result = run_serially(user_context, task, min, size, closure);
            return true;
        }
        start_workers(workers);
        const int parts = std::min(workers + 1, size);
        if (static_cast<int>(shares_.size()) < parts) shares_ = std::vector<Share>(parts);  // no worker holds a loop
        // Then wake the sleepers. A worker counts itself in `sleepers_` before its last look at
        // the epoch, and this reads `sleepers_` after bumping it (both seq_cst), so either the
        // worker sees the new epoch or this sees the sleeper and notifies.
        *result = board_.run(task, user_context, closure, shares_.data(), parts, min, size, [&] {
            if (sleepers_.load(std::memory_order_seq_cst) > 0) {
                std::lock_guard<std::mutex> lock(sleep_mutex_);
                wake_.notify_all();
            }
        });
        return true;
    }

    void set_threads(int threads) { threads_.store(threads > 0 ? threads : default_threads()); }
    int threads() const { return threads_.load(std::memory_order_relaxed); }

private:
    // Workers are started as loops first need them and never stopped (a process-lifetime pool,
    // as Halide's); fewer threads later leaves the extra ones asleep.
    void start_workers(int workers) {
        while (static_cast<int>(started_) < workers) {
            const int index = started_++;
            // The epoch before this caller's loop, read here: read by the new thread, it could
            // already be this loop's, which the worker would then wait past.
            const uint64_t seen = board_.epoch.load(std::memory_order_seq_cst);
            std::thread([this, index, seen] { work(index, seen); }).detach();
        }
    }

    void work(int index, uint64_t seen) {
        in_task = true;  // a loop forked from a task runs on the fallback
        for (;;) {
            wait_for_loop(seen);
            seen = board_.serve(index);
        }
    }

    // Returns once the epoch has moved past `seen`: spinning for kSpin, then asleep.
    void wait_for_loop(uint64_t seen) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        for (;;) {
            for (int i = 0; i < 64; ++i) {
                if (board_.epoch.load(std::memory_order_relaxed) != seen) return;
                cpu_relax();
            }
            if (std::chrono::steady_clock::now() >= until) break;
        }
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] { return board_.epoch.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }

    std::mutex caller_;  // one caller's loop at a time
    std::atomic<int> threads_{default_threads()};
    unsigned started_ = 0;  // under caller_
    std::vector<Share> shares_;  // under caller_
    LoopBoard board_;
    alignas(64) std::atomic<int> sleepers_{0};
    std::mutex sleep_mutex_;
    std::condition_variable wake_;
};

// Never destroyed: detached workers may still be in it when the process exits.
Pool &pool() {
    static Pool *p = new Pool;
    return *p;
}

halide_do_par_for_t fallback = nullptr;  // where the pool does not take a loop; nullptr: serially
bool installed = false;
std::atomic<int> requested_threads{0};  // set_pool_threads' argument: 0 = the default

// The entry points of a loaded OpenMP runtime.
struct OpenMP {
    void (*parallel)(void (*fn)(void *), void *data, unsigned threads, unsigned flags) = nullptr;  // GOMP_parallel
    int (*thread_num)() = nullptr;
    int (*max_threads)() = nullptr;
    std::string library;  // its file
};

// The first loaded library named libgomp*, libomp* or libiomp* that exports the three.
const OpenMP *find_loaded_openmp() {
    std::vector<std::string> candidates;
    dl_iterate_phdr(
        [](dl_phdr_info *info, size_t, void *out) {
            const char *name = info->dlpi_name;
            if (!name || !*name) return 0;
            const char *base = std::strrchr(name, '/');
            base = base ? base + 1 : name;
            for (const char *prefix : {"libgomp", "libomp", "libiomp"})
                if (std::strncmp(base, prefix, std::strlen(prefix)) == 0)
                    static_cast<std::vector<std::string> *>(out)->push_back(name);
            return 0;
        },
        &candidates);
    for (const std::string &path : candidates) {
        void *handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);  // kept open: loops may run on it
        if (!handle) continue;
        OpenMP omp;
        omp.parallel = reinterpret_cast<decltype(omp.parallel)>(dlsym(handle, "GOMP_parallel"));
        omp.thread_num = reinterpret_cast<int (*)()>(dlsym(handle, "omp_get_thread_num"));
        omp.max_threads = reinterpret_cast<int (*)()>(dlsym(handle, "omp_get_max_threads"));
        if (omp.parallel && omp.thread_num && omp.max_threads) {
            omp.library = path.substr(path.rfind('/') + 1);
            return new OpenMP(std::move(omp));  // kept for the process's life, as the handle
        }
    }
    return nullptr;
}

std::atomic<const OpenMP *> openmp{nullptr};  // set: the loops run on its threads

// A loop on an OpenMP team: one share per team member, the caller's thread being member 0.
int run_on_openmp(const OpenMP &omp, void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
    const int requested = requested_threads.load(std::memory_order_relaxed);
    const int parts = std::min(requested > 0 ? requested : omp.max_threads(), size);
    if (parts <= 1) return run_serially(user_context, task, min, size, closure);
    thread_local std::vector<Share> shares;  // a thread's loops do not nest here (in_task)
    if (static_cast<int>(shares.size()) < parts) shares = std::vector<Share>(parts);
    split_into_shares(shares.data(), parts, min, size);
    struct Team {
        Loop loop;
        int (*thread_num)();
    } team{{task, user_context, closure, shares.data(), parts, {0}}, omp.thread_num};
    omp.parallel(
        [](void *data) {
            auto *team = static_cast<Team *>(data);
            const bool was_in_task = in_task;
            in_task = true;  // a loop forked from a task runs on the fallback
            team->loop.run(team->thread_num() % team->loop.parts);  // a smaller team steals the rest
            in_task = was_in_task;
        },
        &team, static_cast<unsigned>(parts), 0);
    return team.loop.result.load(std::memory_order_relaxed);
}

// One op call's loops on one OpenMP team (run_in_one_team): the team's other members serve the
// call's loops from its board, spinning between them, until the call is done; a fork is then one
// atomic store, as on the pool, not a GOMP_parallel (0.42 µs with its join, twice a step: 7 % of
// BlockLSTMV2 at T,B,I=H 50,8,128).
struct TeamCall {
    LoopBoard board;
    std::vector<Share> shares;  // one per member
    alignas(64) std::atomic<bool> done{false};
};

thread_local TeamCall *team_call = nullptr;  // the call whose body this thread runs (member 0)

int run_on_team_call(TeamCall &call, void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
    const int parts = std::min(static_cast<int>(call.shares.size()), size);
    if (parts <= 1) return run_serially(user_context, task, min, size, closure);
    return call.board.run(task, user_context, closure, call.shares.data(), parts, min, size, [] {});
}

}  // namespace

#ifdef BLOCKLSTM_THREAD_POOL_TEST_HOOKS
void (*team_member_before_serve)() = nullptr;  // tests/thread_pool_test.cc holds a member there
#endif

namespace {

// A member other than 0: the call's loops until it is done (its epoch moves once more after).
// `done` is read after the epoch that serve returns, never before it: serve reads the epoch again,
// and a member preempted between an earlier check of `done` and that read could come back with the
// caller's final epoch already in `seen`, then wait for one that never comes while the caller waits
// for it in the team's barrier (seen once in 34 runs of a training example beside a loaded ctest).
// The caller stores `done` before its final epoch (both seq_cst), so a member that read that
// epoch reads `done` true.
void serve_until_done(TeamCall &call, int member) {
    const bool was_in_task = in_task;
    in_task = true;  // a loop forked from a task runs on the fallback
    uint64_t seen = 0;  // a fresh board's: a member that comes late serves the loop published already
    for (;;) {
        while (call.board.epoch.load(std::memory_order_relaxed) == seen) cpu_relax();
#ifdef BLOCKLSTM_THREAD_POOL_TEST_HOOKS
        if (team_member_before_serve) team_member_before_serve();
#endif
        seen = call.board.serve(member - 1);
        if (call.done.load(std::memory_order_seq_cst)) break;
    }
    in_task = was_in_task;
}

}  // namespace

void run_in_one_team(const std::function<void()> &body) {
    const OpenMP *omp = openmp.load(std::memory_order_acquire);
    if (!omp || in_task || team_call) return body();
    const int requested = requested_threads.load(std::memory_order_relaxed);
    const int members = requested > 0 ? requested : omp->max_threads();
    if (members <= 1) return body();
    TeamCall call;
    call.shares = std::vector<Share>(members);
    struct Region {
        TeamCall &call;
        const std::function<void()> &body;
        int (*thread_num)();
        std::exception_ptr error;  // the body's, rethrown here: nothing unwinds through the OpenMP runtime
    } region{call, body, omp->thread_num, nullptr};
    omp->parallel(
        [](void *data) {
            auto *r = static_cast<Region *>(data);
            if (const int member = r->thread_num(); member != 0) return serve_until_done(r->call, member);
            team_call = &r->call;  // member 0 is the calling thread
            try {
                r->body();
            } catch (...) {
                r->error = std::current_exception();
            }
            team_call = nullptr;
            r->call.done.store(true, std::memory_order_seq_cst);  // before the epoch the members wait on
            r->call.board.epoch.fetch_add(1, std::memory_order_seq_cst);
        },
        &region, static_cast<unsigned>(members), 0);
    if (region.error) std::rethrow_exception(region.error);
}

namespace {

// A loop on the threads it runs on (the top of the file); where the pool does not take it, on
// `otherwise` if given, else serially.
int run_loop(void *user_context, halide_task_t task, int min, int size, uint8_t *closure,
             halide_do_par_for_t otherwise) {
    if (serial_loops) return run_serially(user_context, task, min, size, closure);
    if (TeamCall *call = team_call; call && !in_task)
        return run_on_team_call(*call, user_context, task, min, size, closure);
    if (const OpenMP *omp = openmp.load(std::memory_order_acquire); omp && !in_task)
        return run_on_openmp(*omp, user_context, task, min, size, closure);
    int result = 0;
    if (pool().run(user_context, task, min, size, closure, &result)) return result;
    if (otherwise) return otherwise(user_context, task, min, size, closure);
    return run_serially(user_context, task, min, size, closure);
}

}  // namespace

int pool_do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
    return run_loop(user_context, task, min, size, closure, fallback);
}

void run_side_by_side(const std::function<void()> &first, const std::function<void()> &second) {
    struct Pair {
        const std::function<void()> *body[2];
        std::exception_ptr error[2];
    } pair{{&first, &second}, {}};
    auto task = [](void *, int index, uint8_t *closure) -> int {
        auto &p = *reinterpret_cast<Pair *>(closure);
        const bool was_serial = serial_loops;
        serial_loops = true;
        try {
            (*p.body[index])();
        } catch (...) {
            p.error[index] = std::current_exception();
        }
        serial_loops = was_serial;
        return 0;
    };
    // Never on Halide's pool (a second caller's, or a loop inside a task): one after the other
    // there, as where the pool is not installed. Halide's pool would run this library's code on
    // threads whose ordering ThreadSanitizer cannot see, and nothing is gained where the pool is
    // taken.
    if (installed)
        run_loop(nullptr, task, 0, 2, reinterpret_cast<uint8_t *>(&pair), nullptr);
    else
        run_serially(nullptr, task, 0, 2, reinterpret_cast<uint8_t *>(&pair));
    for (const std::exception_ptr &e : pair.error)
        if (e) std::rethrow_exception(e);
}

int loop_threads() {
    if (serial_loops || !installed) return 1;
    const int requested = requested_threads.load(std::memory_order_relaxed);
    if (team_call && !in_task) return static_cast<int>(team_call->shares.size());
    if (const OpenMP *omp = openmp.load(std::memory_order_acquire); omp && !in_task)
        return requested > 0 ? requested : omp->max_threads();
    return in_task ? 1 : pool().threads();
}

void set_pool_fallback(halide_do_par_for_t halide_default) {
    fallback = halide_default;
    installed = true;
    const char *env = std::getenv("BLOCKLSTM_THREAD_POOL");
    if (env && std::strcmp(env, "openmp") == 0 && use_openmp_threads(true).empty())
        std::fprintf(stderr, "blocklstm: BLOCKLSTM_THREAD_POOL=openmp, but no OpenMP runtime (libgomp, libomp or "
                             "libiomp5) is loaded yet: the library's own pool runs the loops until "
                             "set_thread_pool(\"openmp\")\n");
}

bool thread_pool_switched_off() {
    const char *env = std::getenv("BLOCKLSTM_THREAD_POOL");
    return env && std::strcmp(env, "halide") == 0;
}

void set_pool_threads(int threads) {
    requested_threads.store(threads);
    pool().set_threads(threads);
}

bool own_thread_pool() { return installed; }

std::string use_openmp_threads(bool on) {
    if (!on) {
        openmp.store(nullptr, std::memory_order_release);
        return "";
    }
    static const OpenMP *found = nullptr;  // looked up until found, then kept
    static std::mutex lookup;
    std::lock_guard<std::mutex> lock(lookup);
    if (!found) found = find_loaded_openmp();
    if (found) openmp.store(found, std::memory_order_release);
    return found ? found->library : "";
}

std::string openmp_library_in_use() {
    const OpenMP *omp = openmp.load(std::memory_order_acquire);
    return omp ? omp->library : "";
}

}  // namespace blocklstm::detail
