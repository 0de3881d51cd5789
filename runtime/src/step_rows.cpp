#include "runtime/src/step_rows.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "HalideRuntime.h"

#include "runtime/src/buf.h"
#include "runtime/src/exec.h"
#include "runtime/src/kernel_args.h"
#include "runtime/src/validate.h"
#include "runtime/src/zero_ranges.h"

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

// The length of row b as seq_lengths holds it (int32 or int64).
int64_t length_at(const TensorView &lengths, int64_t b) {
    return lengths.dtype == DType::i32 ? static_cast<const int32_t *>(lengths.data)[b]
                                       : static_cast<const int64_t *>(lengths.data)[b];
}

}  // namespace

StepRows step_rows(int64_t B, int64_t L, const TensorView *seq_lengths) {
    StepRows r;
    r.B = B;
    r.length.assign(B, L);
    if (seq_lengths) {
        for (int64_t b = 0; b < B; ++b) r.length[b] = std::min(length_at(*seq_lengths, b), L);
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

// seq_lengths (blocklstm's extension): [B] int32 or int64 in host memory, each in [0, T]. Read
// here, before anything is written, and again by step_rows.
void validate_seq_lengths(const Validator &v, const TensorView &lengths, int64_t B, int64_t T, Device device) {
    if (lengths.dtype != DType::i32 && lengths.dtype != DType::i64)
        v.fail_arg("seq_lengths", std::string("has dtype ") + to_string(lengths.dtype) + ": expected int32 or int64");
    if (device == Device::cuda && !cuda_seq_lengths())
        v.fail_arg("seq_lengths", "is given for CUDA tensors: expected none, as seq_lengths on a GPU have not run on one "
                                  "yet (BLOCKLSTM_CUDA_SEQ_LENGTHS=1 runs them; docs/cuda.md)");
    if (lengths.device != Device::cpu)
        v.fail_arg("seq_lengths", std::string("is on device ") + to_string(lengths.device) +
                                      ": expected cpu (host memory; the call reads the lengths to plan its steps)");
    if (lengths.shape != std::vector<int64_t>{B})
        v.fail_arg("seq_lengths", "has shape " + shape_string(lengths.shape) + ": expected [" + std::to_string(B) +
                                      "] (x has batch size " + std::to_string(B) + ")");
    if (B > 0 && lengths.data == nullptr) v.fail_arg("seq_lengths", "has null data: expected " + std::to_string(B) + " values");
    if (reinterpret_cast<uintptr_t>(lengths.data) % size_of(lengths.dtype) != 0)
        v.fail_arg("seq_lengths", "is not aligned: expected an address that is a multiple of " +
                                      std::to_string(size_of(lengths.dtype)) + " bytes (" + to_string(lengths.dtype) + ")");
    for (int64_t b = 0; b < B; ++b) {
        const int64_t len = length_at(lengths, b);
        if (len < 0 || len > T)
            v.fail_arg("seq_lengths", "has " + std::to_string(len) + " at [" + std::to_string(b) + "]: expected a value in [0, " +
                                          std::to_string(T) + "] (x has " + std::to_string(T) + " time steps)");
    }
}

void zero_idle_rows(const Exec &exec, const StepRows &rows, const TensorView &t) {
    const int64_t row = t.num_elements() / std::max<int64_t>(t.shape[0] * rows.B, 1);
    const int64_t es = static_cast<int64_t>(size_of(t.dtype));
    ByteRanges idle;  // the rows each step does not run (rows in length order: one range a step)
    for (int64_t s = 0; s < rows.steps; ++s)
        for (int64_t j = rows.n[s]; j < rows.B; ++j)
            idle.add(offset_bytes(t.data, (s * rows.B + rows.order[j]) * row, t.dtype), row * es);
    if (exec.device() == Device::cpu) {
        idle.zero_on_host();  // streamed, over the loops' threads (zero_ranges.h)
    } else {
        for (std::size_t r = 0; r < idle.size(); ++r) exec.zero_bytes(idle.data(r), idle.bytes(r));
    }
    zero_steps(exec, t, rows.steps);
}

void gather_rows(Exec &exec, const KernelEntry &kernel, const std::vector<int32_t> &index, DType dtype, int64_t width,
                 const void *src, int64_t src_rows, void *dst) {
    const int64_t rows = static_cast<int64_t>(index.size());
    if (width == 0 || rows == 0) return;
    if (src_rows == 0) return exec.zero_bytes(dst, rows * width * static_cast<int64_t>(size_of(dtype)));
    // The index on the call's device (CUDA: a stream-ordered copy of the host vector, which
    // cuMemcpyAsync has staged when it returns).
    Scratch on_device(exec, rows * 4, Scratch::Fill::none);
    exec.copy_bytes(on_device.data(), index.data(), rows * 4);
    Buf in = Buf::matrix(exec.device(), const_cast<void *>(src), dtype, src_rows, width, width);
    Buf idx(exec.device(), on_device.data(), DType::i32, {rows});
    Buf out = Buf::matrix(exec.device(), dst, dtype, rows, width, width);
    run(kernel, exec, GatherRowsArgs{.in = in, .index = idx, .out = out});
}

namespace {

// The steps of a [T, B, width] tensor, 1 for [B, width].
int64_t steps_of(const TensorView &t) { return t.rank() == 3 ? t.shape[0] : 1; }

}  // namespace

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

void to_length_order(Exec &exec, const KernelEntry &kernel, const StepRows &rows, const TensorView &src, void *dst) {
    const bool per_step = src.rank() == 3;
    const int64_t T = steps_of(src), B = rows.B;
    std::vector<int32_t> index(T * B, -1);
    for (int64_t t = 0; t < T; ++t) {
        const int64_t running = per_step ? (t < rows.steps ? rows.n[t] : 0) : B;
        for (int64_t j = 0; j < running; ++j) index[t * B + j] = static_cast<int32_t>(t * B + rows.order[j]);
    }
    gather_rows(exec, kernel, index, src.dtype, src.shape.back(), src.data, T * B, dst);
}

void from_length_order(Exec &exec, const KernelEntry &kernel, const StepRows &rows, const void *src,
                       const TensorView &dst) {
    const bool per_step = dst.rank() == 3;
    const int64_t T = steps_of(dst), B = rows.B;
    std::vector<int32_t> index(T * B, -1);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < B; ++b)
            if (!per_step || t < rows.length[b]) index[t * B + b] = static_cast<int32_t>(t * B + rows.place[b]);
    gather_rows(exec, kernel, index, dst.dtype, dst.shape.back(), src, T * B, dst.data);
}

void to_packed_length_order(Exec &exec, const KernelEntry &gather, const StepRows &rows, const TensorView &src,
                            void *dst) {
    std::vector<int32_t> index(rows.total());
    for (int64_t t = 0; t < rows.steps; ++t)
        for (int64_t j = 0; j < rows.n[t]; ++j)
            index[rows.packed[t] + j] = static_cast<int32_t>(t * rows.B + rows.order[j]);
    gather_rows(exec, gather, index, src.dtype, src.shape.back(), src.data, steps_of(src) * rows.B, dst);
}

namespace {

struct StepsToCaller {
    const StepRows *rows;
    int64_t t0, steps;
    const int64_t *first;  // first(t0 + s) for the steps s that run
    const StepsInLengthOrder *tensors;
};

// Task i: every row of step t0 + i % steps of tensor i / steps.
int copy_step_rows(void *, int i, uint8_t *closure) {
    const auto &c = *reinterpret_cast<const StepsToCaller *>(closure);
    const StepRows &rows = *c.rows;
    const StepsInLengthOrder &tensor = c.tensors[i / c.steps];
    const int64_t s = i % c.steps, t = c.t0 + s;
    const auto row_bytes = static_cast<size_t>(tensor.dst->shape.back()) * size_of(tensor.dst->dtype);
    char *to = static_cast<char *>(tensor.dst->data) + static_cast<size_t>(t * rows.B) * row_bytes;
    for (int64_t b = 0; b < rows.B; ++b, to += row_bytes) {
        if (t < rows.length[b])
            std::memcpy(to, static_cast<const char *>(tensor.src) + static_cast<size_t>(c.first[s] + rows.place[b]) * row_bytes,
                        row_bytes);
        else
            std::memset(to, 0, row_bytes);
    }
    return 0;
}

}  // namespace

void from_length_order_steps(const StepRows &rows, int64_t t0, int64_t t1,
                             const std::function<int64_t(int64_t)> &first,
                             const std::vector<StepsInLengthOrder> &tensors) {
    if (t1 <= t0 || tensors.empty() || rows.B == 0) return;
    std::vector<int64_t> firsts(static_cast<size_t>(t1 - t0), 0);
    for (int64_t t = t0; t < std::min(t1, rows.steps); ++t) firsts[static_cast<size_t>(t - t0)] = first(t);
    StepsToCaller c{&rows, t0, t1 - t0, firsts.data(), tensors.data()};
    halide_do_par_for(nullptr, copy_step_rows, 0, static_cast<int>(static_cast<int64_t>(tensors.size()) * (t1 - t0)),
                      reinterpret_cast<uint8_t *>(&c));
}

}  // namespace blocklstm::detail
