"""The ops a model runs on fp32 arrays: linear, conv2d of banded images, attention, LayerNorm, GEGLU/GELU/SiLU.

conv2d picks Winograd, nine shifted GEMMs or a patch matrix per band of rows; attention
runs the fused C kernel or two BLAS GEMMs per band of query rows. The GEMMs are BLAS
(numpy's, or engine.blas for what numpy lacks), the inner loops engine.kernels' C
kernels (Winograd transforms, attention, norms, GELU, softmax), split over the cores.

Layouts: images (B, C, H, W); token sequences (B, L, C) or (N, C); weights as in
the model files (linear (out, in), conv (out, in, kh, kw)).
"""

from __future__ import annotations

import math

import numpy as np

from engine import blas, kernels
from engine.parallel import equal_step, in_parallel, worker_pool
from engine.bands import Dense, BandedImage, silu_
from engine.weights import Weight, WeightRows, row_chunks


def linear(x: np.ndarray, w: Weight, b: np.ndarray | None = None) -> np.ndarray:
    """x (N, in) @ w.T + b -> (N, out); a WeightRows weight is applied band by band."""
    if isinstance(w, np.ndarray):
        y = x @ w.T
    else:
        y = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)
        for r0, r1, rows in row_chunks(w):
            np.matmul(x, rows.T, out=y[:, r0:r1])
    if b is not None:
        y += b
    return y


