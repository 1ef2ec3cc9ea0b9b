/* The base model's whole forward on the CPU in one call: a Llama-family decoder (RMSNorm, RoPE, GQA attention over a
 * KV cache, SwiGLU MLP, final norm, vocabulary head) whose linears read their weights as the checkpoint stores them:
 * GGUF Q4_0 / Q4_1 / Q8_0 blocks (32 weights, fp16 scale [and min]) or float32 rows.
 *
 * Exactness, the reason this file exists as it does:
 * - A block is dequantized to float32 as ggml's reference (and the `gguf` package) does it, w = q*d + m with two
 *   roundings (compiled with -ffp-contract=off, so no FMA fuses them), then multiplied by the float32 activations.
 *   So a block linear gives the same bits as this kernel on the dequantized float32 weights, and what torch
 *   computes on them up to the order of the float32 sum.
 * - Every output of every row is one dot product summed in one fixed order (2 x 16 lane accumulators, blocks in
 *   order, then a fixed reduction tree), whatever the number of rows, the row's place in the block or the
 *   thread that runs it. Attention (cpu_attention.h) scores each key by one fixed sequence of float32 operations on
 *   the query and that key alone, and sums a row's visible keys in key order (over a float32 cache, or a float16
 *   one under native-q8, as llama.cpp keeps it: K/V are rounded once, when stored, so every row that reads a key
 *   reads the same value). So each row's result depends on that row alone: a tree-verify block computes each
 *   node exactly as a one-token decode step would, which keeps EAGLE's output identical to plain decoding on this
 *   engine.
 *
 * Vectors are 16 float32 lanes (cpu_simd.h): one AVX-512 register, or two AVX2 ones on a CPU without AVX-512, the same
 * float32 operations per lane and the same reduction trees either way.
 * Built by eagle_trt.kernels.cpu_build (gcc -O3 -march=native -fopenmp -ffp-contract=off, and once more without
 * -fopenmp for one-thread callers: the same arithmetic); the ctypes structs in
 * eagle_trt.runtime.native mirror the ones below.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include "cpu_simd.h"
#include "cpu_amx.h"
#ifdef _OPENMP
#include <omp.h>
#else /* the one-thread build (cpu_build: parallel=False): the pragmas are ignored */
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
#endif

enum { W_F32 = 0, W_Q4_0 = 1, W_Q4_1 = 2, W_Q8_0 = 3 };
#define QK 32   /* weights per block */
#define TILE 8  /* rows that share one dequantized block */
#define PREFETCH_ROWS 4 /* weight rows read ahead */
#define CHUNK 64 /* rows per pass over the weights (keeps the activations in cache) */

typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_q4_1;
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;

typedef struct {
    int32_t type, rows, cols;  /* out features, in features */
    const void *data;          /* F32: float [rows][cols]; blocks: [rows][cols / 32] */
    const float *bias;         /* [rows] or NULL */
} Linear;

typedef struct {
    Linear q, k, v, o, gate, up, down;
    const float *input_norm, *post_norm;  /* [hidden]; input_norm NULL: none (an EAGLE-1 draft's layer) */
} Layer;

typedef struct {
    int32_t n_layers, hidden, inter, heads, kv_heads, head_dim, vocab;
    float eps;
    const Layer *layers;
    const float *final_norm;  /* NULL: none (a draft's output is its layer's) */
    Linear lm_head;
} Model;

typedef struct {
    void *k, *v;           /* the sequence's cache, [n_layers][kv_heads][max_len][head_dim], float32 or float16 */
    int32_t max_len, start, rows;
    int32_t mask_cols;     /* rows: mask covers the block's keys, the prefix all visible; start + rows: every key */
    const uint8_t *mask;   /* [rows][mask_cols] the keys a row sees (1), or NULL: the prefix, causal in the block */
    int32_t half;          /* 1: the cache holds float16 (K/V rounded to nearest even when stored), 0: float32 */
} Segment;

static inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

/* The block's 32 quantized values as float32 (weights 0-15, 16-31) and its scale d and offset m:
 * w = q*d + m (Q4_1), (q-8)*d = q*d + (-8d) (Q4_0), q*d (Q8_0, m = 0). */
