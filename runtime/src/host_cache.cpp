// The host memory cache: the CPU workspaces of a call (Scratch) and Halide's own buffers (the
// packed GEMM panels, through halide_malloc) come from blocks kept from earlier calls. An op
// allocates the same workspaces on every call, and a fresh allocation from the system costs a
// page fault and a zeroed page per 4 KiB at first touch: 12 % of BlockLSTMGrad at T,B,I=H
// 50,8,128 on the benchmark machine (perf, asm_exc_page_fault with children).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include <malloc.h>

#include "runtime/src/exec.h"

namespace blocklstm {
namespace detail {
namespace {

constexpr std::size_t kAlignment = 128;          // >= halide_malloc_alignment() on every target
constexpr std::size_t kSmallest = 64 * 1024;     // smaller blocks come from malloc's free lists
constexpr std::size_t kDefaultLimit = std::size_t(1) << 30;

// allocate and release are called from Halide's C runtime and from destructors: they never throw
// (the bookkeeping's own allocation failing is an allocation failure, nullptr, or a block freed
// instead of kept).
class HostCache {
public:
    void *allocate(std::size_t bytes) noexcept {
        const std::size_t size = round_up(std::max<std::size_t>(bytes, 1));
        try {
            return allocate_or_throw(size);
        } catch (...) {
            return nullptr;
        }
    }

    void release(void *p) noexcept {
        if (!p) return;
        // Only blocks of kSmallest bytes or more are tracked (allocate_or_throw), and a block's
        // usable size is at least its size: a smaller one was never tracked, so no lock.
        if (malloc_usable_size(p) < kSmallest) return std::free(p);
        try {
            if (keep(p)) return;
        } catch (...) {
        }
        std::free(p);
    }

    void set_limit(std::size_t bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        limit_ = bytes;
        trim_locked();
    }

    std::size_t cached() {
        std::lock_guard<std::mutex> lock(mutex_);
        return cached_;
    }

private:
    void *allocate_or_throw(std::size_t size) {
        if (size >= kSmallest) {
            std::lock_guard<std::mutex> lock(mutex_);
            // The smallest kept block that fits, if it wastes less than half of itself.
            auto it = free_.lower_bound(size);
            if (it != free_.end() && it->first / 2 < size) {
                void *p = it->second;
                live_.emplace(p, it->first);  // first: if it throws, the block stays kept
                cached_ -= it->first;
                free_.erase(it);
                return p;
            }
        }
        void *p = std::aligned_alloc(kAlignment, size);
        if (p && size >= kSmallest) {
            try {
                std::lock_guard<std::mutex> lock(mutex_);
                live_.emplace(p, size);
            } catch (...) {
                std::free(p);
                throw;
            }
        }
        return p;
    }

    // Whether `p` (a live block) is kept for the next allocation; otherwise the caller frees it.
    bool keep(void *p) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = live_.find(p);
        if (it == live_.end()) return false;
        const std::size_t size = it->second;
        live_.erase(it);
        if (size > limit_) return false;
        free_.emplace(size, p);
        cached_ += size;
        trim_locked();
        return true;
    }

    static std::size_t round_up(std::size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

    // The largest kept blocks go first: they cost the fewest page faults per byte to get back.
    void trim_locked() {
        while (cached_ > limit_ && !free_.empty()) {
            auto last = std::prev(free_.end());
            cached_ -= last->first;
            std::free(last->second);
            free_.erase(last);
        }
    }

    std::mutex mutex_;
    std::multimap<std::size_t, void *> free_;  // kept blocks by size
    std::unordered_map<void *, std::size_t> live_;
    std::size_t cached_ = 0, limit_ = kDefaultLimit;
};

// Never destroyed: Halide's thread pool and other static destructors may free after main.
HostCache &cache() {
    static HostCache *c = new HostCache;
    return *c;
}

void *halide_cached_malloc(void *, std::size_t bytes) { return cache().allocate(bytes); }
void halide_cached_free(void *, void *p) { cache().release(p); }

const bool halide_allocator_installed =
    (halide_set_custom_malloc(halide_cached_malloc), halide_set_custom_free(halide_cached_free), true);

}  // namespace

void *host_allocate(std::size_t bytes) { return cache().allocate(bytes); }
void host_free(void *p) { cache().release(p); }

}  // namespace detail

void set_host_cache_limit(std::size_t max_bytes) { detail::cache().set_limit(max_bytes); }
std::size_t host_cache_bytes() { return detail::cache().cached(); }

}  // namespace blocklstm
