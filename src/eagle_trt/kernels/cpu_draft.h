/* An EAGLE-1/2 draft forward in one call (runtime.native.NativeDraft.forward_packed), so that a draft step costs
 * Python one call instead of a dozen torch ops around three (~0.5 ms a step on one thread). Included at the end of
 * cpu_forward.c.
 *
 * Row t's input is [embed[ids[t]], feats[t]] (embed [n_embed][H] float32: the base's embedding), then the draft's fc,
 * then its layer: ef_forward over the segments, RoPE at position pos[t] from the tables cos_table, sin_table
 * [n_pos][D] -> out [T][H]. Then the head's k best next tokens of the rows top_rows[n_top] as ef_head_topk takes
 * them: scores [n_top][k] log-probs, ids [n_top][k] the head rows, mapped through vocab [V] when it is not NULL (a
 * truncated head's base ids). The same operations in the same order as ef_linear(fc), ef_forward and ef_head_topk
 * called one by one: the same bits.
 * Returns 0; -1 (shapes, as ef_forward), -2 (out of memory), -3 (a token id, position or top row outside its table).
 */
int ef_draft(const Model *m, const Linear *fc, const float *embed, int n_embed, const float *cos_table,
             const float *sin_table, int n_pos, int T, const int64_t *ids, const float *feats, const int64_t *pos,
             int n_seg, const Segment *segs, float *out, int n_top, const int32_t *top_rows, int k,
             const int64_t *vocab, int64_t *top_ids, float *top_scores, float *scratch) {
    const int H = m->hidden, D = m->head_dim, V = m->lm_head.rows;
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= n_embed || pos[t] < 0 || pos[t] >= n_pos) return -3;
    for (int i = 0; i < n_top; i++)
        if (top_rows[i] < 0 || top_rows[i] >= T) return -3;
    float *buf = malloc(((size_t)T * (3 * H + 2 * D) + (size_t)n_top * (H + V + k)) * sizeof(float));
    if (!buf) return -2;
    float *x_in = buf;                              /* [T][2H] */
    float *x = x_in + (size_t)T * 2 * H;            /* [T][H] fc's output, the residual stream */
    float *cs = x + (size_t)T * H;                  /* [T][D] */
    float *sn = cs + (size_t)T * D;                 /* [T][D] */
    float *picked = sn + (size_t)T * D;             /* [n_top][H] */
    float *logits = picked + (size_t)n_top * H;     /* [n_top][V] */
    int32_t *rows = (int32_t *)(logits + (size_t)n_top * V);  /* [n_top][k] head rows */
    for (int t = 0; t < T; t++) {
        memcpy(x_in + (size_t)t * 2 * H, embed + (size_t)ids[t] * H, H * sizeof(float));
        memcpy(x_in + (size_t)t * 2 * H + H, feats + (size_t)t * H, H * sizeof(float));
        memcpy(cs + (size_t)t * D, cos_table + (size_t)pos[t] * D, D * sizeof(float));
        memcpy(sn + (size_t)t * D, sin_table + (size_t)pos[t] * D, D * sizeof(float));
    }
    linear(fc, T, x_in, x);
    const int rc = ef_forward(m, T, x, cs, sn, n_seg, segs, 0, NULL, NULL, out, 0, NULL, NULL, scratch);
    if (rc == 0 && n_top > 0) {
        for (int i = 0; i < n_top; i++) memcpy(picked + (size_t)i * H, out + (size_t)top_rows[i] * H, H * sizeof(float));
        ef_head_topk(&m->lm_head, n_top, picked, k, logits, rows, top_scores);
        for (size_t i = 0; i < (size_t)n_top * k; i++) top_ids[i] = vocab ? vocab[rows[i]] : rows[i];
    }
    free(buf);
    return rc;
}
