// The FMA peak of one core, for the "what limits us" figures in README.md: 12 independent
// chains of 256-bit FMAs in registers (no memory traffic).
//   cc -O2 -mavx2 -mfma bench/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

int main(void) {
    const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);
    __m256 a0 = b, a1 = c, a2 = b, a3 = c, a4 = b, a5 = c, a6 = b, a7 = c, a8 = b, a9 = c, a10 = b, a11 = c;
    const long n = 100000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
#define F(x) x = _mm256_fmadd_ps(x, b, c);
        F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11)
        // Keeps the chains in registers and the loop from being folded away.
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),
                         "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    const __m256 r = _mm256_add_ps(a0, a11);
    printf("%.1f GFLOP/s on one core (checksum %f)\n", n * 12.0 * 16.0 / s / 1e9, r[0]);
    return 0;
}
