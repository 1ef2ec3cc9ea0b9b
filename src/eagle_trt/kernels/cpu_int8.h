/* The int8 precision's products (runtime.linears.Int8Linear), on whichever unit this CPU has: exact int32 sums of
 * int8 activations times int8 weights, the weights in this file's own layout (ef_int8_pack).
 * - AMX (Sapphire Rapids and later, where Linux grants the tile state): tdpbssd, signed x signed bytes into int32
 *   tiles, 16 activation rows against 16 outputs x 64 inputs a tile product. Weights in tiles of 16 outputs x 64
 *   inputs ([16 input quads][16 outputs][4 bytes], as the B operand reads them), so T rows cost about what one row
 *   costs until the tile unit is busy: a verify block of 4-16 rows rides on the weight reads of a decode step.
 * - AVX-512 VNNI: vpdpbusd (unsigned x signed bytes, 4 products a lane, no saturation) on the activations offset to
 *   unsigned (x + 128: 1..255), minus 128 x the weight row's sum (kept after the weights).
 * - AVX2: vpmaddubsw on |w| and x with w's sign (a pair of products is at most 2 * 127 * 127, inside int16),
 *   vpmaddwd to int32 (where torch._int_mm has no fast kernel and oneDNN's u8 x s8 one may saturate: no VNNI, an
 *   AMD Zen 3 ran a SmolLM2 step in ~200 ms).
 * Integer sums are exact in any order, so every branch, _int_mm and oneDNN give the same bits; the choice among them
 * is speed only. EAGLE_TRT_AMX=0 keeps an AMX CPU on the VNNI branch (cpu_amx.h). Included by cpu_forward.c. */

#if SIMD_AVX512 && defined(__AVX512VNNI__)
#define INT8_VNNI 1
#else
#define INT8_VNNI 0
#endif
#if INT8_VNNI && HAVE_AMX
#define INT8_AMX 1
#define AMX_BLOCKS 4 /* 16-output blocks a pass: accumulator tiles 0-3, activations 4, weights 5-7 */

/* Accumulator tile i's rows (outputs n0 .. n0+15) to out, the last block's valid columns only. */
#define AMX_STORE(i)                                                                                              \
    do {                                                                                                          \
        const int n0 = (b0 + (i)) * 16;                                                                           \
        if (n0 + 16 <= N) {                                                                                       \
            _tile_stored(i, out + (size_t)t0 * N + n0, (size_t)N * 4);                                            \
        } else {                                                                                                  \
            _tile_stored(i, spill, 64);                                                                           \
            for (int r = 0; r < R; r++) memcpy(out + (size_t)(t0 + r) * N + n0, spill + 16 * r, 4 * (N - n0));  \
        }                                                                                                         \
    } while (0)
/* One 64-input chunk of block i: its weight tile into tile `tb`, then sums i += activations x weights. */
#define AMX_STEP(i, tb)                                                                                           \
    if (nb > (i)) {                                                                                               \
        _tile_loadd(tb, wg + ((size_t)(i) * chunks + c) * 1024, 64);                                              \
        _tile_dpbssd(i, 4, tb);                                                                                   \
    }

/* out [T][N] = x [T][Kp] (rows Kp apart, zero past K) times the tiled weights (int8_amx_pack). */
static void int8_amx_mm(const int8_t *x, int T, const int8_t *wp, int N, int Kp, int32_t *out) {
    const int chunks = Kp / 64, blocks = (N + 15) / 16, groups = (blocks + AMX_BLOCKS - 1) / AMX_BLOCKS;
#pragma omp parallel
    {
        int configured = 0;
        int32_t spill[16 * 16];
#pragma omp for schedule(static)
        for (int g = 0; g < groups; g++) {
            const int b0 = g * AMX_BLOCKS, nb = blocks - b0 < AMX_BLOCKS ? blocks - b0 : AMX_BLOCKS;
            const int8_t *wg = wp + (size_t)b0 * chunks * 1024;
            for (int t0 = 0; t0 < T; t0 += 16) {
                const int R = T - t0 < 16 ? T - t0 : 16;
                if (R != configured) amx_configure(configured = R, 64, 16);
                _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
                for (int c = 0; c < chunks; c++) {
                    _tile_loadd(4, x + (size_t)t0 * Kp + c * 64, Kp);
                    AMX_STEP(0, 5) AMX_STEP(1, 6) AMX_STEP(2, 7) AMX_STEP(3, 5)
                }
                AMX_STORE(0);
                if (nb > 1) AMX_STORE(1);
                if (nb > 2) AMX_STORE(2);
                if (nb > 3) AMX_STORE(3);
            }
        }
        if (configured) _tile_release();
    }
}
#undef AMX_STEP
#undef AMX_STORE

