"""FLOP counts of the engine's ops from the shapes each op ran on: what the op trace reports.

Each op gets two counts, because the two run at very different speeds on a small CPU:

- GEMM FLOPs: the multiply-adds of matrix products (linear layers, convolutions,
  attention's q k^T and scores x v), two FLOPs per multiply-add;
- other FLOPs: everything elementwise (norms, softmax, activations, bias adds), one
  FLOP per arithmetic operation or transcendental function per element, with the
  per-element costs below.

The counts are those of the op as defined, not of the algorithm that ran it: a 3x3
convolution counts as the direct convolution even where engine.ops runs it by Winograd
(2.25x fewer multiplies), so that a count means the same for any engine running the
same model (bench/pi_projection.py projects OnnxStream's runs, whose XNNPACK computes
convolutions as GEMMs, with the same figures as ours). Work the model code does between
ops (residual adds, transposes) is not an op and is not counted.
"""

from __future__ import annotations

from typing import NamedTuple

# Elementwise costs per element, counted as the engine's kernels compute them.
GROUP_NORM = 5      # statistics: x, x*x, two sums (3); then x * scale + shift (2)
LAYER_NORM = 7      # mean and variance (3); (x - mean) * rstd * gamma + beta (4)
SILU = 4            # x / (1 + exp(-x)): negate, exp, add, divide
GEGLU = 8           # per hidden unit: two bias adds, gelu(gate) = 0.5 * g * (1 + erf(g / sqrt 2)) (5), value * it
SOFTMAX = 4         # per score: row max, subtract, exp, row sum


class Flops(NamedTuple):
    """FLOPs of one op: GEMM-like and the rest."""

    gemm: int = 0
    other: int = 0


def linear(rows: int, inputs: int, outputs: int, bias: bool) -> Flops:
    """x (rows, inputs) @ w.T (+ b) -> (rows, outputs)."""
    return Flops(2 * rows * inputs * outputs, rows * outputs if bias else 0)


def conv(batch: int, in_channels: int, out_channels: int, kernel: int, out_h: int, out_w: int, bias: bool,
         accumulate: bool) -> Flops:
    """A k x k convolution producing (batch, out_channels, out_h, out_w); `accumulate`: added
    into an existing tensor (a residual)."""
    outputs = batch * out_channels * out_h * out_w
    return Flops(2 * outputs * in_channels * kernel * kernel, outputs * (int(bias) + int(accumulate)))


def group_norm(elements: int, silu: bool) -> Flops:
    return Flops(0, elements * (GROUP_NORM + (SILU if silu else 0)))


def layer_norm(elements: int) -> Flops:
    return Flops(0, elements * LAYER_NORM)


def feed_forward(rows: int, channels: int, hidden: int) -> Flops:
    """GEGLU feed-forward: (rows, channels) -> 2 * hidden -> value * gelu(gate) -> channels, with biases."""
    return Flops(2 * rows * channels * 2 * hidden + 2 * rows * hidden * channels,
                 rows * hidden * GEGLU + rows * channels)


def attention(batch: int, queries: int, keys: int, channels: int, heads: int) -> Flops:
    """softmax(q k^T / sqrt(d)) v over `heads` heads of channels / heads: two GEMMs per head;
    scaling q, the softmax of every score and dividing the output by the row sums."""
    gemm = 2 * 2 * queries * keys * channels
    other = 2 * queries * channels + heads * queries * keys * SOFTMAX
    return Flops(batch * gemm, batch * other)
