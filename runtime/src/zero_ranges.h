// Host memory zeroed where the op will not read it back (outputs past each row's length): with
// streaming stores, which write whole cache lines without reading them first, over the loops'
// threads. A memset of the zeros past the lengths, one thread reading each line it wrote, was
// 3 % of BlockLSTM at T,B,I=H 200,16,256 with lengths spread over [T/4, T] (perf; AMD Zen 4).
#pragma once

#include <cstdint>
#include <vector>

namespace blocklstm::detail {

// Ranges of bytes, in the order they are added; a range that starts where the last one ends
// extends it.
class ByteRanges {
public:
    void add(void *data, int64_t bytes) {
        if (bytes <= 0) return;
        auto *p = static_cast<char *>(data);
        if (!at_.empty() && at_.back() + (end_.back() - start(at_.size() - 1)) == p) {
            end_.back() += bytes;
            return;
        }
        at_.push_back(p);
        end_.push_back(total() + bytes);
    }
    int64_t total() const { return end_.empty() ? 0 : end_.back(); }
    std::size_t size() const { return at_.size(); }
    // Range r: its first byte and its length.
    void *data(std::size_t r) const { return at_[r]; }
    int64_t bytes(std::size_t r) const { return end_[r] - start(r); }

    // Zeroes every range of host memory: their bytes, one after another, cut into `tasks` stretches
    // of (nearly) one size, each a task of one parallel loop (halide_do_par_for); tasks <= 0: by
    // their size (zero_tasks).
    void zero_on_host(int64_t tasks = 0);

    // One task per 256 KiB (a fork costs about what streaming 4 KiB does), at most the loops' threads.
    static int64_t zero_tasks(int64_t bytes);

private:
    int64_t start(std::size_t r) const { return r == 0 ? 0 : end_[r - 1]; }
    static int zero_task(void *user_context, int task, uint8_t *closure);
    std::vector<char *> at_;
    std::vector<int64_t> end_;  // each range's end in the bytes of all
    int64_t tasks_ = 1;
};

}  // namespace blocklstm::detail