static inline __attribute__((always_inline)) void block_values(const void *data, int type, size_t i, vf *q0,
                                                               vf *q1, float *d, float *m) {
    if (type == W_Q8_0) {
        const block_q8_0 *blk = (const block_q8_0 *)data + i;
        *q0 = vf_from_i8(blk->qs);
        *q1 = vf_from_i8(blk->qs + 16);
        *d = fp16(blk->d);
        *m = 0.0f;
        return;
    }
    const uint8_t *qs = type == W_Q4_1 ? ((const block_q4_1 *)data + i)->qs : ((const block_q4_0 *)data + i)->qs;
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    *q0 = vf_from_u8(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
    *q1 = vf_from_u8(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    if (type == W_Q4_1) {
        *d = fp16(((const block_q4_1 *)data + i)->d);
        *m = fp16(((const block_q4_1 *)data + i)->m);
    } else {
        *d = fp16(((const block_q4_0 *)data + i)->d);
        *m = -8.0f * *d;
    }
}

/* Block i (32 weights: 0-15, 16-31) as float32 w0, w1, dequantized as the reference does it: q*d + m with two
 * roundings, m = 0 for Q8_0 and -8d for Q4_0 (exact); float32 rows are read as they are. */
static inline __attribute__((always_inline)) void block_weights(const void *data, int type, size_t i, vf *w0,
                                                                vf *w1) {
    if (type == W_F32) {
        *w0 = vf_load((const float *)data + i * QK);
        *w1 = vf_load((const float *)data + i * QK + 16);
        return;
    }
    vf q0, q1;
    float d, m;
    block_values(data, type, i, &q0, &q1, &d, &m);
    const vf dv = vf_set1(d), mv = vf_set1(m);
    *w0 = vf_add(vf_mul(q0, dv), mv);
    *w1 = vf_add(vf_mul(q1, dv), mv);
}

/* Rows t0..t0+NT-1 of y = x W^T for output o. Each block is dequantized once for the NT rows; each row sums into 2
 * accumulators (weights 0-15 and 16-31 of each block, blocks in order), then one fixed reduction: the same arithmetic
 * for NT = 1..TILE, so a row's sum does not depend on its neighbours. The weight row PREFETCH_ROWS ahead is fetched
 * (a one-row step is bound by memory: it doubles the speed). */
static inline __attribute__((always_inline)) void dot_rows(const Linear *L, int o, const float *x, int ldx, float *y,
                                                           int ldy, const int NT, const int type) {
    vf acc[TILE][2];
    for (int r = 0; r < NT; r++) acc[r][0] = acc[r][1] = vf_zero();
    const int nb = L->cols / QK;
    const size_t row_bytes = (size_t)nb * (type == W_F32 ? QK * sizeof(float) : type == W_Q8_0 ? sizeof(block_q8_0)
                                           : type == W_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q4_0));
    const char *ahead = (const char *)L->data + (size_t)(o + PREFETCH_ROWS) * row_bytes;
    for (size_t off = 0; off < row_bytes && o + PREFETCH_ROWS < L->rows; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    for (int b = 0; b < nb; b++) {
        vf w0, w1;
        block_weights(L->data, type, (size_t)o * nb + b, &w0, &w1);
        for (int r = 0; r < NT; r++) {
            const float *xr = x + (size_t)r * ldx + b * QK;
            acc[r][0] = vf_fmadd(w0, vf_load(xr), acc[r][0]);
            acc[r][1] = vf_fmadd(w1, vf_load(xr + 16), acc[r][1]);
        }
    }
    const float bias = L->bias ? L->bias[o] : 0.0f;
    for (int r = 0; r < NT; r++)
        y[(size_t)r * ldy + o] = vf_reduce_add(vf_add(acc[r][0], acc[r][1])) + bias;
}

#define ROWS_CASES(CALL)                                                         \
    int t = 0;                                                                   \
    for (; t + TILE <= nt; t += TILE) CALL(TILE);                                \
    switch (nt - t) {                                                            \
        case 7: CALL(7); break;                                                  \
        case 6: CALL(6); break;                                                  \
        case 5: CALL(5); break;                                                  \
        case 4: CALL(4); break;                                                  \
        case 3: CALL(3); break;                                                  \
        case 2: CALL(2); break;                                                  \
        case 1: CALL(1); break;                                                  \
        default: break;                                                          \
    }

#include "cpu_linear_q8.h"

/* y [T][rows] = x [T][cols] W^T (+ bias). */
static void linear(const Linear *L, int T, const float *x, float *y) {
    for (int c0 = 0; c0 < T; c0 += CHUNK) {
        const int nt = T - c0 < CHUNK ? T - c0 : CHUNK;
        const float *xc = x + (size_t)c0 * L->cols;
        float *yc = y + (size_t)c0 * L->rows;
        if (L->type == W_X4 || L->type == W_X8) {
            linear_q8(L, nt, xc, yc);
            continue;
        }
#define XT (xc + (size_t)t * L->cols)
#define YT (yc + (size_t)t * L->rows)
#define F32(n) dot_rows(L, o, XT, L->cols, YT, L->rows, n, W_F32)
#define Q41(n) dot_rows(L, o, XT, L->cols, YT, L->rows, n, W_Q4_1)
#define Q40(n) dot_rows(L, o, XT, L->cols, YT, L->rows, n, W_Q4_0)
#define Q80(n) dot_rows(L, o, XT, L->cols, YT, L->rows, n, W_Q8_0)
        switch (L->type) {
            case W_F32:
#pragma omp parallel for schedule(static)
                for (int o = 0; o < L->rows; o++) { ROWS_CASES(F32) }
                break;
            case W_Q4_1:
#pragma omp parallel for schedule(static)
                for (int o = 0; o < L->rows; o++) { ROWS_CASES(Q41) }
                break;
            case W_Q4_0:
#pragma omp parallel for schedule(static)
                for (int o = 0; o < L->rows; o++) { ROWS_CASES(Q40) }
                break;
            default:
#pragma omp parallel for schedule(static)
                for (int o = 0; o < L->rows; o++) { ROWS_CASES(Q80) }
                break;
        }
#undef XT
#undef YT
#undef F32
#undef Q41
#undef Q40
#undef Q80
    }
}

/* Sum of a[0..n) * b[0..n) in a fixed order (n a multiple of 16: 4 accumulators round-robin). */
static inline float dot16(const float *a, const float *b, int n) {
    vf acc[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
    for (int i = 0, j = 0; i < n; i += 16, j = (j + 1) & 3)
        acc[j] = vf_fmadd(vf_load(a + i), vf_load(b + i), acc[j]);
    return vf_reduce_add(vf_add(vf_add(acc[0], acc[1]), vf_add(acc[2], acc[3])));
}

/* out [T][n] = x / rms(x) * weight, per row (weight NULL: out = x). */
static void rms_norm(const float *x, const float *weight, int T, int n, float eps, float *out) {
    if (!weight) {
        memcpy(out, x, (size_t)T * n * sizeof(float));
        return;
    }
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        float *yr = out + (size_t)t * n;
        const float inv = 1.0f / sqrtf(dot16(xr, xr, n) / (float)n + eps);
        for (int i = 0; i < n; i++) yr[i] = (xr[i] * inv) * weight[i];
    }
}

/* HF rotate-half RoPE in place: x [T][nh][D]; cos, sin [T][D]. */
static void rope(float *x, const float *cos, const float *sin, int T, int nh, int D) {
    const int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            float *v = x + ((size_t)t * nh + h) * D;
            const float *c = cos + (size_t)t * D, *s = sin + (size_t)t * D;
            for (int i = 0; i < half; i++) {
                const float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i + half] + a * s[i + half];
            }
        }
}

