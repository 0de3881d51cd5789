// The float64 reference: the equations of docs/semantics.md (Forward, Backward) as plain loops.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace blocklstm::reference {
namespace {

int64_t count(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) throw std::invalid_argument("reference: negative dimension");
        n *= d;
    }
    return n;
}

void require(bool ok, const std::string &what) {
    if (!ok) throw std::invalid_argument("reference: " + what);
}

void require_shape(const Array &a, const std::vector<int64_t> &shape, const char *name) {
    require(a.shape == shape, std::string(name) + " has an unexpected shape");
    require(static_cast<int64_t>(a.data.size()) == count(shape),
            std::string(name) + ": data size does not match its shape");
}

struct Offsets {
    int64_t i, c, f, o;
};
Offsets offsets(Layout layout, int64_t H) {
    if (layout == Layout::icfo) return {0, H, 2 * H, 3 * H};
    return {0, 2 * H, H, 3 * H};
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Per-element backward of one step (docs/semantics.md: Backward). Adds the batch sums of the peephole terms to
// pci/pcf/pco and writes the gate gradients into D (row stride 4H) and the new dcs carry into dc.
struct StepBackward {
    int64_t B, H;
    Offsets off;
    bool peep;
    const double *wci, *wcf, *wco;
    // inputs, [B,H]: stored activations of the step, the state entering it, incoming grads
    void run(const double *i, const double *cs, const double *f, const double *o,
             const double *ci, const double *co, const double *cp, const double *dcs_in,
             const double *dh, double *D, double *dc, double *pci, double *pcf,
             double *pco) const {
        for (int64_t n = 0; n < B; ++n) {
            for (int64_t j = 0; j < H; ++j) {
                const int64_t e = n * H + j;
                const double do_ = o[e] * (1 - o[e]) * dh[e] * co[e];
                double dcs = (1 - co[e] * co[e]) * dh[e] * o[e] + dcs_in[e];
                if (peep) dcs += do_ * wco[j];
                const double dci = (1 - ci[e] * ci[e]) * dcs * i[e];
                const double df = f[e] * (1 - f[e]) * dcs * cp[e];
                const double di = i[e] * (1 - i[e]) * dcs * ci[e];
                double *row = D + n * 4 * H;
                row[off.i + j] = di;
                row[off.c + j] = dci;
                row[off.f + j] = df;
                row[off.o + j] = do_;
                double g = dcs * f[e];
                if (peep) g += di * wci[j] + df * wcf[j];
                dc[e] = g;
                if (peep) {
                    pci[j] += di * cp[e];
                    pcf[j] += df * cp[e];
                    pco[j] += do_ * cs[e];
                }
            }
        }
    }
};

}  // namespace

Array zeros(std::vector<int64_t> shape) {
    Array a;
    a.data.assign(static_cast<std::size_t>(count(shape)), 0.0);
    a.shape = std::move(shape);
    return a;
}

