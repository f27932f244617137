"""cffi builder for engine._ckernels: small elementwise C kernels behind engine.fastops,
and one fused attention kernel (ATTENTION_SOURCE) behind engine.ops.attention.

Built by setup.py (``cffi_modules``); ``python engine/_kernels_build.py`` builds it in
place by hand. Every elementwise kernel has a numpy twin in engine/fastops.py that
gives the same bits; the attention kernel's fallback is the BLAS path in engine/ops.py,
which it matches to float32 rounding. So the C module is only a speed-up and may be
missing.

Rules for the C below:
- IEEE semantics: no -ffast-math, and -ffp-contract=off so that ``a * b + c`` is two
  roundings as in numpy (aarch64 gcc fuses it into an FMA by default otherwise). The
  attention kernel alone turns contraction back on, for its own functions.
- No -march=native: the module must run on any CPU of the arch it was built for.
- Loops are single-threaded, branch-free (selects via masks) and use restrict
  pointers so gcc -O3 vectorises them with the baseline SIMD (SSE2 / NEON).
"""

import sys

from cffi import FFI

CDEF = """
void sf_f16_to_f32(const uint16_t *src, float *out, size_t n);
void sf_bf16_to_f32(const uint16_t *src, float *out, size_t n);
void sf_f32_to_f16(const float *src, uint16_t *out, size_t n);
void sf_dequant_u8_rows(const uint8_t *q, const float *scale, const float *zero,
                        float *out, size_t rows, size_t cols);
void sf_dequant_u8(const uint8_t *q, float scale, float zero, float *out, size_t n);
void sf_quant_u8(const float *x, float scale, float zero, uint8_t *out, size_t n);
void sf_gelu_erf(const float *x, float *out, size_t n);
void sf_geglu(const float *p, const float *bias, float *out, size_t rows, size_t d);
void sf_softmax_rows(float *s, float *sums, size_t rows, size_t cols);
void sf_taps_first(const float *w, float *out, size_t rows, size_t cin, size_t taps);
void sf_wino_weights(const float *w, float *u, size_t rows, size_t cin, size_t r0, size_t r1);
void sf_wino_input(const float *p, float *v, size_t cin, size_t prow, size_t pcol, size_t ty, size_t tx,
                   size_t c0, size_t c1);
void sf_wino_output(const float *m, float *y, size_t cout, size_t ty, size_t tx, size_t c0, size_t c1);
void sf_layer_norm(const float *x, const float *gamma, const float *beta, float *out, size_t rows, size_t cols,
                   float eps);
void sf_row_moments(const float *x, size_t ld, size_t rows, size_t cols, double *mean, double *m2);
size_t sf_attention_work(size_t lk, size_t d);
int sf_attention_head(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                      float *out, size_t ldo, size_t l, size_t lk, size_t d, float *work, int variant);
"""

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <stddef.h>
#include <math.h>

/* x86-64: also build AVX-512 and AVX2 copies, picked at load time (same bits: no FMA
   contraction). The AVX-512 copy runs GELU 2.5x faster than the AVX2 one. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SF_CLONES
#endif

static inline float sf_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t sf_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* all-ones when c is true, else 0: selects as (a & m) | (b & ~m) keep loops branch-free */
static inline uint32_t sf_mask(int c) { return -(uint32_t)(c != 0); }
/* c ? a : b for floats, as a bit select: gcc will not if-convert float ternaries whose
   arms could trap (it keeps -ftrapping-math), so a plain ?: stops vectorisation */
static inline float sf_sel(int c, float a, float b)
{
    uint32_t m = sf_mask(c);
    return sf_u2f((sf_f2u(a) & m) | (sf_f2u(b) & ~m));
}