/* Lanes 0..n-i-1 of the 16 at i (all 16 from n - i >= 16 on). */
static inline vmask tail_mask(int n, int i) { return n - i >= 16 ? 0xFFFF : (vmask)((1u << (n - i)) - 1); }

/* e^x per lane, deterministic: x = n ln2 + r, |r| <= ln2/2, a degree-7 Taylor polynomial for e^r (error < 1e-8
 * relative, under float32's half ulp), scaled by 2^n; saturates to 0 below -103.9 and to e^88.7 above. */
static inline vf vf_exp(vf x) {
    x = vf_max(vf_min(x, vf_set1(88.7f)), vf_set1(-103.9f));
    const vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
    vf r = vf_fnmadd(n, vf_set1(0.693145751953125f), x);  /* ln2's high part: n*hi exact */
    r = vf_fnmadd(n, vf_set1(1.428606765330187e-06f), r);
    static const float c[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    vf p = vf_set1(c[0]);
    for (int i = 1; i < 8; i++) p = vf_fmadd(p, r, vf_set1(c[i]));
    return vf_scalef(p, n);
}

/* g[i] = silu(g[i]) * u[i] for n values (elementwise: any split over threads gives the same bits). */
static void swiglu(float *g, const float *u, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += 16) {
        const vmask k = tail_mask((int)n, (int)i);
        const vf gv = vf_maskz_load(k, g + i), uv = vf_maskz_load(k, u + i);
        const vf e = vf_exp(vf_sub(vf_zero(), gv));
        vf_mask_store(g + i, k, vf_mul(vf_div(gv, vf_add(vf_set1(1.0f), e)), uv));
    }
}

#include "cpu_attention.h"

