// The FMA peak of one core, for the "what limits us" figures in docs/performance.md: 12
// independent chains of FMAs in registers (no memory traffic), on the widest vectors the
// compiler is given: 512-bit with AVX-512 (-march=native on an AVX-512 CPU), else 256-bit.
//   cc -O2 -march=native bench/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak
//   (/tmp/fma_peak & /tmp/fma_peak; wait)      # both cores of a 2-core machine at once
//   /tmp/fma_peak bf16                          # with AVX512-BF16: 12 chains of vdpbf16ps instead,
//                                               # counted as 2 FLOPs per bfloat16 product
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMADD _mm512_fmadd_ps
#define ADD _mm512_add_ps
#define FLOATS 16
#define CONSTRAINT "+v"
#else
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#define FMADD _mm256_fmadd_ps
#define ADD _mm256_add_ps
#define FLOATS 8
#define CONSTRAINT "+x"
#endif

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#if defined(__AVX512BF16__)
// The bfloat16 dot product's rate (the products of the bfloat16 kernels with bf16 pairs,
// schedules/cpu_targets.json): each vdpbf16ps adds two bfloat16 products into each float32 lane.
static int bf16_peak(void) {
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f803f80), c = (__m512bh)_mm512_set1_epi32(0x38d138d1);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
           a9 = a0, a10 = a0, a11 = a0;
    const long n = 50000000;
    const double t0 = seconds();
    for (long i = 0; i < n; i++) {
#define D(x) x = _mm512_dpbf16_ps(x, b, c);
        D(a0) D(a1) D(a2) D(a3) D(a4) D(a5) D(a6) D(a7) D(a8) D(a9) D(a10) D(a11)
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                         "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    const double s = seconds() - t0;
    const __m512 r = _mm512_add_ps(a0, a11);
    printf("%.1f GFLOP/s on one core, 512-bit vdpbf16ps (checksum %f)\n", n * 12.0 * 2 * 32 / s / 1e9, r[0]);
    return 0;
}
#endif

int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0] == 'b') {
#if defined(__AVX512BF16__)
        return bf16_peak();
#else
        fprintf(stderr, "fma_peak: compiled without AVX512-BF16 (-march=native on a CPU with it)\n");
        return 2;
#endif
    }
    const vec b = SET1(0.9999f), c = SET1(0.0001f);
    vec a0 = b, a1 = c, a2 = b, a3 = c, a4 = b, a5 = c, a6 = b, a7 = c, a8 = b, a9 = c, a10 = b, a11 = c;
    const long n = 100000000;
    const double t0 = seconds();
    for (long i = 0; i < n; i++) {
#define F(x) x = FMADD(x, b, c);
        F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11)
        // Keeps the chains in registers and the loop from being folded away.
        __asm__ volatile("" : CONSTRAINT(a0), CONSTRAINT(a1), CONSTRAINT(a2), CONSTRAINT(a3), CONSTRAINT(a4),
                         CONSTRAINT(a5), CONSTRAINT(a6), CONSTRAINT(a7), CONSTRAINT(a8), CONSTRAINT(a9),
                         CONSTRAINT(a10), CONSTRAINT(a11));
    }
    const double s = seconds() - t0;
    const vec r = ADD(a0, a11);
    printf("%.1f GFLOP/s on one core, %d-bit vectors (checksum %f)\n", n * 12.0 * 2 * FLOATS / s / 1e9,
           FLOATS * 32, r[0]);
    return 0;
}
