/* The int8 precision's products (runtime.linears.Int8Linear) on CPUs where torch._int_mm has no fast kernel and
 * oneDNN's u8 x s8 one may saturate (no VNNI: an AMD Zen 3 ran a SmolLM2 step in ~200 ms): exact int32 sums of int8
 * activations times int8 weights, by AVX2's vpmaddubsw on |w| and x with w's sign (a pair of products is at most
 * 2 * 127 * 127, inside int16), vpmaddwd to int32 and int32 sums. Integer sums are exact in any order, so this kernel,
 * _int_mm and oneDNN give the same bits; the choice among them is speed only. Included by cpu_forward.c. */

/* Sum of the 8 int32 lanes. */
static inline int32_t hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
}

#define INT8_AHEAD 2 /* weight-row pairs to prefetch ahead. AMD Zen 3, weights streaming from memory, against one weight
                      * row a pass without prefetch: 1 row 0-10 % faster, 4 rows 12-20 %, 8-16 rows 20-45 %
                      * (docs/results/2026-11-28-avx2-int8/int8_ab.c); pairs without the prefetch ran 1-4 rows 25-35 %
                      * slower than one row a pass */

/* out[t][n .. n+NW) for the activation rows t0 .. t0+R: NW weight rows against R activation rows in one pass over
 * K, every (weight row, activation row) sum in a register of its own (NW, R constants at each call, so the sums
 * stay in AVX2's 16 registers: 2 x 4 of them, the 2 weight rows and their |w|). */
static inline __attribute__((always_inline)) void int8_tile(const int8_t *xq, int K, const int8_t *w, int n, int t0,
                                                            int N, int32_t *out, const int NW, const int R) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[2][4];
    for (int j = 0; j < NW; j++)
        for (int r = 0; r < R; r++) acc[j][r] = _mm256_setzero_si256();
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        __m256i wv[2], aw[2];
        for (int j = 0; j < NW; j++)  /* the weights stream from memory: fetch the pair INT8_AHEAD pairs on */
            _mm_prefetch((const char *)(w + (size_t)(n + j + 2 * INT8_AHEAD) * K + k), _MM_HINT_T0);
        for (int j = 0; j < NW; j++) {
            wv[j] = _mm256_loadu_si256((const __m256i *)(w + (size_t)(n + j) * K + k));
            aw[j] = _mm256_abs_epi8(wv[j]);
        }
        for (int r = 0; r < R; r++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)(t0 + r) * K + k));
            for (int j = 0; j < NW; j++) {
                const __m256i p = _mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(xv, wv[j]));  /* pairs: |.| <= 32258 */
                acc[j][r] = _mm256_add_epi32(acc[j][r], _mm256_madd_epi16(p, ones));
            }
        }
    }
    for (int j = 0; j < NW; j++) {
        const int8_t *wn = w + (size_t)(n + j) * K;
        for (int r = 0; r < R; r++) {
            const int8_t *xr = xq + (size_t)(t0 + r) * K;
            int32_t sum = hsum8_epi32(acc[j][r]);
            for (int kk = k; kk < K; kk++) sum += (int32_t)xr[kk] * wn[kk];
            out[(size_t)(t0 + r) * N + n + j] = sum;
        }
    }
}

#define INT8_ROWS 4 /* activation rows that share one pass over the weight rows */

/* out [T][N] = xq [T][K] w^T as exact int32 sums; w [N][K] int8 (values in -127..127, as the activations). Weight
 * rows go in pairs (a lone last one alone), activation rows in tiles of INT8_ROWS and one of the rest. */
void ef_int8_mm(const int8_t *xq, int T, const int8_t *w, int N, int K, int32_t *out) {
#pragma omp parallel for schedule(static)
    for (int p = 0; p < (N + 1) / 2; p++) {
        const int n = 2 * p, nw = N - n < 2 ? 1 : 2;
        for (int t0 = 0; t0 < T; t0 += INT8_ROWS) {
            const int R = T - t0 < INT8_ROWS ? T - t0 : INT8_ROWS;
#define INT8_TILE(NW_, R_) int8_tile(xq, K, w, n, t0, N, out, NW_, R_)
            if (nw == 2) {
                switch (R) { case 1: INT8_TILE(2, 1); break; case 2: INT8_TILE(2, 2); break; case 3: INT8_TILE(2, 3); break; default: INT8_TILE(2, 4); }
            } else {
                switch (R) { case 1: INT8_TILE(1, 1); break; case 2: INT8_TILE(1, 2); break; case 3: INT8_TILE(1, 3); break; default: INT8_TILE(1, 4); }
            }
#undef INT8_TILE
        }
    }
}
