// A peephole BlockLSTM and its gradient through blocklstm's C++ API.
#include <blocklstm/blocklstm.h>

#include <cstdio>

using namespace blocklstm;

int main() {
    const int64_t T = 10, B = 4, I = 8, H = 16;
    Tensor x(DType::f32, {T, B, I}), cs0(DType::f32, {B, H}), h0(DType::f32, {B, H});
    Tensor w(DType::f32, {I + H, 4 * H}), wci(DType::f32, {H}), wcf(DType::f32, {H});
    Tensor wco(DType::f32, {H}), b(DType::f32, {4 * H});  // Tensors start zeroed
    for (int64_t k = 0; k < x.num_elements(); ++k) x.data_as<float>()[k] = 0.01f * (k % 17);
    for (int64_t k = 0; k < w.num_elements(); ++k) w.data_as<float>()[k] = 0.02f * (k % 7) - 0.06f;

    BlockLSTMAttrs attrs;  // TF's defaults: forget_bias 1, cell_clip 3
    attrs.use_peephole = true;
    LSTMOutputs<Tensor> out = BlockLSTM(T, x, cs0, h0, w, wci, wcf, wco, b, attrs);

    Tensor cs_grad(DType::f32, {T, B, H}), h_grad(DType::f32, {T, B, H});
    for (int64_t k = 0; k < h_grad.num_elements(); ++k) h_grad.data_as<float>()[k] = 1.0f;
    BlockLSTMGradOutputs<Tensor> grad =
        BlockLSTMGrad(T, x, cs0, h0, w, wci, wcf, wco, b, out.i, out.cs, out.f, out.o, out.ci,
                      out.co, out.h, cs_grad, h_grad, GradAttrs{/*use_peephole=*/true});

    std::printf("h[T-1, 0, 0] = %.6f, w_grad[0, 0] = %.6f (blocklstm %s)\n",
                out.h.data_as<float>()[(T - 1) * B * H], grad.w_grad.data_as<float>()[0], version());
}
