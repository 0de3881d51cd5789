#include "runtime/src/step_rows.h"

#include <algorithm>
#include <numeric>

#include "runtime/src/buf.h"
#include "runtime/src/exec.h"

namespace blocklstm::detail {
namespace {

// n, packed and steps from length and order.
void count_steps(StepRows &r) {
    r.steps = r.B > 0 ? r.length[r.order[0]] : 0;
    r.n.assign(r.steps, 0);
    for (int64_t len : r.length)
        for (int64_t t = 0; t < len; ++t) ++r.n[t];
    r.packed.assign(r.steps + 1, 0);
    for (int64_t t = 0; t < r.steps; ++t) r.packed[t + 1] = r.packed[t] + r.n[t];
}

}  // namespace

StepRows step_rows(int64_t B, int64_t L, const TensorView *seq_lengths) {
    StepRows r;
    r.B = B;
    r.length.assign(B, L);
    if (seq_lengths) {
        for (int64_t b = 0; b < B; ++b) {
            const int64_t len = seq_lengths->dtype == DType::i32 ? static_cast<const int32_t *>(seq_lengths->data)[b]
                                                                 : static_cast<const int64_t *>(seq_lengths->data)[b];
            r.length[b] = std::min(len, L);
        }
    }
    r.order.resize(B);
    std::iota(r.order.begin(), r.order.end(), 0);
    std::stable_sort(r.order.begin(), r.order.end(), [&](int64_t a, int64_t b) { return r.length[a] > r.length[b]; });
    r.place.resize(B);
    for (int64_t j = 0; j < B; ++j) r.place[r.order[j]] = j;
    count_steps(r);
    return r;
}

StepRows in_length_order(const StepRows &rows) {
    StepRows r;
    r.B = rows.B;
    r.length.resize(rows.B);
    for (int64_t j = 0; j < rows.B; ++j) r.length[j] = rows.length[rows.order[j]];
    r.order.resize(rows.B);
    std::iota(r.order.begin(), r.order.end(), 0);
    r.place = r.order;
    count_steps(r);
    return r;
}

void pack_steps(const Exec &exec, const StepRows &rows, const void *steps, void *packed, int64_t width, DType dtype) {
    for (int64_t t = 0; t < rows.steps; ++t)
        exec.copy_bytes(offset_bytes(packed, rows.packed[t] * width, dtype),
                        offset_bytes(steps, t * rows.B * width, dtype),
                        rows.n[t] * width * static_cast<int64_t>(size_of(dtype)));
}

void unpack_steps(const Exec &exec, const StepRows &rows, const void *packed, void *steps, int64_t width, DType dtype) {
    for (int64_t t = 0; t < rows.steps; ++t)
        exec.copy_bytes(offset_bytes(steps, t * rows.B * width, dtype),
                        offset_bytes(packed, rows.packed[t] * width, dtype),
                        rows.n[t] * width * static_cast<int64_t>(size_of(dtype)));
}

void zero_idle_rows(const Exec &exec, const StepRows &rows, const TensorView &t) {
    const int64_t row = t.num_elements() / std::max<int64_t>(t.shape[0] * rows.B, 1);
    const int64_t es = static_cast<int64_t>(size_of(t.dtype));
    for (int64_t s = 0; s < rows.steps; ++s)
        if (rows.n[s] < rows.B)
            exec.zero_bytes(offset_bytes(t.data, (s * rows.B + rows.n[s]) * row, t.dtype), (rows.B - rows.n[s]) * row * es);
    zero_steps(exec, t, rows.steps);
}

void to_length_order(const Exec &exec, const StepRows &rows, const TensorView &src, void *dst) {
    const bool per_step = src.rank() == 3;
    const int64_t T = per_step ? src.shape[0] : 1, width = src.shape.back();
    const int64_t bytes = width * static_cast<int64_t>(size_of(src.dtype));
    for (int64_t t = 0; t < T; ++t) {
        const int64_t running = per_step ? (t < rows.steps ? rows.n[t] : 0) : rows.B;
        for (int64_t j = 0; j < running; ++j)
            exec.copy_bytes(offset_bytes(dst, (t * rows.B + j) * width, src.dtype),
                            offset_bytes(src.data, (t * rows.B + rows.order[j]) * width, src.dtype), bytes);
    }
}

void from_length_order(const Exec &exec, const StepRows &rows, const void *src, const TensorView &dst) {
    const bool per_step = dst.rank() == 3;
    const int64_t T = per_step ? dst.shape[0] : 1, width = dst.shape.back();
    const int64_t bytes = width * static_cast<int64_t>(size_of(dst.dtype));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < rows.B; ++b) {
            void *to = offset_bytes(dst.data, (t * rows.B + b) * width, dst.dtype);
            if (!per_step || t < rows.length[b])
                exec.copy_bytes(to, offset_bytes(src, (t * rows.B + rows.place[b]) * width, dst.dtype), bytes);
            else
                exec.zero_bytes(to, bytes);
        }
}

}  // namespace blocklstm::detail
