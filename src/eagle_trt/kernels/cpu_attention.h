/* Attention over the KV cache for cpu_forward.c: one row's softmax(q K^T / sqrt(D)) V over the keys it sees, in a
 * fixed order per row (the exactness rules in cpu_forward.c's header), and K/V rows stored into the cache (float32, or
 * float16 under native-q8). Included by cpu_forward.c after its types and vf_exp.
 */

/* 16 cached values at row[i..i+16) as float32: float16 (HALF) or float32 storage. */
static inline __attribute__((always_inline)) vf load_cached(const void *row, int i, const int HALF) {
    if (HALF) return vf_load_half((const uint16_t *)row + i);
    return vf_load((const float *)row + i);
}

#ifndef ATT_LANES
#define ATT_LANES 16 /* heads per attention pass x head_dim / 16: the value accumulators kept in registers */
#endif

#ifndef ATT_AHEAD
#define ATT_AHEAD 8 /* cached keys (and values) fetched ahead of the one attended */
#endif

/* Fetch a cached key or value row of `bytes` into L2 (a prefetch past the cache's end is harmless: no fault); into L1
 * it evicted the converted keys and the scores a group's rows reuse (cpu_linear_q8.h's Q8_HINT, measured together). */
static inline void prefetch_row(const void *row, int bytes) {
    for (int i = 0; i < bytes; i += 64) _mm_prefetch((const char *)row + i, _MM_HINT_T1);
}

#ifndef ATT_GROUP
#define ATT_GROUP 16 /* rows of a block attended together: they read the keys and values all of them see once */
#endif
#define VCHUNK 32 /* values converted at once for a group's rows */

/* The keys a row sees, in key order: keys 0..lead-1 (rank j is key j), then tail[0 .. n - lead). */
typedef struct { int32_t lead, n, off; } RowKeys;

/* Whether row `row` of S sees key j. */
static inline int sees(const Segment *S, int row, int j) {
    const uint8_t *mrow = S->mask ? S->mask + (size_t)row * S->mask_cols : NULL;
    if (mrow && S->mask_cols != S->rows) return mrow[j];  /* the mask covers the prefix too */
    return j < S->start ? 1 : mrow ? mrow[j - S->start] : j - S->start <= row;
}

/* Every row's visible keys (rk [T], rows of the segments back to back), once per forward (they are the same in every
 * layer and head); returns the tail keys (malloc'd, rk[i].off into it), or NULL when out of memory. */
static int32_t *row_keys(int n_seg, const Segment *segs, int T, RowKeys *rk) {
    int row0 = 0;
    for (int s = 0; s < n_seg; s++) {
        const Segment *S = &segs[s];
        const int all = S->start + S->rows;
#pragma omp parallel for schedule(static)
        for (int t = 0; t < S->rows; t++) {
            int lead = 0, n;
            while (lead < all && sees(S, t, lead)) lead++;
            n = lead;
            for (int j = lead + 1; j < all; j++) n += sees(S, t, j);
            rk[row0 + t].lead = lead, rk[row0 + t].n = n;
        }
        row0 += S->rows;
    }
    long total = 0;
    for (int t = 0; t < T; t++) rk[t].off = (int32_t)total, total += rk[t].n - rk[t].lead;
    int32_t *tail = malloc((size_t)(total > 0 ? total : 1) * sizeof(int32_t));
    if (!tail) return NULL;
    row0 = 0;
    for (int s = 0; s < n_seg; s++) {
        const Segment *S = &segs[s];
        for (int t = 0; t < S->rows; t++) {
            const RowKeys *r = &rk[row0 + t];
            int32_t *out = tail + r->off;
            for (int j = r->lead + 1, i = 0; i < r->n - r->lead; j++)
                if (sees(S, t, j)) out[i++] = j;
        }
        row0 += S->rows;
    }
    return tail;
}

/* Scores of ranks i0..i1 for R rows' nh query heads (row r's [nh][D] at q + r * ld) into
 * sc[(r * nh + h) * stride + rank], 16 keys at a time, each converted once for all rows: a key's D products summed
 * in order per lane, then its lanes by vf_sum16x16, times scale. Rank i is key i (keys NULL) or keys[i - koff].
 * kf: [16][D] floats. */
