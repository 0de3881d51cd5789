// Calls BlockLSTMGrad through the installed package and checks one gradient entry against a
// central finite difference of BlockLSTM (loss = sum of h), in float32.
#include <blocklstm/blocklstm.h>

#include <cmath>
#include <cstdio>

using namespace blocklstm;

int main() {
    const int64_t T = 3, B = 2, I = 3, H = 4;
    Tensor x(DType::f32, {T, B, I}), cs0(DType::f32, {B, H}), h0(DType::f32, {B, H});
    Tensor w(DType::f32, {I + H, 4 * H}), wci(DType::f32, {H}), wcf(DType::f32, {H});
    Tensor wco(DType::f32, {H}), b(DType::f32, {4 * H});
    unsigned state = 7;
    auto fill = [&](const Tensor &t, float scale) {
        for (int64_t k = 0; k < t.num_elements(); ++k) {
            state = state * 1103515245u + 12345u;
            t.data_as<float>()[k] = scale * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
        }
    };
    fill(x, 2), fill(cs0, 1), fill(h0, 1), fill(w, 1), fill(wci, 1), fill(wcf, 1), fill(wco, 1), fill(b, 1);
    BlockLSTMAttrs attrs;
    attrs.use_peephole = true;
    attrs.cell_clip = 0;

    auto loss = [&]() {
        auto fwd = BlockLSTM(T, x, cs0, h0, w, wci, wcf, wco, b, attrs);
        double s = 0;
        for (int64_t k = 0; k < fwd.h.num_elements(); ++k) s += fwd.h.data_as<float>()[k];
        return s;
    };
    auto fwd = BlockLSTM(T, x, cs0, h0, w, wci, wcf, wco, b, attrs);
    Tensor cs_grad(DType::f32, {T, B, H}), h_grad(DType::f32, {T, B, H});
    for (int64_t k = 0; k < h_grad.num_elements(); ++k) h_grad.data_as<float>()[k] = 1.0f;
    auto grad = BlockLSTMGrad(T, x, cs0, h0, w, wci, wcf, wco, b, fwd.i, fwd.cs, fwd.f, fwd.o,
                              fwd.ci, fwd.co, fwd.h, cs_grad, h_grad, GradAttrs{true});

    float &w01 = w.data_as<float>()[5];
    const float saved = w01, eps = 1e-2f;
    w01 = saved + eps;
    const double up = loss();
    w01 = saved - eps;
    const double down = loss();
    w01 = saved;
    const double numeric = (up - down) / (2 * eps), analytic = grad.w_grad.data_as<float>()[5];
    std::printf("consumer: w_grad[0,5] = %.6f, finite difference %.6f\n", analytic, numeric);
    return std::fabs(numeric - analytic) <= 1e-3 * (1 + std::fabs(numeric)) ? 0 : 1;
}
