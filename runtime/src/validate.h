// Validation of an op call's arguments, and its output bundles.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/src/exec.h"
#include "schedules/panel_layout.h"

namespace blocklstm::detail {

// Checks of one op's arguments, collected in the order they are made; the first failure throws
// blocklstm::Error naming the op and the argument.
class Validator {
public:
    explicit Validator(const char *op) : op_(op) {}

    [[noreturn]] void fail(const std::string &what) const;
    [[noreturn]] void fail_arg(const char *arg, const std::string &what) const;

    // rank, then every dim; dims < 0 in `expected` are not checked.
    void shape(const char *arg, const TensorView &t, const std::vector<int64_t> &expected) const;
    void rank(const char *arg, const TensorView &t, int expected) const;
    // dtype and device of every float tensor (the first one given sets the dtype), a non-null
    // pointer when there is data, and every extent the kernels index with int32.
    void tensor(const char *arg, const TensorView &t);
    void output(const char *arg, const TensorView &t);
    // No output may overlap an input or another output.
    void no_overlaps() const;
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    const void *first_data() const { return first_data_; }  // a pointer on the call's device

private:
    struct Range {
        const char *arg;
        uintptr_t begin, end;
        bool is_output;
    };
    const char *op_;
    DType dtype_ = DType::f32;
    Device device_ = Device::cpu;
    int cuda_ordinal_ = -1;
    const void *first_data_ = nullptr;
    bool have_dtype_ = false;
    std::vector<Range> ranges_;
};

std::string shape_string(const std::vector<int64_t> &shape);

// Input checks in TF's order: every rank first, then dtype, device, data and int32 limits.
struct InputArg {
    const char *name;
    const TensorView &tensor;
    int rank;
};
void check_inputs(Validator &v, std::initializer_list<InputArg> inputs);

// The state and weight shapes every op shares: cs_prev, h_prev [B,H], w [I+H,4H], wci, wcf,
// wco [H], b [4H].
void check_state_and_weights(const Validator &v, const TensorView &cs_prev,
                             const TensorView &h_prev, const TensorView &w, const TensorView &wci,
                             const TensorView &wcf, const TensorView &wco, const TensorView &b,
                             int64_t B, int64_t I, int64_t H);

// The forward activations and output gradients a grad op takes (acts.each(fn(name, tensor))):
// ranks, then tensor checks, then each exactly `shape`.
template <typename Activations>
void check_activations(Validator &v, const Activations &acts, const std::vector<int64_t> &shape) {
    const int rank = static_cast<int>(shape.size());
    acts.each([&](const char *name, const TensorView &t) { v.rank(name, t, rank); });
    acts.each([&](const char *name, const TensorView &t) { v.tensor(name, t); });
    acts.each([&](const char *name, const TensorView &t) { v.shape(name, t, shape); });
}

// ---- Output bundles ---------------------------------------------------------------------------------

template <typename Bundle, template <typename> class Of>
constexpr bool is_bundle = std::is_same_v<Bundle, Of<TensorView>> || std::is_same_v<Bundle, Of<Tensor>>;

// fn(name, tensor) for every output of a bundle (const or not), in TF's output order.
template <typename Out, typename F>
void each_output(Out &&out, F &&fn) {
    using B = std::decay_t<Out>;
    if constexpr (is_bundle<B, LSTMOutputs>) {
        fn("i", out.i), fn("cs", out.cs), fn("f", out.f), fn("o", out.o), fn("ci", out.ci),
            fn("co", out.co), fn("h", out.h);
    } else if constexpr (is_bundle<B, LSTMBlockCellGradOutputs>) {
        fn("cs_prev_grad", out.cs_prev_grad), fn("dicfo", out.dicfo),
            fn("wci_grad", out.wci_grad), fn("wcf_grad", out.wcf_grad),
            fn("wco_grad", out.wco_grad);
    } else {
        static_assert(is_bundle<B, BlockLSTMGradOutputs>, "not an output bundle");
        fn("x_grad", out.x_grad), fn("cs_prev_grad", out.cs_prev_grad),
            fn("h_prev_grad", out.h_prev_grad), fn("w_grad", out.w_grad),
            fn("wci_grad", out.wci_grad), fn("wcf_grad", out.wcf_grad),
            fn("wco_grad", out.wco_grad), fn("b_grad", out.b_grad);
    }
}

// The outputs (when given) in order: rank, tensor checks, exact shape; then no overlaps.
template <typename Outputs>
void validate_outputs(Validator &v, const Outputs *out,
                      const std::vector<std::vector<int64_t>> &shapes) {
    if (!out) return;
    std::size_t k = 0;
    each_output(*out, [&](const char *name, const TensorView &t) {
        v.rank(name, t, static_cast<int>(shapes[k].size()));
        v.output(name, t);
        v.shape(name, t, shapes[k++]);
    });
    v.no_overlaps();
}

// A forward output left out: i, f, o, ci, co of a call that needs only cs and h (inference), given
// as a TensorView without data or shape.
inline bool left_out(const TensorView &t) { return t.data == nullptr && t.shape.empty(); }

// A forward op's outputs (when given) as validate_outputs checks them, all seven of `shape`, or
// with i, f, o, ci and co all left out, cs and h alone (some of the five left out is bad input);
// then cs may instead be of `final_state` (a sequence op's [B, H]: each row's last cs, CPU only).
void validate_forward_outputs(Validator &v, const LSTMOutputs<TensorView> *out, const std::vector<int64_t> &shape,
                              const std::vector<int64_t> &final_state = {});

// An owning bundle of zeroed tensors of `shapes` (in output order) on `device`, and views of one.
template <template <typename> class Bundle>
Bundle<Tensor> allocate_outputs(DType dtype, Device device,
                                const std::vector<std::vector<int64_t>> &shapes) {
    Bundle<Tensor> out;
    std::size_t k = 0;
    each_output(out, [&](const char *, Tensor &t) { t = Tensor(dtype, shapes[k++], device); });
    return out;
}
template <template <typename> class Bundle>
Bundle<TensorView> views(const Bundle<Tensor> &owned) {
    std::vector<TensorView> v;
    each_output(owned, [&](const char *, const Tensor &t) { v.push_back(t.view()); });
    Bundle<TensorView> out;
    std::size_t k = 0;
    each_output(out, [&](const char *, TensorView &t) { t = v[k++]; });
    return out;
}

// What validating one op call found: its dimensions, the dtype and device of its tensors, a
// pointer into its memory (CUDA: it selects the device) and the shapes of its outputs.
template <typename Dims>
struct Checked {
    Dims dims;
    DType dtype;
    Device device;
    const void *some_data;
    std::vector<std::vector<int64_t>> output_shapes;
};

template <typename Dims>
Checked<Dims> checked(const Validator &v, const Dims &d, std::vector<std::vector<int64_t>> shapes) {
    return {d, v.dtype(), v.device(), v.first_data(), std::move(shapes)};
}

// The allocating form of every op: `validate(nullptr)` checks the inputs (no outputs given), the
// outputs are allocated (zeroed, on the inputs' device) and `run(views)` runs the op into them.
template <template <typename> class Bundle, typename Validate, typename Run>
Bundle<Tensor> into_new_outputs(Validate &&validate, Run &&run) {
    const auto c = validate(static_cast<const Bundle<TensorView> *>(nullptr));
    std::optional<Exec> on_inputs_device;  // CUDA: a Tensor is allocated in the current context
    if (c.device == Device::cuda && c.some_data) on_inputs_device.emplace(Device::cuda, c.some_data);
    Bundle<Tensor> out = allocate_outputs<Bundle>(c.dtype, c.device, c.output_shapes);
    on_inputs_device.reset();
    run(views(out));
    return out;
}

// An op call's checks without the call: each throws what the call would throw (invoke_side_by_side
// checks both of its calls before either runs). The tensors in the op's input order (ops.h), the
// sequence ops' seq_lengths apart (nullptr: none).
void check_sequence_forward(const char *op, int64_t seq_len_max, const std::vector<TensorView> &in,
                            const LSTMOutputs<TensorView> &out, const TensorView *seq_lengths);
void check_sequence_grad(const char *op, int64_t seq_len_max, const std::vector<TensorView> &in,
                         const BlockLSTMGradOutputs<TensorView> &out, const TensorView *seq_lengths);
void check_cell_forward(const std::vector<TensorView> &in, const LSTMOutputs<TensorView> &out);
void check_cell_grad(const std::vector<TensorView> &in, const LSTMBlockCellGradOutputs<TensorView> &out);

// The product of sizes, saturated at INT64_MAX instead of overflowing.
int64_t saturating_product(std::initializer_list<int64_t> factors);

// Products of sizes that become Halide extents or strides must fit int32; `arg` is the input
// whose size sets the product.
void check_int32_extent(const Validator &v, const char *arg, const char *what, int64_t value);

// The value of a float attr as the kernels see it: TF converts forget_bias and cell_clip to the
// element type first, so float16 ops use the half-rounded value.
float attr_in_dtype(float value, DType dtype);

}  // namespace blocklstm::detail