/* w [N][K] -> tiles: block b (outputs 16b ..), chunk c (inputs 64c ..) at ((b * chunks) + c) * 1024, byte
 * [quad][output][j] = w[16b + output][64c + 4 quad + j], zero past N and K. */
static void int8_amx_pack(const int8_t *w, int N, int K, int8_t *out) {
    const int chunks = (K + 63) / 64, blocks = (N + 15) / 16;
    memset(out, 0, (size_t)blocks * chunks * 1024);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            out[((size_t)(n / 16) * chunks + k / 64) * 1024 + ((k % 64) / 4) * 64 + (n % 16) * 4 + k % 4] =
                w[(size_t)n * K + k];
}
#else
#define INT8_AMX 0
#endif

/* 2 where the products run on AMX (cpu_amx.h: granted once per process), 1 on AVX-512 VNNI, 0 on AVX2. */
int ef_int8_kernel(void) {
#if INT8_AMX
    if (amx_granted()) return 2;
#endif
    return INT8_VNNI;
}

#if INT8_VNNI
#define INT8_W 4    /* weight rows a pass, each against INT8_ROWS activation rows: 16 sums in registers of their own */
#define INT8_ROWS 4 /* activation rows that share one pass over the weight rows */

/* The four vectors' lane sums as one 128-bit vector (a[0]'s in lane 0 .. a[3]'s in lane 3). */
static inline __m128i sum4_epi32(const __m512i a[4]) {
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    const __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* out[t][n .. n+NW) for the activation rows t0 .. t0+R: NW weight rows against R activation rows in one pass over
 * K (NW, R constants at each call). The last partial 64 bytes load masked: weights past K read as 0, so they add
 * nothing whatever the activation byte. */
static inline __attribute__((always_inline)) void int8_tile(const int8_t *xq, int K, const int8_t *w,
                                                            const int32_t *wsum, int n, int t0, int N, int32_t *out,
                                                            const int NW, const int R) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);  /* x ^ 0x80 = x + 128 as an unsigned byte */
    __m512i acc[INT8_ROWS][INT8_W];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < INT8_W; j++) acc[r][j] = _mm512_setzero_si512();
    for (int k = 0; k < K; k += 64) {
        const __mmask64 m = K - k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (K - k)) - 1);
        __m512i wv[INT8_W];
        for (int j = 0; j < NW; j++) {
            _mm_prefetch((const char *)(w + (size_t)(n + j + INT8_W) * K + k), _MM_HINT_T0);
            wv[j] = _mm512_maskz_loadu_epi8(m, w + (size_t)(n + j) * K + k);
        }
        for (int r = 0; r < R; r++) {
            const __m512i xv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, xq + (size_t)(t0 + r) * K + k), flip);
            for (int j = 0; j < NW; j++) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], xv, wv[j]);
        }
    }
    for (int r = 0; r < R; r++) {
        int32_t sums[4];
        _mm_storeu_si128((__m128i *)sums, sum4_epi32(acc[r]));
        for (int j = 0; j < NW; j++) out[(size_t)(t0 + r) * N + n + j] = sums[j] - 128 * wsum[n + j];
    }
}

/* The VNNI branch: out [T][N] = xq [T][K] w^T; w [N][K], wsum [N] each weight row's sum. Weight rows go in fours
 * (the last 1-3 alone), activation rows in tiles of INT8_ROWS and one of the rest. */
static void int8_rows_mm(const int8_t *xq, int T, const int8_t *w, const int32_t *wsum, int N, int K, int32_t *out) {
#pragma omp parallel for schedule(static)
    for (int p = 0; p < (N + INT8_W - 1) / INT8_W; p++) {
        const int n = INT8_W * p, nw = N - n < INT8_W ? N - n : INT8_W;
        for (int t0 = 0; t0 < T; t0 += INT8_ROWS) {
            const int R = T - t0 < INT8_ROWS ? T - t0 : INT8_ROWS;
#define INT8_TILE(NW_, R_) int8_tile(xq, K, w, wsum, n, t0, N, out, NW_, R_)
#define INT8_TILES(NW_) switch (R) { case 1: INT8_TILE(NW_, 1); break; case 2: INT8_TILE(NW_, 2); break; \
                                     case 3: INT8_TILE(NW_, 3); break; default: INT8_TILE(NW_, 4); }
            switch (nw) { case 1: INT8_TILES(1); break; case 2: INT8_TILES(2); break; case 3: INT8_TILES(3); break;
                          default: INT8_TILES(4); }
#undef INT8_TILES
#undef INT8_TILE
        }
    }
}
#else
/* Sum of the 8 int32 lanes. */
static inline int32_t hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
}