static inline __attribute__((always_inline)) void score_keys(const float *q, size_t ld, int R, int nh,
                                                             const void *kc, int D, const int32_t *keys, int koff,
                                                             int i0, int i1, float scale, float *sc, int stride,
                                                             float *kf, const int HALF) {
    const size_t row_bytes = (size_t)D * (HALF ? 2 : 4);
    const int L = D / 16;
#define KEY(i) (keys ? keys[(i) - koff] : (i))
    for (; i0 < i1; i0 += 16) {
        const int cnt = i1 - i0 < 16 ? i1 - i0 : 16;
        for (int i = 0; i < cnt; i++) {
            const char *kj = (const char *)kc + (size_t)KEY(i0 + i) * row_bytes;
            if (i0 + i + ATT_AHEAD < i1) prefetch_row((const char *)kc + (size_t)KEY(i0 + i + ATT_AHEAD) * row_bytes,
                                                      (int)row_bytes);
            for (int c = 0; c < L; c++) vf_store(kf + i * D + c * 16, load_cached(kj, c * 16, HALF));
        }
        for (int rh = 0; rh < R * nh; rh++) {
            vf qv[8], p[16];
            const float *qh = q + (size_t)(rh / nh) * ld + (size_t)(rh % nh) * D;
            for (int c = 0; c < L; c++) qv[c] = vf_load(qh + c * 16);
            for (int i = 0; i < 16; i++) {
                if (i >= cnt) {
                    p[i] = vf_zero();
                    continue;
                }
                vf acc = vf_mul(qv[0], vf_load(kf + i * D));
                for (int c = 1; c < L; c++) acc = vf_fmadd(qv[c], vf_load(kf + i * D + c * 16), acc);
                p[i] = acc;
            }
            vf_mask_store(sc + (size_t)rh * stride + i0, tail_mask(cnt, 0),
                                  vf_mul(vf_sum16x16(p), vf_set1(scale)));
        }
    }
#undef KEY
}

/* The largest of x[0..n), by 16 lanes then reduced. */
static inline float max_of(const float *x, int n) {
    vf mx = vf_set1(-INFINITY);
    for (int i = 0; i < n; i += 16)
        mx = vf_max(mx, vf_mask_load(vf_set1(-INFINITY), tail_mask(n, i), x + i));
    return vf_reduce_max(mx);
}

/* Sum of e^(x[i] - top) over i < n (16 lanes in index order, then reduced); with `store`, x[i] becomes e^(x[i] - top). */
static inline float sum_exp(float *x, int n, float top, const int store) {
    vf sum = vf_zero();
    for (int i = 0; i < n; i += 16) {  /* masked-off lanes add 0 */
        const vmask k = tail_mask(n, i);
        const vf p = vf_maskz_mov(k, vf_exp(vf_sub(vf_maskz_load(k, x + i),
                                                                     vf_set1(top))));
        if (store) vf_mask_store(x + i, k, p);
        sum = vf_add(sum, p);
    }
    return vf_reduce_add(sum);
}

/* One row's running sums of p_j * value_j for nh heads, in registers: acc[h * L + c] += p[h][j] * v[c] for the value
 * row at vj (every lane one FMA per key, keys in rank order). */
static inline __attribute__((always_inline)) void add_value(vf *acc, const float *p, int stride, int nh,
                                                            const void *vj, int L, const int HALF) {
    vf vals[ATT_LANES / 2];
    for (int c = 0; c < L; c++) vals[c] = load_cached(vj, c * 16, HALF);
    for (int h = 0; h < nh; h++) {
        const vf pv = vf_set1(p[(size_t)h * stride]);
        for (int c = 0; c < L; c++) acc[h * L + c] = vf_fmadd(pv, vals[c], acc[h * L + c]);
    }
}

/* Attention of rows row..row+R-1 of S (R <= ATT_GROUP; rk their RowKeys, tail their tail keys) for query heads
 * h0..h0+nh-1, which share one K/V head (GQA; nh * head_dim / 16 <= ATT_LANES), each row over its visible keys in
 * key order. A key's score is one fixed sequence of float32 operations on the query and that key alone
 * (score_keys); each row's softmax and its weighted sum of values run in its own rank order, one FMA per key per
 * lane. The leading keys every row of the group sees (the cached prefix, at the same rank in each) are read and
 * converted once for all of them, the rest per row: the operations on each row's numbers are the same for any R,
 * so a row's result is the same in a verify block as in the plain decode step that would compute it. The heads of
 * a group read each key and value once too (a 4k context's cache is larger than L2: most of a long-context step
 * is reading it).
 * q, out: row r's [heads][D] at q + r * ld, out + r * ld; scores [R][nh][stride] of scratch;
 * kc, vc: the K/V head's cache rows, float16 (HALF) or float32. */
