/* Every C kernel of engine.kernels: the one list of sf_ functions.

   engine/kernels/build.py hands these prototypes to cffi as its cdef, and
   engine/kernels/backend.py reads the function names from here to tell a module built
   from older sources. So this file holds prototypes only (cffi parses it): helpers
   the .c files share are in common.h. Pointers are C-contiguous unless a row stride
   (ld*) is given; each kernel's Python module states its shapes. */
#ifndef SF_KERNELS_H
#define SF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* conversions.c: dtypes, 8-bit quantisation, conv weight layout */
void sf_f16_to_f32(const uint16_t *src, float *out, size_t n);
void sf_bf16_to_f32(const uint16_t *src, float *out, size_t n);
void sf_f32_to_f16(const float *src, uint16_t *out, size_t n);
void sf_dequant_u8_rows(const uint8_t *q, const float *scale, const float *zero,
                        float *out, size_t rows, size_t cols);
void sf_quant_u8_rows(const float *x, const float *scale, const float *zero, uint8_t *out,
                      size_t rows, size_t cols);
void sf_taps_first(const float *w, float *out, size_t rows, size_t cin, size_t taps);

/* activations.c */
void sf_gelu_erf(const float *x, float *out, size_t n);
void sf_geglu(const float *p, const float *bias, float *out, size_t rows, size_t d);
void sf_softmax_rows(float *s, float *sums, size_t rows, size_t cols);

/* norms.c */
void sf_layer_norm(const float *x, const float *gamma, const float *beta, float *out, size_t rows, size_t cols,
                   float eps);
void sf_row_moments(const float *x, size_t ld, size_t rows, size_t cols, double *mean, double *m2);

/* winograd.c */
void sf_wino_weights(const float *w, float *u, size_t rows, size_t cin, size_t r0, size_t r1);
void sf_wino_input(const float *p, float *v, size_t cin, size_t prow, size_t pcol, size_t ty, size_t tx,
                   size_t c0, size_t c1);
void sf_wino_output(const float *m, float *y, size_t cout, size_t ty, size_t tx, size_t c0, size_t c1);

/* attention.c */
size_t sf_attention_work(size_t lk, size_t d);
int sf_attention_head(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                      float *out, size_t ldo, size_t l, size_t lk, size_t d, float *work, int variant);

#endif
