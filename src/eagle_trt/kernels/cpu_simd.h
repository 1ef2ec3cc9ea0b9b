/* 16 float32 lanes for cpu_forward.c, on AVX-512 (one zmm register) or on AVX2 + FMA + F16C (two ymm registers, lanes
 * 0-7 and 8-15). Every operation is lane by lane and IEEE-exact in both, and the reductions add the lanes in the
 * same tree (GCC's _mm512_reduce_add_ps: lane i + lane i+8, then the 128-bit halves, then the pairs (0,2) (1,3),
 * then the two), so a sum is the same sequence of float32 operations on either instruction set: the exactness rules
 * of cpu_forward.c hold on both, and one machine's rows are as independent as the other's.
 *
 *   vf: 16 floats; vmask: 16 lane bits; vf_load/store, vf_add/sub/mul/div/max/min, vf_fmadd(a, b, c) = a*b + c and
 *   vf_fnmadd = c - a*b (one rounding), vf_abs, vf_round (to nearest even), vf_scalef(p, n) = p * 2^n for integral n,
 *   vf_maskz_load / vf_mask_load / vf_mask_store / vf_maskz_mov, vf_load_half / vf_store_half (float16 storage,
 *   rounded to nearest even), vf_from_i8 / vf_from_u8 (16 bytes as values), vf_reduce_add / vf_reduce_max,
 *   vf_sum16x16 (16 vectors' sums as one vector), quantize_block (32 floats to llama.cpp's Q8).
 */
#include <immintrin.h>

#if defined(__AVX512F__)
#define SIMD_AVX512 1
typedef __m512 vf;
typedef __mmask16 vmask;
#define vf_zero _mm512_setzero_ps
#define vf_set1 _mm512_set1_ps
#define vf_load _mm512_loadu_ps
#define vf_store _mm512_storeu_ps
#define vf_add _mm512_add_ps
#define vf_sub _mm512_sub_ps
#define vf_mul _mm512_mul_ps
#define vf_div _mm512_div_ps
#define vf_max _mm512_max_ps
#define vf_min _mm512_min_ps
#define vf_fmadd _mm512_fmadd_ps
#define vf_fnmadd _mm512_fnmadd_ps
#define vf_abs _mm512_abs_ps
#define vf_scalef _mm512_scalef_ps
#define vf_maskz_load _mm512_maskz_loadu_ps
#define vf_mask_load _mm512_mask_loadu_ps
#define vf_mask_store _mm512_mask_storeu_ps
#define vf_maskz_mov _mm512_maskz_mov_ps
#define vf_reduce_add _mm512_reduce_add_ps
#define vf_reduce_max _mm512_reduce_max_ps
#define vf_round(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vf_load_half(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vf_store_half(p, v) \
    _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define vf_from_i8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define vf_from_u8(raw) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(raw))

/* The 16 lane sums of v[0..16) as one vector, lane i = v[i]'s sum. Every v[i] is reduced by the same sequence of
 * additions over its own lanes (lane l + lane l+8, then the 128-bit halves of that, then adjacent pairs twice),
 * whatever slot it sits in and whatever the other 15 hold: a key's score depends on the key and the query alone. */
static inline __attribute__((always_inline)) vf vf_sum16x16(const vf *v) {
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

/* 32 floats as llama.cpp's Q8 block: d = max|x| / 127, q = round(x / d) (nearest even) into q[32]; returns d and
 * sets *qsum = sum of q. */
static inline float quantize_block(const float *xb, int8_t *q, int *qsum) {
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(id)));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(id)));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(q1));
    *qsum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return d;
}

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SIMD_AVX512 0
typedef struct { __m256 lo, hi; } vf;  /* lanes 0-7, 8-15 */
typedef uint16_t vmask;
#define VF2(expr_lo, expr_hi) ((vf){(expr_lo), (expr_hi)})
#define ALWAYS static inline __attribute__((always_inline))
ALWAYS vf vf_zero(void) { return VF2(_mm256_setzero_ps(), _mm256_setzero_ps()); }
ALWAYS vf vf_set1(float x) { return VF2(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
ALWAYS vf vf_load(const float *p) { return VF2(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
ALWAYS void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v.lo), _mm256_storeu_ps(p + 8, v.hi); }
ALWAYS vf vf_add(vf a, vf b) { return VF2(_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)); }
ALWAYS vf vf_sub(vf a, vf b) { return VF2(_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)); }
ALWAYS vf vf_mul(vf a, vf b) { return VF2(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)); }
ALWAYS vf vf_div(vf a, vf b) { return VF2(_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)); }
ALWAYS vf vf_max(vf a, vf b) { return VF2(_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)); }
ALWAYS vf vf_min(vf a, vf b) { return VF2(_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)); }
ALWAYS vf vf_fmadd(vf a, vf b, vf c) { return VF2(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)); }
ALWAYS vf vf_fnmadd(vf a, vf b, vf c) {
    return VF2(_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi));
}
ALWAYS vf vf_abs(vf a) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    return VF2(_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m));
}
ALWAYS vf vf_round(vf a) {
    return VF2(_mm256_round_ps(a.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
               _mm256_round_ps(a.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* p * 2^n for integral n in [-150, 128] (what vf_exp passes), rounded once as _mm512_scalef_ps rounds it: p * 2^n1 is
 * exact (p near 1, n1 = floor(n / 2) keeps it normal), then * 2^n2 rounds. */
ALWAYS __m256 scalef8(__m256 p, __m256 n) {
    const __m256i ni = _mm256_cvttps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
ALWAYS vf vf_scalef(vf p, vf n) { return VF2(scalef8(p.lo, n.lo), scalef8(p.hi, n.hi)); }
/* Lane masks of the low (bits 0-7) and high (8-15) halves of k, as all-ones / zero int32 lanes. */
ALWAYS __m256i lane_mask(unsigned k) {
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(k & 0xFF)), bits), bits);
}
ALWAYS vf vf_maskz_load(vmask k, const float *p) {
    return VF2(_mm256_maskload_ps(p, lane_mask(k)), _mm256_maskload_ps(p + 8, lane_mask(k >> 8)));
}
ALWAYS vf vf_mask_load(vf src, vmask k, const float *p) {
    const __m256i ml = lane_mask(k), mh = lane_mask(k >> 8);
    return VF2(_mm256_blendv_ps(src.lo, _mm256_maskload_ps(p, ml), _mm256_castsi256_ps(ml)),
               _mm256_blendv_ps(src.hi, _mm256_maskload_ps(p + 8, mh), _mm256_castsi256_ps(mh)));
}
ALWAYS void vf_mask_store(float *p, vmask k, vf v) {
    _mm256_maskstore_ps(p, lane_mask(k), v.lo), _mm256_maskstore_ps(p + 8, lane_mask(k >> 8), v.hi);
}
ALWAYS vf vf_maskz_mov(vmask k, vf v) {
    return VF2(_mm256_and_ps(v.lo, _mm256_castsi256_ps(lane_mask(k))),
               _mm256_and_ps(v.hi, _mm256_castsi256_ps(lane_mask(k >> 8))));
}
ALWAYS vf vf_load_half(const void *p) {
    return VF2(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
               _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1)));
}
ALWAYS void vf_store_half(void *p, vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128((__m128i *)p + 1, _mm256_cvtps_ph(v.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
ALWAYS vf vf_from_i8(const void *p) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)p);
    return VF2(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8))));
}
ALWAYS vf vf_from_u8(__m128i raw) {
    return VF2(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(raw)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(raw, 8))));
}
/* GCC's _mm512_reduce_{add,max}_ps tree on the two halves. */
#define REDUCE8(NAME, OP256, OP128)                                                    \
    ALWAYS float NAME(vf v) {                                                          \
        const __m256 t3 = OP256(v.hi, v.lo);                                           \
        const __m128 t6 = OP128(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3)); \
        const __m128 t8 = OP128(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));  \
        return _mm_cvtss_f32(OP128(t8, _mm_shuffle_ps(t8, t8, 1)));                   \
    }
