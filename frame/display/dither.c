/* The error-diffusion inner loop behind frame/display/dither.py, whose pure-Python twin
   (py_diffuse) gives the same indices: the loop works in double precision with
   -ffp-contract=off (engine/kernels/cbuild.py), one rounding per operation in the same
   order as the twin, and Python floats are IEEE doubles. */
#include <string.h>

#include "dither.h"

#define SF_PAD 2      /* taps reach at most 2 columns sideways */
#define SF_ROWS 3     /* and at most 2 rows down: a ring of 3 error rows */
#define SF_CUBE 64    /* the nearest-colour cube has 64 cells per axis */

static inline double sf_clamp(double v, double lo, double hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Error diffusion of a linear-light RGB image (h x w x 3 floats in [0, 1]) onto a palette.

   For each pixel in scan order (right to left on odd rows when serpentine):
   value = clamp(pixel + diffused error, lo, hi); the palette index is
   cube[encode[clamp(value, 0, 1)]] (a precomputed nearest-colour table in CIELAB);
   the error value - pal[index] goes to the taps (dx mirrored on reversed rows); taps
   falling outside the image are dropped.
   err_rows: SF_ROWS * (w + 2 * SF_PAD) * 3 doubles of scratch, any content.
   Returns 0, or -1 when a tap reaches further than SF_PAD columns or SF_ROWS - 1 rows. */
int sf_diffuse(const float *restrict img, size_t h, size_t w,
               const double *restrict pal, size_t n_pal,
               const uint8_t *restrict cube, const uint8_t *restrict encode, size_t encode_len,
               const int *restrict tap_dx, const int *restrict tap_dy, const double *restrict tap_w,
               size_t n_taps, int serpentine, double lo, double hi,
               double *restrict err_rows, uint8_t *restrict out)
{
    const size_t stride = (w + 2 * SF_PAD) * 3;
    const double scale = (double)(encode_len - 1);
    (void)n_pal;
    for (size_t k = 0; k < n_taps; k++)
        if (tap_dx[k] < -SF_PAD || tap_dx[k] > SF_PAD || tap_dy[k] < 0 || tap_dy[k] >= SF_ROWS)
            return -1;
    memset(err_rows, 0, SF_ROWS * stride * sizeof(double));

    for (size_t y = 0; y < h; y++) {
        double *row = err_rows + (y % SF_ROWS) * stride + SF_PAD * 3;
        const int reverse = serpentine && (y & 1);
        for (size_t i = 0; i < w; i++) {
            const size_t x = reverse ? w - 1 - i : i;
            const float *px = img + (y * w + x) * 3;
            double *e = row + x * 3;
            double v0 = sf_clamp((double)px[0] + e[0], lo, hi);
            double v1 = sf_clamp((double)px[1] + e[1], lo, hi);
            double v2 = sf_clamp((double)px[2] + e[2], lo, hi);
            size_t c0 = encode[(size_t)(sf_clamp(v0, 0.0, 1.0) * scale + 0.5)];
            size_t c1 = encode[(size_t)(sf_clamp(v1, 0.0, 1.0) * scale + 0.5)];
            size_t c2 = encode[(size_t)(sf_clamp(v2, 0.0, 1.0) * scale + 0.5)];
            uint8_t idx = cube[(c0 * SF_CUBE + c1) * SF_CUBE + c2];
            out[y * w + x] = idx;
            const double *p = pal + (size_t)idx * 3;
            double d0 = v0 - p[0], d1 = v1 - p[1], d2 = v2 - p[2];
            for (size_t k = 0; k < n_taps; k++) {
                const long dx = reverse ? -tap_dx[k] : tap_dx[k];
                double *t = err_rows + ((y + (size_t)tap_dy[k]) % SF_ROWS) * stride
                            + (size_t)((long)(x + SF_PAD) + dx) * 3;
                t[0] += d0 * tap_w[k];
                t[1] += d1 * tap_w[k];
                t[2] += d2 * tap_w[k];
            }
        }
        memset(row - SF_PAD * 3, 0, stride * sizeof(double));   /* becomes row y + 3 */
    }
    return 0;
}