static inline __attribute__((always_inline)) void attend_group(const float *q, size_t ld, int nh, const void *kc,
                                                               const void *vc, int D, const RowKeys *rk,
                                                               const int32_t *tail, const int R, float scale,
                                                               float *scores, int stride, float *out,
                                                               const int HALF) {
    const size_t row_bytes = (size_t)D * (HALF ? 2 : 4);
    const int L = D / 16;
    float kf[16 * 128];  /* 16 keys as float32, [16][D] */
    int shared = 1 << 30;
    for (int r = 0; r < R; r++) shared = rk[r].lead < shared ? rk[r].lead : shared;
    if (R == 1) shared = 0;  /* one row: all in registers below */
    score_keys(q, ld, R, nh, kc, D, NULL, 0, 0, shared, scale, scores, stride, kf, HALF);
    float inv[ATT_GROUP][ATT_LANES];
    for (int r = 0; r < R; r++) {
        float *sr = scores + (size_t)r * nh * stride;
        score_keys(q + r * ld, ld, 1, nh, kc, D, NULL, 0, shared, rk[r].lead, scale, sr, stride, kf, HALF);
        score_keys(q + r * ld, ld, 1, nh, kc, D, tail + rk[r].off, rk[r].lead, rk[r].lead, rk[r].n, scale, sr,
                   stride, kf, HALF);
        for (int h = 0; h < nh; h++) {
            float *sh = sr + (size_t)h * stride;
            inv[r][h] = 1.0f / sum_exp(sh, rk[r].n, max_of(sh, rk[r].n), 1);
        }
    }
    float sums[ATT_GROUP][ATT_LANES * 16];  /* the rows' value sums between chunks of shared keys */
    for (int r = 0; r < R; r++) memset(sums[r], 0, (size_t)nh * D * sizeof(float));
    float vconv[VCHUNK * 128];  /* VCHUNK values as float32, [VCHUNK][D] */
    for (int j0 = 0; j0 < shared; j0 += VCHUNK) {  /* ranks j0.. are keys j0.. in every row */
        const int cnt = shared - j0 < VCHUNK ? shared - j0 : VCHUNK;
        for (int i = 0; i < cnt; i++) {
            const char *vj = (const char *)vc + (size_t)(j0 + i) * row_bytes;
            if (j0 + i + ATT_AHEAD < shared) prefetch_row(vj + ATT_AHEAD * row_bytes, (int)row_bytes);
            for (int c = 0; c < L; c++) vf_store(vconv + i * D + c * 16, load_cached(vj, c * 16, HALF));
        }
        for (int r = 0; r < R; r++) {
            vf acc[ATT_LANES];
            for (int i = 0; i < nh * L; i++) acc[i] = vf_load(sums[r] + i * 16);
            for (int i = 0; i < cnt; i++)
                add_value(acc, scores + (size_t)r * nh * stride + j0 + i, stride, nh, vconv + i * D, L, 0);
            for (int i = 0; i < nh * L; i++) vf_store(sums[r] + i * 16, acc[i]);
        }
    }
    for (int r = 0; r < R; r++) {
        const float *sr = scores + (size_t)r * nh * stride;
        const int32_t *kt = tail + rk[r].off;
        vf acc[ATT_LANES];
        for (int i = 0; i < nh * L; i++) acc[i] = vf_load(sums[r] + i * 16);
        for (int j = shared; j < rk[r].n; j++) {
            const int key = j < rk[r].lead ? j : kt[j - rk[r].lead];
            const int ahead = j + ATT_AHEAD;
            if (ahead < rk[r].n)
                prefetch_row((const char *)vc + (size_t)(ahead < rk[r].lead ? ahead : kt[ahead - rk[r].lead]) *
                             row_bytes, (int)row_bytes);
            add_value(acc, sr + j, stride, nh, (const char *)vc + (size_t)key * row_bytes, L, HALF);
        }
        for (int h = 0; h < nh; h++)
            for (int c = 0; c < L; c++)
                vf_store(out + r * ld + (size_t)h * D + c * 16,
                                 vf_mul(acc[h * L + c], vf_set1(inv[r][h])));
    }
}

/* A K or V row of D floats into the cache at value offset `slot`: float16 (rounded to nearest even) or float32. */
static void store_cached(void *cache, size_t slot, const float *src, int D, int half) {
    if (!half) {
        memcpy((float *)cache + slot, src, D * sizeof(float));
        return;
    }
    for (int i = 0; i < D; i += 16)
        vf_store_half((uint16_t *)cache + slot + i, vf_load(src + i));
}
