// Two builds of libblocklstm in one process: each loaded with dlopen (RTLD_LOCAL | RTLD_DEEPBIND,
// so that each runs its own kernels and thread pool), the same call made through one and then the
// other, the order swapped every pair, with 0.3 ms between calls so that the other build's pool has
// stopped spinning (thread_pool.cpp: 100 us). The VMs these kernels are measured on drift by
// 10-30 % within minutes, more than most schedule changes, and two builds alternated process by
// process see different spells; here both see the same. Prints each build's median time and the
// median of the pairs' ratios (B / A) for each order apart, and their geometric mean, the figure
// to quote: the second call of a pair runs at a different speed from the first, so the two orders'
// ratios differ and the median of all pairs falls between them.
//   g++ -O2 -std=c++17 -Iruntime/include bench/builds_ab.cpp -Lbuild/runtime -lblocklstm -ldl
//       -Wl,-rpath,$PWD/build/runtime -o build/builds_ab      (one command)
//   cp build/runtime/libblocklstm.so.0.1.0 build/a.so        # build A; then rebuild with the change
//   build/builds_ab build/a.so build/runtime/libblocklstm.so.0.1.0 forward 50 8 128 300 [spread] [f16]
// OP: forward (BlockLSTM), backward (BlockLSTMGrad) or cell (LSTMBlockCell, 100 calls a sample, T
// unused); T B H (I = H, or AB_INPUT=I in the environment); PAIRS; lengths: none (TF's op), spread (each row's length uniform in
// [ceil(T/4), T]) or sorted (the same, longest first); the dtype: f32 (the default), f16 or
// bf16. AB_PEEPHOLE=1: the sequence ops with peepholes; AB_THREADS: the loops' threads (default 2).
// A copy of a build against itself reads 0.99-1.00 on an AMD Zen 3 VM at 50,8,128.
#include <blocklstm/blocklstm.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace blocklstm;

