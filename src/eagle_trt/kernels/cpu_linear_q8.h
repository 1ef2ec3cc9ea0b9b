/* Block linears with 8-bit activations (the `native-q8` precision): the weights' integer values times the
 * activations quantized per 32-block as llama.cpp quantizes them (Q8: d = max|x| / 127, q = round(x / d)), summed in
 * int32 by AVX-512 VNNI (vpdpbusd: unsigned weight bytes x signed activation bytes), or on an AVX2 CPU by vpmaddubsw
 * and vpmaddwd (the same integer sums, see dot_group_q8), then scaled in float32.
 *
 * Weights are repacked once at load (ef_repack) so that one 64-byte vector holds 16 output rows x 4 inputs: a
 * vpdpbusd then gives 16 outputs' partial sums, lane r = output row r (AVX2: its two 32-byte halves, rows 0-7 and
 * 8-15), and the block scales apply per lane with no horizontal sums. A unit is 16 rows x 32 inputs (one block of each row):
 *   X4 (Q4_0, Q4_1): d[16] fp16, m[16] fp16, 4 x 64 bytes; byte 4r+i of vector v holds row r's input 4v+i in its
 *                    low nibble and input 16+4v+i in its high nibble (values 0..15)     -- 320 bytes, the file's 0.625 B
 *   X8 (Q8_0):       d[16] fp16, m[16] fp16, 8 x 64 bytes; byte 4r+i of vector j holds row r's input 4j+i + 128
 * with w = u*d + m: Q4_1 as stored; Q4_0 m = -8d; Q8_0 m = -128d (exact in fp16; ef_repack checks).
 *
 * A row's output o is  sum over blocks b in order of  float(sum_k u_k q_k) * (d_b * dx_b) + m_b * (dx_b * sum_k q_k):
 * integer sums are exact and every float operation runs in the same order for every row, whatever rows run beside
 * it, so rows stay independent (EAGLE = plain decoding on this precision) exactly as on the float32-activation path.
 */
#if SIMD_AVX512 && defined(__AVX512VNNI__)
#define HAVE_Q8 1
#define Q8_VNNI 1
#elif !SIMD_AVX512
#define HAVE_Q8 1 /* AVX2: vpmaddubsw (exact here: weights 0..15 per nibble, see dot_group_q8) */
#define Q8_VNNI 0
#else
#define HAVE_Q8 0
#endif

enum { W_X4 = 4, W_X8 = 5 };
#define GROUP 16 /* output rows per repacked unit */
/* Units prefetched ahead, into L2 (T1), not L1: the weights stream from L3 once per step, and fetched into L1 they
 * pushed out the activations and sums the next units read. 32 / T1 against 16 / T0: a one-row step -5 to -9 %, a
 * two-row verify step -4 to -14 % (SmolLM2 Q4_1, context 300 and 3000, 1 and 2 threads, builds alternating in one
 * process; docs/native_cpu.md "Prefetching into L2"). */
#ifndef Q8_AHEAD
#define Q8_AHEAD 32
#endif
#ifndef Q8_HINT
#define Q8_HINT _MM_HINT_T1
#endif

static inline size_t unit_bytes(int type) { return type == W_X4 ? 64 + 4 * 64 : 64 + 8 * 64; }

/* Bytes ef_repack writes for a rows x cols linear stored as `type` (Q4_0 / Q4_1 / Q8_0), or 0 if it cannot. */
long ef_repacked_bytes(int type, int rows, int cols) {
    if (!HAVE_Q8 || rows % GROUP || cols % QK || !(type == W_Q4_0 || type == W_Q4_1 || type == W_Q8_0)) return 0;
    return (long)(rows / GROUP) * (cols / QK) * (long)unit_bytes(type == W_Q8_0 ? W_X8 : W_X4);
}

/* Row i's block as unsigned values u[32] (inputs in order) with w = u*d + m; d16 the stored fp16 scale. */
static void block_unsigned(const Linear *src, size_t i, uint8_t *u, uint16_t *d16, float *m) {
    if (src->type == W_Q8_0) {
        const block_q8_0 *blk = (const block_q8_0 *)src->data + i;
        for (int k = 0; k < QK; k++) u[k] = (uint8_t)(blk->qs[k] + 128);
        *d16 = blk->d, *m = -128.0f * fp16(blk->d);
        return;
    }
    const block_q4_1 *b1 = (const block_q4_1 *)src->data + i;
    const block_q4_0 *b0 = (const block_q4_0 *)src->data + i;
    const uint8_t *q = src->type == W_Q4_1 ? b1->qs : b0->qs;
    for (int k = 0; k < 16; k++) u[k] = q[k] & 0x0F, u[k + 16] = q[k] >> 4;
    *d16 = src->type == W_Q4_1 ? b1->d : b0->d;
    *m = src->type == W_Q4_1 ? fp16(b1->m) : -8.0f * fp16(b0->d);
}

