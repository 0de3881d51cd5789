// What Halide 21's AMX lowering makes of a bfloat16 product, for the AMX target that bfloat16 on
// Intel Sapphire Rapids and later still lacks (docs/performance.md, "bfloat16"): c = a . b with
// a (K x M rows, k contiguous) and b in AMX's pair layout b(k % 2, x, k / 2), float32 sums, timed
// and checked against a float64 sum. Built and run by bench/amx_product.sh.
//
// The pattern Halide 21 turns into tileloadd / tdpbf16ps / tilestored (its tile-extraction pass):
// one accumulator tile of 16 x 16 float32 per loop nest (two, or 8 x 16, are compile errors), k in
// whole steps of 32 (16 pairs), whole tiles in x and y (a GuardWithIf tile predicates its loads,
// which the pattern refuses), zero origins and b's pair rows as a dense dimension: pair panels
// 16 columns wide (b(2 x + k % 2, k / 2, x / 16), what the vdpbf16ps kernels read) are not
// recognised, so an AMX target needs the weights in one panel the width of the product.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cpuid.h>
#include <cstdio>
#include <cstdlib>

#include "Halide.h"

using namespace Halide;

namespace {

bool cpu_has_amx_bf16() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    return (edx >> 22 & 1) && (edx >> 24 & 1);  // AMX-BF16, AMX-TILE
}

// Linux hands a process the 8 KiB of tile state only when asked; without it the first tile
// instruction dies with SIGILL.
bool request_tile_state() {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: amx_product M N K [PAD]   (M, N multiples of 16, K of 32; b's pair rows PAD\n"
                             "       columns longer than N, never read; HL_NUM_THREADS threads)\n");
        return 2;
    }
    const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
    const int pad = argc == 5 ? std::atoi(argv[4]) : 0;
    if (M <= 0 || N <= 0 || K <= 0 || M % 16 || N % 16 || K % 32 || pad < 0 || pad % 16) {
        std::fprintf(stderr, "amx_product: M and N must be positive multiples of 16, K of 32 and PAD of 16 (or 0), got %d %d %d %d\n",
                     M, N, K, pad);
        return 2;
    }
    if (!cpu_has_amx_bf16()) {
        std::printf("amx_product: skipped: this CPU has no AMX-BF16\n");
        return 0;
    }
    if (!request_tile_state()) {
        std::printf("amx_product: skipped: Linux refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM)\n");
        return 0;
    }

    constexpr int kTile = 16, kDepth = 32;  // the accumulator tile and the k of one tdpbf16ps
    ImageParam a(BFloat(16), 2, "a"), b(BFloat(16), 3, "b");
    Var x("x"), y("y"), xi("xi"), yi("yi");
    RDom k(0, K, "k");
    Func product("product");
    product(x, y) = 0.0f;
    product(x, y) += cast<float>(a(k, y)) * cast<float>(b(k % 2, x, k / 2));
    Func c = product.in();

    // The columns outer, the rows inner: a 16-column strip of b (K / 2 pair rows of 64 bytes)
    // stays in L1 while every row tile reads it; the strips in parallel.
    c.tile(x, y, xi, yi, kTile, kTile, TailStrategy::RoundUp).reorder(xi, yi, y, x).vectorize(xi).vectorize(yi).parallel(x);
    RVar ko("ko"), ki("ki");
    product.compute_at(c, y).store_in(MemoryType::AMXTile).tile(x, y, xi, yi, kTile, kTile).vectorize(xi).vectorize(yi);
    product.update()
        .tile(x, y, xi, yi, kTile, kTile, TailStrategy::RoundUp)
        .split(k, ko, ki, kDepth)
        .reorder({ki, xi, yi, ko, x, y})
        .atomic()
        .vectorize(ki)
        .vectorize(xi)
        .vectorize(yi);
    c.output_buffer().dim(0).set_min(0).dim(1).set_min(0);
    a.dim(0).set_min(0).dim(1).set_min(0);
    for (int d = 0; d < 3; ++d) b.dim(d).set_min(0);
    c.compile_jit(Target("x86-64-linux-avx512_sapphirerapids"));

    Buffer<bfloat16_t> a_buf(K, M), b_buf(2, N + pad, K / 2);
    std::srand(1);
    auto uniform = [] { return bfloat16_t(float(std::rand()) / RAND_MAX - 0.5f); };
    a_buf.for_each_value([&](bfloat16_t &v) { v = uniform(); });
    b_buf.for_each_value([&](bfloat16_t &v) { v = uniform(); });
    a.set(a_buf);
    b.set(b_buf);
    Buffer<float> out(N, M);
    c.realize(out);

    // Every 7th row and 5th column against a float64 sum of the same bfloat16 values: the float32
    // sum of K exact products errs by at most about K * 2^-24 of the sum of their magnitudes.
    double worst = 0;
    for (int i = 0; i < M; i += 7)
        for (int j = 0; j < N; j += 5) {
            double sum = 0, magnitude = 0;
            for (int kk = 0; kk < K; ++kk) {
                const double p = double(float(a_buf(kk, i))) * double(float(b_buf(kk % 2, j, kk / 2)));
                sum += p, magnitude += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(out(j, i) - sum) / std::max(magnitude, 1e-30));
        }
    const double bound = K * std::ldexp(1.0, -24);
    if (!(worst <= bound)) {
        std::printf("amx_product: FAILED: relative error %.3g above %.3g\n", worst, bound);
        return 1;
    }

    double best = 1e30;
    for (int round = 0; round < 10; ++round) {
        const int calls = 10;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) c.realize(out);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
    std::printf("amx_product %d x %d x %d, pair rows of %d columns: %.1f us, %.1f GFLOP/s (relative error %.2g, bound %.2g)\n", M, N, K,
                N + pad, best * 1e6, 2.0 * M * N * K / best / 1e9, worst, bound);
    return 0;
}