/* IEEE half bits -> float32, exact for every pattern (NaN payloads kept, as numpy). */
SF_CLONES
void sf_f16_to_f32(const uint16_t *restrict src, float *restrict out, size_t n)
{
    uint32_t *restrict o = (uint32_t *)out;
    for (size_t i = 0; i < n; i++) {
        uint32_t h = src[i];
        uint32_t m = (h & 0x7fffu) << 13;            /* exponent+mantissa, f32 position */
        uint32_t e = m & 0x0f800000u;                /* the half's exponent field */
        uint32_t nrm = m + 0x38000000u;              /* rebias 15 -> 127 */
        uint32_t inf = m + 0x70000000u;              /* exponent 31 -> 255 (inf, NaN) */
        /* zero/subnormal: mantissa * 2^-24 exactly, as (2^-14 + m*2^-24) - 2^-14 */
        uint32_t sub = sf_f2u(sf_u2f(m + 0x38800000u) - 6.103515625e-05f);
        uint32_t mi = sf_mask(e == 0x0f800000u);
        uint32_t mz = sf_mask(e == 0);
        uint32_t r = (inf & mi) | (nrm & ~mi);
        r = (sub & mz) | (r & ~mz);
        o[i] = r | ((h & 0x8000u) << 16);
    }
}

SF_CLONES
void sf_bf16_to_f32(const uint16_t *restrict src, float *restrict out, size_t n)
{
    uint32_t *restrict o = (uint32_t *)out;
    for (size_t i = 0; i < n; i++)
        o[i] = (uint32_t)src[i] << 16;
}

/* float32 -> IEEE half bits, round to nearest even; overflow -> inf; NaN -> NaN with the
   top 10 payload bits (forced nonzero), which is what numpy's software path gives. */
SF_CLONES
void sf_f32_to_f16(const float *restrict src, uint16_t *restrict out, size_t n)
{
    const uint32_t *restrict s = (const uint32_t *)src;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = s[i];
        uint32_t sign = (u >> 16) & 0x8000u;
        uint32_t a = u & 0x7fffffffu;
        /* normal result: rebias, round the 13 dropped bits to nearest even; a carry out
           of the mantissa bumps the exponent (and 65520.. gives 0x7c00 = inf) */
        uint32_t nrm = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
        /* subnormal or zero result (|x| < 2^-14): adding 0.5 puts the half's last
           mantissa bit at the f32 ulp, so the FPU does the rounding */
        uint32_t sub = sf_f2u(sf_u2f(a) + 0.5f) - 0x3f000000u;
        uint32_t pay = (a >> 13) & 0x3ffu;
        uint32_t nan = 0x7c00u | pay | (uint32_t)(pay == 0);
        uint32_t ms = sf_mask(a < 0x38800000u);      /* below 2^-14 */
        uint32_t mo = sf_mask(a >= 0x47800000u);     /* 65536 and up: inf */
        uint32_t mn = sf_mask(a > 0x7f800000u);      /* NaN */
        uint32_t r = (sub & ms) | (nrm & ~ms);
        r = (0x7c00u & mo) | (r & ~mo);
        r = (nan & mn) | (r & ~mn);
        out[i] = (uint16_t)(r | sign);
    }
}

/* out[r, k] = (float(q[r, k]) - zero[r]) * scale[r] */
SF_CLONES
void sf_dequant_u8_rows(const uint8_t *restrict q, const float *restrict scale,
                        const float *restrict zero, float *restrict out,
                        size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        const float s = scale[r], z = zero[r];
        const uint8_t *restrict qr = q + r * cols;
        float *restrict orow = out + r * cols;
        for (size_t k = 0; k < cols; k++)
            orow[k] = ((float)qr[k] - z) * s;
    }
}

SF_CLONES
void sf_dequant_u8(const uint8_t *restrict q, float scale, float zero,
                   float *restrict out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ((float)q[i] - zero) * scale;
}

/* out = clip(rint(x / scale) + zero, 0, 255), truncated to uint8; NaN -> rint part 0,
   i.e. the zero point. rint is round-half-even via the 2^23 trick (the baseline
   x86-64 ISA has no vector round instruction, and rintf would be a libm call). */
