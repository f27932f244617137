"""What the numpy twins share: blocks that keep their temporaries in L2 instead of
allocating several full-size arrays, and sums in the C kernels' lane order."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

BLOCK = 1 << 15   # elements per block
LANES = 8         # SF_LANES of engine/kernels/norms.c


def flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1)  # a view: a is C-contiguous


def blocks(n: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of each BLOCK of range(n)."""
    for i in range(0, n, BLOCK):
        yield i, min(i + BLOCK, n)


def lanes_sum(values: np.ndarray, cols: int, width: int = LANES) -> np.ndarray:
    """Row sums of `values` (rows, cols), in their dtype, in the C kernels' lane order:
    `width` interleaved partial sums (the tail adds into the first lanes), then adjacent
    pairs added level by level."""
    body = cols // width * width
    lanes = np.zeros((values.shape[0], width), dtype=values.dtype)
    # numpy adds along a non-last axis one block after another, like the C loop
    np.add.reduce(values[:, :body].reshape(values.shape[0], -1, width), axis=1, out=lanes)
    lanes[:, :cols - body] += values[:, body:]
    while lanes.shape[1] > 1:
        lanes = lanes[:, 0::2] + lanes[:, 1::2]
    return lanes[:, 0]
