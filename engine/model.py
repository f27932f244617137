"""The base of every streamed model: ops that fetch their weights as they run.

A model's forward pass is plain code calling `self.conv(name, ...)`,
`self.linear(name, ...)` and friends with the model files' module names. Each call
asks the WeightsProvider for that module's tensors, computes, prints a trace line
when `ops_printf` is on, and lets the weights go.

`plan()` runs the same forward code in planning mode: no weights are read and ops
return zeros of the right shape, but every request is recorded, which gives the
exact order the prefetch thread must read in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from engine import blas, flops, kernels, memory, ops
from engine.errors import Cancelled
from engine.options import Options
from engine.parallel import cores, equal_step
from engine.bands import Normalized, BandedImage
from engine.trace import OpTrace
from engine.weights import Group, TensorStore, WeightRows, make_provider

log = logging.getLogger(__name__)
_fallback_reported = False


def _report_numpy_fallback() -> None:
    """Warn once per process when the hot loops run in numpy by accident."""
    global _fallback_reported
    message = kernels.fallback_warning()
    if message and not _fallback_reported:
        log.warning(message)
        _fallback_reported = True


class StreamedModel:
    def __init__(self, store: TensorStore, options: Options):
        self.store = store
        self.options = options
        self.threads = options.threads or cores()
        """CPU threads this model computes on: BLAS, the C kernels' splits, attention heads."""
        self.provider = make_provider(store, options.weights, options.prefetch_bytes, options.weight_chunk_bytes,
                                      self.threads, options.readahead_bytes)
        self.trace = OpTrace(options.ops_printf)
        _report_numpy_fallback()
        if options.keep_freed_memory:
            memory.keep_freed_memory()
        elif options.mmap_threshold:
            memory.return_freed_arrays(options.mmap_threshold)
        self._recording: list[Group] | None = None
        self._retaining = False
        self.cancel: threading.Event | None = None
        """When set, the next op raises Cancelled: a long evaluation stops within one op."""

    def close(self) -> None:
        """Stop the prefetch thread and close the weight files."""
        self.provider.close()

    def __enter__(self) -> "StreamedModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def planning(self) -> bool:
        return self._recording is not None

    def record_plan(self, forward: Callable[[], object]) -> list[Group]:
        """The weight requests `forward` makes, in order, without reading or computing them."""
        self._recording = []
        try:
            forward()
            return self._recording
        finally:
            self._recording = None

    def run_planned(self, plan: list[Group], forward: Callable[[], np.ndarray]) -> np.ndarray:
        self.provider.begin(plan)
        try:
            with blas.threads(self.threads):
                return forward()
        finally:
            self.provider.end()
            self.retain_freed_memory(False)
            self.trace.summary()

    def retain_freed_memory(self, retain: bool) -> None:
        """Keep options.retain_freed_bytes of freed heap for reuse (True), or return it (False)."""
        if self.options.keep_freed_memory or not self.options.retain_freed_bytes or retain == self._retaining:
            return
        self._retaining = retain
        memory.retain_freed(self.options.retain_freed_bytes if retain else 0)

    # -- weights ---------------------------------------------------------------

    def fetch(self, names: Group) -> list[np.ndarray]:
        if self._recording is not None:
            self._recording.append(names)
            return []
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("stopped on request")
        return self.provider.get(names)

    def _param_names(self, name: str) -> Group:
        bias = name + ".bias"
        return (name + ".weight", bias) if bias in self.store else (name + ".weight",)

    def _weight_bytes(self, names: Group) -> int:
        return sum(self.store.stored_bytes(n) for n in names)

    # -- ops -------------------------------------------------------------------

    def linear(self, name: str, x: np.ndarray) -> np.ndarray:
        names = self._param_names(name)
        started = self.trace.begin()
        params = self.fetch(names)
        if self.planning:
            return np.zeros(x.shape[:-1] + (self.store.shape(names[0])[0],), dtype=np.float32)
        lead = x.shape[:-1]
        rows = x.reshape(-1, x.shape[-1])
        y = ops.linear(rows, *params).reshape(*lead, -1)
        self.trace.end("linear", name, self._weight_bytes(names), started,
                       flops.linear(rows.shape[0], rows.shape[1], y.shape[-1], len(params) == 2))
        return y

    def conv(self, name: str, image: BandedImage, stride: int = 1, out: np.ndarray | None = None) -> np.ndarray:
        """Convolution of a banded image; with `out`, the result is added to it."""
        names = self._param_names(name)
        started = self.trace.begin()
        params = self.fetch(names)
        if self.planning:
            B, _, H, W = image.shape
            co = self.store.shape(names[0])[0]
            return out if out is not None else np.zeros((B, co, (H - 1) // stride + 1, (W - 1) // stride + 1),
                                                        dtype=np.float32)
        w, b = params if len(params) == 2 else (params[0], None)
        accumulate = out is not None
        y = ops.conv2d(image, w, b, stride, self.options.band_bytes, out, self.threads)
        B, co, Ho, Wo = y.shape
        self.trace.end("conv", name, self._weight_bytes(names), started,
                       flops.conv(B, image.shape[1], co, w.shape[2], Ho, Wo, b is not None, accumulate))
        return y

    def group_norm(self, name: str, image: BandedImage, groups: int, eps: float, silu: bool = False) -> BandedImage:
        """GroupNorm (+SiLU) as a banded image: statistics now, normalised values when read."""
        names = self._param_names(name)
        started = self.trace.begin()
        params = self.fetch(names)
        if self.planning:
            return image
        y = Normalized(image, params[0], params[1], groups, eps, silu, self.threads)
        self.trace.end("groupnorm", name, self._weight_bytes(names), started,
                       flops.group_norm(int(np.prod(image.shape)), silu))
        return y

    def layer_norm(self, name: str, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
        names = self._param_names(name)
        started = self.trace.begin()
        params = self.fetch(names)
        if self.planning:
            return np.zeros_like(x)
        y = ops.layer_norm(x, params[0], params[1], eps, self.threads)
        self.trace.end("layernorm", name, self._weight_bytes(names), started, flops.layer_norm(x.size))
        return y

    def feed_forward(self, name: str, x: np.ndarray) -> np.ndarray:
        """GEGLU feed-forward (net.0.proj -> value * gelu(gate) -> net.2). With whole weights
        it works in bands of tokens or of hidden units so the 8x-wide projection never
        exists whole; with banded weights (WeightRows) in bands of the projection's rows."""
        names = self._param_names(name + ".net.0.proj") + self._param_names(name + ".net.2")
        started = self.trace.begin()
        params = self.fetch(names)
        if self.planning:
            return np.zeros_like(x)
        w1, b1, w2, b2 = params
        lead, c = x.shape[:-1], x.shape[-1]
        rows = x.reshape(-1, c)
        if isinstance(w1, np.ndarray):
            # Each band streams either both weights (bands of tokens) or the tokens' input
            # and output (bands of hidden units) through the cache; the band count is the
            # same either way, so the smaller of the two is streamed.
            if w1.size + w2.size > 3 * rows.size:
                out = self._ff_in_hidden_bands(rows, w1, b1, w2)
            else:
                out = self._ff_in_token_bands(rows, w1, b1, w2)
            out += b2
        else:
            out = ops.linear(self._geglu_in_bands(rows, w1, b1), w2, b2)
        self.trace.end("ff", name, self._weight_bytes(names), started,
                       flops.feed_forward(rows.shape[0], c, w1.shape[0] // 2))
        return out.reshape(*lead, c)

    def _ff_in_token_bands(self, x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray) -> np.ndarray:
        """geglu(x @ w1.T + b1) @ w2.T, a band of tokens at a time."""
        out = np.empty((x.shape[0], w2.shape[0]), dtype=np.float32)
        band = equal_step(x.shape[0], self.options.band_bytes // (4 * w1.shape[0]))
        projected = np.empty((band, w1.shape[0]), dtype=np.float32)        # reused by every band
        hidden = np.empty((band, w1.shape[0] // 2), dtype=np.float32)
        for r0 in range(0, x.shape[0], band):
            n = min(band, x.shape[0] - r0)
            np.matmul(x[r0:r0 + n], w1.T, out=projected[:n])
            ops.geglu(projected[:n], b1, self.threads, hidden[:n])
            np.matmul(hidden[:n], w2.T, out=out[r0:r0 + n])
        return out

    def _ff_in_hidden_bands(self, x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray) -> np.ndarray:
        """geglu(x @ w1.T + b1) @ w2.T for all tokens, a band of hidden units at a time:
        each band's value and gate projection (tokens, 2 * band) stays within band_bytes
        and its contribution is added up (faster than bands of tokens where the weights
        outweigh the tokens: bench/RESULTS.md#feed-forward)."""
        inner = w1.shape[0] // 2
        step = equal_step(inner, self.options.band_bytes // (8 * x.shape[0]))
        out = np.empty((x.shape[0], w2.shape[0]), dtype=np.float32)
        scratch = GegluScratch(x.shape[0], step, self.threads)
        part = np.empty_like(out) if step < inner else out
        for j0 in range(0, inner, step):
            j1 = min(inner, j0 + step)
            hidden = _geglu_band(x, w1[j0:j1], w1[inner + j0:inner + j1], b1, inner, j0, j1, scratch)
            np.matmul(hidden, w2[:, j0:j1].T, out=out if j0 == 0 else part)
            if j0:
                out += part
        return out

    def _geglu_in_bands(self, x: np.ndarray, w1: WeightRows, b1: np.ndarray) -> np.ndarray:
        """value * gelu(gate) for all tokens, reading the projection's value and gate rows
        in matching bands so its fp32 weight is never whole."""
        inner = w1.shape[0] // 2
        step = equal_step(inner, w1.rows_per_chunk // 2)
        hidden = np.empty((x.shape[0], inner), dtype=np.float32)
        value, gate = w1.buffer(step), w1.buffer(step)
        scratch = GegluScratch(x.shape[0], step, self.threads)
        for j0 in range(0, inner, step):
            j1 = min(inner, j0 + step)
            hidden[:, j0:j1] = _geglu_band(x, w1.rows(j0, j1, value[:j1 - j0]),
                                           w1.rows(inner + j0, inner + j1, gate[:j1 - j0]), b1, inner, j0, j1, scratch)
        return hidden

    def attention(self, name: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int) -> np.ndarray:
        """Multi-head attention over (B, L, C) q and (B, Lk, C) k, v; no weights of its own."""
        if self.planning:
            return np.zeros_like(q)
        started = self.trace.begin()
        slices = self.options.attention_slices
        if q.shape[0] == 1:   # no (B, L, C) copy of the result beside the result itself
            out = ops.attention(q[0], k[0], v[0], heads, slices, self.threads)[None]
        else:
            out = np.empty_like(q)
            for b in range(q.shape[0]):
                out[b] = ops.attention(q[b], k[b], v[b], heads, slices, self.threads)
        self.trace.end("attention", name, 0, started, flops.attention(q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                                                                      heads))
        return out


class GegluScratch:
    """The buffers of one band of _geglu_band, reused band after band, and the threads it runs on."""

    def __init__(self, tokens: int, units: int, threads: int):
        self.projected = np.empty(tokens * 2 * units, dtype=np.float32)
        self.hidden = np.empty(tokens * units, dtype=np.float32)
        self.threads = threads


def _geglu_band(x: np.ndarray, value_rows: np.ndarray, gate_rows: np.ndarray, b1: np.ndarray, inner: int,
                j0: int, j1: int, scratch: GegluScratch) -> np.ndarray:
    """value * gelu(gate) for hidden units j0:j1 of a GEGLU projection (value rows first,
    then gate rows, `inner` of each), given those units' rows of its weight; the result
    lives in scratch until the next band."""
    n, units = x.shape[0], j1 - j0
    p = scratch.projected[:n * 2 * units].reshape(n, 2 * units)
    np.matmul(x, value_rows.T, out=p[:, :units])
    np.matmul(x, gate_rows.T, out=p[:, units:])
    hidden = scratch.hidden[:n * units].reshape(n, units)
    return ops.geglu(p, np.concatenate([b1[j0:j1], b1[inner + j0:inner + j1]]), scratch.threads, hidden)
