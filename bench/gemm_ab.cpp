// A/B of the batched GEMM kernels (generators/gemm.cpp, float32) of several builds, interleaved in
// one process so that the machine's drift hits every variant alike, with oneDNN's sgemm as the
// peer. Each variant is a shared library holding gemm_tn and gemm_nn (bench/gemm_ab.sh).
//
//   gemm_ab ROUNDS LIB... SHAPE...     SHAPE: "tn M N K" (c[M,N] = a[K,M]^T b[K,N]) or "nn M N K"
//
// Prints, per shape, each variant's GFLOP/s: the best of ROUNDS rounds, each round timing every
// variant ~2 GFLOP in turn.
#include <HalideBuffer.h>
#include <HalideRuntime.h>
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using Halide::Runtime::Buffer;
using GemmFn = int (*)(halide_buffer_t *, halide_buffer_t *, halide_buffer_t *);

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: gemm_ab ROUNDS LIB.so... 'tn|nn M N K'...\n");
        return 2;
    }
    const int rounds = std::atoi(argv[1]);
    std::vector<std::string> names, shapes;
    std::vector<void *> libs;
    for (int i = 2; i < argc; ++i) {
        const std::string s = argv[i];
        if (s.find(' ') != std::string::npos) {
            shapes.push_back(s);
            continue;
        }
        void *h = dlopen(s.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            std::fprintf(stderr, "gemm_ab: %s\n", dlerror());
            return 1;
        }
        libs.push_back(h);
        std::string n = s.substr(s.find_last_of('/') + 1);
        names.push_back(n.substr(0, n.find(".so")));
    }
    names.push_back("oneDNN");
    // GEMM_AB_THREADS: 1 shows a single core's kernel without the parallel loop's costs.
    const char *threads = std::getenv("GEMM_AB_THREADS");
    halide_set_num_threads(threads ? std::atoi(threads) : 2);
    for (const std::string &shape : shapes) {
        char form[8];
        int M, N, K;
        if (std::sscanf(shape.c_str(), "%7s %d %d %d", form, &M, &N, &K) != 4) {
            std::fprintf(stderr, "gemm_ab: bad shape '%s'\n", shape.c_str());
            return 2;
        }
        const bool tn = std::string(form) == "tn";
        Buffer<float> a = tn ? Buffer<float>(M, K) : Buffer<float>(K, M), b(N, K), c(N, M);
        a.for_each_value([](float &v) { v = (std::rand() & 1023) / 1024.0f; });
        b.for_each_value([](float &v) { v = (std::rand() & 1023) / 1024.0f; });
        const double flop = 2.0 * M * N * K;
        const int reps = std::max(1, static_cast<int>(2e9 / flop));
        std::vector<double> best(names.size(), 1e30);
        for (int r = 0; r < rounds; ++r) {
            for (std::size_t v = 0; v < names.size(); ++v) {
                auto run = [&] {
                    if (v == libs.size()) {  // oneDNN, row-major: c = op(a) . b
                        dnnl_sgemm(tn ? 'T' : 'N', 'N', M, N, K, 1.0f, a.data(), tn ? M : K,
                                   b.data(), N, 0.0f, c.data(), N);
                        return;
                    }
                    auto fn = reinterpret_cast<GemmFn>(dlsym(libs[v], tn ? "gemm_tn" : "gemm_nn"));
                    fn(a.raw_buffer(), b.raw_buffer(), c.raw_buffer());
                };
                run();  // warm-up
                for (int i = 0; i < reps; ++i) {
                    const auto t0 = std::chrono::steady_clock::now();
                    run();
                    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
                    best[v] = std::min(best[v], dt.count());
                }
            }
        }
        std::printf("%-20s", shape.c_str());
        for (std::size_t v = 0; v < names.size(); ++v) {
            std::printf("  %s %.1f", names[v].c_str(), flop / best[v] / 1e9);
        }
        std::printf("  GFLOP/s\n");
    }
}