/* Rows [T] of several sequences (segments, back to back) through the model. x [T][hidden] holds the embeddings and
 * is used as the residual stream; cos, sin [T][head_dim]; captured [T][n_capture * hidden] gets the residual stream
 * entering the layers `capture` names (n_layers: the last layer's output); hidden [T][hidden] gets the final normed
 * state; logits [n_logit][vocab] the vocabulary head of rows logit_rows (n_logit < 0: of every row, [T][vocab]).
 * scratch: ef_scratch_floats(model, T, max_len, threads) floats. */
int ef_forward(const Model *m, int T, float *x, const float *cos, const float *sin, int n_seg, const Segment *segs,
               int n_capture, const int32_t *capture, float *captured, float *hidden, int n_logit,
               const int32_t *logit_rows, float *logits, float *scratch) {
    const int H = m->hidden, D = m->head_dim, nh = m->heads, nkv = m->kv_heads, group = nh / nkv;
    if (D % 16 || D > 128 || H % QK || m->inter % QK) return -1;
    float *h = scratch;                          /* [T][max(H, nh*D)] */
    const int wide = H > nh * D ? H : nh * D;
    float *q = h + (size_t)T * wide;             /* [T][nh*D] */
    float *k = q + (size_t)T * nh * D;           /* [T][nkv*D] */
    float *v = k + (size_t)T * nkv * D;          /* [T][nkv*D] */
    float *att = v + (size_t)T * nkv * D;        /* [T][nh*D] */
    float *g = att + (size_t)T * nh * D;         /* [T][inter] */
    float *u = g + (size_t)T * m->inter;         /* [T][inter] */
    float *scores = u + (size_t)T * m->inter;    /* [threads][ATT_GROUP][heads per pass][max_len] */
    int max_len = 0;
    for (int s = 0; s < n_seg; s++) max_len = segs[s].max_len > max_len ? segs[s].max_len : max_len;
    const float scale = 1.0f / sqrtf((float)D);
    const int heads_per_pass = ATT_LANES / (D / 16), per_kv = (group + heads_per_pass - 1) / heads_per_pass;
    const int passes = nkv * per_kv;  /* attention tasks per row: a K/V head's query heads, a pass at a time */
    const int threads = omp_get_max_threads();
    RowKeys *rk = malloc((size_t)T * sizeof(RowKeys));
    int32_t *tail = rk ? row_keys(n_seg, segs, T, rk) : NULL;
    if (!tail) {
        free(rk);
        return -2;
    }

    for (int l = 0; l <= m->n_layers; l++) {
        for (int c = 0; c < n_capture; c++)
            if (capture[c] == l)
                for (int t = 0; t < T; t++) memcpy(captured + ((size_t)t * n_capture + c) * H, x + (size_t)t * H, H * sizeof(float));
        if (l == m->n_layers) break;
        const Layer *L = &m->layers[l];
        rms_norm(x, L->input_norm, T, H, m->eps, h);
        linear(&L->q, T, h, q);
        linear(&L->k, T, h, k);
        linear(&L->v, T, h, v);
        rope(q, cos, sin, T, nh, D);
        rope(k, cos, sin, T, nkv, D);
        int row0 = 0;
        for (int s = 0; s < n_seg; s++) {
            const Segment *S = &segs[s];
            const size_t layer_off = (size_t)l * nkv * S->max_len * D;  /* in values */
            for (int t = 0; t < S->rows; t++)
                for (int kh = 0; kh < nkv; kh++) {
                    const size_t slot = layer_off + ((size_t)kh * S->max_len + S->start + t) * D;
                    store_cached(S->k, slot, k + ((size_t)(row0 + t) * nkv + kh) * D, D, S->half);
                    store_cached(S->v, slot, v + ((size_t)(row0 + t) * nkv + kh) * D, D, S->half);
                }
            /* a K/V head's rows in groups of up to ATT_GROUP: the rows of a group read the keys and values they all
             * see once (a row's numbers do not depend on its group: attend_group). Fewer, larger groups where the
             * threads still get an even share of tasks (one thread: one group per K/V head). */
            int groups = 1;
            while (threads > 1 && (passes * groups) % threads && groups < S->rows) groups++;
            if (groups < (S->rows + ATT_GROUP - 1) / ATT_GROUP) groups = (S->rows + ATT_GROUP - 1) / ATT_GROUP;
            const int per = (S->rows + groups - 1) / groups;
            groups = (S->rows + per - 1) / per;
#pragma omp parallel for schedule(static) collapse(2)
            for (int pass = 0; pass < passes; pass++)
                for (int gi = 0; gi < groups; gi++) {
                    const int t = gi * per, R = S->rows - t < per ? S->rows - t : per;
                    const int kh = pass / per_kv, h0 = kh * group + (pass % per_kv) * heads_per_pass;
                    const int nq = group - (h0 - kh * group) < heads_per_pass ? group - (h0 - kh * group) : heads_per_pass;
                    const size_t kv_off = (layer_off + (size_t)kh * S->max_len * D) * (S->half ? 2 : 4);  /* bytes */
                    float *mine = scores + (size_t)omp_get_thread_num() * ATT_GROUP * heads_per_pass * max_len;
                    const size_t ld = (size_t)nh * D;  /* from one row's q (and output) to the next row's */
                    const float *qr = q + (row0 + t) * ld + (size_t)h0 * D;
                    float *outr = att + (row0 + t) * ld + (size_t)h0 * D;
                    const char *kc = (const char *)S->k + kv_off, *vc = (const char *)S->v + kv_off;
                    if (S->half)
                        attend_group(qr, ld, nq, kc, vc, D, rk + row0 + t, tail, R, scale, mine, max_len, outr, 1);
                    else
                        attend_group(qr, ld, nq, kc, vc, D, rk + row0 + t, tail, R, scale, mine, max_len, outr, 0);
                }
            row0 += S->rows;
        }
        linear(&L->o, T, att, h);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += h[i];
        rms_norm(x, L->post_norm, T, H, m->eps, h);
        linear(&L->gate, T, h, g);
        linear(&L->up, T, h, u);
        swiglu(g, u, (size_t)T * m->inter);
        linear(&L->down, T, g, h);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += h[i];
    }
    free(tail);
    free(rk);
    rms_norm(x, m->final_norm, T, H, m->eps, hidden);
    if (n_logit < 0) {
        linear(&m->lm_head, T, hidden, logits);
    } else {  /* the rows asked for, gathered (g holds T * inter >= n_logit * H floats) */
        for (int i = 0; i < n_logit; i++) memcpy(g + (size_t)i * H, hidden + (size_t)logit_rows[i] * H, H * sizeof(float));
        linear(&m->lm_head, n_logit, g, logits);
    }
    return 0;
}

