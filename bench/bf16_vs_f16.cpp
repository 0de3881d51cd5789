// bfloat16 against float16 on the CPU, in one process: BlockLSTM, then BlockLSTMGrad, each call of
// one dtype followed by the same call of the other (the order swapped every pair), so that the
// VM's drift hits both alike; prints each dtype's median time and the median of the pairs' ratios.
// Where the CPU has no bfloat16 hardware both dtypes compute in float32 and differ only in their
// loads and roundings, so the ratio says what bfloat16 costs over float16 there (README: dtypes).
//   g++ -O2 -std=c++17 -Iruntime/include bench/bf16_vs_f16.cpp -Lbuild/runtime -lblocklstm
//       -Wl,-rpath,$PWD/build/runtime -o build/bf16_vs_f16      (one command)
//   build/bf16_vs_f16 T B H PAIRS          # I = H, 2 threads, e.g. 100 64 512 6
#include <blocklstm/blocklstm.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace blocklstm;

namespace {

// One dtype's tensors: the inputs (x, cs_prev, h_prev, w, wci, wcf, wco, b), the activations
// (i, cs, f, o, ci, co, h), the output gradients (cs_grad, h_grad) and the eight gradients.
struct Set {
    std::vector<Tensor> in, act, grads_in, grads;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: bf16_vs_f16 T B H PAIRS\n");
        return 2;
    }
    const int64_t T = std::atoi(argv[1]), B = std::atoi(argv[2]), H = std::atoi(argv[3]), I = H;
    const int pairs = std::atoi(argv[4]);
    if (T < 1 || B < 1 || H < 1 || pairs < 1) {
        std::fprintf(stderr, "bf16_vs_f16: T, B, H and PAIRS must be positive\n");
        return 2;
    }
    set_num_threads(2);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    auto random = [&](DType dt, std::vector<int64_t> shape) {
        Tensor t(dt, std::move(shape));
        auto *p = t.data_as<uint16_t>();
        for (int64_t k = 0; k < t.num_elements(); ++k)
            p[k] = dt == DType::f16 ? float_to_half(u(rng)) : float_to_bfloat16(u(rng));
        return t;
    };
    const DType dtypes[2] = {DType::f16, DType::bf16};
    Set sets[2];
    for (int d = 0; d < 2; ++d) {
        const DType dt = dtypes[d];
        Set &s = sets[d];
        for (const std::vector<int64_t> &shape :
             std::vector<std::vector<int64_t>>{{T, B, I}, {B, H}, {B, H}, {I + H, 4 * H}, {H}, {H}, {H}, {4 * H}}) {
            s.in.push_back(random(dt, shape));
            s.grads.emplace_back(dt, shape);
        }
        for (int k = 0; k < 7; ++k) s.act.emplace_back(dt, std::vector<int64_t>{T, B, H});
        for (int k = 0; k < 2; ++k) s.grads_in.push_back(random(dt, {T, B, H}));
    }
    auto forward = [&](const Set &s) {
        const std::vector<Tensor> &a = s.act, &in = s.in;
        const LSTMOutputs<TensorView> out{a[0], a[1], a[2], a[3], a[4], a[5], a[6]};
        const auto t0 = std::chrono::steady_clock::now();
        BlockLSTM(T, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], out);
        return ms_since(t0);
    };
    auto backward = [&](const Set &s) {
        const std::vector<Tensor> &a = s.act, &in = s.in, &g = s.grads;
        const BlockLSTMGradOutputs<TensorView> out{g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]};
        const auto t0 = std::chrono::steady_clock::now();
        BlockLSTMGrad(T, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], a[0], a[1], a[2], a[3], a[4], a[5],
                      a[6], s.grads_in[0], s.grads_in[1], out);
        return ms_since(t0);
    };
    for (int k = 0; k < 3; ++k)  // warm-up: the host cache's blocks, the pool's threads
        for (const Set &s : sets) {
            forward(s);
            backward(s);
        }
    for (const bool grad : {false, true}) {
        std::vector<double> f16, bf16, ratio;
        for (int k = 0; k < pairs; ++k) {
            const bool bf16_first = k % 2 == 1;
            const double first = grad ? backward(sets[bf16_first]) : forward(sets[bf16_first]);
            const double second = grad ? backward(sets[!bf16_first]) : forward(sets[!bf16_first]);
            f16.push_back(bf16_first ? second : first);
            bf16.push_back(bf16_first ? first : second);
            ratio.push_back(bf16.back() / f16.back());
        }
        std::printf("%lld,%lld,%lld %s: float16 %.3f ms, bfloat16 %.3f ms, bfloat16 / float16 (median of %d pairs) "
                    "%.3f\n",
                    static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(H),
                    grad ? "BlockLSTMGrad" : "BlockLSTM", median(f16), median(bf16), pairs, median(ratio));
    }
    return 0;
}
