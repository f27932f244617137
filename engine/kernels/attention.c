/* Fused attention for one head: softmax(q k^T) v, 64 query rows at a time. Their
   scores (64 x lk) are computed, exponentiated and multiplied by V while they sit in
   L2, so no band of scores ever goes to memory (the BLAS path writes, reads and
   rewrites a whole band; the fused kernel measured faster, see bench/RESULTS.md).
   Multiply-adds are contracted into FMAs (here only): the sums run in another order
   than any BLAS's anyway, so this kernel matches the BLAS path to float32 rounding, not
   bit for bit (engine/kernels/attention.py). Needs GNU C vector extensions; elsewhere
   sf_attention_head returns -1 and callers use BLAS. */
#include "common.h"

#define SF_RB 64      /* query rows per block */
#define SF_JC 128     /* keys per pass of the value product */
#if defined(__GNUC__)
#define SF_ATTN 1
#if defined(__x86_64__) && !defined(__clang__)
#define SF_ATTN_X86 1
#endif

/* One build per target, each with vectors of the target's native width (gcc lowers
   wider ones through the stack) and tiles sized to its registers: 16 NEON q of 32 here
   (SSE2 spills some: x86-64 without AVX2 is rare), 8 ymm of 16 for AVX2, 16 zmm of 32
   for AVX-512. */
#define SF_CONTRACT optimize("fp-contract=fast")

#define SF_NAME generic
#define SF_ATTR __attribute__((SF_CONTRACT))
#define SF_W 4
#define SF_R 4
#define SF_NV 4
#define SF_PR 4
#define SF_PC 4
#include "attention_impl.h"

#if SF_ATTN_X86
#define SF_NAME avx2
#define SF_ATTR __attribute__((target("avx2,fma"), SF_CONTRACT))
#define SF_W 8
#define SF_R 4
#define SF_NV 2
#define SF_PR 4
#define SF_PC 2
#include "attention_impl.h"

#define SF_NAME avx512
#define SF_ATTR __attribute__((target("avx512f,fma"), SF_CONTRACT))
#define SF_W 16
#define SF_R 8
#define SF_NV 2
#define SF_PR 4
#define SF_PC 4
#include "attention_impl.h"
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