/* Repack a block linear (src->data as the file stores it) into dst (ef_repacked_bytes); returns the new type, or
 * -1 where an offset m is not exact in fp16. */
int ef_repack(const Linear *src, uint8_t *dst) {
    const int nb = src->cols / QK, out = src->type == W_Q8_0 ? W_X8 : W_X4;
    const size_t ub = unit_bytes(out);
    for (int g = 0; g < src->rows / GROUP; g++)
        for (int b = 0; b < nb; b++) {
            uint8_t *unit = dst + ((size_t)g * nb + b) * ub, *qs = unit + 64;
            uint16_t *d16 = (uint16_t *)unit, *m16 = d16 + GROUP;
            for (int r = 0; r < GROUP; r++) {
                uint8_t u[QK];
                float m;
                block_unsigned(src, (size_t)(g * GROUP + r) * nb + b, u, &d16[r], &m);
                m16[r] = _cvtss_sh(m, 0);
                if (fp16(m16[r]) != m) return -1;
                for (int k = 0; k < 4; k++)
                    for (int v = 0; v < (out == W_X4 ? 4 : 8); v++)
                        qs[v * 64 + 4 * r + k] = out == W_X4 ? (uint8_t)(u[4 * v + k] | (u[16 + 4 * v + k] << 4))
                                                             : u[4 * v + k];
            }
        }
    return out;
}

#if HAVE_Q8
/* Rows x [T][cols] as 8-bit blocks: q [T][cols], dx [T][nb] = max|x|/127, sx [T][nb] = dx * sum(q). */
static void quantize_rows(const float *x, int T, int cols, int8_t *q, float *dx, float *sx) {
    const int nb = cols / QK;
    for (int t = 0; t < T; t++)
        for (int b = 0; b < nb; b++) {
            int qsum;
            const float d = quantize_block(x + (size_t)t * cols + b * QK, q + (size_t)t * cols + b * QK, &qsum);
            dx[(size_t)t * nb + b] = d;
            sx[(size_t)t * nb + b] = d * (float)qsum;
        }
}

/* Scale one unit's integer sums (as floats: exact below 2^24) into a row's accumulator. */
#define SCALE_SUMS(acc, isum, rb)                                                                         \
    do {                                                                                                  \
        acc = vf_fmadd(isum, vf_mul(dv, vf_set1(dx[rb])), acc); \
        acc = vf_fmadd(mv, vf_set1(sx[rb]), acc);               \
    } while (0)

#if Q8_VNNI
/* Outputs g*16 .. g*16+15 of rows t0..t0+NT-1 (q, dx, sx already offset to row t0). Each unit's weights are
 * unpacked once for the NT rows; every row runs the same arithmetic for NT = 1..TILE. */
