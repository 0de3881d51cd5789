// Which rows of a batch run at each step of a sequence op. Without seq_lengths every row runs
// L = seq_len_max steps; with them row b runs len_b = min(seq_lengths[b], L) steps. The time loops
// take the rows in order of decreasing length, so that the rows still running at step t are the
// first n[t] of that order and each step computes those only; the batched products (the input
// projection, x_grad, w_grad) run on the rows of every step laid one after another, "packed",
// as cuDNN's packed layout, so that no padded step costs a multiply.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace blocklstm::detail {

class Exec;
class Validator;
struct KernelEntry;

struct StepRows {
    int64_t B = 0;
    int64_t steps = 0;            // the longest row's length (L without seq_lengths)
    std::vector<int64_t> length;  // len_b by row
    std::vector<int64_t> order;   // order[j]: the row in place j, by decreasing length (stable)
    std::vector<int64_t> place;   // place[b]: the place of row b in `order`
    std::vector<int64_t> n;       // n[t]: the rows running at step t < steps
    std::vector<int64_t> packed;  // packed[t]: the packed row where step t starts; packed[steps]: all

    int64_t total() const { return packed[steps]; }
    // Some row stops before the longest: the packed rows are not x's [steps, B] rows.
    bool ragged() const { return total() != steps * B; }
    // The rows are already by decreasing length: the time loops run on the tensors as they are.
    bool in_order() const {
        for (int64_t j = 0; j < B; ++j)
            if (order[j] != j) return false;
        return true;
    }
};

// seq_lengths (blocklstm's extension): [B] int32 or int64 in host memory, each in [0, T]; for CUDA
// tensors (`device`) only with cuda_seq_lengths(). Fails naming "seq_lengths".
void validate_seq_lengths(const Validator &v, const TensorView &lengths, int64_t B, int64_t T, Device device);

// Every one of B rows running L steps, or the lengths read from seq_lengths (validated: [B], int32
// or int64, host memory, each in [0, T]), each capped at L.
StepRows step_rows(int64_t B, int64_t L, const TensorView *seq_lengths);

// The same rows by decreasing length: place j holds row order[j] (the call on permuted tensors).
StepRows in_length_order(const StepRows &rows);

// Copies between a [T, B, width] tensor of `dtype` and its packed rows (step t's first n[t]
// rows at packed row packed[t]): one contiguous copy per step, T copies (the rows of a step are
// already a prefix, so no gather is needed).
void pack_steps(const Exec &exec, const StepRows &rows, const void *steps, void *packed, int64_t width, DType dtype);
void unpack_steps(const Exec &exec, const StepRows &rows, const void *packed, void *steps, int64_t width, DType dtype);

// dst's rows r = src's rows index[r], or zeros where index[r] < 0 (src [src_rows, width], dst
// [index.size(), width], of dtype, on the call's device): one launch of `kernel` (gather_rows).
void gather_rows(Exec &exec, const KernelEntry &kernel, const std::vector<int32_t> &index, DType dtype, int64_t width,
                 const void *src, int64_t src_rows, void *dst);

// Zero what no step writes in a [T, B, ...] output: the rows past the n[t] rows of each step t <
// steps (rows order[n[t]].., one range a step where the rows are in length order), and every step
// from `steps` on.
void zero_idle_rows(const Exec &exec, const StepRows &rows, const TensorView &t);

// Between a tensor in the caller's row order and one in length order (dst and src of the same
// shape, [B, width] or [T, B, width]), one launch of `gather` (gather_rows, of the tensor's dtype):
// to_length_order writes every row of dst, the rows that run (every row of a [B, width] tensor)
// from src, zeros elsewhere; from_length_order writes every row of dst, zeros where a row does not run.
void to_length_order(Exec &exec, const KernelEntry &gather, const StepRows &rows, const TensorView &src, void *dst);
void from_length_order(Exec &exec, const KernelEntry &gather, const StepRows &rows, const void *src,
                       const TensorView &dst);

// The running rows of a [T, B, width] tensor `src` in the caller's row order, packed in length
// order into dst (step t's at packed row packed[t]): one launch of `gather`, the rows that run only.
void to_packed_length_order(Exec &exec, const KernelEntry &gather, const StepRows &rows, const TensorView &src,
                            void *dst);

// One tensor of from_length_order_steps: `dst`, a [T, B, width] tensor in the caller's row order
// in host memory, from `src`, which holds step t's running rows in length order from its row
// first(t).
struct StepsInLengthOrder {
    const void *src;
    const TensorView *dst;
};

// Steps [t0, t1) of every tensor's dst from its src, zeros where a row does not run (every row of
// a step past rows.steps), on the CPU: one parallel loop of row copies over (tensor, step) on the
// kernels' threads. The backward's x_grad goes into the caller's rows this way; a gather_rows
// launch per step cost 12 us for 64 KB (when the forward's outputs went this way, a chunk of
// steps at a time: BlockLSTM at 200,16,256 with lengths spread over [T/4, T], 4.2 ms of a 27 ms
// call against 0.6 ms).
void from_length_order_steps(const StepRows &rows, int64_t t0, int64_t t1,
                             const std::function<int64_t(int64_t)> &first,
                             const std::vector<StepsInLengthOrder> &tensors);

}  // namespace blocklstm::detail
