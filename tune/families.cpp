#include "tune/families.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "generators/interface.h"
#include "runtime/src/plans.h"
#include "runtime/src/weight_grad_chunks.h"
#include "schedules/tuning.h"
#include "schedules/panel_layout.h"

namespace blocklstm::tune {

using Halide::Buffer;

std::string LstmShape::text() const {
    return std::to_string(T) + "," + std::to_string(B) + "," + std::to_string(I) + "," + std::to_string(H);
}

namespace {

// A float32 buffer of the given extents (innermost first), uniform in [lo, hi).
Buffer<> random(std::mt19937 &rng, std::vector<int> extents, float lo = -1.0f, float hi = 1.0f) {
    Buffer<float> b(extents);
    std::uniform_real_distribution<float> u(lo, hi);
    b.for_each_value([&](float &v) { v = u(rng); });
    return b;
}

Buffer<> empty_like(std::vector<int> extents) { return Buffer<float>(extents); }

// An output of no elements with a host pointer, as the runtime passes one: Halide takes a call
// whose output has no host pointer for a bounds query and computes nothing.
Buffer<> no_elements() {
    Buffer<float> one(1);
    one.crop(0, 0, 0);
    return one;
}

// Packed weight panels of a [depth, cols] operand (generators/panels.cpp): panel_count(cols)
// panels of kPanelCols columns, zero past the last column as the runtime packs them.
Buffer<> random_panels(std::mt19937 &rng, int cols, int depth) {
    Buffer<float> b(panels::kPanelCols, depth, panels::panel_count(cols));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    b.for_each_element([&](int xi, int k, int xo) {
        b(xi, k, xo) = xo * panels::kPanelCols + xi < cols ? u(rng) : 0.0f;
    });
    return b;
}

// The knobs a schedule reads, by the products it tiles (families.inc) and the device: the knob
// rows' (schedules/tuning.h).
template <typename Tuning>
std::vector<std::string> knobs_reading(const std::vector<schedules::Knob<Tuning>> &knobs, kernel::Products products) {
    std::vector<std::string> names;
    for (const auto &k : knobs)
        if (k.reads(products)) names.push_back(k.name);
    return names;
}
std::vector<std::string> knobs_of(kernel::Products products, bool gpu) {
    return gpu ? knobs_reading(schedules::cuda_knobs(), products) : knobs_reading(schedules::cpu_knobs(), products);
}

// How a family's float32 kernel on a device holds the recurrent weights (kernels.inc).
std::string weights_of(kernel::Family family, bool gpu) {
    struct Line {
        const char *family, *backend, *dtype, *weights;
    };
    static const Line lines[] = {
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, weights) {#family, #backend, #dtype, #weights},
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL
    };
    for (const Line &l : lines)
        if (kernel::name(family) == std::string(l.family) && std::string(l.backend) == (gpu ? "cuda" : "cpu") &&
            std::string(l.dtype) == "f32")
            return l.weights;
    throw std::logic_error(std::string("kernels.inc has no float32 ") + (gpu ? "cuda" : "cpu") + " kernel of " +
                           kernel::name(family));
}

// A tuned family: the record's generator and params, its float32 kernel's weights, its
// knobs, and its calls per op from the plans of the steps it stands for. `peephole`: its
// peephole variant (true) or its plain one (false), counted only in the ops with (without)
// peepholes; unset: its plain kernel, standing for both.
Family family(const std::string &name, kernel::Family id, bool gpu, std::vector<plan::Site> sites,
              std::function<Call(const LstmShape &, std::mt19937 &)> make, std::optional<bool> peephole = std::nullopt,
              bool by_default = true) {
    const kernel::FamilyRecord &r = kernel::record(id);
    Family f;
    f.name = name;
    f.kernel = kernel::name(id);
    f.peephole = peephole.value_or(false);
    f.generator = r.generator();
    std::string params = r.generator_params;
    std::stringstream words(params.substr(std::min(params.size(), f.generator.size() + 1)));
    for (std::string word; words >> word;) f.params[word.substr(0, word.find('='))] = word.substr(word.find('=') + 1);
    f.params["dtype"] = "float32";
    if (const std::string w = weights_of(id, gpu); w != "none") f.params["weights"] = w;
    // The layout of the kernels the ops run (kernels.inc): on the GPU one kernel per layout (ICFO's
    // timed); on the CPU the generators' default (`any` where a family has layouts).
    if (gpu && r.has_layout_variants()) f.params["layout"] = "icfo";
    if (peephole.value_or(false)) f.params["use_peephole"] = "true";
    f.knobs = knobs_of(r.products, gpu);
    f.make = std::move(make);
    auto calls = [id, gpu, sites, peephole](plan::Kind kind, bool op_peephole) {
        return [=](const LstmShape &s) {
            if (peephole && *peephole != op_peephole) return 0;
            int n = 0;
            for (const plan::Step &step : plan::plan_of(kind, gpu ? Device::cuda : Device::cpu, DType::f32))
                if (step.family == id && std::find(sites.begin(), sites.end(), step.site) != sites.end())
                    n += int(plan::count(step.times, s.T, s.B, s.H));
            return n;
        };
    };
    f.forward_calls = calls(plan::Kind::forward, false);
    f.grad_calls = calls(plan::Kind::sequence_grad, false);
    f.grad_peephole_calls = calls(plan::Kind::sequence_grad, true);
    f.by_default = by_default;
    return f;
}

// The buffers of each generator's call at a shape, as the runtime passes them
// (runtime/src/ops_sequence.cpp). The per-step products read W_h in packed panels on the CPU and
// as a matrix on the GPU.

// xw = x . W_x + b (the input projection; W_x in panels on the CPU).
Call input_projection(const LstmShape &s, std::mt19937 &rng, bool panels) {
    namespace n = kernel::args::gemm;
    Call c;
    c.buffers[n::a] = random(rng, {s.I, s.T * s.B});
    c.buffers[n::b] = panels ? random_panels(rng, 4 * s.H, s.I) : random(rng, {4 * s.H, s.I});
    c.buffers[n::bias] = random(rng, {4 * s.H});
    c.buffers[n::c] = empty_like({4 * s.H, s.T * s.B});
    return c;
}

// x_grad = dgates . W_x^T (W_x^T in panels on the CPU).
Call input_grad(const LstmShape &s, std::mt19937 &rng, bool panels) {
    namespace n = kernel::args::gemm;
    Call c;
    c.buffers[n::a] = random(rng, {4 * s.H, s.T * s.B});
    c.buffers[n::b] = panels ? random_panels(rng, s.I, 4 * s.H) : random(rng, {s.I, 4 * s.H});
    c.buffers[n::c] = empty_like({s.I, s.T * s.B});
    return c;
}

// caller_rows (the CPU's seq_fwd_step_rows): each row read and written at its caller row, here
// the identity, as the runtime passes it where the rows are in length order.
Call forward_step(const LstmShape &s, std::mt19937 &rng, bool panels, bool caller_rows) {
    namespace n = kernel::args::seq_fwd_step;
    Call c;
    if (caller_rows) {
        Buffer<int32_t> order(s.B);
        order.for_each_element([&](int b) { order(b) = b; });
        c.buffers[n::order] = order;
    }
    c.buffers[n::xw] = random(rng, {4 * s.H, s.B});
    c.buffers[n::h_prev] = random(rng, {s.H, s.B});
    c.buffers[n::w_h] = panels ? random_panels(rng, 4 * s.H, s.H) : random(rng, {4 * s.H, s.H});  // W_h [H, 4H]
    c.buffers[n::cs_prev] = random(rng, {s.H, s.B});
    for (const char *p : {n::wci, n::wcf, n::wco}) c.buffers[p] = random(rng, {s.H});
    c.scalars[n::forget_bias] = 1.0f;
    c.scalars[n::cell_clip] = 3.0f;
    c.scalars[n::gate_order] = 0;  // icfo, for a kernel compiled for any layout
    for (int k = 0; k < 7; ++k) c.buffers[kernel::tuple_element(n::lstm, k)] = empty_like({s.H, s.B});
    c.buffers[n::gates] = empty_like({4 * s.H, s.B});
    return c;
}

// caller_rows (the CPU's seq_bwd_step_rows): each row read at its caller row, here the identity,
// as the runtime passes it where the rows are in length order.
Call backward_step(const LstmShape &s, std::mt19937 &rng, bool panels, bool caller_rows) {
    namespace n = kernel::args::seq_bwd_step;
    Call c;
    if (caller_rows) {
        Buffer<int32_t> order(s.B);
        order.for_each_element([&](int b) { order(b) = b; });
        c.buffers[n::order] = order;
    }
    c.buffers[n::dgates_next] = random(rng, {4 * s.H, s.B});
    c.buffers[n::w_h_t] = panels ? random_panels(rng, s.H, 4 * s.H) : random(rng, {s.H, 4 * s.H});  // W_h^T [4H, H]
    for (const char *p : {n::h_grad, n::cs_grad, n::dcs_carry, n::cs_prev, n::ci, n::co}) c.buffers[p] = random(rng, {s.H, s.B});
    for (const char *p : {n::i, n::f, n::o}) c.buffers[p] = random(rng, {s.H, s.B}, 0.0f, 1.0f);
    for (const char *p : {n::wci, n::wcf, n::wco}) c.buffers[p] = random(rng, {s.H});
    c.buffers[n::dgates] = empty_like({s.H, 4, s.B});
    c.buffers[n::dcs_carry_out] = empty_like({s.H, s.B});
    c.buffers[n::dh] = empty_like({s.H, s.B});
    c.scalars[n::gate_order] = 0;  // icfo, for a kernel compiled for any layout
    return c;
}

// The reductions after the backward loop. On the CPU b_grad comes with w_grad's product, so the
// runtime passes it empty (with a host pointer).
Call reductions(const LstmShape &s, std::mt19937 &rng, bool peephole, bool b_grad_elsewhere) {
    namespace n = kernel::args::seq_bwd_reduce;
    Call c;
    c.buffers[n::dgates] = random(rng, {4 * s.H, s.T * s.B});
    c.buffers[n::cs] = random(rng, {s.H, s.B, s.T});
    c.buffers[n::cs_prev] = random(rng, {s.H, s.B});
    c.buffers[n::dcs_carry] = random(rng, {s.H, s.B});
    c.buffers[n::b_grad] = b_grad_elsewhere ? no_elements() : empty_like({4 * s.H});
    c.buffers[n::cs_prev_grad] = empty_like({s.H, s.B});
    if (peephole) {
        for (int k = 0; k < 3; ++k) c.buffers[kernel::tuple_element(n::peephole_grads, k)] = empty_like({s.H});
        c.scalars[n::gate_order] = 0;  // icfo, for a kernel compiled for any layout
    }
    return c;
}

}  // namespace

std::vector<Family> cpu_families() {
    using namespace std::placeholders;
    using kernel::Family;
    using plan::Site;
    return {
        family("gemm_nn_bias", Family::gemm_nn_bias, false, {Site::input_projection},
               std::bind(input_projection, _1, _2, true)),
        family("seq_fwd_step", Family::seq_fwd_step_rows, false, {Site::forward_step},
               std::bind(forward_step, _1, _2, true, true)),
        family("seq_bwd_step", Family::seq_bwd_step_rows, false, {Site::backward_step},
               std::bind(backward_step, _1, _2, true, true)),
        family("gemm_nn", Family::gemm_nn, false, {Site::x_grad}, std::bind(input_grad, _1, _2, true)),
        // w_grad's product (and b_grad's column sums) over one chunk of dgates.
        family("gemm_tn_panels", Family::gemm_tn_panels, false, {Site::w_grad},
               [](const LstmShape &s, std::mt19937 &rng) {
                   namespace n = kernel::args::gemm;
                   const int rows = std::min<int>(s.T * s.B, int(detail::weight_grad_chunk_rows(s.B, s.H)));
                   Call c;
                   c.buffers[n::a] = random(rng, {s.I, rows});
                   c.buffers[n::a_h] = random(rng, {s.H, rows});
                   c.buffers[n::b] = random_panels(rng, 4 * s.H, rows);
                   c.buffers[n::c_in] = random(rng, {4 * s.H, s.I + s.H});
                   c.buffers[n::sums_in] = random(rng, {4 * s.H});
                   c.scalars[n::accumulate] = 1.0f;
                   c.buffers[n::c] = empty_like({4 * s.H, s.I + s.H});
                   c.buffers[n::sums] = empty_like({4 * s.H});
                   return c;
               }),
        // The peephole sums after the backward loop (without peepholes there is nothing to sum:
        // b_grad comes with w_grad's product on the CPU).
        family("seq_bwd_reduce", Family::seq_bwd_reduce, false, {Site::reductions},
               std::bind(reductions, _1, _2, true, true), true),
    };
}

std::vector<Family> cpu_op_kernels() {
    std::vector<Family> out;
    auto add = [&](kernel::Family id) {
        const kernel::FamilyRecord &r = kernel::record(id);
        if (knobs_of(r.products, false).empty()) return;  // the same kernel in every table
        for (bool peephole : {false, true}) {
            if (peephole && !r.has_peephole_variants()) break;
            const std::string name = std::string(kernel::name(id)) + (peephole ? "_peephole" : "");
            const std::optional<bool> variant = r.has_peephole_variants() ? std::optional(peephole) : std::nullopt;
            if (std::none_of(out.begin(), out.end(), [&](const Family &f) { return f.name == name; }))
                out.push_back(family(name, id, false, {}, nullptr, variant));
        }
    };
    for (plan::Kind kind : {plan::Kind::forward, plan::Kind::sequence_grad})
        for (const plan::Step &step : plan::plan_of(kind, Device::cpu, DType::f32)) add(step.family);
    return out;
}

std::vector<Family> gpu_families() {
    using namespace std::placeholders;
    using kernel::Family;
    using plan::Site;
    return {
        // The per-step products with their gate math: the recurrence, T launches per op.
        family("seq_fwd_step", Family::seq_fwd_step, true, {Site::forward_step},
               std::bind(forward_step, _1, _2, false, false)),
        family("seq_bwd_step", Family::seq_bwd_step, true, {Site::backward_step},
               std::bind(backward_step, _1, _2, false, false)),
        // After the recurrence: b_grad and cs_prev_grad, and with peepholes their three sums.
        family("seq_bwd_reduce", Family::seq_bwd_reduce, true, {Site::reductions},
               std::bind(reductions, _1, _2, false, false), false),
        family("seq_bwd_reduce_peephole", Family::seq_bwd_reduce, true, {Site::reductions},
               std::bind(reductions, _1, _2, true, false), true),
        // The batched products, which cuBLAS does where it loads (so not tuned unless asked for
        // with --families): the input projection, x_grad, and w_grad's two products (x and
        // h_prev_seq; I = H at the default shapes). h_prev_grad's product of B rows is left out.
        family("gemm_nn_bias", Family::gemm_nn_bias, true, {Site::input_projection},
               std::bind(input_projection, _1, _2, false), std::nullopt, false),
        family("gemm_nn", Family::gemm_nn, true, {Site::x_grad}, std::bind(input_grad, _1, _2, false), std::nullopt,
               false),
        family("gemm_tn", Family::gemm_tn, true, {Site::w_grad_x, Site::w_grad_h},
               [](const LstmShape &s, std::mt19937 &rng) {
                   Call c;
                   c.buffers[kernel::args::gemm::a] = random(rng, {s.I, s.T * s.B});
                   c.buffers[kernel::args::gemm::b] = random(rng, {4 * s.H, s.T * s.B});
                   c.buffers[kernel::args::gemm::c] = empty_like({4 * s.H, s.I});
                   return c;
               },
               std::nullopt, false),
    };
}

std::vector<Family> select_families(const std::vector<Family> &all, const std::vector<std::string> &only) {
    std::vector<Family> out;
    if (only.empty()) {
        std::copy_if(all.begin(), all.end(), std::back_inserter(out), [](const Family &f) { return f.by_default; });
        return out;
    }
    for (const std::string &name : only) {
        auto it = std::find_if(all.begin(), all.end(), [&](const Family &f) { return f.name == name; });
        if (it == all.end()) {
            std::string names;
            for (const Family &f : all) names += (names.empty() ? "" : ", ") + f.name;
            throw std::invalid_argument("--families: unknown family '" + name + "' (expected: " + names + ")");
        }
        out.push_back(*it);
    }
    return out;
}

}  // namespace blocklstm::tune
