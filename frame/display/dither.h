/* The C dithering kernel of frame.display.dither (dither.c). cffi reads this file as
   the module's cdef: prototypes only. */
#ifndef SF_DITHER_H
#define SF_DITHER_H

#include <stddef.h>
#include <stdint.h>

int sf_diffuse(const float *img, size_t h, size_t w,
               const double *pal, size_t n_pal,
               const uint8_t *cube, const uint8_t *encode, size_t encode_len,
               const int *tap_dx, const int *tap_dy, const double *tap_w, size_t n_taps,
               int serpentine, double lo, double hi, double *err_rows, uint8_t *out);

#endif