LSTMOut block_lstm(int64_t L, const Array &x, const Array &cs_prev, const Array &h_prev,
                   const Array &w, const Array &wci, const Array &wcf, const Array &wco,
                   const Array &b, double forget_bias, double cell_clip, bool peep,
                   Layout layout, const std::vector<int64_t> *lengths) {
    require(x.shape.size() == 3, "x must be rank 3");
    require(cs_prev.shape.size() == 2, "cs_prev must be rank 2");
    const int64_t T = x.shape[0], B = x.shape[1], I = x.shape[2], H = cs_prev.shape[1];
    require_shape(x, {T, B, I}, "x");
    require_shape(cs_prev, {B, H}, "cs_prev");
    require_shape(h_prev, {B, H}, "h_prev");
    require_shape(w, {I + H, 4 * H}, "w");
    require_shape(wci, {H}, "wci");
    require_shape(wcf, {H}, "wcf");
    require_shape(wco, {H}, "wco");
    require_shape(b, {4 * H}, "b");
    require(0 <= L && L <= T, "seq_len_max out of range");

    const Offsets off = offsets(layout, H);
    LSTMOut out;
    for (Array *a : {&out.i, &out.cs, &out.f, &out.o, &out.ci, &out.co, &out.h}) *a = zeros({T, B, H});
    std::vector<double> c(cs_prev.data), h(h_prev.data), G(static_cast<std::size_t>(4 * H));
    const bool clip = cell_clip > 0;
    for (int64_t t = 0; t < L; ++t) {
        const double *xt = x.data.data() + t * B * I;
        for (int64_t n = 0; n < B; ++n) {
            if (lengths && t >= (*lengths)[n]) {  // the row has stopped: its outputs stay zero, its state as it was
                for (int64_t j = 0; j < H; ++j) {
                    out.cs.data[(t * B + n) * H + j] = c[n * H + j];
                    out.h.data[(t * B + n) * H + j] = h[n * H + j];
                }
                continue;
            }
            for (int64_t k = 0; k < 4 * H; ++k) G[k] = 0;
            for (int64_t r = 0; r < I + H; ++r) {
                const double v = r < I ? xt[n * I + r] : h[n * H + (r - I)];
                const double *wr = w.data.data() + r * 4 * H;
                for (int64_t k = 0; k < 4 * H; ++k) G[k] += v * wr[k];
            }
            for (int64_t k = 0; k < 4 * H; ++k) G[k] += b.data[k];
            for (int64_t j = 0; j < H; ++j) {
                const double cp = c[n * H + j];
                double zi = G[off.i + j], zc = G[off.c + j], zf = G[off.f + j] + forget_bias;
                if (peep) {
                    zi += cp * wci.data[j];
                    zf += cp * wcf.data[j];
                }
                const double iv = sigmoid(zi), civ = std::tanh(zc), fv = sigmoid(zf);
                double s = iv * civ + fv * cp;
                if (clip) s = std::min(std::max(s, -cell_clip), cell_clip);
                const double cov = std::tanh(s);
                double zo = G[off.o + j];
                if (peep) zo += s * wco.data[j];
                const double ov = sigmoid(zo);
                const int64_t e = (t * B + n) * H + j;
                out.i.data[e] = iv;
                out.cs.data[e] = s;
                out.f.data[e] = fv;
                out.o.data[e] = ov;
                out.ci.data[e] = civ;
                out.co.data[e] = cov;
                out.h.data[e] = ov * cov;
            }
        }
        std::copy(out.cs.data.begin() + t * B * H, out.cs.data.begin() + (t + 1) * B * H, c.begin());
        std::copy(out.h.data.begin() + t * B * H, out.h.data.begin() + (t + 1) * B * H, h.begin());
        if (lengths)  // the outputs of stopped rows, which carried their state, are zero
            for (int64_t n = 0; n < B; ++n)
                if (t >= (*lengths)[n])
                    for (int64_t j = 0; j < H; ++j) out.cs.data[(t * B + n) * H + j] = out.h.data[(t * B + n) * H + j] = 0;
    }
    return out;
}

LSTMOut lstm_block_cell(const Array &x, const Array &cs_prev, const Array &h_prev, const Array &w,
                        const Array &wci, const Array &wcf, const Array &wco, const Array &b,
                        double forget_bias, double cell_clip, bool peep) {
    require(x.shape.size() == 2, "x must be rank 2");
    Array x3{{1, x.shape[0], x.shape[1]}, x.data};
    LSTMOut out = block_lstm(1, x3, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip,
                             peep, Layout::icfo);
    for (Array *a : {&out.i, &out.cs, &out.f, &out.o, &out.ci, &out.co, &out.h})
        a->shape = {a->shape[1], a->shape[2]};
    return out;
}