SF_CLONES
void sf_quant_u8(const float *restrict x, float scale, float zero,
                 uint8_t *restrict out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i] / scale;
        float a = fabsf(v);
        float t = copysignf((a + 8388608.0f) - 8388608.0f, v);
        float r = sf_sel(a < 8388608.0f, t, v);      /* |v| >= 2^23 (or NaN): already integral */
        r = sf_sel(r == r, r, 0.0f);
        float u = r + zero;
        u = sf_sel(u > 0.0f, u, 0.0f);
        u = sf_sel(u < 255.0f, u, 255.0f);
        out[i] = (uint8_t)(int32_t)u;
    }
}

/* GELU, exact-erf form, with Abramowitz & Stegun 7.1.28 for erf (|error| <= 3e-7):
   r = 1 / (1 + a1 a + ... + a6 a^6)^16 ~ erfc(a), a = |x| / sqrt(2);
   gelu(x) = 0.5 x (x >= 0 ? 2 - r : r). Same op order as fastops.np_gelu_erf. x is
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

/* exp(x) for x <= 0 (Cephes expf: Cody-Waite reduction, degree-5 polynomial, ~1 ulp),
   flushed to exactly 0 below x = -64. A softmax row sums to at least 1, so the ~1e-28
   dropped there is far below float32 rounding; what it buys is that the next GEMM
   (probabilities times values) never forms a subnormal product, each of which costs
   x86 a microcode assist: with untrained weights' wide score ranges attention ran ~2x
   slower. (The clamp at -87 only keeps the exponent arithmetic in range.) */
static inline float sf_exp_neg(float x)
{
    int flush = x < -64.0f;
    x = sf_sel(x < -87.0f, -87.0f, x);
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round(x / ln 2) */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * r) * r + r + 1.0f;
    return sf_sel(flush, 0.0f, p * sf_u2f((uint32_t)((int32_t)n + 127) << 23));
}

#define SF_LANES 8

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
   lanes fill one AVX-512 register: the exponentials run 1.5x faster than with eight. */
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

/* A conv weight's rows (out channel) from (cin, taps) to (taps, cin) order, so each
   kernel tap is a matrix with unit column stride (ops.conv2d runs one GEMM per tap).
   Each row is small enough to stay in cache while it is transposed. */
void sf_taps_first(const float *restrict w, float *restrict out, size_t rows, size_t cin, size_t taps)
{
    for (size_t r = 0; r < rows; r++) {
        const float *restrict src = w + r * cin * taps;
        float *restrict dst = out + r * cin * taps;
        for (size_t t = 0; t < taps; t++)
            for (size_t c = 0; c < cin; c++)
                dst[t * cin + c] = src[c * taps + t];
    }
}

/* Winograd F(2x2, 3x3): a 3x3 stride-1 convolution as 16 GEMMs over 4x4 input tiles
   that each give a 2x2 output tile (2.25x fewer multiplies than direct). The three
   transforms below (weights G g G^T, inputs B^T d B, outputs A^T m A) use only
   additions, subtractions and halvings, each in a fixed order the numpy twins repeat.
   Planes are indexed t = 4 * row + col of the 4x4 transformed tile. */

#define SF_WINO_BLOCK 64

/* w (rows, cin, 3, 3) -> u (16, rows, cin), for rows r0..r1. A block of input channels'
   kernels is first transposed to nine contiguous vectors so the arithmetic vectorises. */
