/* Attention over the KV cache for cpu_forward.c: one row's softmax(q K^T / sqrt(D)) V over the keys it sees, in a
 * fixed order per row (the exactness rules in cpu_forward.c's header), and K/V rows stored into the cache (float32, or
 * float16 under native-q8). Included by cpu_forward.c after its types and exp512.
 */

/* 16 cached values at row[i..i+16) as float32: float16 (HALF) or float32 storage. */
static inline __attribute__((always_inline)) __m512 load_cached(const void *row, int i, const int HALF) {
    if (HALF) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}

#ifndef ATT_LANES
#define ATT_LANES 16 /* heads per attention pass x head_dim / 16: the value accumulators kept in registers */
#endif

#ifndef ATT_AHEAD
#define ATT_AHEAD 8 /* cached keys (and values) fetched ahead of the one attended */
#endif

/* Fetch a cached key or value row of `bytes` into L1 (a prefetch past the cache's end is harmless: no fault). */
static inline void prefetch_row(const void *row, int bytes) {
    for (int i = 0; i < bytes; i += 64) _mm_prefetch((const char *)row + i, _MM_HINT_T0);
}

/* The 16 lane sums of v[0..16) as one vector, lane i = v[i]'s sum. Every v[i] is reduced by the same sequence of
 * additions over its own lanes (lane l + lane l+8, then the 128-bit halves of that, then adjacent pairs twice),
 * whatever slot it sits in and whatever the other 15 hold: a key's score depends on the key and the query alone. */
static inline __attribute__((always_inline)) __m512 sum16x16(const __m512 *v) {
    __m512 s[8], t[4], u[2];
    for (int i = 0; i < 8; i++)  /* [v0 lanes i + i+8 (8), v1 likewise (8)] */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)  /* 128-bit blocks: [key 4i, 4i+1, 4i+2, 4i+3], 4 lanes each */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)  /* block j: [key 8i+j: 2 lanes, key 8i+4+j: 2 lanes] */
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x88),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xDD));
    /* block j: [key j, key 4+j, key 8+j, key 12+j]; then into key order */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[0], u[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

#define ATT_ROWS 2 /* rows of a block attended together: they read the keys and values all of them see once */

/* The keys row `row` of S sees, in key order, into keys; returns how many. */
static inline int visible_keys(const Segment *S, int row, int32_t *keys) {
    const int start = S->start;
    const uint8_t *mrow = S->mask ? S->mask + (size_t)row * S->mask_cols : NULL;
    int n = 0;
    for (int j = 0; j < start + S->rows; j++) {
        const int seen = mrow && S->mask_cols != S->rows ? mrow[j]    /* the mask covers the prefix too */
                         : j < start ? 1 : mrow ? mrow[j - start] : j - start == row;
        if (seen) keys[n++] = j;
    }
    return n;
}

/* Scores of keys[i0..i1) (rank order) for R rows' nh query heads (row r's [nh][D] at q + r * ld) into
 * sc[(r * nh + h) * stride + rank], 16 keys at a time, each converted once for all rows: a key's D products summed
 * in order per lane, then its lanes by sum16x16, times scale. kf: [16][D] floats. */
static inline __attribute__((always_inline)) void score_keys(const float *q, size_t ld, int R, int nh,
                                                             const void *kc, int D, const int32_t *keys, int i0,
                                                             int i1, float scale, float *sc, int stride, float *kf,
                                                             const int HALF) {
    const size_t row_bytes = (size_t)D * (HALF ? 2 : 4);
    const int L = D / 16;
    for (; i0 < i1; i0 += 16) {
        const int cnt = i1 - i0 < 16 ? i1 - i0 : 16;
        for (int i = 0; i < cnt; i++) {
            const char *kj = (const char *)kc + keys[i0 + i] * row_bytes;
            if (i0 + i + ATT_AHEAD < i1) prefetch_row((const char *)kc + keys[i0 + i + ATT_AHEAD] * row_bytes,
                                                      (int)row_bytes);
            for (int c = 0; c < L; c++) _mm512_storeu_ps(kf + i * D + c * 16, load_cached(kj, c * 16, HALF));
        }
        for (int rh = 0; rh < R * nh; rh++) {
            __m512 qv[8], p[16];
            const float *qh = q + (size_t)(rh / nh) * ld + (size_t)(rh % nh) * D;
            for (int c = 0; c < L; c++) qv[c] = _mm512_loadu_ps(qh + c * 16);
            for (int i = 0; i < 16; i++) {
                if (i >= cnt) {
                    p[i] = _mm512_setzero_ps();
                    continue;
                }
                __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kf + i * D));
                for (int c = 1; c < L; c++) acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kf + i * D + c * 16), acc);
                p[i] = acc;
            }
            const __mmask16 k = cnt == 16 ? 0xFFFF : (__mmask16)((1u << cnt) - 1);
            _mm512_mask_storeu_ps(sc + (size_t)rh * stride + i0, k, _mm512_mul_ps(sum16x16(p), _mm512_set1_ps(scale)));
        }
    }
}

/* Scores sc[0..n) of one head into p = e^(s - max) in place; returns 1 / sum p (16 lanes in order, then reduced). */
static inline float softmax_in_place(float *sc, int n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, sc + i));
    }
    const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {  /* masked-off lanes add 0 */
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 p = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + i), top)));
        _mm512_mask_storeu_ps(sc + i, k, p);
        sum = _mm512_add_ps(sum, p);
    }
    return 1.0f / _mm512_reduce_add_ps(sum);
}