CellGradOut lstm_block_cell_grad(const Array &x, const Array &cs_prev, const Array &h_prev,
                                 const Array &w, const Array &wci, const Array &wcf,
                                 const Array &wco, const Array &b, const Array &i,
                                 const Array &cs, const Array &f, const Array &o, const Array &ci,
                                 const Array &co, const Array &cs_grad, const Array &h_grad,
                                 bool peep) {
    require(x.shape.size() == 2, "x must be rank 2");
    require(cs_prev.shape.size() == 2, "cs_prev must be rank 2");
    const int64_t B = x.shape[0], I = x.shape[1], H = cs_prev.shape[1];
    require_shape(cs_prev, {B, H}, "cs_prev");
    require_shape(h_prev, {B, H}, "h_prev");
    require_shape(w, {I + H, 4 * H}, "w");
    require_shape(wci, {H}, "wci");
    require_shape(wcf, {H}, "wcf");
    require_shape(wco, {H}, "wco");
    require_shape(b, {4 * H}, "b");
    for (const Array *a : {&i, &cs, &f, &o, &ci, &co, &cs_grad, &h_grad}) require_shape(*a, {B, H}, "activation/grad");

    CellGradOut out;
    out.cs_prev_grad = zeros({B, H});
    out.dicfo = zeros({B, 4 * H});
    out.wci_grad = zeros({H});
    out.wcf_grad = zeros({H});
    out.wco_grad = zeros({H});
    StepBackward step{B, H, offsets(Layout::icfo, H), peep, wci.data.data(), wcf.data.data(), wco.data.data()};
    step.run(i.data.data(), cs.data.data(), f.data.data(), o.data.data(), ci.data.data(),
             co.data.data(), cs_prev.data.data(), cs_grad.data.data(), h_grad.data.data(),
             out.dicfo.data.data(), out.cs_prev_grad.data.data(), out.wci_grad.data.data(),
             out.wcf_grad.data.data(), out.wco_grad.data.data());
    return out;
}

SeqGradOut block_lstm_grad(int64_t L, const Array &x, const Array &cs_prev, const Array &h_prev,
                           const Array &w, const Array &wci, const Array &wcf, const Array &wco,
                           const Array &b, const Array &i, const Array &cs, const Array &f,
                           const Array &o, const Array &ci, const Array &co, const Array &h,
                           const Array &cs_grad, const Array &h_grad, bool peep, Layout layout,
                           const std::vector<int64_t> *lengths) {
    require(x.shape.size() == 3, "x must be rank 3");
    require(w.shape.size() == 2 && w.shape[1] % 4 == 0, "w must be [I+H, 4H]");
    const int64_t T = x.shape[0], B = x.shape[1], I = x.shape[2], H = w.shape[1] / 4;
    require_shape(cs_prev, {B, H}, "cs_prev");
    require_shape(h_prev, {B, H}, "h_prev");
    require_shape(w, {I + H, 4 * H}, "w");
    require_shape(wci, {H}, "wci");
    require_shape(wcf, {H}, "wcf");
    require_shape(wco, {H}, "wco");
    require_shape(b, {4 * H}, "b");
    for (const Array *a : {&i, &cs, &f, &o, &ci, &co, &h, &cs_grad, &h_grad})
        require_shape(*a, {T, B, H}, "activation/grad");
    require(0 <= L && L <= T, "seq_len_max out of range");

    SeqGradOut out;
    out.x_grad = zeros({T, B, I});
    out.cs_prev_grad = zeros({B, H});  // the dcs carry
    out.h_prev_grad = zeros({B, H});   // the dh carry
    out.w_grad = zeros({I + H, 4 * H});
    out.wci_grad = zeros({H});
    out.wcf_grad = zeros({H});
    out.wco_grad = zeros({H});
    out.b_grad = zeros({4 * H});
    StepBackward step{B, H, offsets(layout, H), peep, wci.data.data(), wcf.data.data(), wco.data.data()};
    const int64_t BH = B * H;
    std::vector<double> dcs_in(BH), dh(BH), D(B * 4 * H), dc(BH);
    for (int64_t t = L - 1; t >= 0; --t) {
        const double *cp = t == 0 ? cs_prev.data.data() : cs.data.data() + (t - 1) * BH;
        const double *hp = t == 0 ? h_prev.data.data() : h.data.data() + (t - 1) * BH;
        for (int64_t e = 0; e < BH; ++e) {
            // A row past its length takes no gradient at t: nothing flows from its steps >= length.
            const bool runs = !lengths || t < (*lengths)[e / H];
            dcs_in[e] = runs ? out.cs_prev_grad.data[e] + cs_grad.data[t * BH + e] : 0.0;
            dh[e] = runs ? out.h_prev_grad.data[e] + h_grad.data[t * BH + e] : 0.0;
        }
        const int64_t s = t * BH;
        step.run(i.data.data() + s, cs.data.data() + s, f.data.data() + s, o.data.data() + s,
                 ci.data.data() + s, co.data.data() + s, cp, dcs_in.data(), dh.data(), D.data(),
                 dc.data(), out.wci_grad.data.data(), out.wcf_grad.data.data(),
                 out.wco_grad.data.data());
        const double *xt = x.data.data() + t * B * I;
        for (int64_t n = 0; n < B; ++n) {
            const double *Dn = D.data() + n * 4 * H;
            // xh_grad = D · wᵀ
            for (int64_t r = 0; r < I + H; ++r) {
                const double *wr = w.data.data() + r * 4 * H;
                double acc = 0;
                for (int64_t k = 0; k < 4 * H; ++k) acc += Dn[k] * wr[k];
                if (r < I)
                    out.x_grad.data[(t * B + n) * I + r] = acc;
                else
                    out.h_prev_grad.data[n * H + (r - I)] = acc;
            }
            // w_grad += xhᵀ · D ; b_grad += Σ_rows D
            for (int64_t r = 0; r < I + H; ++r) {
                const double v = r < I ? xt[n * I + r] : hp[n * H + (r - I)];
                double *wg = out.w_grad.data.data() + r * 4 * H;
                for (int64_t k = 0; k < 4 * H; ++k) wg[k] += v * Dn[k];
            }
            for (int64_t k = 0; k < 4 * H; ++k) out.b_grad.data[k] += Dn[k];
        }
        out.cs_prev_grad.data = dc;
    }
    return out;
}