SF_CLONES
void sf_wino_weights(const float *restrict w, float *restrict u, size_t rows, size_t cin, size_t r0, size_t r1)
{
    size_t plane = rows * cin;
    float g[9][SF_WINO_BLOCK], a[4][3][SF_WINO_BLOCK];
    for (size_t r = r0; r < r1; r++)
        for (size_t cb = 0; cb < cin; cb += SF_WINO_BLOCK) {
            size_t nb = cin - cb < SF_WINO_BLOCK ? cin - cb : SF_WINO_BLOCK;
            const float *src = w + (r * cin + cb) * 9;
            for (size_t c = 0; c < nb; c++)
                for (int k = 0; k < 9; k++)
                    g[k][c] = src[c * 9 + k];
            for (int j = 0; j < 3; j++)
                for (size_t c = 0; c < nb; c++) {
                    a[0][j][c] = g[j][c];
                    a[1][j][c] = ((g[j][c] + g[3 + j][c]) + g[6 + j][c]) * 0.5f;
                    a[2][j][c] = ((g[j][c] - g[3 + j][c]) + g[6 + j][c]) * 0.5f;
                    a[3][j][c] = g[6 + j][c];
                }
            float *o = u + r * cin + cb;
            for (int i = 0; i < 4; i++) {
                float *o0 = o + (4 * i + 0) * plane, *o1 = o + (4 * i + 1) * plane;
                float *o2 = o + (4 * i + 2) * plane, *o3 = o + (4 * i + 3) * plane;
                for (size_t c = 0; c < nb; c++) {
                    o0[c] = a[i][0][c];
                    o1[c] = ((a[i][0][c] + a[i][1][c]) + a[i][2][c]) * 0.5f;
                    o2[c] = ((a[i][0][c] - a[i][1][c]) + a[i][2][c]) * 0.5f;
                    o3[c] = a[i][2][c];
                }
            }
        }
}

/* p (cin, prow, pcol), zero-padded input rows with tile (i, j) reading p[:, 2i:2i+4,
   2j:2j+4] -> v (16, cin, ty, tx), for channels c0..c1. The row step runs along whole
   rows (SF_WINO_BLOCK tiles at a time), the column step then reads every other element. */
SF_CLONES
void sf_wino_input(const float *restrict p, float *restrict v, size_t cin, size_t prow, size_t pcol,
                   size_t ty, size_t tx, size_t c0, size_t c1)
{
    size_t plane = cin * ty * tx;
    float t[4][2 * SF_WINO_BLOCK + 2];
    for (size_t c = c0; c < c1; c++)
        for (size_t i = 0; i < ty; i++) {
            const float *d0 = p + (c * prow + 2 * i) * pcol, *d1 = d0 + pcol, *d2 = d1 + pcol, *d3 = d2 + pcol;
            for (size_t jb = 0; jb < tx; jb += SF_WINO_BLOCK) {
                size_t nb = tx - jb < SF_WINO_BLOCK ? tx - jb : SF_WINO_BLOCK;
                size_t x0 = 2 * jb, nx = 2 * nb + 2;
                for (size_t x = 0; x < nx; x++) {
                    t[0][x] = d0[x0 + x] - d2[x0 + x];
                    t[1][x] = d1[x0 + x] + d2[x0 + x];
                    t[2][x] = d2[x0 + x] - d1[x0 + x];
                    t[3][x] = d1[x0 + x] - d3[x0 + x];
                }
                float *o = v + (c * ty + i) * tx + jb;
                for (int r = 0; r < 4; r++) {
                    const float *tr = t[r];
                    float *o0 = o + (4 * r + 0) * plane, *o1 = o + (4 * r + 1) * plane;
                    float *o2 = o + (4 * r + 2) * plane, *o3 = o + (4 * r + 3) * plane;
                    for (size_t j = 0; j < nb; j++) {
                        o0[j] = tr[2 * j] - tr[2 * j + 2];
                        o1[j] = tr[2 * j + 1] + tr[2 * j + 2];
                        o2[j] = tr[2 * j + 2] - tr[2 * j + 1];
                        o3[j] = tr[2 * j + 1] - tr[2 * j + 3];
                    }
                }
            }
        }
}