namespace {

using TV = TensorView;
using ForwardFn = void (*)(int64_t, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &,
                           const TV &, const LSTMOutputs<TV> &, const BlockLSTMAttrs &, const TV *);
using BackwardFn = void (*)(int64_t, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &,
                            const TV &, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &,
                            const TV &, const TV &, const TV &, const BlockLSTMGradOutputs<TV> &, const GradAttrs &,
                            const TV *);
using CellFn = void (*)(const TV &, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &, const TV &,
                        const LSTMOutputs<TV> &, const LSTMBlockCellAttrs &);
using ThreadsFn = void (*)(int);

// The C++ API's symbols, as a build exports them (nm -D libblocklstm.so).
constexpr const char *kForward =
    "_ZN9blocklstm9BlockLSTMElRKNS_10TensorViewES2_S2_S2_S2_S2_S2_S2_RKNS_11LSTMOutputsIS0_EERKNS_14BlockLSTMAttrsEPS1_";
constexpr const char *kBackward =
    "_ZN9blocklstm13BlockLSTMGradElRKNS_10TensorViewES2_S2_S2_S2_S2_S2_S2_S2_S2_S2_S2_S2_S2_S2_S2_S2_RKNS_"
    "20BlockLSTMGradOutputsIS0_EERKNS_9GradAttrsEPS1_";
constexpr const char *kCell =
    "_ZN9blocklstm13LSTMBlockCellERKNS_10TensorViewES2_S2_S2_S2_S2_S2_S2_RKNS_11LSTMOutputsIS0_EERKNS_"
    "18LSTMBlockCellAttrsE";
constexpr const char *kThreads = "_ZN9blocklstm15set_num_threadsEi";

struct Build {
    ForwardFn forward = nullptr;
    BackwardFn backward = nullptr;
    CellFn cell = nullptr;
};

Build load(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!lib) {
        std::fprintf(stderr, "builds_ab: %s\n", dlerror());
        std::exit(1);
    }
    Build b{reinterpret_cast<ForwardFn>(dlsym(lib, kForward)), reinterpret_cast<BackwardFn>(dlsym(lib, kBackward)),
            reinterpret_cast<CellFn>(dlsym(lib, kCell))};
    auto threads = reinterpret_cast<ThreadsFn>(dlsym(lib, kThreads));
    if (!b.forward || !b.backward || !b.cell || !threads) {
        std::fprintf(stderr, "builds_ab: %s lacks the C++ API's symbols\n", path);
        std::exit(1);
    }
    threads(std::getenv("AB_THREADS") ? std::atoi(std::getenv("AB_THREADS")) : 2);
    return b;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 8 || argc > 10) {
        std::fprintf(stderr,
                     "usage: builds_ab LIB_A LIB_B forward|backward|cell T B H PAIRS [none|spread|sorted] [f32|f16|bf16]\n");
        return 2;
    }
    const std::string dtype_name = argc > 9 ? argv[9] : "f32";
    if (dtype_name != "f32" && dtype_name != "f16" && dtype_name != "bf16") {
        std::fprintf(stderr, "builds_ab: dtype: expected f32, f16 or bf16, got %s\n", dtype_name.c_str());
        return 2;
    }
    const DType dt = dtype_name == "f16" ? DType::f16 : dtype_name == "bf16" ? DType::bf16 : DType::f32;
    const Build builds[2] = {load(argv[1]), load(argv[2])};
    const std::string op = argv[3], lengths = argc > 8 ? argv[8] : "none";
    const int64_t T = std::atoll(argv[4]), B = std::atoll(argv[5]), H = std::atoll(argv[6]), I = std::getenv("AB_INPUT") ? std::atoll(std::getenv("AB_INPUT")) : H;
    const int pairs = std::atoi(argv[7]);
    if ((op != "forward" && op != "backward" && op != "cell") || T < 1 || B < 1 || H < 1 || pairs < 1 ||
        (lengths != "none" && lengths != "spread" && lengths != "sorted")) {
        std::fprintf(stderr, "builds_ab: expected forward, backward or cell, positive T B H PAIRS, and none, spread or "
                             "sorted\n");
        return 2;
    }
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    auto random = [&](std::vector<int64_t> shape) {
        Tensor t(dt, std::move(shape));
        for (int64_t k = 0; k < t.num_elements(); ++k) {
            const float v = u(rng);
            if (dt == DType::f32) t.data_as<float>()[k] = v;
            else t.data_as<uint16_t>()[k] = dt == DType::f16 ? float_to_half(v) : float_to_bfloat16(v);
        }
        return t;
    };
    // x, cs_prev, h_prev, w, wci, wcf, wco, b; their gradients; the activations; the output gradients.
    const std::vector<std::vector<int64_t>> shapes{{T, B, I}, {B, H}, {B, H}, {I + H, 4 * H}, {H}, {H}, {H}, {4 * H}};
    std::vector<Tensor> in, grads, act, out_grads, cell_act;
    for (const auto &shape : shapes) {
        in.push_back(random(shape));
        grads.emplace_back(dt, shape);
    }
    for (int k = 0; k < 7; ++k) {
        act.emplace_back(dt, std::vector<int64_t>{T, B, H});
        cell_act.emplace_back(dt, std::vector<int64_t>{B, H});
    }
    for (int k = 0; k < 2; ++k) out_grads.push_back(random({T, B, H}));
    const Tensor x_step = random({B, I});
    Tensor seq_lengths(DType::i64, {B});
    std::mt19937 length_rng(0x5eed);
    std::uniform_int_distribution<int64_t> length((T + 3) / 4, T);
    int64_t *len = seq_lengths.data_as<int64_t>();
    for (int64_t b = 0; b < B; ++b) len[b] = lengths == "none" ? T : length(length_rng);
    if (lengths == "sorted") std::sort(len, len + B, std::greater<>());
    const TV lengths_view = seq_lengths;
    const TV *lp = lengths == "none" ? nullptr : &lengths_view;
    const LSTMOutputs<TV> out{act[0], act[1], act[2], act[3], act[4], act[5], act[6]};
    const LSTMOutputs<TV> cell_out{cell_act[0], cell_act[1], cell_act[2], cell_act[3],
                                   cell_act[4], cell_act[5], cell_act[6]};
    const BlockLSTMGradOutputs<TV> grad_out{grads[0], grads[1], grads[2], grads[3],
                                            grads[4], grads[5], grads[6], grads[7]};
    const bool peephole = std::getenv("AB_PEEPHOLE") && std::string(std::getenv("AB_PEEPHOLE")) == "1";
    BlockLSTMAttrs forward_attrs;
    GradAttrs grad_attrs;
    forward_attrs.use_peephole = grad_attrs.use_peephole = peephole;
    auto call = [&](const Build &b) {
        usleep(300);
        const auto t0 = std::chrono::steady_clock::now();
        if (op == "forward") b.forward(T, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], out, forward_attrs, lp);
        if (op == "backward")
            b.backward(T, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], act[0], act[1], act[2], act[3],
                       act[4], act[5], act[6], out_grads[0], out_grads[1], grad_out, grad_attrs, lp);
        if (op == "cell")
            for (int k = 0; k < 100; ++k)
                b.cell(x_step, in[1], in[2], in[3], in[4], in[5], in[6], in[7], cell_out, {});
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    // The backward's inputs: a forward's activations. Then a warm-up of both builds.
    builds[0].forward(T, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], out, forward_attrs, lp);
    for (int k = 0; k < 3; ++k)
        for (const Build &b : builds) call(b);
    std::vector<double> a, b, ratio[2];  // ratio[0]: A called first in the pair; ratio[1]: B first
    for (int k = 0; k < pairs; ++k) {
        const bool b_first = k % 2 == 1;
        const double first = call(builds[b_first]), second = call(builds[!b_first]);
        a.push_back(b_first ? second : first);
        b.push_back(b_first ? first : second);
        ratio[b_first].push_back(b.back() / a.back());
    }
    const double a_first = median(ratio[0]), b_first = ratio[1].empty() ? a_first : median(ratio[1]);
    std::printf("%s %s %lld,%lld,%lld lengths %s: A %.3f ms, B %.3f ms; B / A (median of %d pairs) A first %.3f, B "
                "first %.3f, geometric mean %.3f\n",
                op.c_str(), dtype_name.c_str(), static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(H),
                lengths.c_str(), median(a), median(b), pairs, a_first, b_first, std::sqrt(a_first * b_first));
    return 0;
}