static inline __attribute__((always_inline)) void dot_group_q8(const Linear *L, int g, const int8_t *q,
                                                               const float *dx, const float *sx, float *y, int ldy,
                                                               const int NT, const int type) {
    const int nb = L->cols / QK;
    const size_t ub = unit_bytes(type);
    const uint8_t *unit = (const uint8_t *)L->data + (size_t)g * nb * ub;
    vf acc[TILE];
    for (int r = 0; r < NT; r++) acc[r] = vf_zero();
    for (int b = 0; b < nb; b++, unit += ub) {
        for (int line = 0; line < (int)ub; line += 64) _mm_prefetch((const char *)unit + Q8_AHEAD * ub + line, Q8_HINT);
        const vf dv = vf_load_half(unit), mv = vf_load_half(unit + 32);
        __m512i w[8];
        if (type == W_X4) {
            const __m512i lo = _mm512_set1_epi8(0x0F);
            for (int v = 0; v < 4; v++) {
                const __m512i raw = _mm512_loadu_si512(unit + 64 + 64 * v);
                w[v] = _mm512_and_si512(raw, lo);
                w[v + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo);
            }
        } else {
            for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(unit + 64 + 64 * j);
        }
        for (int r = 0; r < NT; r++) {
            const int32_t *xb = (const int32_t *)(q + (size_t)r * L->cols + b * QK);  /* 8 groups of 4 inputs */
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int j = 0; j < 8; j += 2) {
                s0 = _mm512_dpbusd_epi32(s0, w[j], _mm512_set1_epi32(xb[j]));
                s1 = _mm512_dpbusd_epi32(s1, w[j + 1], _mm512_set1_epi32(xb[j + 1]));
            }
            const size_t rb = (size_t)r * nb + b;
            SCALE_SUMS(acc[r], _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), rb);
        }
    }
    const vf bias = L->bias ? vf_load(L->bias + g * GROUP) : vf_zero();
    for (int r = 0; r < NT; r++) vf_store(y + (size_t)r * ldy + g * GROUP, vf_add(acc[r], bias));
}
#else
/* AVX2. vpmaddubsw adds two products of an unsigned weight byte and a signed activation byte in int16, saturating:
 * with weights 0..15 (X4's nibbles; X8's bytes as lo + 16 hi) a pair is at most 2 * 15 * 127 and a lane's 8 pairs
 * 30480, so the int16 sums, then vpmaddwd's int32 ones, are exact: the integer block sums VNNI gives. Half h of a
 * unit (its 32-byte halves) is its output rows 8h..8h+7. */

/* One row's integer sums over a unit's half: X4 from its unpacked nibbles w[8]; X8 from its bytes at qs. */
static inline __attribute__((always_inline)) __m256i half_sums(const __m256i *w, const uint8_t *qs,
                                                               const int32_t *xb, const int type) {
    const __m256i lo = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    if (type == W_X4) {
        __m256i s16 = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(xb[0]));
        for (int j = 1; j < 8; j++) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[j], _mm256_set1_epi32(xb[j])));
        return _mm256_madd_epi16(s16, ones);
    }
    __m256i s_lo = _mm256_setzero_si256(), s_hi = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 64 * j)), x4 = _mm256_set1_epi32(xb[j]);
        s_lo = _mm256_add_epi16(s_lo, _mm256_maddubs_epi16(_mm256_and_si256(raw, lo), x4));
        s_hi = _mm256_add_epi16(s_hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), lo), x4));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(s_lo, ones), _mm256_slli_epi32(_mm256_madd_epi16(s_hi, ones), 4));
}

/* X4's nibbles of a unit's half (qs: vector j's half at qs + 64 j) as w[8]. */
static inline __attribute__((always_inline)) void half_nibbles(const uint8_t *qs, __m256i *w) {
    const __m256i lo = _mm256_set1_epi8(0x0F);
    for (int v = 0; v < 4; v++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 64 * v));
        w[v] = _mm256_and_si256(raw, lo);
        w[v + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo);
    }
}

/* SCALE_SUMS on a half: the same float32 operations per lane. */
#define SCALE_HALF(acc, isum, h, rb)                                                                              \
    do {                                                                                                          \
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)unit + (h)));                          \
        const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(unit + 32) + (h)));                   \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dv, _mm256_set1_ps(dx[rb])), acc);          \
        acc = _mm256_fmadd_ps(mv, _mm256_set1_ps(sx[rb]), acc);                                                   \
    } while (0)

/* Outputs 8h..8h+7 of group g for RN <= 4 rows (q, dx, sx, y at the first of them): one pass over the group's
 * units. */
static inline __attribute__((always_inline)) void half_pass(const uint8_t *unit, int nb, size_t ub, const int8_t *q,
                                                            int cols, const float *dx, const float *sx,
                                                            const float *bias_row, int g, float *y, int ldy, int h,
                                                            int prefetch, const int RN, const int type) {
    __m256 acc[4];
    for (int r = 0; r < RN; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, unit += ub) {
        if (prefetch)
            for (int line = 0; line < (int)ub; line += 64) _mm_prefetch((const char *)unit + Q8_AHEAD * ub + line, Q8_HINT);
        __m256i w[8];
        if (type == W_X4) half_nibbles(unit + 64 + 32 * h, w);
        for (int r = 0; r < RN; r++) {
            const size_t rb = (size_t)r * nb + b;
            SCALE_HALF(acc[r], half_sums(w, unit + 64 + 32 * h, (const int32_t *)(q + (size_t)r * cols + b * QK), type), h, rb);
        }
    }
    const __m256 bias = bias_row ? _mm256_loadu_ps(bias_row + g * GROUP + 8 * h) : _mm256_setzero_ps();
    for (int r = 0; r < RN; r++) _mm256_storeu_ps(y + (size_t)r * ldy + g * GROUP + 8 * h, _mm256_add_ps(acc[r], bias));
}