/* Floats of scratch ef_forward needs for T rows and caches of up to max_len slots, with `threads` OpenMP threads. */
long ef_scratch_floats(const Model *m, int T, int max_len, int threads) {
    const int nhd = m->heads * m->head_dim, wide = m->hidden > nhd ? m->hidden : nhd;
    return (long)T * (wide + 2L * nhd + 2L * m->kv_heads * m->head_dim + 2L * m->inter) + (long)threads * ATT_GROUP * (ATT_LANES / (m->head_dim / 16)) * max_len;
}

/* 1 when this build has the 8-bit-activation linears (AVX-512 VNNI, or AVX2). */
int ef_has_q8(void) { return HAVE_Q8; }

/* OpenMP threads the forward runs on (scratch has one score row per thread). */
int ef_threads(void) { return omp_get_max_threads(); }

/* y [T][rows] = x [T][cols] W^T for one linear (tests and the kernel benchmark). */
void ef_linear(const Linear *L, int T, const float *x, float *y) { linear(L, T, x, y); }

/* The k best next tokens of n rows x [n][cols] under a vocabulary head: logits [n][rows] = x W^T, then per row the
 * log-probabilities of its k highest logits, scores [n][k] = logit - logsumexp (max plus the log of sum e^(l - max),
 * 16 lanes in index order, then reduced), ids [n][k] best first (equal logits: the lower index first). */
void ef_head_topk(const Linear *head, int n, const float *x, int k, float *logits, int32_t *ids, float *scores) {
    linear(head, n, x, logits);
    const int V = head->rows;
    for (int r = 0; r < n; r++) {
        const float *lr = logits + (size_t)r * V;
        int32_t *ir = ids + (size_t)r * k;
        float *sr = scores + (size_t)r * k;
        const float top = max_of(lr, V);
        const float lse = top + logf(sum_exp((float *)lr, V, top, 0));
        int have = 0;  /* ir/sr hold the best `have` so far, best first (sr: logits until the end) */
        for (int i = 0; i < V; i++) {
            const float v = lr[i];
            if (have == k && !(v > sr[k - 1])) continue;
            int at = have < k ? have++ : k - 1;
            while (at > 0 && v > sr[at - 1]) {
                sr[at] = sr[at - 1], ir[at] = ir[at - 1];
                at--;
            }
            sr[at] = v, ir[at] = i;
        }
        for (int j = 0; j < have; j++) sr[j] -= lse;
        for (int j = have; j < k; j++) sr[j] = -INFINITY, ir[j] = 0;
    }
}

#include "cpu_draft.h"
#include "cpu_int8.h"
