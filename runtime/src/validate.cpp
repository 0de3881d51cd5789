// Argument checks shared by the ops. Every check runs before any kernel; the first failure throws
// blocklstm::Error naming the op, the argument, what was expected and what was given.
#include <algorithm>
#include <climits>
#include <cstdio>

#include "runtime/src/exec.h"
#include "runtime/src/products.h"
#include "runtime/src/validate.h"

namespace blocklstm::detail {

std::string shape_string(const std::vector<int64_t> &shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ',';
        s += shape[i] < 0 ? std::string("?") : std::to_string(shape[i]);
    }
    return s + "]";
}

void check_inputs(Validator &v, std::initializer_list<InputArg> inputs) {
    for (const InputArg &a : inputs) v.rank(a.name, a.tensor, a.rank);
    for (const InputArg &a : inputs) v.tensor(a.name, a.tensor);
}

void check_state_and_weights(const Validator &v, const TensorView &cs_prev,
                             const TensorView &h_prev, const TensorView &w, const TensorView &wci,
                             const TensorView &wcf, const TensorView &wco, const TensorView &b,
                             int64_t B, int64_t I, int64_t H) {
    v.shape("cs_prev", cs_prev, {B, H});
    v.shape("h_prev", h_prev, {B, H});
    v.shape("w", w, {I + H, 4 * H});
    v.shape("wci", wci, {H});
    v.shape("wcf", wcf, {H});
    v.shape("wco", wco, {H});
    v.shape("b", b, {4 * H});
    // The cell ops run as one step of BlockLSTM, so they pack w the same way.
    check_int32_extent(v, "w", "the recurrent weights in panels of 16 columns",
                       std::max(panel_elements(4 * H, H), panel_elements(H, 4 * H)));
}

void Validator::fail(const std::string &what) const { throw Error(std::string(op_) + ": " + what); }

void Validator::fail_arg(const char *arg, const std::string &what) const {
    fail(std::string("argument '") + arg + "' " + what);
}

void Validator::rank(const char *arg, const TensorView &t, int expected) const {
    if (t.rank() != expected) {
        // "must be rank N" is the fragment TF's own error tests match on.
        fail_arg(arg, "must be rank " + std::to_string(expected) + ": expected rank " +
                          std::to_string(expected) + ", got rank " + std::to_string(t.rank()) +
                          " (shape " + shape_string(t.shape) + ")");
    }
}

void Validator::shape(const char *arg, const TensorView &t, const std::vector<int64_t> &expected) const {
    rank(arg, t, static_cast<int>(expected.size()));
    for (std::size_t d = 0; d < expected.size(); ++d) {
        if (expected[d] >= 0 && t.shape[d] != expected[d]) {
            fail_arg(arg, "has shape " + shape_string(t.shape) + ": expected " + shape_string(expected));
        }
    }
}

int64_t saturating_product(std::initializer_list<int64_t> factors) {
    int64_t p = 1;
    for (int64_t f : factors) {
        if (__builtin_mul_overflow(p, f, &p)) return INT64_MAX;
    }
    return p;
}

void check_int32_extent(const Validator &v, const char *arg, const char *what, int64_t value) {
    if (value > INT32_MAX) {
        v.fail_arg(arg, std::string("needs ") + what + " of " + std::to_string(value) +
                            " elements: expected at most " + std::to_string(INT32_MAX) +
                            " (the kernels index with int32)");
    }
}

