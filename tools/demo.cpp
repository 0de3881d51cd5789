// `blocklstm demo`: trains a small peephole LSTM with BlockLSTM / BlockLSTMGrad on next-value
// prediction of noisy sums of sines, then checks one BlockLSTMGrad against the float64 reference.
//
// Model: h = BlockLSTM(x) (peephole, forget_bias 1, cell_clip 0 = off: TF's backward treats the
// clip as identity, so with clipping on the gradient would not be the loss's exact gradient);
// y[t,b] = h[t,b,:]·V + c; loss = mean over (t,b) of (y - target)^2. The readout and its gradient
// (which gives BlockLSTMGrad's h_grad; cs_grad is zero) and Adam are plain C++.
#include <deque>
#include <blocklstm/blocklstm.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "cli.h"
#include "progress.h"
#include "tests/reference/reference.h"

namespace blocklstm::cli {
namespace {

constexpr int64_t T = 50, B = 16, I = 1, H = 32;
constexpr float kLearningRate = 0.01f;
constexpr float kClipNorm = 1.0f;  // global gradient-norm clipping for Adam's input
constexpr double kPi = 3.14159265358979323846;


struct Batch {
    Tensor x;                    // [T,B,I] f32
    std::vector<float> target;   // [T,B]
};

// Each row: a sum of three sines with random amplitude, frequency and phase plus Gaussian noise;
// input x_t = s_t, target s_{t+1}.
Batch make_batch(Rng &rng) {
    Batch batch{Tensor(DType::f32, {T, B, I}), std::vector<float>(T * B)};
    float *x = batch.x.data_as<float>();
    for (int64_t b = 0; b < B; ++b) {
        double amp[3], freq[3], phase[3];
        for (int k = 0; k < 3; ++k) {
            amp[k] = rng.uniform(0.15, 0.5);
            freq[k] = rng.uniform(0.1, 0.6);
            phase[k] = rng.uniform(0.0, 2.0 * kPi);
        }
        std::vector<double> s(T + 1);
        for (int64_t t = 0; t <= T; ++t) {
            double v = 0.03 * rng.normal();
            for (int k = 0; k < 3; ++k) v += amp[k] * std::sin(freq[k] * t + phase[k]);
            s[t] = v;
        }
        for (int64_t t = 0; t < T; ++t) {
            x[(t * B + b) * I] = static_cast<float>(s[t]);
            batch.target[t * B + b] = static_cast<float>(s[t + 1]);
        }
    }
    return batch;
}

struct Param {
    const char *name;
    Tensor value;  // f32
    std::vector<float> m, v;
    explicit Param(const char *n, std::vector<int64_t> shape)
        : name(n), value(DType::f32, std::move(shape)),
          m(value.num_elements(), 0.0f), v(value.num_elements(), 0.0f) {}
    float *data() const { return value.data_as<float>(); }
    int64_t size() const { return value.num_elements(); }
};

struct Model {
    Param w{"w", {I + H, 4 * H}}, b{"b", {4 * H}}, wci{"wci", {H}}, wcf{"wcf", {H}},
        wco{"wco", {H}}, V{"V", {H}}, c{"c", {1}};
    std::vector<Param *> all() { return {&w, &b, &wci, &wcf, &wco, &V, &c}; }
};

void init_model(Model &m, Rng &rng) {
    const double s = 1.0 / std::sqrt(static_cast<double>(H));
    for (int64_t k = 0; k < m.w.size(); ++k) m.w.data()[k] = static_cast<float>(rng.uniform(-s, s));
    for (Param *p : {&m.wci, &m.wcf, &m.wco})
        for (int64_t k = 0; k < p->size(); ++k) p->data()[k] = static_cast<float>(rng.uniform(-0.1, 0.1));
    for (int64_t k = 0; k < H; ++k) m.V.data()[k] = static_cast<float>(rng.uniform(-s, s));
    // b and c start at zero (Tensor is zero-initialised); the forget bias comes from the attr.
}

BlockLSTMAttrs fwd_attrs() {
    BlockLSTMAttrs a;
    a.forget_bias = 1.0f;
    a.cell_clip = 0.0f;
    a.use_peephole = true;
    return a;
}

// Buffers of one training step (caller-owned outputs, allocated once).
struct Work {
    Tensor cs0{DType::f32, {B, H}}, h0{DType::f32, {B, H}};
    Tensor i{DType::f32, {T, B, H}}, cs{DType::f32, {T, B, H}}, f{DType::f32, {T, B, H}},
        o{DType::f32, {T, B, H}}, ci{DType::f32, {T, B, H}}, co{DType::f32, {T, B, H}},
        h{DType::f32, {T, B, H}};
    Tensor cs_grad{DType::f32, {T, B, H}}, h_grad{DType::f32, {T, B, H}};
    Tensor x_grad{DType::f32, {T, B, I}}, cs_prev_grad{DType::f32, {B, H}},
        h_prev_grad{DType::f32, {B, H}}, w_grad{DType::f32, {I + H, 4 * H}},
        wci_grad{DType::f32, {H}}, wcf_grad{DType::f32, {H}}, wco_grad{DType::f32, {H}},
        b_grad{DType::f32, {4 * H}};
    std::vector<float> y = std::vector<float>(T * B);
    std::vector<double> fwd_ms, bwd_ms;
};

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The ops run on `device`; on CUDA the host tensors are copied in, the outputs back (the readout
// and Adam stay on the host), and a call is timed to the end of its GPU work.
struct OnDevice {
    Device device;
    std::deque<Tensor> keep;
    const Tensor &in(const Tensor &host) {
        if (device == Device::cpu) return host;
        keep.emplace_back(host.dtype(), host.shape(), device);
        copy(host, keep.back());
        return keep.back();
    }
    const Tensor &out(const Tensor &host) {
        if (device == Device::cpu) return host;
        keep.emplace_back(host.dtype(), host.shape(), device);
        return keep.back();
    }
    void finish() {
        if (device == Device::cuda) cuda_synchronize();
    }
};

void forward(const Model &m, const Batch &batch, Work &wk, bool timed, Device device) {
    OnDevice d{device, {}};
    const LSTMOutputs<TensorView> out{d.out(wk.i), d.out(wk.cs), d.out(wk.f), d.out(wk.o),
                                      d.out(wk.ci), d.out(wk.co), d.out(wk.h)};
    const Tensor &x = d.in(batch.x), &cs0 = d.in(wk.cs0), &h0 = d.in(wk.h0), &w = d.in(m.w.value);
    const Tensor &wci = d.in(m.wci.value), &wcf = d.in(m.wcf.value), &wco = d.in(m.wco.value);
    const Tensor &b = d.in(m.b.value);
    d.finish();
    const auto start = std::chrono::steady_clock::now();
    BlockLSTM(T, x, cs0, h0, w, wci, wcf, wco, b, out, fwd_attrs());
    d.finish();
    if (timed) wk.fwd_ms.push_back(ms_since(start));
    if (device != Device::cpu) {
        const Tensor *host[] = {&wk.i, &wk.cs, &wk.f, &wk.o, &wk.ci, &wk.co, &wk.h};
        const TensorView *dev[] = {&out.i, &out.cs, &out.f, &out.o, &out.ci, &out.co, &out.h};
        for (int k = 0; k < 7; ++k) copy(*dev[k], *host[k]);
    }
}

// Readout and loss; fills wk.y.
double readout_loss(const Model &m, const Batch &batch, Work &wk) {
    const float *h = wk.h.data_as<float>();
    const float *V = m.V.data();
    double loss = 0.0;
    for (int64_t r = 0; r < T * B; ++r) {
        double y = m.c.data()[0];
        for (int64_t j = 0; j < H; ++j) y += static_cast<double>(h[r * H + j]) * V[j];
        wk.y[r] = static_cast<float>(y);
        const double e = y - batch.target[r];
        loss += e * e;
    }
    return loss / static_cast<double>(T * B);
}

// Gradient of the loss w.r.t. h (into wk.h_grad), V and c.
void readout_backward(const Model &m, const Batch &batch, Work &wk, std::vector<float> &gV,
                      float &gc) {
    const float *h = wk.h.data_as<float>();
    float *hg = wk.h_grad.data_as<float>();
    const float *V = m.V.data();
    std::vector<double> dV(H, 0.0);
    double dc = 0.0;
    for (int64_t r = 0; r < T * B; ++r) {
        const double dy = 2.0 * (wk.y[r] - batch.target[r]) / static_cast<double>(T * B);
        dc += dy;
        for (int64_t j = 0; j < H; ++j) {
            hg[r * H + j] = static_cast<float>(dy * V[j]);
            dV[j] += dy * h[r * H + j];
        }
    }
    gV.assign(H, 0.0f);
    for (int64_t j = 0; j < H; ++j) gV[j] = static_cast<float>(dV[j]);
    gc = static_cast<float>(dc);
}

void backward(const Model &m, const Batch &batch, Work &wk, bool timed, Device device) {
    OnDevice d{device, {}};
    GradAttrs attrs;
    attrs.use_peephole = true;
    const BlockLSTMGradOutputs<TensorView> out{d.out(wk.x_grad),   d.out(wk.cs_prev_grad),
                                               d.out(wk.h_prev_grad), d.out(wk.w_grad),
                                               d.out(wk.wci_grad), d.out(wk.wcf_grad),
                                               d.out(wk.wco_grad), d.out(wk.b_grad)};
    const Tensor &x = d.in(batch.x), &cs0 = d.in(wk.cs0), &h0 = d.in(wk.h0), &w = d.in(m.w.value);
    const Tensor &wci = d.in(m.wci.value), &wcf = d.in(m.wcf.value), &wco = d.in(m.wco.value);
    const Tensor &b = d.in(m.b.value), &i = d.in(wk.i), &cs = d.in(wk.cs), &f = d.in(wk.f);
    const Tensor &o = d.in(wk.o), &ci = d.in(wk.ci), &co = d.in(wk.co), &h = d.in(wk.h);
    const Tensor &cs_grad = d.in(wk.cs_grad), &h_grad = d.in(wk.h_grad);
    d.finish();
    const auto start = std::chrono::steady_clock::now();
    BlockLSTMGrad(T, x, cs0, h0, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h, cs_grad, h_grad, out,
                  attrs);
    d.finish();
    if (timed) wk.bwd_ms.push_back(ms_since(start));
    if (device != Device::cpu) {
        const Tensor *host[] = {&wk.x_grad,   &wk.cs_prev_grad, &wk.h_prev_grad, &wk.w_grad,
                                &wk.wci_grad, &wk.wcf_grad,     &wk.wco_grad,    &wk.b_grad};
        const TensorView *dev[] = {&out.x_grad,   &out.cs_prev_grad, &out.h_prev_grad, &out.w_grad,
                                   &out.wci_grad, &out.wcf_grad,     &out.wco_grad,    &out.b_grad};
        for (int k = 0; k < 8; ++k) copy(*dev[k], *host[k]);
    }
}

void adam_step(Model &m, const std::vector<const float *> &grads, int step) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    auto params = m.all();
    double norm2 = 0.0;
    for (std::size_t p = 0; p < params.size(); ++p)
        for (int64_t k = 0; k < params[p]->size(); ++k) norm2 += double(grads[p][k]) * grads[p][k];
    const double norm = std::sqrt(norm2);
    const float scale = norm > kClipNorm ? static_cast<float>(kClipNorm / norm) : 1.0f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(step));
    const float c2 = 1.0f - std::pow(b2, static_cast<float>(step));
    for (std::size_t p = 0; p < params.size(); ++p) {
        Param &P = *params[p];
        float *x = P.data();
        for (int64_t k = 0; k < P.size(); ++k) {
            const float g = grads[p][k] * scale;
            P.m[k] = b1 * P.m[k] + (1 - b1) * g;
            P.v[k] = b2 * P.v[k] + (1 - b2) * g * g;
            x[k] -= kLearningRate * (P.m[k] / c1) / (std::sqrt(P.v[k] / c2) + eps);
        }
    }
}


// The training progress on stdout: a bar and the mean loss since the last milestone.
class Progress {
public:
    explicit Progress(int total) : total_(total), line_(stdout, 0.0, 1e30) {}