/* Attention of rows row..row+R-1 of S (R <= ATT_ROWS) for query heads h0..h0+nh-1, which share one K/V head (GQA;
 * nh * head_dim / 16 <= ATT_LANES), each row over its visible keys (the cached prefix, then the block's keys its
 * mask shows) gathered in key order. A key's score is one fixed sequence of float32 operations on the query and
 * that key alone (score_keys); each row's softmax and its weighted sum of values run in its own key order. The
 * leading keys every one of the R rows sees (the prefix, at the same rank in each) are read once for all of them,
 * the rest per row: the operations on each row's numbers are the same as with R = 1, so a row's result is the same
 * in a verify block as in the plain decode step that would compute it. The heads of a group read each key and
 * value once too (a 4k context's cache is larger than L2: most of a long-context step is reading it).
 * q, out: row r's [heads][D] at q + r * ld, out + r * ld; scores [R][nh][stride], keys [R][stride] of scratch;
 * kc, vc: the K/V head's cache rows, float16 (HALF) or float32. */
static inline __attribute__((always_inline)) void attend_rows(const float *q, size_t ld, int nh, const void *kc,
                                                              const void *vc, int D, const Segment *S, int row,
                                                              const int R, float scale, float *scores, int stride,
                                                              int32_t *keys, float *out, const int HALF) {
    const size_t row_bytes = (size_t)D * (HALF ? 2 : 4);
    const int L = D / 16;
    float kf[16 * 128];  /* 16 keys as float32, [16][D] */
    int n[ATT_ROWS], shared = 1 << 30;
    for (int r = 0; r < R; r++) {
        int32_t *kr = keys + (size_t)r * stride;
        n[r] = visible_keys(S, row + r, kr);
        int lead = 0;  /* keys 0..lead-1 all seen: key j at rank j */
        while (lead < n[r] && kr[lead] == lead) lead++;
        shared = lead < shared ? lead : shared;
    }
    if (R > 1 && shared > 0)  /* the keys all R rows see, each read once for all of them */
        score_keys(q, ld, R, nh, kc, D, keys, 0, shared, scale, scores, stride, kf, HALF);
    else
        shared = 0;
    float inv[ATT_ROWS][ATT_LANES];
    for (int r = 0; r < R; r++) {
        float *sr = scores + (size_t)r * nh * stride;
        score_keys(q + r * ld, ld, 1, nh, kc, D, keys + (size_t)r * stride, shared, n[r], scale, sr, stride, kf,
                   HALF);
        for (int h = 0; h < nh; h++) inv[r][h] = softmax_in_place(sr + (size_t)h * stride, n[r]);
    }
    __m512 acc[ATT_ROWS][ATT_LANES];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < nh * L; i++) acc[r][i] = _mm512_setzero_ps();
    for (int j = 0; j < shared; j++) {  /* key j is rank j of every row */
        const char *vj = (const char *)vc + j * row_bytes;
        if (j + ATT_AHEAD < shared) prefetch_row((const char *)vc + (j + ATT_AHEAD) * row_bytes, (int)row_bytes);
        __m512 vals[ATT_LANES / 2];  /* the value row once, for every head and row */
        for (int i = 0; i < L; i++) vals[i] = load_cached(vj, i * 16, HALF);
        for (int r = 0; r < R; r++)
            for (int h = 0; h < nh; h++) {
                const __m512 pv = _mm512_set1_ps(scores[((size_t)r * nh + h) * stride + j]);
                for (int i = 0; i < L; i++) acc[r][h * L + i] = _mm512_fmadd_ps(pv, vals[i], acc[r][h * L + i]);
            }
    }
    for (int r = 0; r < R; r++) {
        const int32_t *kr = keys + (size_t)r * stride;
        for (int j = shared; j < n[r]; j++) {
            const char *vj = (const char *)vc + kr[j] * row_bytes;
            if (j + ATT_AHEAD < n[r]) prefetch_row((const char *)vc + kr[j + ATT_AHEAD] * row_bytes, (int)row_bytes);
            __m512 vals[ATT_LANES / 2];
            for (int i = 0; i < L; i++) vals[i] = load_cached(vj, i * 16, HALF);
            for (int h = 0; h < nh; h++) {
                const __m512 pv = _mm512_set1_ps(scores[((size_t)r * nh + h) * stride + j]);
                for (int i = 0; i < L; i++) acc[r][h * L + i] = _mm512_fmadd_ps(pv, vals[i], acc[r][h * L + i]);
            }
        }
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < L; i++)
                _mm512_storeu_ps(out + r * ld + (size_t)h * D + i * 16,
                                 _mm512_mul_ps(acc[r][h * L + i], _mm512_set1_ps(inv[r][h])));
    }
}

/* A K or V row of D floats into the cache at value offset `slot`: float16 (rounded to nearest even) or float32. */
static void store_cached(void *cache, size_t slot, const float *src, int D, int half) {
    if (!half) {
        memcpy((float *)cache + slot, src, D * sizeof(float));
        return;
    }
    for (int i = 0; i < D; i += 16)
        _mm256_storeu_si256((__m256i *)((uint16_t *)cache + slot + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