/* m (16, cout, ty, tx) -> y (cout, 2 ty, 2 tx), for output channels c0..c1. */
SF_CLONES
void sf_wino_output(const float *restrict m, float *restrict y, size_t cout, size_t ty, size_t tx,
                    size_t c0, size_t c1)
{
    size_t plane = cout * ty * tx, wy = 2 * tx;
    for (size_t c = c0; c < c1; c++)
        for (size_t i = 0; i < ty; i++) {
            const float *mi = m + (c * ty + i) * tx;
            float *y0 = y + (c * 2 * ty + 2 * i) * wy, *y1 = y0 + wy;
            for (size_t j = 0; j < tx; j++) {
                float q[4][2];
                for (int r = 0; r < 4; r++) {
                    float e0 = mi[(4 * r + 0) * plane + j], e1 = mi[(4 * r + 1) * plane + j];
                    float e2 = mi[(4 * r + 2) * plane + j], e3 = mi[(4 * r + 3) * plane + j];
                    q[r][0] = (e0 + e1) + e2;
                    q[r][1] = (e1 - e2) - e3;
                }
                for (int b = 0; b < 2; b++) {
                    y0[2 * j + b] = (q[0][b] + q[1][b]) + q[2][b];
                    y1[2 * j + b] = (q[1][b] - q[2][b]) - q[3][b];
                }
            }
        }
}

/* Sum of SF_LANES interleaved double lanes (the tail adds into the first lanes),
   combined pairwise: the order numpy reproduces in np_layer_norm. */
static inline double sf_lanes_sum(const double *acc)
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The mean of x[0..cols), summed in SF_LANES double lanes, and in *m2 the sum of
   squares of (double)(x - (float)mean) in the same lane order (numpy's twins reproduce
   both). */
static inline __attribute__((always_inline)) double sf_moments(const float *restrict xr, size_t cols,
                                                               double *restrict m2)
{
    size_t body = cols / SF_LANES * SF_LANES;
    double acc[SF_LANES] = {0};
    for (size_t i = 0; i < body; i += SF_LANES)
        for (int j = 0; j < SF_LANES; j++)
            acc[j] += (double)xr[i + j];
    for (size_t i = body; i < cols; i++)
        acc[i - body] += (double)xr[i];
    double mu = sf_lanes_sum(acc) / (double)cols;
    float m = (float)mu;
    double sq[SF_LANES] = {0};
    for (size_t i = 0; i < body; i += SF_LANES)
        for (int j = 0; j < SF_LANES; j++) {
            double d = (double)(xr[i + j] - m);
            sq[j] += d * d;
        }
    for (size_t i = body; i < cols; i++) {
        double d = (double)(xr[i] - m);
        sq[i - body] += d * d;
    }
    *m2 = sf_lanes_sum(sq);
    return mu;
}

/* LayerNorm of each row: mean and variance accumulated in double (sf_moments), then
   out = ((x - mean) * rstd) * gamma + beta in float32, as numpy's steps. */
SF_CLONES
void sf_layer_norm(const float *restrict x, const float *restrict gamma, const float *restrict beta,
                   float *restrict out, size_t rows, size_t cols, float eps)
{
    for (size_t r = 0; r < rows; r++) {
        const float *restrict xr = x + r * cols;
        float *restrict o = out + r * cols;
        double m2, mu = sf_moments(xr, cols, &m2);
        float mean = (float)mu;
        float rstd = (float)(1.0 / sqrt(m2 / (double)cols + (double)eps));
        for (size_t i = 0; i < cols; i++)
            o[i] = ((xr[i] - mean) * rstd) * gamma[i] + beta[i];
    }
}

/* Per row of x (rows x cols, row stride ld): sf_moments, one band's per-channel
   statistics for GroupNorm, which merges them across bands (Chan's formula) and the
   channels of a group. */
