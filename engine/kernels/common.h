/* Helpers the kernel files share: target clones, bit casts, branch-free selects and an
   exp for non-positive arguments.

   Rules for every kernel (the flags are in engine/kernels/cbuild.py):
   - IEEE semantics: no -ffast-math, and -ffp-contract=off so that a * b + c is two
     roundings as in numpy (aarch64 gcc fuses it into an FMA by default otherwise). The
     attention kernel alone turns contraction back on, for its own functions.
   - No -march=native: the module must run on any CPU of the arch it was built for.
   - Loops are single-threaded, branch-free (selects via masks) and use restrict
     pointers so gcc -O3 vectorises them with the baseline SIMD (SSE2 / NEON). */
#ifndef SF_COMMON_H
#define SF_COMMON_H

#include <stdint.h>
#include <string.h>
#include <stddef.h>
#include <math.h>

#include "kernels.h"

/* x86-64: also build AVX-512 and AVX2 copies, picked at load time (same bits: no FMA
   contraction). The AVX-512 copy is kept because it measured faster (see bench/RESULTS.md). */
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

/* exp(x) for x <= 0 (Cephes expf: Cody-Waite reduction, degree-5 polynomial, ~1 ulp),
   flushed to exactly 0 below x = -64. A softmax row sums to at least 1, so the ~1e-28
   dropped there is far below float32 rounding; what it buys is that the next GEMM
   (probabilities times values) never forms a subnormal product, each of which costs
   x86 a microcode assist (measured: see bench/RESULTS.md). (The clamp at -87 only keeps
   the exponent arithmetic in range.) */
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

#endif
