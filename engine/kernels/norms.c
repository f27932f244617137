/* Norms: LayerNorm and the per-row moments GroupNorm merges. Each gives its numpy
   twin's bits (engine/kernels/norms.py). */
#include "common.h"

#define SF_LANES 8   /* double partial sums per row; numpy_twins.lanes_sum repeats their order */

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