Array to_array(const blocklstm::TensorView &t) {
    require(t.device == blocklstm::Device::cpu, "to_array needs a host tensor");
    Array a = zeros(t.shape);
    const std::size_t n = a.data.size();
    if (n == 0) return a;
    require(t.data != nullptr, "to_array: null data");
    if (t.dtype == blocklstm::DType::f32) {
        const float *p = static_cast<const float *>(t.data);
        for (std::size_t k = 0; k < n; ++k) a.data[k] = p[k];
    } else if (t.dtype == blocklstm::DType::bf16) {
        const uint16_t *p = static_cast<const uint16_t *>(t.data);
        for (std::size_t k = 0; k < n; ++k) a.data[k] = blocklstm::bfloat16_to_float(p[k]);
    } else {
        require(t.dtype == blocklstm::DType::f16, "to_array needs a float tensor");
        const uint16_t *p = static_cast<const uint16_t *>(t.data);
        for (std::size_t k = 0; k < n; ++k) a.data[k] = blocklstm::half_to_float(p[k]);
    }
    return a;
}

blocklstm::Tensor to_tensor(const Array &a, blocklstm::DType dtype) {
    require(static_cast<int64_t>(a.data.size()) == count(a.shape), "to_tensor: data size does not match shape");
    blocklstm::Tensor t(dtype, a.shape);
    const std::size_t n = a.data.size();
    if (dtype == blocklstm::DType::f32) {
        float *p = t.data_as<float>();
        for (std::size_t k = 0; k < n; ++k) p[k] = static_cast<float>(a.data[k]);
    } else {
        // double -> float -> 16 bits can double-round; values here come from float data or are
        // test inputs, where a last-bit difference does not matter: both sides see to_array of
        // the result.
        require(dtype == blocklstm::DType::f16 || dtype == blocklstm::DType::bf16, "to_tensor needs a float dtype");
        uint16_t *p = t.data_as<uint16_t>();
        for (std::size_t k = 0; k < n; ++k) {
            const auto f = static_cast<float>(a.data[k]);
            p[k] = dtype == blocklstm::DType::bf16 ? blocklstm::float_to_bfloat16(f) : blocklstm::float_to_half(f);
        }
    }
    return t;
}

}  // namespace blocklstm::reference
