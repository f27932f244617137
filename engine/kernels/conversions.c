/* Conversions: half and bfloat16 to float32 and back, 8-bit quantisation, and the conv
   weight layout with each kernel tap first. Each gives its numpy twin's bits
   (engine/kernels/conversions.py). */
#include "common.h"

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

/* clip(rint(x / scale) + zero, 0, 255), truncated to uint8; NaN -> rint part 0, i.e. the
   zero point. rint is round-half-even via the 2^23 trick (the baseline x86-64 ISA has no
   vector round instruction, and rintf would be a libm call). */
static inline uint8_t sf_quant_u8_one(float x, float scale, float zero)
{
    float v = x / scale;
    float a = fabsf(v);
    float t = copysignf((a + 8388608.0f) - 8388608.0f, v);
    float q = sf_sel(a < 8388608.0f, t, v);      /* |v| >= 2^23 (or NaN): already integral */
    q = sf_sel(q == q, q, 0.0f);
    float u = q + zero;
    u = sf_sel(u > 0.0f, u, 0.0f);
    u = sf_sel(u < 255.0f, u, 255.0f);
    return (uint8_t)(int32_t)u;
}

/* out[r, k] = sf_quant_u8_one(x[r, k], scale[r], zero[r]) */
SF_CLONES
void sf_quant_u8_rows(const float *restrict x, const float *restrict scale,
                      const float *restrict zero, uint8_t *restrict out,
                      size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t i = r * cols; i < (r + 1) * cols; i++)
            out[i] = sf_quant_u8_one(x[i], scale[r], zero[r]);
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