SF_CLONES
void sf_row_moments(const float *restrict x, size_t ld, size_t rows, size_t cols, double *restrict mean,
                    double *restrict m2)
{
    for (size_t r = 0; r < rows; r++)
        mean[r] = sf_moments(x + r * ld, cols, &m2[r]);
}
"""


# Fused attention: not elementwise, so the one kernel here that does not give its numpy
# twin's bits (see ATTENTION_SOURCE). One template, instantiated per target below.
ATTENTION_TEMPLATE = r"""
/* ---- $NAME build: $W-float vectors; score tiles of $R rows x $NV vectors of keys,
   value tiles of $PR rows x $PC vectors of channels ---- */
typedef float sf_v_$NAME __attribute__((vector_size(4 * $W)));
typedef int32_t sf_i_$NAME __attribute__((vector_size(4 * $W)));

$ATTR
static inline __attribute__((always_inline)) sf_v_$NAME sf_sel_$NAME(sf_i_$NAME m, sf_v_$NAME a, sf_v_$NAME b)
{
    return (sf_v_$NAME)(((sf_i_$NAME)a & m) | ((sf_i_$NAME)b & ~m));
}

/* sf_exp_neg, $W lanes at a time */
$ATTR
static inline __attribute__((always_inline)) sf_v_$NAME sf_exp_neg_$NAME(sf_v_$NAME x)
{
    sf_i_$NAME flush = x < -64.0f;
    x = sf_sel_$NAME(x < -87.0f, (sf_v_$NAME){0} - 87.0f, x);
    sf_v_$NAME n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    sf_v_$NAME r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    sf_v_$NAME p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * r) * r + r + 1.0f;
    sf_i_$NAME e = (__builtin_convertvector(n, sf_i_$NAME) + 127) << 23;
    return (sf_v_$NAME)((sf_i_$NAME)(p * (sf_v_$NAME)e) & ~flush);
}

/* x[0..n) -> exp(x - max) in place; returns their sum. A NaN score makes the row NaN
   (through its exponential), as on the BLAS path. */
