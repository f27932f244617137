"""What the kernel tests share: each kernel's two versions, bit comparisons, random inputs."""

import numpy as np
import pytest

from engine.kernels import activations, backend, conversions, norms, winograd

C_BUILT = backend.lib is not None
NOT_BUILT = ("engine.kernels._ckernels is not built (no C compiler at install time): only the numpy fallbacks are "
             "tested")
needs_c = pytest.mark.skipif(not C_BUILT, reason=NOT_BUILT)

# each elementwise kernel's family module
FAMILY = {name: module for module, names in (
    (conversions, ("f16_to_f32", "bf16_to_f32", "f32_to_f16", "dequant_u8_rows", "quant_u8_rows", "taps_first")),
    (activations, ("gelu_erf", "geglu", "softmax_rows")),
    (norms, ("layer_norm", "row_moments")),
    (winograd, ("wino_weights", "wino_input", "wino_output")),
) for name in names}
NAMES = list(FAMILY)


def version(prefix, name):
    """A kernel's numpy twin (prefix "np_") or C version ("c_") from its family module."""
    return getattr(FAMILY[name], prefix + name)


def impls(name):
    """Parametrize over the numpy fallback and the C kernel (skipped when not built)."""
    return pytest.mark.parametrize(
        "fn",
        [
            pytest.param(version("np_", name), id="numpy"),
            pytest.param(version("c_", name), id="c", marks=needs_c),
        ],
    )


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def assert_same_bits(a, b):
    ba, bb = bits(a).ravel(), bits(b).ravel()
    bad = np.flatnonzero(ba != bb)
    assert bad.size == 0, f"{bad.size} differ, first at {bad[0]}: {ba[bad[0]]:#x} != {bb[bad[0]]:#x}"


def assert_same_f32(a, b, nan_sign=True):
    """Equal bits, except that any NaN matches any NaN (of the same sign if nan_sign)."""
    a, b = a.ravel(), b.ravel()
    na, nb = np.isnan(a), np.isnan(b)
    assert np.array_equal(na, nb)
    if nan_sign:
        assert np.array_equal(np.signbit(a[na]), np.signbit(b[nb]))
    assert_same_bits(a[~na], b[~nb])


def rng(seed=0):
    return np.random.default_rng(seed)


def random_f32(n, seed=0):
    """Random bit patterns: every exponent, NaNs, infs, subnormals."""
    return rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


SIZES = [0, 1, 3, 15, 16, 17, 1000, (1 << 15) + 5]  # vector tails, the fallback's block edge