    void update(int step, double interval_loss, bool milestone) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s %3d%%  step %*d/%d  train loss %.5f",
                      ProgressLine::bar(step, total_).c_str(),
                      static_cast<int>(static_cast<int64_t>(step) * 100 / total_),
                      static_cast<int>(std::to_string(total_).size()), step, total_, interval_loss);
        line_.show(buf, milestone);
    }

private:
    int total_;
    ProgressLine line_;
};

double max_abs(const reference::Array &a) {
    double m = 0.0;
    for (double v : a.data) m = std::max(m, std::fabs(v));
    return m;
}

double max_abs_diff(const reference::Array &a, const reference::Array &b) {
    if (a.shape != b.shape) return INFINITY;
    double m = 0.0;
    for (std::size_t k = 0; k < a.data.size(); ++k) m = std::max(m, std::fabs(a.data[k] - b.data[k]));
    return m;
}

}  // namespace

int demo(const DemoOptions &options) {
    const auto t_start = std::chrono::steady_clock::now();
    const Device device = options.device == "auto"
                              ? (cuda_device_count() > 0 ? Device::cuda : Device::cpu)
                              : check_device(options.device);
    // Resolved before the first line: a bad BLOCKLSTM_CPU_TARGET pin fails here, not after a header.
    const std::string cpu_target = device == Device::cpu ? cpu_target_in_use() : std::string();
    std::printf("blocklstm demo: train a peephole LSTM with BlockLSTM + BlockLSTMGrad (float32, %s)\n",
                device == Device::cuda ? "CUDA" : "CPU");
    std::printf("  seed %llu | T=%lld B=%lld I=%lld H=%lld | forget_bias 1.0, cell_clip 0 (off), "
                "use_peephole true\n",
                static_cast<unsigned long long>(options.seed), static_cast<long long>(T),
                static_cast<long long>(B), static_cast<long long>(I), static_cast<long long>(H));
    std::printf("  task: next-value prediction of noisy sums of 3 sines; readout y = h.V + c; "
                "Adam lr %g, %d steps\n",
                kLearningRate, options.steps);
    if (device == Device::cuda)
        std::printf("  CUDA device: %s\n\n", cuda_device_name().c_str());
    else
        std::printf("  CPU target: %s%s\n\n", cpu_target.c_str(),
                    options.device == "auto" ? " (no CUDA device found)" : "");

    Rng rng(options.seed);
    Rng val_rng(options.seed ^ 0x5eed5eed5eed5eedULL);
    Model model;
    init_model(model, rng);
    Work wk;
    const Batch val = make_batch(val_rng);

    forward(model, val, wk, false, device);
    const double initial_val_loss = readout_loss(model, val, wk);
    std::printf("initial validation loss %.6f\n", initial_val_loss);

    Progress progress(options.steps);
    std::vector<float> gV;
    float gc = 0.0f;
    double interval_sum = 0.0;
    int interval_n = 0;
    double first_train_loss = -1.0;
    int next_milestone = 1;
    for (int step = 1; step <= options.steps; ++step) {
        const Batch batch = make_batch(rng);
        forward(model, batch, wk, true, device);
        const double loss = readout_loss(model, batch, wk);
        if (!std::isfinite(loss)) {
            std::fprintf(stderr, "\nblocklstm demo: loss became %f at step %d\n", loss, step);
            return 1;
        }
        if (first_train_loss < 0) first_train_loss = loss;
        interval_sum += loss;
        ++interval_n;
        readout_backward(model, batch, wk, gV, gc);
        backward(model, batch, wk, true, device);
        adam_step(model,
                  {wk.w_grad.data_as<float>(), wk.b_grad.data_as<float>(),
                   wk.wci_grad.data_as<float>(), wk.wcf_grad.data_as<float>(),
                   wk.wco_grad.data_as<float>(), gV.data(), &gc},
                  step);
        const bool milestone =
            static_cast<int64_t>(step) * 10 >= static_cast<int64_t>(next_milestone) * options.steps;
        progress.update(step, interval_sum / interval_n, milestone);
        if (milestone) {
            while (static_cast<int64_t>(step) * 10 >= static_cast<int64_t>(next_milestone) * options.steps)
                ++next_milestone;
            interval_sum = 0.0;
            interval_n = 0;
        }
    }

    forward(model, val, wk, false, device);
    const double final_val_loss = readout_loss(model, val, wk);
    std::printf("\nfirst training loss     %.6f\n", first_train_loss);
    std::printf("validation loss         %.6f -> %.6f (%.1fx lower)\n", initial_val_loss,
                final_val_loss, initial_val_loss / final_val_loss);
    if (!(final_val_loss < initial_val_loss)) {
        std::fprintf(stderr, "blocklstm demo: FAILED: the final loss %.6f is not lower than the "
                             "initial loss %.6f\n",
                     final_val_loss, initial_val_loss);
        return 1;
    }

    // ---- One BlockLSTMGrad on the trained weights against the float64 reference. -------------
    readout_backward(model, val, wk, gV, gc);  // h_grad of the validation batch
    backward(model, val, wk, false, device);
    namespace ref = reference;
    const auto A = [](const Tensor &t) { return ref::to_array(t); };
    const ref::LSTMOut rf = ref::block_lstm(T, A(val.x), A(wk.cs0), A(wk.h0), A(model.w.value),
                                            A(model.wci.value), A(model.wcf.value),
                                            A(model.wco.value), A(model.b.value), 1.0, 0.0, true,
                                            ref::Layout::icfo);
    // The reference gradient is taken at the kernel's own forward activations, so the comparison
    // measures BlockLSTMGrad alone.
    const ref::SeqGradOut rg = ref::block_lstm_grad(
        T, A(val.x), A(wk.cs0), A(wk.h0), A(model.w.value), A(model.wci.value),
        A(model.wcf.value), A(model.wco.value), A(model.b.value), A(wk.i), A(wk.cs), A(wk.f),
        A(wk.o), A(wk.ci), A(wk.co), A(wk.h), A(wk.cs_grad), A(wk.h_grad), true, ref::Layout::icfo);

    struct Row {
        const char *name;
        ref::Array got, want;
    };
    const Row fwd_rows[] = {{"h", A(wk.h), rf.h}, {"cs", A(wk.cs), rf.cs}};
    const Row rows[] = {{"x_grad", A(wk.x_grad), rg.x_grad},
                        {"cs_prev_grad", A(wk.cs_prev_grad), rg.cs_prev_grad},
                        {"h_prev_grad", A(wk.h_prev_grad), rg.h_prev_grad},
                        {"w_grad", A(wk.w_grad), rg.w_grad},
                        {"wci_grad", A(wk.wci_grad), rg.wci_grad},
                        {"wcf_grad", A(wk.wcf_grad), rg.wcf_grad},
                        {"wco_grad", A(wk.wco_grad), rg.wco_grad},
                        {"b_grad", A(wk.b_grad), rg.b_grad}};
    // Each output within 1e-4 of its scale, max(max |ref|, 0.01): the forward's and the gradient's.
    double overall = 0.0;
    bool ok = true;
    auto check = [&](const char *title, const auto &table) {
        std::printf("%s", title);
        for (const Row &r : table) {
            const double scale = max_abs(r.want), err = max_abs_diff(r.got, r.want);
            const bool good = err <= 1e-4 * std::max(scale, 1e-2);
            overall = std::max(overall, err);
            ok = ok && good;
            std::printf("  %-13s max |ref| %.3e   max abs error %.3e%s\n", r.name, scale, err,
                        good ? "" : "   <-- above tolerance");
        }
    };
    check("\nBlockLSTM forward (validation batch) vs float64 reference:\n", fwd_rows);
    check("BlockLSTMGrad on the trained weights vs float64 reference:\n", rows);
    std::printf("  overall max abs error %.3e\n", overall);

    std::printf("\nkernel times during training (median of %zu calls): BlockLSTM %.3f ms, "
                "BlockLSTMGrad %.3f ms\n",
                wk.fwd_ms.size(), median(wk.fwd_ms), median(wk.bwd_ms));
    std::printf("total demo time %.2f s\n", ms_since(t_start) / 1000.0);
    if (!ok) {
        std::fprintf(stderr, "blocklstm demo: FAILED: an output differs from the float64 reference by more "
                             "than 1e-4 x max(max |ref|, 0.01) (marked above)\n");
        return 1;
    }
    return 0;
}

}  // namespace blocklstm::cli