$ATTR
static float sf_exp_row_$NAME(float *x, size_t n)
{
    size_t body = n / $W * $W;
    float mx = -INFINITY;
    if (body) {
        sf_v_$NAME m = *(const sf_v_$NAME *)x;
        for (size_t j = $W; j < body; j += $W) {
            sf_v_$NAME y = *(const sf_v_$NAME *)(x + j);
            m = sf_sel_$NAME(y > m, y, m);
        }
        for (int t = 0; t < $W; t++)
            mx = m[t] > mx ? m[t] : mx;
    }
    for (size_t j = body; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    sf_v_$NAME acc = {0};
    for (size_t j = 0; j < body; j += $W) {
        sf_v_$NAME e = sf_exp_neg_$NAME(*(const sf_v_$NAME *)(x + j) - mx);
        *(sf_v_$NAME *)(x + j) = e;
        acc += e;
    }
    float sum = 0.0f;
    for (int t = 0; t < $W; t++)
        sum += acc[t];
    for (size_t j = body; j < n; j++) {
        x[j] = sf_exp_neg(x[j] - mx);
        sum += x[j];
    }
    return sum;
}

$ATTR
static void sf_attn_$NAME(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                          float *out, size_t ldo, size_t l, size_t lk, size_t d, float *work)
{
    typedef sf_v_$NAME vec;
    enum { W = $W, R = $R, NV = $NV, PW = $W * $NV, PR = $PR, PC = $PC };
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
            sums[i] = sf_exp_row_$NAME(s + i * lds, lk);
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
"""


def _attention_variant(name: str, attr: str, w: int, r: int, nv: int, pr: int, pc: int) -> str:
    values = {"$NAME": name, "$ATTR": attr, "$W": str(w), "$R": str(r), "$NV": str(nv), "$PR": str(pr),
              "$PC": str(pc)}
    text = ATTENTION_TEMPLATE
    for key, value in values.items():
        text = text.replace(key, value)
    return text


_CONTRACT = 'optimize("fp-contract=fast")'
# Vectors of each target's native width (gcc lowers wider ones through the stack), tiles
# sized to its registers: 16 zmm accumulators of 32, 8 ymm of 16, 16 NEON q of 32 (SSE2
# spills some: x86-64 without AVX2 is rare).
ATTENTION_SOURCE = r"""
/* Fused attention for one head: softmax(q k^T) v, 64 query rows at a time. Their
   scores (64 x lk) are computed, exponentiated and multiplied by V while they sit in
   L2, so no band of scores ever goes to memory (the BLAS path writes, reads and
   rewrites a whole band: measured 247 -> 199 ms for 10 heads of 4096 tokens on two
   AVX-512 cores, 34.7 -> 24.5 ms for 20 heads of 1024). Multiply-adds are contracted into
   FMAs (here only): the sums run in another order than any BLAS's anyway, so this
   kernel matches the BLAS path to float32 rounding, not bit for bit. Needs GNU C
   vector extensions; elsewhere sf_attention_head returns -1 and callers use BLAS. */
#define SF_RB 64      /* query rows per block */
#define SF_JC 128     /* keys per pass of the value product */
#if defined(__GNUC__)
#define SF_ATTN 1
#if defined(__x86_64__) && !defined(__clang__)
#define SF_ATTN_X86 1
#endif
""" + _attention_variant("generic", f"__attribute__(({_CONTRACT}))", 4, 4, 4, 4, 4) + r"""
#if SF_ATTN_X86
""" + _attention_variant("avx2", f'__attribute__((target("avx2,fma"), {_CONTRACT}))', 8, 4, 2, 4, 2) \
    + _attention_variant("avx512", f'__attribute__((target("avx512f,fma"), {_CONTRACT}))', 16, 8, 2, 4, 4) + r"""
#endif
#endif

/* floats of `work` sf_attention_head needs for lk keys of d channels (64-byte aligned
   inside it by the kernel) */
size_t sf_attention_work(size_t lk, size_t d)
{
    size_t lds = (lk + 31) / 32 * 32;
    return lds * d + lk * d + SF_RB * lds + SF_RB * d + 16;
}

/* One head: q (l x d, row stride ldq), k and v (lk x d), out (l x d); q is pre-scaled.
   variant: 0 the best this CPU runs, 1 generic, 2 AVX2, 3 AVX-512. Returns 0, or -1
   when that build is missing or d is not a multiple of 16 (the caller uses BLAS). */
int sf_attention_head(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                      float *out, size_t ldo, size_t l, size_t lk, size_t d, float *work, int variant)
{
#if SF_ATTN
    if (d == 0 || d % 16 || lk == 0)
        return -1;
    float *w = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
#if SF_ATTN_X86
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (variant == 3 || (variant == 0 && has512)) {
        if (!has512)
            return -1;
        sf_attn_avx512(q, ldq, k, ldk, v, ldv, out, ldo, l, lk, d, w);
        return 0;
    }
    if (variant == 2 || (variant == 0 && has2)) {
        if (!has2)
            return -1;
        sf_attn_avx2(q, ldq, k, ldk, v, ldv, out, ldo, l, lk, d, w);
        return 0;
    }
#endif
    if (variant != 0 && variant != 1)
        return -1;
    sf_attn_generic(q, ldq, k, ldk, v, ldv, out, ldo, l, lk, d, w);
    return 0;
#else
    (void)q; (void)ldq; (void)k; (void)ldk; (void)v; (void)ldv; (void)out; (void)ldo;
    (void)l; (void)lk; (void)d; (void)work; (void)variant;
    return -1;
#endif
}
"""

if sys.platform == "win32":
    EXTRA_COMPILE_ARGS = ["/O2", "/fp:precise"]
else:
    EXTRA_COMPILE_ARGS = ["-O3", "-ffp-contract=off"]

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source("engine._ckernels", SOURCE + ATTENTION_SOURCE, extra_compile_args=EXTRA_COMPILE_ARGS)

if __name__ == "__main__":
    import os

    ffibuilder.compile(tmpdir=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), verbose=True)
