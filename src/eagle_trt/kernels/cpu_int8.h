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

#define INT8_ROWS 4 /* activation rows that share one pass over a weight row */

/* out [T][N] = xq [T][K] w^T as exact int32 sums; w [N][K] int8 (values in -127..127, as the activations). */
void ef_int8_mm(const int8_t *xq, int T, const int8_t *w, int N, int K, int32_t *out) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int8_t *wn = w + (size_t)n * K;
        for (int t0 = 0; t0 < T; t0 += INT8_ROWS) {
            const int R = T - t0 < INT8_ROWS ? T - t0 : INT8_ROWS;
            __m256i acc[INT8_ROWS];
            for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_si256();
            int k = 0;
            for (; k + 32 <= K; k += 32) {
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(wn + k)), aw = _mm256_abs_epi8(wv);
                for (int r = 0; r < R; r++) {
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)(t0 + r) * K + k));
                    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
                    acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, ones));
                }
            }
            for (int r = 0; r < R; r++) {
                const int8_t *xr = xq + (size_t)(t0 + r) * K;
                int32_t sum = hsum8_epi32(acc[r]);
                for (int kk = k; kk < K; kk++) sum += (int32_t)xr[kk] * wn[kk];
                out[(size_t)(t0 + r) * N + n] = sum;
            }
        }
    }
}
