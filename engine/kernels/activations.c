/* Activations: GELU (exact-erf form), GEGLU and the row softmax. Each gives its numpy
   twin's bits (engine/kernels/activations.py). */
#include "common.h"

/* GELU, exact-erf form, with Abramowitz & Stegun 7.1.28 for erf (|error| <= 3e-7):
   r = 1 / (1 + a1 a + ... + a6 a^6)^16 ~ erfc(a), a = |x| / sqrt(2);
   gelu(x) = 0.5 x (x >= 0 ? 2 - r : r). Same op order as np_gelu_erf. x is
   clamped at -20 (where r is already 0) so that gelu(-inf) = -0.0 instead of NaN. */
static inline float sf_gelu1(float x)
{
    float a = fabsf(x) * 0.70710678118654752f;
    float p = 0.0000430638f;
    p = p * a + 0.0002765672f;
    p = p * a + 0.0001520143f;
    p = p * a + 0.0092705272f;
    p = p * a + 0.0422820123f;
    p = p * a + 0.0705230784f;
    p = p * a + 1.0f;
    p = p * p;
    p = p * p;
    p = p * p;
    p = p * p;
    float r = 1.0f / p;                              /* p = inf -> r = 0 */
    float s = sf_sel(x >= 0.0f, 2.0f - r, r);
    float xm = sf_sel(x < -20.0f, -20.0f, x);
    return (0.5f * xm) * s;
}

/* no restrict: gelu_erf may run in place (out == x); gcc versions the loop on overlap */
SF_CLONES
void sf_gelu_erf(const float *x, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = sf_gelu1(x[i]);
}

/* diffusers GEGLU with the projection's bias added here (one pass over p instead of two):
   p is (rows, 2d), bias (2d); value = p[:, :d] + bias[:d], gate = p[:, d:] + bias[d:];
   out (rows, d) = value * gelu(gate) */
SF_CLONES
void sf_geglu(const float *restrict p, const float *restrict bias, float *restrict out, size_t rows, size_t d)
{
    const float *restrict bg = bias + d;
    for (size_t r = 0; r < rows; r++) {
        const float *restrict v = p + r * 2 * d;
        const float *restrict g = v + d;
        float *restrict o = out + r * d;
        for (size_t j = 0; j < d; j++)
            o[j] = (v[j] + bias[j]) * sf_gelu1(g[j] + bg[j]);
    }
}

/* The largest of x[0..n), n >= 1; NaN if any is NaN (as numpy's max). Compared as
   integers that order like the floats (negative ones with their magnitude bits flipped),
   because gcc vectorises an integer max reduction but not a float one without
   -ffast-math. */
static inline float sf_row_max(const float *restrict x, size_t n)
{
    int32_t best = INT32_MIN;
    uint32_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = sf_f2u(x[i]);
        int32_t key = (int32_t)u ^ (((int32_t)u >> 31) & 0x7fffffff);
        best = key > best ? key : best;
        nan |= (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    }
    if (nan)
        return NAN;
    return sf_u2f((uint32_t)(best ^ ((best >> 31) & 0x7fffffff)));
}

/* Each row of s (rows, cols) becomes exp(s - max(row)) in place and sums[r] its sum.
   The max is taken here, just before the same row is exponentiated, instead of in a
   separate pass. The sum runs in SF_SOFTMAX_LANES interleaved partial sums (the tail adds
   into the first lanes), combined pairwise, so numpy can reproduce it exactly. Sixteen
   lanes fill one AVX-512 register, chosen by measurement (see bench/RESULTS.md). */
#define SF_SOFTMAX_LANES 16
SF_CLONES
void sf_softmax_rows(float *restrict s, float *restrict sums, size_t rows, size_t cols)
{
    size_t body = cols / SF_SOFTMAX_LANES * SF_SOFTMAX_LANES;
    for (size_t r = 0; r < rows; r++) {
        float *restrict x = s + r * cols;
        float mx = sf_row_max(x, cols);
        float acc[SF_SOFTMAX_LANES] = {0};
        for (size_t i = 0; i < body; i += SF_SOFTMAX_LANES)
            for (int j = 0; j < SF_SOFTMAX_LANES; j++) {
                float e = sf_exp_neg(x[i + j] - mx);
                x[i + j] = e;
                acc[j] += e;
            }
        for (size_t i = body; i < cols; i++) {
            float e = sf_exp_neg(x[i] - mx);
            x[i] = e;
            acc[i - body] += e;
        }
        for (int width = SF_SOFTMAX_LANES / 2; width >= 1; width /= 2)   /* adjacent pairs, level by level */
            for (int j = 0; j < width; j++)
                acc[j] = acc[2 * j] + acc[2 * j + 1];
        sums[r] = acc[0];
    }
}