void Validator::tensor(const char *arg, const TensorView &t) {
    if (!is_float(t.dtype)) {
        fail_arg(arg, "has dtype " + (t.dtype == DType::i32 || t.dtype == DType::i64 ? std::string(to_string(t.dtype))
                                          : "value " + std::to_string(static_cast<int>(t.dtype))) +
                          ": expected float32, float16 or bfloat16");
    }
    if (t.device != Device::cpu && t.device != Device::cuda) {
        fail_arg(arg, "has device value " + std::to_string(static_cast<int>(t.device)) +
                          ": expected cpu or cuda");
    }
    if (!have_dtype_) {
        dtype_ = t.dtype;
        device_ = t.device;
        have_dtype_ = true;
    } else if (t.dtype != dtype_) {
        fail_arg(arg, std::string("has dtype ") + to_string(t.dtype) + ": expected " +
                          to_string(dtype_) + " like the op's other float tensors");
    } else if (t.device != device_) {
        fail_arg(arg, std::string("is on device ") + to_string(t.device) + ": expected " +
                          to_string(device_) + " like the op's other tensors");
    }
    int64_t elements = 1;
    for (int64_t d : t.shape) {
        if (d < 0) {
            std::string given;  // as given: shape_string writes a negative (expected) size as '?'
            for (int64_t e : t.shape) given += (given.empty() ? "" : ",") + std::to_string(e);
            fail_arg(arg, "has shape [" + given + "]: expected no negative dimension");
        }
        // Also for an empty tensor: its sizes enter the other arguments' expected shapes (I + H,
        // 4 * H), which stay far from int64's limit this way.
        if (d > INT32_MAX) {
            fail_arg(arg, "has shape " + shape_string(t.shape) + ": expected every dimension at most " +
                              std::to_string(INT32_MAX) + " (the kernels index with int32)");
        }
        if (__builtin_mul_overflow(elements, d, &elements)) elements = INT64_MAX;
    }
    if (elements > INT32_MAX) {
        fail_arg(arg, "has shape " + shape_string(t.shape) + " = " + std::to_string(elements) +
                          " elements: expected at most " + std::to_string(INT32_MAX) +
                          " (the kernels index with int32)");
    }
    if (elements > 0 && t.data == nullptr) {
        fail_arg(arg, "has a null data pointer: expected data for " + std::to_string(elements) +
                          " elements");
    }
    if (elements > 0 && reinterpret_cast<uintptr_t>(t.data) % size_of(t.dtype) != 0) {
        // A misaligned float: a fault on a GPU (a sticky one, which loses the context) and UB here.
        char address[32];
        std::snprintf(address, sizeof address, "%p", t.data);
        fail_arg(arg, std::string("has data at ") + address + ": expected an address aligned to " +
                          std::to_string(size_of(t.dtype)) + " bytes (" + to_string(t.dtype) + ")");
    }
    if (elements > 0 && t.device == Device::cuda) {
        // Device memory is checked with the driver, so a host pointer marked cuda (or memory of
        // another GPU) is an error here, not a fault in a kernel.
        std::string why;
        const int ordinal = cuda::device_of(t.data, &why);
        if (ordinal < 0) fail_arg(arg, "is on device cuda, but " + why);
        if (cuda_ordinal_ < 0) {
            cuda_ordinal_ = ordinal;
        } else if (ordinal != cuda_ordinal_) {
            fail_arg(arg, "is on CUDA device " + std::to_string(ordinal) + ": expected device " +
                              std::to_string(cuda_ordinal_) + " like the op's other tensors");
        }
    }
    if (elements > 0 && !first_data_) first_data_ = t.data;
    const auto begin = reinterpret_cast<uintptr_t>(t.data);
    ranges_.push_back({arg, begin, begin + static_cast<uintptr_t>(elements) * size_of(t.dtype), false});
}

void Validator::output(const char *arg, const TensorView &t) {
    tensor(arg, t);
    ranges_.back().is_output = true;
}

void Validator::no_overlaps() const {
    for (std::size_t a = 0; a < ranges_.size(); ++a) {
        if (!ranges_[a].is_output || ranges_[a].begin == ranges_[a].end) continue;
        for (std::size_t b = 0; b < ranges_.size(); ++b) {
            if (a == b || ranges_[b].begin == ranges_[b].end) continue;
            if (ranges_[a].begin < ranges_[b].end && ranges_[b].begin < ranges_[a].end) {
                fail_arg(ranges_[a].arg, std::string("(an output) overlaps argument '") +
                                             ranges_[b].arg + "': expected separate memory");
            }
        }
    }
}

void validate_forward_outputs(Validator &v, const LSTMOutputs<TensorView> *out, const std::vector<int64_t> &shape,
                              const std::vector<int64_t> &final_state) {
    if (!out) return;
    const std::pair<const char *, const TensorView *> five[] = {
        {"i", &out->i}, {"f", &out->f}, {"o", &out->o}, {"ci", &out->ci}, {"co", &out->co}};
    const bool five_left_out = left_out(out->i);
    for (const auto &[name, t] : five)
        if (left_out(*t) != five_left_out)
            v.fail_arg(name, std::string(five_left_out ? "is given while 'i' is left out" : "is left out while 'i' is given") +
                                 ": expected all of i, f, o, ci, co given, or all left out (only cs and h written)");
    if (!five_left_out) return validate_outputs(v, out, std::vector<std::vector<int64_t>>(7, shape));
    for (const auto &[name, t] : {std::pair<const char *, const TensorView *>{"cs", &out->cs}, {"h", &out->h}}) {
        const bool final = t == &out->cs && !final_state.empty() && t->shape.size() == final_state.size();
        if (!final) v.rank(name, *t, static_cast<int>(shape.size()));
        v.output(name, *t);
        if (final && v.device() != Device::cpu)
            v.fail_arg(name, "has shape " + shape_string(t->shape) + ", a final state: written on the CPU only "
                             "(expected " + shape_string(shape) + " on CUDA)");
        v.shape(name, *t, final ? final_state : shape);
    }
    v.no_overlaps();
}

}  // namespace blocklstm::detail
