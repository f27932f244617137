/* The fused attention kernel for one build target, included by attention.c once per
   target. Before each inclusion attention.c defines:
   SF_NAME  suffix of this target's functions (sf_attn_<SF_NAME>, ...)
   SF_ATTR  the attributes of its functions (target ISA, FMA contraction)
   SF_W     floats per vector
   SF_R, SF_NV  score tiles: SF_R query rows x SF_NV vectors of keys
   SF_PR, SF_PC value tiles: SF_PR rows x SF_PC vectors of channels
   and this file undefines them all at its end. */

#define SF_PASTE2(a, b) a##_##b
#define SF_PASTE(a, b) SF_PASTE2(a, b)
#define SF_NAMED(x) SF_PASTE(x, SF_NAME)
#define SF_VEC SF_NAMED(sf_v)
#define SF_IVEC SF_NAMED(sf_i)

typedef float SF_VEC __attribute__((vector_size(4 * SF_W)));
typedef int32_t SF_IVEC __attribute__((vector_size(4 * SF_W)));

SF_ATTR
static inline __attribute__((always_inline)) SF_VEC SF_NAMED(sf_sel)(SF_IVEC m, SF_VEC a, SF_VEC b)
{
    return (SF_VEC)(((SF_IVEC)a & m) | ((SF_IVEC)b & ~m));
}

/* sf_exp_neg, SF_W lanes at a time */
SF_ATTR
static inline __attribute__((always_inline)) SF_VEC SF_NAMED(sf_exp_neg)(SF_VEC x)
{
    SF_IVEC flush = x < -64.0f;
    x = SF_NAMED(sf_sel)(x < -87.0f, (SF_VEC){0} - 87.0f, x);
    SF_VEC n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    SF_VEC r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    SF_VEC p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * r) * r + r + 1.0f;
    SF_IVEC e = (__builtin_convertvector(n, SF_IVEC) + 127) << 23;
    return (SF_VEC)((SF_IVEC)(p * (SF_VEC)e) & ~flush);
}

/* x[0..n) -> exp(x - max) in place; returns their sum. A NaN score makes the row NaN
   (through its exponential), as on the BLAS path. */