REDUCE8(vf_reduce_add, _mm256_add_ps, _mm_add_ps)
REDUCE8(vf_reduce_max, _mm256_max_ps, _mm_max_ps)
#undef REDUCE8

/* vf_sum16x16 of the AVX-512 branch, the same tree per vector: s_l = v_l + v_l+8, t_l = s_l + s_l+4, then
 * (t_0 + t_1) + (t_2 + t_3). */
ALWAYS vf vf_sum16x16(const vf *v) {
    __m256 t[8], u[4];
    for (int i = 0; i < 8; i++) {  /* [key 2i: t_0..t_3, key 2i+1: t_0..t_3] */
        const __m256 a = _mm256_add_ps(v[2 * i].lo, v[2 * i].hi), b = _mm256_add_ps(v[2 * i + 1].lo, v[2 * i + 1].hi);
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    }
    for (int i = 0; i < 4; i++)  /* [key 4i: 2, key 4i+2: 2 | key 4i+1: 2, key 4i+3: 2] */
        u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x88),
                             _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xDD));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 r[2];
    for (int i = 0; i < 2; i++)  /* [key 8i, 8i+2, 8i+4, 8i+6 | 8i+1, 8i+3, 8i+5, 8i+7], then in key order */
        r[i] = _mm256_permutevar8x32_ps(_mm256_add_ps(_mm256_shuffle_ps(u[2 * i], u[2 * i + 1], 0x88),
                                                      _mm256_shuffle_ps(u[2 * i], u[2 * i + 1], 0xDD)), order);
    return VF2(r[0], r[1]);
}

/* The AVX-512 branch's quantize_block on two halves: the same roundings (cvtps_epi32: nearest even), the same
 * saturation to int8. */
static inline float quantize_block(const float *xb, int8_t *q, int *qsum) {
    const vf x0 = vf_load(xb), x1 = vf_load(xb + 16);
    const float amax = vf_reduce_max(vf_max(vf_abs(x0), vf_abs(x1)));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    const __m256i q00 = _mm256_cvtps_epi32(_mm256_mul_ps(x0.lo, idv)), q01 = _mm256_cvtps_epi32(_mm256_mul_ps(x0.hi, idv));
    const __m256i q10 = _mm256_cvtps_epi32(_mm256_mul_ps(x1.lo, idv)), q11 = _mm256_cvtps_epi32(_mm256_mul_ps(x1.hi, idv));
    /* packs: [a0-3 b0-3 | a4-7 b4-7] per pair, put back in order, then to bytes */
    const __m256i w0 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q00, q01), 0xD8);
    const __m256i w1 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q10, q11), 0xD8);
    _mm_storeu_si128((__m128i *)q, _mm_packs_epi16(_mm256_castsi256_si128(w0), _mm256_extracti128_si256(w0, 1)));
    _mm_storeu_si128((__m128i *)(q + 16), _mm_packs_epi16(_mm256_castsi256_si128(w1), _mm256_extracti128_si256(w1, 1)));
    int s = 0;
    for (int k = 0; k < 32; k++) s += q[k];
    *qsum = s;
    return d;
}
#undef ALWAYS
#else
#error "cpu_forward.c needs AVX-512F, or AVX2 with FMA and F16C"
#endif
