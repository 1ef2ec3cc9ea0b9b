/* A/B of the int8 AVX2 kernel, in one process, rounds alternating: ef_int8_mm as of 85d9469 (kernels/cpu_int8.h:
 * two weight rows against up to 4 activation rows a pass, prefetched ahead) against the kernel before it (one weight
 * row a pass, up to 4 activation rows, no prefetch; kept below as old_int8_mm). Weights cycle through ~160 MB of
 * copies, so they stream from memory as in a forward; outputs are compared bit for bit. Run from the repository root:
 *
 *   gcc -O3 -march=native -ffp-contract=off docs/results/2026-11-28-avx2-int8/int8_ab.c -o /tmp/int8_ab && /tmp/int8_ab
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../../../src/eagle_trt/kernels/cpu_int8.h"

static void old_int8_mm(const int8_t *xq, int T, const int8_t *w, int N, int K, int32_t *out) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int n = 0; n < N; n++) {
        const int8_t *wn = w + (size_t)n * K;
        for (int t0 = 0; t0 < T; t0 += 4) {
            const int R = T - t0 < 4 ? T - t0 : 4;
            __m256i acc[4];
            for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_si256();
            int k = 0;
            for (; k + 32 <= K; k += 32) {
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(wn + k)), aw = _mm256_abs_epi8(wv);
                for (int r = 0; r < R; r++) {
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)(t0 + r) * K + k));
                    acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones));
                }
            }
            for (int r = 0; r < R; r++) {
                int32_t sum = hsum8_epi32(acc[r]);
                for (int kk = k; kk < K; kk++) sum += (int32_t)xq[(size_t)(t0 + r) * K + kk] * wn[kk];
                out[(size_t)(t0 + r) * N + n] = sum;
            }
        }
    }
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
typedef void (*mm_fn)(const int8_t *, int, const int8_t *, int, int, int32_t *);

int main(void) {
    const int shapes[4][2] = {{960, 576}, {3072, 576}, {576, 1536}, {49152, 576}};  /* SmolLM2: qkv, gate|up, down, head */
    const int rows[5] = {1, 2, 4, 8, 16};
    const mm_fn fns[2] = {old_int8_mm, ef_int8_mm};
    printf("| N x K | rows | before us | tiled us | speedup | tiled GMAC/s |\n|---|---|---|---|---|---|\n");
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], K = shapes[s][1];
        int copies = (int)(160000000L / ((size_t)N * K));
        if (copies < 1) copies = 1;
        int8_t *w = malloc((size_t)N * K * copies), *x = malloc(16 * (size_t)K);  /* [copies][N][K], [16][K] */
        int32_t *o = malloc(16 * (size_t)N * 4), *o2 = malloc(16 * (size_t)N * 4);  /* [16][N] */
        for (size_t i = 0; i < (size_t)N * K * copies; i++) w[i] = (int8_t)(rand() % 255 - 127);
        for (int i = 0; i < 16 * K; i++) x[i] = (int8_t)(rand() % 255 - 127);
        for (int ri = 0; ri < 5; ri++) {
            const int T = rows[ri], reps = copies < 3 ? 3 : copies;
            double best[2] = {1e9, 1e9};
            old_int8_mm(x, T, w, N, K, o);
            ef_int8_mm(x, T, w, N, K, o2);
            if (memcmp(o, o2, (size_t)T * N * 4)) { printf("outputs differ\n"); return 1; }
            for (int round = 0; round < 7; round++)
                for (int f = 0; f < 2; f++) {
                    const double t0 = now();
                    for (int r = 0; r < reps; r++) fns[f](x, T, w + (size_t)N * K * (r % copies), N, K, o);
                    const double d = (now() - t0) / reps;
                    if (d < best[f]) best[f] = d;
                }
            printf("| %d x %d | %d | %.0f | %.0f | %.2fx | %.0f |\n", N, K, T, best[0] * 1e6, best[1] * 1e6,
                   best[0] / best[1], (double)N * K * T / best[1] / 1e9);
        }
        free(w), free(x), free(o), free(o2);
    }
    return 0;
}