#define INT8_ROWS 4 /* activation rows that share one pass over the weight rows */
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

/* The AVX2 branch: out [T][N] = xq [T][K] w^T; w [N][K] (wsum unused: the sign trick needs no offset). Weight
 * rows go in pairs (a lone last one alone), activation rows in tiles of INT8_ROWS and one of the rest. */
static void int8_rows_mm(const int8_t *xq, int T, const int8_t *w, const int32_t *wsum, int N, int K, int32_t *out) {
    (void)wsum;
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
#endif

/* Bytes of w [N][K]'s packed form: AMX tiles, or the rows ([N][K], 64-byte aligned end) then their int32 sums. */
long ef_int8_packed_bytes(int N, int K) {
#if INT8_AMX
    if (ef_int8_kernel() == 2) return (long)((N + 15) / 16) * ((K + 63) / 64) * 1024;
#endif
    return ((long)N * K + 63) / 64 * 64 + 4L * N;
}

/* w [N][K] int8 (values in -127..127) -> out, ef_int8_packed_bytes of it, in this machine's layout. */
void ef_int8_pack(const int8_t *w, int N, int K, int8_t *out) {
#if INT8_AMX
    if (ef_int8_kernel() == 2) {
        int8_amx_pack(w, N, K, out);
        return;
    }
#endif
    memcpy(out, w, (size_t)N * K);
    int32_t *sums = (int32_t *)(out + ((size_t)N * K + 63) / 64 * 64);
    for (int n = 0; n < N; n++) {
        int32_t s = 0;
        for (int k = 0; k < K; k++) s += w[(size_t)n * K + k];
        sums[n] = s;
    }
}

/* out [T][N] = xq [T][K] w^T as exact int32 sums; packed: ef_int8_pack's form of w [N][K] (int8, -127..127 like the
 * activations). */
void ef_int8_mm(const int8_t *xq, int T, const int8_t *packed, int N, int K, int32_t *out) {
#if INT8_AMX
    if (ef_int8_kernel() == 2) {
        const int Kp = (K + 63) / 64 * 64;
        if (Kp == K) {
            int8_amx_mm(xq, T, packed, N, K, out);
        } else {  /* rows padded with zeros to whole 64-byte chunks */
            int8_t *x = calloc((size_t)T * Kp, 1);
            for (int t = 0; t < T; t++) memcpy(x + (size_t)t * Kp, xq + (size_t)t * K, K);
            int8_amx_mm(x, T, packed, N, Kp, out);
            free(x);
        }
        return;
    }
#endif
    int8_rows_mm(xq, T, packed, (const int32_t *)(packed + ((size_t)N * K + 63) / 64 * 64), N, K, out);
}

/* Int8Linear's whole forward, the same float32 operations in the same order as its torch ops (runtime/linears.py),
 * so the same bits: each row quantized by its own scale s = max(max|x|, 1e-12) / 127 to round-half-even(x / s), the
 * exact int32 sums, then y = (float(sum) * s) * scale[n] (+ bias[n]). x [T][K], y [T][N] float32; packed as for
 * ef_int8_mm; bias NULL: none. */
void ef_int8_linear(const float *x, int T, const int8_t *packed, int N, int K, const float *scale, const float *bias,
                    float *y) {
    int8_t *xq = malloc((size_t)T * K);
    int32_t *sums = malloc((size_t)T * N * sizeof(int32_t));
    float *row_scale = malloc((size_t)T * sizeof(float));
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * K;
        float amax = 0.0f;
        for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(xr[k]));
        const float s = fmaxf(amax, 1e-12f) / 127.0f;
        row_scale[t] = s;
        for (int k = 0; k < K; k++) xq[(size_t)t * K + k] = (int8_t)nearbyintf(xr[k] / s);
    }
    ef_int8_mm(xq, T, packed, N, K, sums);
    for (int t = 0; t < T; t++) {
        float *yr = y + (size_t)t * N;
        const int32_t *sr = sums + (size_t)t * N;
        for (int n = 0; n < N; n++) yr[n] = ((float)sr[n] * row_scale[t]) * scale[n];
        if (bias)
            for (int n = 0; n < N; n++) yr[n] += bias[n];
    }
    free(xq), free(sums), free(row_scale);
}
