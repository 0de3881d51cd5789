// ReverseSequence: TF's op with seq_axis 0 and batch_axis 1 — each row of a [T, B, W] tensor
// reversed within its own length — as one launch of gather_rows, for the reverse direction of a
// bidirectional LSTM over rows of their own lengths.
#include <optional>

#include "runtime/src/exec.h"
#include "runtime/src/kernel_table.h"
#include "runtime/src/step_rows.h"
#include "runtime/src/validate.h"

namespace blocklstm {
namespace detail {
namespace {

struct ReverseDims {
    int64_t T, B, W;
};

Checked<ReverseDims> validate_reverse(const TensorView &input, const TensorView &seq_lengths,
                                      const TensorView *output) {
    Validator v("ReverseSequence");
    check_inputs(v, {{"input", input, 3}});
    const ReverseDims d{input.shape[0], input.shape[1], input.shape[2]};
    validate_seq_lengths(v, seq_lengths, d.B, d.T, input.device);
    check_int32_extent(v, "input", "rows (T*B)", saturating_product({d.T, d.B}));
    check_int32_extent(v, "input", "elements", saturating_product({d.T, d.B, d.W}));
    if (output) {
        v.rank("output", *output, 3);
        v.output("output", *output);
        v.shape("output", *output, input.shape);
        v.no_overlaps();
    }
    return checked(v, d, {input.shape});
}

void run_reverse(const Checked<ReverseDims> &c, const TensorView &input, const TensorView &seq_lengths,
                 const TensorView &output) {
    const auto [T, B, W] = c.dims;
    if (T * B * W == 0) return;
    const StepRows rows = step_rows(B, T, &seq_lengths);
    std::vector<int32_t> index(T * B);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < B; ++b) {
            const int64_t len = rows.length[b];
            index[t * B + b] = static_cast<int32_t>((t < len ? len - 1 - t : t) * B + b);
        }
    Exec exec(c.device, c.some_data);
    gather_rows(exec, find_kernel(Family::gather_rows, c.device, c.dtype), index, c.dtype, W, input.data, T * B,
                output.data);
}

}  // namespace
}  // namespace detail

void ReverseSequence(const TensorView &input, const TensorView &seq_lengths, const TensorView &output) {
    detail::run_reverse(detail::validate_reverse(input, seq_lengths, &output), input, seq_lengths, output);
}

Tensor ReverseSequence(const TensorView &input, const TensorView &seq_lengths) {
    const auto c = detail::validate_reverse(input, seq_lengths, nullptr);
    std::optional<detail::Exec> on_inputs_device;  // CUDA: a Tensor is allocated in the current context
    if (c.device == Device::cuda && c.some_data) on_inputs_device.emplace(Device::cuda, c.some_data);
    Tensor out(c.dtype, input.shape, c.device);
    on_inputs_device.reset();
    detail::run_reverse(c, input, seq_lengths, out);
    return out;
}

}  // namespace blocklstm
