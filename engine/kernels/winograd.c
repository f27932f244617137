/* Winograd F(2x2, 3x3) transforms of weights, inputs and outputs. Each gives its numpy
   twin's bits (engine/kernels/winograd.py). */
#include "common.h"

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