/* dot_group_q8 of the VNNI branch: one row runs both halves of each unit in one pass (a decode step: the unit read
 * once, its activations broadcast once); more rows run each half as a pass of its own over the group's units, up
 * to 4 rows at a time (2 rows: -25 %, 4 rows: -12 % against one pass per unit for both halves, ef_linear of a 1536 x 576
 * Q4_1 linear in L2, AMD EPYC Zen 3), so that a half's weights and the rows' sums stay in AVX2's 16 registers (the
 * second half and later rows read the group's units from L1). */
static inline __attribute__((always_inline)) void dot_group_q8(const Linear *L, int g, const int8_t *q,
                                                               const float *dx, const float *sx, float *y, int ldy,
                                                               const int NT, const int type) {
    const int nb = L->cols / QK;
    const size_t ub = unit_bytes(type);
    const uint8_t *first = (const uint8_t *)L->data + (size_t)g * nb * ub;
    if (NT == 1) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        const uint8_t *unit = first;
        for (int b = 0; b < nb; b++, unit += ub) {
            for (int line = 0; line < (int)ub; line += 64) _mm_prefetch((const char *)unit + Q8_AHEAD * ub + line, Q8_HINT);
            for (int h = 0; h < 2; h++) {
                __m256i w[8];
                if (type == W_X4) half_nibbles(unit + 64 + 32 * h, w);
                SCALE_HALF(acc[h], half_sums(w, unit + 64 + 32 * h, (const int32_t *)(q + b * QK), type), h, b);
            }
        }
        const vf bias = L->bias ? vf_load(L->bias + g * GROUP) : vf_zero();
        vf_store(y + g * GROUP, vf_add(((vf){acc[0], acc[1]}), bias));
        return;
    }
    for (int r0 = 0; r0 < NT; r0 += 4) {  /* row tiles of constant size, so the sums stay in registers */
        const int RN = NT - r0 < 4 ? NT - r0 : 4;
        for (int h = 0; h < 2; h++) {
#define HALF_PASS(n) half_pass(first, nb, ub, q + (size_t)r0 * L->cols, L->cols, dx + (size_t)r0 * nb, \
                               sx + (size_t)r0 * nb, L->bias, g, y + (size_t)r0 * ldy, ldy, h, r0 == 0 && h == 0, n, type)
            switch (RN) {
                case 1: HALF_PASS(1); break;
                case 2: HALF_PASS(2); break;
                case 3: HALF_PASS(3); break;
                default: HALF_PASS(4); break;
            }
#undef HALF_PASS
        }
    }
}
#endif

/* y [T][rows] = x [T][cols] W^T (+ bias) for a repacked linear. */
static void linear_q8(const Linear *L, int T, const float *x, float *y) {
    const int nb = L->cols / QK, groups = L->rows / GROUP;
    int8_t *q = malloc((size_t)T * L->cols + 2 * (size_t)T * nb * sizeof(float));
    float *dx = (float *)(q + (size_t)T * L->cols), *sx = dx + (size_t)T * nb;
    quantize_rows(x, T, L->cols, q, dx, sx);
#define QT(n) dot_group_q8(L, gi, q + (size_t)t * L->cols, dx + (size_t)t * nb, sx + (size_t)t * nb, \
                           y + (size_t)t * L->rows, L->rows, n, W_X4)
#define Q8T(n) dot_group_q8(L, gi, q + (size_t)t * L->cols, dx + (size_t)t * nb, sx + (size_t)t * nb, \
                            y + (size_t)t * L->rows, L->rows, n, W_X8)
    const int nt = T;
    if (L->type == W_X4) {
#pragma omp parallel for schedule(static)
        for (int gi = 0; gi < groups; gi++) { ROWS_CASES(QT) }
    } else {
#pragma omp parallel for schedule(static)
        for (int gi = 0; gi < groups; gi++) { ROWS_CASES(Q8T) }
    }
#undef QT
#undef Q8T
    free(q);
}
#else
static void linear_q8(const Linear *L, int T, const float *x, float *y) { (void)L, (void)T, (void)x, (void)y; }
#endif