def conv2d(image: BandedImage, w: Weight, b: np.ndarray | None, stride: int = 1,
           band_bytes: int = 64 << 20, out: np.ndarray | None = None, threads: int = 0) -> np.ndarray:
    """2-D convolution, padding k//2, for 1x1 and 3x3 kernels at stride 1 or 2.

    Works in bands of output rows, each built from just the input rows it needs (so a
    full im2col never exists, and the banded image may be normalised/upsampled/concatenated
    on the fly). 3x3 stride-1 convolutions run by Winograd F(2x2, 3x3) where a band
    holds at least WINO_MIN_TILES tiles, else as nine shifted GEMMs; the rest (and
    3x3 without a reachable cblas_sgemm) build the band's (C*k*k, rows*W) patch
    matrix for one GEMM. A WeightRows weight is applied a band of output channels at
    a time. With `out` given, the result is added to it.
    """
    B, C, H, W = image.shape
    co, ci, k, _ = w.shape
    if ci != C:
        raise ValueError(f"conv expects {ci} input channels, got {C}")
    pad = k // 2
    Ho = (H + 2 * pad - k) // stride + 1
    Wo = (W + 2 * pad - k) // stride + 1
    accumulate = out is not None
    if out is None:
        out = np.empty((B, co, Ho, Wo), dtype=np.float32)
    image = _once_if_refilled(image, w)
    if k == 3 and stride == 1:
        tile_rows, block = _winograd_plan(C, H, W, band_bytes)
        if tile_rows * ((W + 1) // 2) >= WINO_MIN_TILES:
            _conv3x3_winograd(image, w, b, tile_rows, block, band_bytes, out, accumulate, threads)
            return out
    if k == 3 and stride == 1 and blas.HAS_GEMM:
        _conv3x3_shifted(image, w, b, band_bytes, out, accumulate, threads)
        return out
    band = max(1, min(Ho, band_bytes // (4 * ci * k * k * Wo)))
    patches = Patches(image, k, stride, band, Wo, threads)
    for c0, c1, wc in row_chunks(w):
        wm = wc.reshape(c1 - c0, ci * k * k)
        bias = None if b is None else b[c0:c1, None]
        for bi in range(B):
            for y0 in range(0, Ho, band):
                y1 = min(Ho, y0 + band)
                dst = out[bi, c0:c1, y0:y1].reshape(c1 - c0, (y1 - y0) * Wo)
                if accumulate:
                    t = wm @ patches.build(bi, y0, y1)
                    if bias is not None:
                        t += bias
                    dst += t
                else:
                    np.matmul(wm, patches.build(bi, y0, y1), out=dst)
                    if bias is not None:
                        dst += bias
    return out


# A computed image (normalised, concatenated with an expanded skip...) that a weight read in
# bands of output channels would have computed anew for every band is computed once instead,
# where it is at most this big: the 1280-channel levels' inputs at 1024x1024 (<= 10.5 MB),
# not the 64x64 level's (21-31 MB), which runs nearer the evaluation's peak RSS
# (bench/RESULTS.md#convolutions).
ONCE_BYTES = 16 << 20


def _once_if_refilled(image: BandedImage, w: Weight) -> BandedImage:
    """`image` as an array where every band of `w`'s output channels would compute it again."""
    if isinstance(image, Dense) or not isinstance(w, WeightRows) or w.rows_per_chunk >= w.shape[0]:
        return image
    return Dense(image.dense()) if 4 * int(np.prod(image.shape)) <= ONCE_BYTES else image


# A band's padded input stays within this many bytes even when band_bytes allows more:
# the nine GEMMs that read it run faster while it is cache-sized (chosen by measurement:
# bench/RESULTS.md#convolutions).
SHIFTED_BAND_BYTES = 16 << 20
TAPS_PIECE_BYTES = 16 << 20


def _conv3x3_shifted(image: BandedImage, w: Weight, b: np.ndarray | None, band_bytes: int, out: np.ndarray,
                     accumulate: bool, threads: int) -> None:
    """3x3 stride-1 convolution as nine GEMMs accumulated into one result, no im2col.

    A band of input rows is copied once, zero-padded, into a flat (C, rows+2, W+2)
    buffer. Seen flat, output pixel (y, x) under kernel tap (ky, kx) reads the element
    ky*(W+2) + kx after the one tap (0, 0) reads, for every pixel alike: so each tap is
    one GEMM of its (co, C) weight slice with the buffer's rows read from that offset.
    Results are computed for all W+2 columns of each row; the two past the edge are
    discarded when the band is copied out.
    """
    B, C, H, W = image.shape
    co = w.shape[0]
    Wp = W + 2
    budget = min(band_bytes, SHIFTED_BAND_BYTES)
    band = max(1, min(H, budget // (4 * C * Wp) - 2))
    band = equal_step(H, band)
    rows = band + 2
    flat = np.empty(C * rows * Wp + 2, dtype=np.float32)       # +2: the last taps read past the end
    flat[-2:] = 0.0
    padded = flat[:C * rows * Wp].reshape(C, rows, Wp)
    padded[:, :, 0] = 0.0
    padded[:, :, W + 1] = 0.0
    # the tap matrices are made for a piece of the output channels at a time: a whole
    # 2560->1280 weight would otherwise be copied at once (118 MB). Pieces of at least
    # TAPS_PIECE_BYTES keep the GEMMs tall enough to run at full speed.
    piece = max(1, min(co, max(band_bytes, TAPS_PIECE_BYTES) // (4 * 9 * C)))
    result = np.empty((piece, band * Wp), dtype=np.float32)
    for c0, c1, wc in row_chunks(w):
        wc = np.ascontiguousarray(wc)
        for p0 in range(c0, c1, piece):
            p1 = min(c1, p0 + piece)
            rows_of = wc[p0 - c0:p1 - c0]
            taps = np.empty((p1 - p0, 9, C), dtype=np.float32)
            in_parallel(lambda r0, r1: kernels.taps_first(rows_of[r0:r1], taps[r0:r1]), 0, p1 - p0, taps.size,
                        threads)
            for bi in range(B):
                for y0 in range(0, H, band):
                    n = min(band, H - y0)
                    _fill_rows(image, bi, y0 - 1, padded, 1, threads)
                    res = result[:p1 - p0, :n * Wp]
                    for t in range(9):
                        offset = (t // 3) * Wp + t % 3
                        taps_in = np.lib.stride_tricks.as_strided(flat[offset:], (C, n * Wp), (4 * rows * Wp, 4))
                        blas.gemm(taps[:, t], taps_in, res, 0.0 if t == 0 else 1.0)
                    _store(res.reshape(p1 - p0, n, Wp)[:, :, :W], out[bi, p0:p1, y0:y0 + n],
                           None if b is None else b[p0:p1], accumulate)


# Winograd's 16 GEMMs per band are (co, C) x (C, tiles in the band): with fewer tiles
# than this they run too far below full speed to beat the direct convolution's 2.25x
# more multiplies, and the nine shifted GEMMs (rows x W columns each) take over (chosen
# by measurement: bench/RESULTS.md#convolutions).
WINO_MIN_TILES = 64
# Where band_bytes cannot hold the transform of this many tiles for all input channels,
# a band is transformed a block of channels at a time, each block's GEMMs adding into
# the same products: wider GEMMs for re-reading the products once per block (chosen by
# measurement: bench/RESULTS.md#convolutions).
WINO_SPLIT_TILES = 128


def _winograd_plan(C: int, H: int, W: int, band_bytes: int) -> tuple[int, int]:
    """(rows of 2x2 output tiles per band, input channels per transform block) for
    bands of equal size: the transformed input (16, channels, rows, tiles across)
    fits band_bytes, for all C channels if a band then holds WINO_SPLIT_TILES tiles,
    else for blocks of them (with their padded input rows, where the band's rows of
    all C channels do not fit beside them; see _winograd_fills_whole_band)."""
    tx, ty_all = (W + 1) // 2, (H + 1) // 2
    ty = band_bytes // (64 * C * tx)
    if ty * tx < WINO_SPLIT_TILES and blas.HAS_GEMM:
        ty = -(-WINO_SPLIT_TILES // tx)
    ty = equal_step(ty_all, max(1, min(ty_all, ty)))
    if 64 * C * ty * tx <= band_bytes or not blas.HAS_GEMM:
        return ty, C
    per_channel = 64 * ty * tx
    if not _winograd_fills_whole_band(C, ty, W, band_bytes):
        per_channel += 4 * (2 * ty + 2) * (2 * tx + 2)
    return ty, equal_step(C, max(1, band_bytes // per_channel))


def _winograd_fills_whole_band(C: int, ty: int, W: int, band_bytes: int) -> bool:
    """Whether a band's padded input rows of all C channels fit band_bytes: they are then
    filled (normalised, upsampled...) once per band, else once per channel block and
    piece of output channels."""
    return 4 * C * (2 * ty + 2) * (2 * ((W + 1) // 2) + 2) <= band_bytes


def _conv3x3_winograd(image: BandedImage, w: Weight, b: np.ndarray | None, ty: int, block: int, band_bytes: int,
                      out: np.ndarray, accumulate: bool, threads: int) -> None:
    """3x3 stride-1 convolution by Winograd F(2x2, 3x3), `ty` rows of tiles per band.

    The output is cut into 2x2 tiles, each computed from a 4x4 input tile. Transformed
    (kernels.wino_*), one 4x4 tile's 16 values each meet one of 16 transformed weight
    matrices (co, C), so a band of tiles costs 16 GEMMs of (co, C) x (C, tiles): 2.25x
    fewer multiplies than the direct convolution. With `block` < C the input is
    transformed `block` channels at a time and the GEMMs accumulate. The transformed
    weights are made for a piece of the output channels at a time, as the tap matrices
    are in _conv3x3_shifted; the transformed output of a piece stays within band_bytes.
    """
    B, C, H, W = image.shape
    co = w.shape[0]
    tx = (W + 1) // 2
    Wp = 2 * tx + 2
    whole = block == C or _winograd_fills_whole_band(C, ty, W, band_bytes)
    padded = np.empty((C if whole else block, 2 * ty + 2, Wp), dtype=np.float32)
    padded[:, :, 0] = 0.0
    padded[:, :, W + 1:] = 0.0
    v_flat = np.empty(16 * block * ty * tx, dtype=np.float32)
    piece = max(1, min(co, max(band_bytes, TAPS_PIECE_BYTES) // (64 * C), band_bytes // (64 * ty * tx)))
    m_flat = np.empty(16 * piece * ty * tx, dtype=np.float32)
    y_flat = np.empty(piece * 4 * ty * tx, dtype=np.float32)
    u_flat = np.empty(16 * piece * C, dtype=np.float32)
    bands = [(bi, y0) for bi in range(B) for y0 in range(0, H, 2 * ty)]

    def transform_weights(wc: np.ndarray, p0: int, p1: int) -> np.ndarray:
        u = u_flat[:16 * (p1 - p0) * C].reshape(16, p1 - p0, C)
        wp = wc[p0:p1]
        in_parallel(lambda r0, r1: kernels.wino_weights(wp, u, r0, r1), 0, p1 - p0, u.size, threads)
        return u

    def transform_input(p: np.ndarray, tyn: int) -> np.ndarray:
        """The transformed input of p, a band's filled padded rows of some channels."""
        v = v_flat[:16 * len(p) * tyn * tx].reshape(16, len(p), tyn, tx)
        in_parallel(lambda q0, q1: kernels.wino_input(p, v, q0, q1), 0, len(p), v.size, threads)
        return v

    def fill_band(bi: int, y0: int) -> np.ndarray | None:
        """Fill `padded` for a band if it holds all channels; the whole transformed input
        where that fits."""
        if not whole:
            return None
        _fill_rows(image, bi, y0 - 1, padded, 1, threads)
        return transform_input(padded, (min(2 * ty, H - y0) + 1) // 2) if block == C else None

    def finish(u: np.ndarray, v: np.ndarray | None, bi: int, y0: int, p0: int) -> None:
        pp, n = u.shape[1], min(2 * ty, H - y0)
        tyn = (n + 1) // 2
        m = m_flat[:16 * pp * tyn * tx].reshape(16, pp, tyn * tx)
        if v is not None and not blas.HAS_GEMM:
            np.matmul(u, v.reshape(16, C, tyn * tx), out=m)
        elif v is not None:
            _wino_products(u, v.reshape(16, C, tyn * tx), m, 0.0, threads)
        else:
            for c0 in range(0, C, block):
                c1 = min(C, c0 + block)
                if whole:
                    p = padded[c0:c1]
                else:
                    p = padded[:c1 - c0]
                    _fill_rows(image, bi, y0 - 1, p, 1, threads, c0)
                vb = transform_input(p, tyn).reshape(16, c1 - c0, tyn * tx)
                _wino_products(u[:, :, c0:c1], vb, m, 0.0 if c0 == 0 else 1.0, threads)
        y = y_flat[:pp * 4 * tyn * tx].reshape(pp, 2 * tyn, 2 * tx)
        m4 = m.reshape(16, pp, tyn, tx)
        in_parallel(lambda q0, q1: kernels.wino_output(m4, y, q0, q1), 0, pp, y.size, threads)
        _store(y[:, :n, :W], out[bi, p0:p0 + pp, y0:y0 + n], None if b is None else b[p0:p0 + pp], accumulate)

    for c0, c1, wc in row_chunks(w):
        wc = np.ascontiguousarray(wc)
        step = equal_step(c1 - c0, piece)
        pieces = [(p0, min(c1, p0 + step)) for p0 in range(c0, c1, step)]
        # One of the two transforms is repeated: the weights' for every band, or the
        # input's (with its normalisation, upsampling...) for every piece. Repeat the
        # smaller total. (In channel blocks the input's transform, though not its
        # filling, is repeated for every piece either way; where even the filling is,
        # as each block is filled on its own, the weights are transformed just once.)
        if whole and (len(bands) - 1) * (c1 - c0) <= (len(pieces) - 1) * B * ((H + 1) // 2) * tx:
            for bi, y0 in bands:
                v = fill_band(bi, y0)
                for p0, p1 in pieces:
                    finish(transform_weights(wc, p0 - c0, p1 - c0), v, bi, y0, p0)
        else:
            for p0, p1 in pieces:
                u = transform_weights(wc, p0 - c0, p1 - c0)
                for bi, y0 in bands:
                    finish(u, fill_band(bi, y0), bi, y0, p0)


def _wino_products(u: np.ndarray, v: np.ndarray, m: np.ndarray, beta: float, threads: int) -> None:
    """m[t] = u[t] @ v[t] + beta * m[t] for the 16 Winograd points, the points shared out
    among the cores, each GEMM on one: a band's GEMMs are too small for BLAS to split
    one well (bench/RESULTS.md#convolutions)."""
    def points(t0: int, t1: int) -> None:
        for t in range(t0, t1):
            blas.gemm(u[t], v[t], m[t], beta)
    with blas.single_threaded():
        in_parallel(points, 0, 16, m.size * u.shape[2], threads)


def _fill_rows(image: BandedImage, bi: int, lo: int, padded: np.ndarray, col: int, threads: int, c0: int = 0) -> None:
    """padded (channels, rows, Wp) = input rows lo .. lo+rows of batch item bi, channels
    c0 .. c0+channels, at columns col .. col+W, rows outside the image zeroed (the
    padding columns are the caller's)."""
    H, W = image.shape[2], image.shape[3]
    a, z = max(lo, 0), min(lo + padded.shape[1], H)
    padded[:, :a - lo] = 0.0
    padded[:, z - lo:] = 0.0

    def fill(r0: int, r1: int) -> None:
        image.fill(bi, r0, r1, padded[:, r0 - lo:r1 - lo, col:col + W], c0)
    in_parallel(fill, a, z, len(padded) * (z - a) * W, threads)


def _store(valid: np.ndarray, dst: np.ndarray, bias: np.ndarray | None, accumulate: bool) -> None:
    """dst = valid + bias, or dst += valid + bias when accumulating (a residual add)."""
    if accumulate:
        dst += valid
        if bias is not None:
            dst += bias[:, None, None]
    elif bias is not None:
        np.add(valid, bias[:, None, None], out=dst)
    else:
        dst[...] = valid


class Patches:
    """The im2col matrix of a band of output rows, (C*k*k, rows*Wo), in reused buffers.

    Building it is plain copying (plus the banded image's GroupNorm/SiLU/upsampling) that
    one core would do while the other waits for the GEMM: it is split over threads.
    """

    def __init__(self, image: BandedImage, k: int, stride: int, band: int, wo: int, threads: int = 0):
        self.image, self.k, self.stride, self.wo = image, k, stride, wo
        self.threads = threads
        C, W = image.shape[1], image.shape[3]
        if k > 1 or stride > 1:
            self.padded = np.zeros((C, (band - 1) * stride + k, W + 2 * (k // 2)), dtype=np.float32)
            self.buf = np.empty((C, k, k, band, wo), dtype=np.float32)
        elif not isinstance(image, Dense):
            self.buf = np.empty(C * band * W, dtype=np.float32)   # the band's (C, rows, W)

    def build(self, bi: int, y0: int, y1: int) -> np.ndarray:
        image, k, s, wo = self.image, self.k, self.stride, self.wo
        C, W = image.shape[1], image.shape[3]
        n = y1 - y0
        if k == 1 and s == 1:
            if isinstance(image, Dense):
                return np.ascontiguousarray(image.rows(bi, y0, y1)).reshape(C, n * W)
            out = self.buf[:C * n * W].reshape(C, n, W)
            _fill_rows(image, bi, y0, out, 0, self.threads)
            return out.reshape(C, n * W)
        pad = k // 2
        p = self.padded
        _fill_rows(image, bi, y0 * s - pad, p[:, :(n - 1) * s + k], pad, self.threads)   # from the first row needed
        buf = self.buf[:, :, :, :n] if n == self.buf.shape[3] else np.empty((C, k, k, n, wo), dtype=np.float32)

        def shifted_copies(c0: int, c1: int) -> None:
            for ky in range(k):
                for kx in range(k):
                    buf[c0:c1, ky, kx] = p[c0:c1, ky:ky + (n - 1) * s + 1:s, kx:kx + (wo - 1) * s + 1:s]
        in_parallel(shifted_copies, 0, C, buf.size, self.threads)
        return buf.reshape(C * k * k, n * wo)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5,
               threads: int = 0) -> np.ndarray:
    """LayerNorm over the last axis (rows split over threads)."""
    c = x.shape[-1]
    rows = np.ascontiguousarray(x.reshape(-1, c))
    gamma, beta = np.ascontiguousarray(gamma, np.float32), np.ascontiguousarray(beta, np.float32)
    out = np.empty(rows.shape, dtype=np.float32)
    in_parallel(lambda r0, r1: kernels.layer_norm(rows[r0:r1], gamma, beta, eps, out[r0:r1]),
                0, rows.shape[0], rows.size, threads)
    return out.reshape(x.shape)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) as a new array."""
    return silu_(x.astype(np.float32, copy=True))


def geglu(p: np.ndarray, bias: np.ndarray | None = None, threads: int = 0,
          out: np.ndarray | None = None) -> np.ndarray:
    """diffusers GEGLU: p + bias = [value, gate] on the last axis -> value * gelu(gate),
    into `out` (C-contiguous (N, half)) if given. The projection's bias is added here
    rather than to p (one pass over p less)."""
    lead = p.shape[:-1]
    p2 = np.ascontiguousarray(p.reshape(-1, p.shape[-1]))
    if out is None:
        out = np.empty((p2.shape[0], p2.shape[1] // 2), dtype=np.float32)
    in_parallel(lambda r0, r1: kernels.geglu(p2[r0:r1], out[r0:r1], bias), 0, p2.shape[0], out.size, threads)
    return out.reshape(*lead, -1)


def gelu(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return kernels.gelu_erf(x, np.empty_like(x))


# A band of query rows is never cut below this many bytes of scores: the slice count is
# sized for the longest sequence (4096 tokens), and the same count on 1024 tokens or a
# 77-token prompt gives GEMMs too thin to run well. 4 MB makes a 1024-token head one band
# (a 4096-token head is 1024 rows at 4 slices, the fastest cut for it too). Chosen by
# measurement: bench/RESULTS.md#attention
MIN_SCORE_BYTES = 4 << 20


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, slices: int, threads: int = 1) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v for each head, one head at a time.

    q (L, C), k and v (Lk, C), C = heads * d. The scale is folded into q (which is
    modified). Heads are shared among `threads` workers. Where the fused C kernel takes
    heads of d channels (kernels.fused_attention) it works through a head 64 query rows
    at a time; otherwise the L rows are cut into `slices` bands, or fewer where a band
    would hold under MIN_SCORE_BYTES of scores, with two GEMMs per band and BLAS
    single-threaded meanwhile, since many small GEMMs scale better across heads than
    inside one call.
    """
    L, C = q.shape
    d = C // heads
    q *= np.float32(1.0 / math.sqrt(d))
    out = np.empty((L, C), dtype=np.float32)
    threads = max(1, min(threads, heads))
    if kernels.fused_attention(d):
        q, k, v = (a if a.strides[1] == 4 else np.ascontiguousarray(a) for a in (q, k, v))
        run, args = _fused_attention_heads, (q, k, v, out, d)
    else:
        band = min(L, max(math.ceil(L / slices), math.ceil(MIN_SCORE_BYTES / (4 * max(1, k.shape[0])))))
        run, args = _attention_heads, (q, k, v, out, d, band)
        if not blas.AVAILABLE:
            threads = 1
    if threads == 1:
        run(*args, range(heads))
        return out
    with blas.single_threaded():
        futures = [worker_pool(threads).submit(run, *args, range(i, heads, threads)) for i in range(threads)]
        for future in futures:
            future.result()
    return out


def _fused_attention_heads(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, d: int,
                           heads: range) -> None:
    work = np.empty(kernels.attention_work(k.shape[0], d), dtype=np.float32)
    for h in heads:
        cols = slice(h * d, (h + 1) * d)
        if not kernels.c_attention_head(q[:, cols], k[:, cols], v[:, cols], out[:, cols], work):
            raise RuntimeError(f"the fused attention kernel refused a head of {d} channels")


def _attention_heads(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, d: int, band: int,
                     heads: range) -> None:
    L = q.shape[0]
    scores = np.empty((band, k.shape[0]), dtype=np.float32)
    sums = np.empty(band, dtype=np.float32)
    for h in heads:
        cols = slice(h * d, (h + 1) * d)
        kt = k[:, cols].T
        vh = v[:, cols]
        for r0 in range(0, L, band):
            r1 = min(L, r0 + band)
            s = scores[:r1 - r0]
            np.matmul(q[r0:r1, cols], kt, out=s)
            kernels.softmax_rows(s, sums[:r1 - r0])   # exp(s - row max) in place
            o = out[r0:r1, cols]
            np.matmul(s, vh, out=o)
            o /= sums[:r1 - r0, None]


def timestep_embedding(t: np.ndarray, dim: int, flip_sin_to_cos: bool = True, shift: float = 0.0,
                       max_period: float = 10000.0) -> np.ndarray:
    """Sinusoidal embedding of t (N,) -> (N, dim), as diffusers' get_timestep_embedding."""
    half = dim // 2
    exponent = (-math.log(max_period) * np.arange(half, dtype=np.float32)).astype(np.float32) / np.float32(half - shift)
    freqs = np.exp(exponent.astype(np.float64)).astype(np.float32)  # correctly rounded, as torch's
    arg = t.astype(np.float32)[:, None] * freqs[None, :]
    sin, cos = np.sin(arg), np.cos(arg)
    emb = np.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)
    if dim % 2:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb.astype(np.float32)