SF_ATTR
static float SF_NAMED(sf_exp_row)(float *x, size_t n)
{
    size_t body = n / SF_W * SF_W;
    float mx = -INFINITY;
    if (body) {
        SF_VEC m = *(const SF_VEC *)x;
        for (size_t j = SF_W; j < body; j += SF_W) {
            SF_VEC y = *(const SF_VEC *)(x + j);
            m = SF_NAMED(sf_sel)(y > m, y, m);
        }
        for (int t = 0; t < SF_W; t++)
            mx = m[t] > mx ? m[t] : mx;
    }
    for (size_t j = body; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    SF_VEC acc = {0};
    for (size_t j = 0; j < body; j += SF_W) {
        SF_VEC e = SF_NAMED(sf_exp_neg)(*(const SF_VEC *)(x + j) - mx);
        *(SF_VEC *)(x + j) = e;
        acc += e;
    }
    float sum = 0.0f;
    for (int t = 0; t < SF_W; t++)
        sum += acc[t];
    for (size_t j = body; j < n; j++) {
        x[j] = sf_exp_neg(x[j] - mx);
        sum += x[j];
    }
    return sum;
}

SF_ATTR
static void SF_NAMED(sf_attn)(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                          float *out, size_t ldo, size_t l, size_t lk, size_t d, float *work)
{
    typedef SF_VEC vec;
    enum { W = SF_W, R = SF_R, NV = SF_NV, PW = SF_W * SF_NV, PR = SF_PR, PC = SF_PC };
    size_t panels = (lk + PW - 1) / PW, lds = panels * PW;
    float *kp = work, *vp = kp + lds * d, *s = vp + lk * d, *o = s + SF_RB * lds;
    /* K in panels of PW keys (d rows of PW, zero past the last key); V rows contiguous */
    for (size_t p = 0; p < panels; p++)
        for (size_t c = 0; c < d; c++)
            for (size_t j = 0; j < PW; j++) {
                size_t key = p * PW + j;
                kp[(p * d + c) * PW + j] = key < lk ? k[key * ldk + c] : 0.0f;
            }
    for (size_t j = 0; j < lk; j++)
        memcpy(vp + j * d, v + j * ldv, d * sizeof(float));
    for (size_t r0 = 0; r0 < l; r0 += SF_RB) {
        size_t nr = l - r0 < SF_RB ? l - r0 : SF_RB;
        const float *qb = q + r0 * ldq;
        /* scores: each K panel is loaded once per block and reused by its row tiles */
        for (size_t p = 0; p < panels; p++)
            for (size_t i0 = 0; i0 < nr; i0 += R) {
                size_t rows = nr - i0 < R ? nr - i0 : R;
                const float *qr[R];
                vec acc[R][NV];
                for (int i = 0; i < R; i++) {
                    qr[i] = qb + (i0 + ((size_t)i < rows ? (size_t)i : rows - 1)) * ldq;
                    for (int w = 0; w < NV; w++)
                        acc[i][w] = (vec){0};
                }
                const float *kk = kp + p * d * PW;
                for (size_t c = 0; c < d; c++) {
                    vec b[NV];
                    for (int w = 0; w < NV; w++)
                        b[w] = *(const vec *)(kk + c * PW + W * w);
                    for (int i = 0; i < R; i++) {
                        vec a = qr[i][c] - (vec){0};
                        for (int w = 0; w < NV; w++)
                            acc[i][w] += a * b[w];
                    }
                }
                for (size_t i = 0; i < rows; i++)
                    for (int w = 0; w < NV; w++)
                        memcpy(s + (i0 + i) * lds + p * PW + W * w, &acc[i][w], sizeof(vec));
            }
        float sums[SF_RB];
        for (size_t i = 0; i < nr; i++)
            sums[i] = SF_NAMED(sf_exp_row)(s + i * lds, lk);
        /* o = p v, SF_JC keys at a time so their V rows stay in cache for every row tile */
        for (size_t j0 = 0; j0 < lk; j0 += SF_JC) {
            size_t j1 = lk - j0 < SF_JC ? lk : j0 + SF_JC;
            for (size_t i0 = 0; i0 < nr; i0 += PR) {
                size_t rows = nr - i0 < PR ? nr - i0 : PR;
                const float *pr[PR];
                for (int i = 0; i < PR; i++)
                    pr[i] = s + (i0 + ((size_t)i < rows ? (size_t)i : rows - 1)) * lds;
                size_t c0 = 0;
                for (; c0 + W * PC <= d; c0 += W * PC) {
                    vec acc[PR][PC];
                    for (int i = 0; i < PR; i++)
                        for (int w = 0; w < PC; w++)
                            acc[i][w] = j0 ? *(const vec *)(o + (i0 + i) * d + c0 + W * w) : (vec){0};
                    for (size_t j = j0; j < j1; j++) {
                        vec b[PC];
                        for (int w = 0; w < PC; w++)
                            b[w] = *(const vec *)(vp + j * d + c0 + W * w);
                        for (int i = 0; i < PR; i++) {
                            vec a = pr[i][j] - (vec){0};
                            for (int w = 0; w < PC; w++)
                                acc[i][w] += a * b[w];
                        }
                    }
                    for (size_t i = 0; i < rows; i++)
                        for (int w = 0; w < PC; w++)
                            *(vec *)(o + (i0 + i) * d + c0 + W * w) = acc[i][w];
                }
                for (; c0 < d; c0 += W) {   /* channels left over from whole tiles */
                    vec acc[PR];
                    for (int i = 0; i < PR; i++)
                        acc[i] = j0 ? *(const vec *)(o + (i0 + i) * d + c0) : (vec){0};
                    for (size_t j = j0; j < j1; j++) {
                        vec b = *(const vec *)(vp + j * d + c0);
                        for (int i = 0; i < PR; i++)
                            acc[i] += (pr[i][j] - (vec){0}) * b;
                    }
                    for (size_t i = 0; i < rows; i++)
                        *(vec *)(o + (i0 + i) * d + c0) = acc[i];
                }
            }
        }
        for (size_t i = 0; i < nr; i++)
            for (size_t c = 0; c < d; c++)
                out[(r0 + i) * ldo + c] = o[i * d + c] / sums[i];
    }
}

#undef SF_VEC
#undef SF_IVEC
#undef SF_NAMED
#undef SF_PASTE
#undef SF_PASTE2
#undef SF_NAME
#undef SF_ATTR
#undef SF_W
#undef SF_R
#undef SF_NV
#undef SF_PR
#undef SF_PC
