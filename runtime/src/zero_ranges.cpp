#include "runtime/src/zero_ranges.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "HalideRuntime.h"
#include "runtime/src/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace blocklstm::detail {
namespace {

void zero_streaming(char *p, int64_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
    const auto misaligned = static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(p) % 64);
    const int64_t head = std::min<int64_t>(bytes, misaligned ? 64 - misaligned : 0);
    std::memset(p, 0, static_cast<std::size_t>(head));
    p += head;
    bytes -= head;
    const __m128i zero = _mm_setzero_si128();
    for (; bytes >= 64; p += 64, bytes -= 64)
        for (int k = 0; k < 64; k += 16) _mm_stream_si128(reinterpret_cast<__m128i *>(p + k), zero);
#endif
    std::memset(p, 0, static_cast<std::size_t>(bytes));
}

constexpr int64_t kTaskBytesMin = int64_t{256} << 10;

}  // namespace

int64_t ByteRanges::zero_tasks(int64_t bytes) { return std::clamp<int64_t>(bytes / kTaskBytesMin, 1, loop_threads()); }

int ByteRanges::zero_task(void *, int task, uint8_t *closure) {
    const auto &z = *reinterpret_cast<const ByteRanges *>(closure);
    const int64_t all = z.total(), from = all * task / z.tasks_, to = all * (task + 1) / z.tasks_;
    // the range holding byte `from`, then on until byte `to`
    auto r = static_cast<std::size_t>(std::upper_bound(z.end_.begin(), z.end_.end(), from) - z.end_.begin());
    for (int64_t pos = from; pos < to; ++r) {
        const int64_t begin = z.start(r), stop = std::min(to, z.end_[r]);
        zero_streaming(z.at_[r] + (pos - begin), stop - pos);
        pos = stop;
    }
#if defined(__x86_64__) || defined(__i386__)
    _mm_sfence();  // the streaming stores before the join, so before any later access to the bytes
#endif
    return 0;
}

void ByteRanges::zero_on_host(int64_t tasks) {
    if (total() == 0) return;
    tasks_ = std::clamp<int64_t>(tasks > 0 ? tasks : zero_tasks(total()), 1, total());
    halide_do_par_for(nullptr, zero_task, 0, static_cast<int>(tasks_), reinterpret_cast<uint8_t *>(this));
}

}  // namespace blocklstm::detail
