"""engine.kernels.checks: the C kernels and their numpy twins refuse the same bad arguments."""

import numpy as np
import pytest

from kernel_testing import needs_c, version


def _calls(n=8):
    f32, u16 = np.zeros(n, np.float32), np.zeros(n, np.uint16)
    return {
        "f16_to_f32": lambda fn, out=None, src=None: fn(u16 if src is None else src, np.zeros(n, np.float32) if out is None else out),
        "bf16_to_f32": lambda fn, out=None, src=None: fn(u16 if src is None else src, np.zeros(n, np.float32) if out is None else out),
        "f32_to_f16": lambda fn, out=None, src=None: fn(f32 if src is None else src, np.zeros(n, np.uint16) if out is None else out),
        "gelu_erf": lambda fn, out=None, src=None: fn(f32 if src is None else src, np.zeros(n, np.float32) if out is None else out),
    }


UNARY = list(_calls())


@pytest.mark.parametrize("prefix", ["np_", pytest.param("c_", marks=needs_c)])
@pytest.mark.parametrize("name", UNARY)
def test_bad_arguments(prefix, name):
    fn, call = version(prefix, name), _calls()[name]
    call(fn)  # the defaults are fine
    out_dtype = call(fn).dtype
    with pytest.raises(ValueError, match="dtype"):
        call(fn, out=np.zeros(8, np.float64))
    with pytest.raises(ValueError, match="dtype"):
        call(fn, src=np.zeros(8, np.int32))
    with pytest.raises(ValueError, match="size"):
        call(fn, out=np.zeros(7, out_dtype))
    with pytest.raises(ValueError, match="contiguous"):
        call(fn, out=np.zeros(16, out_dtype)[::2])
    with pytest.raises(ValueError, match="numpy array"):
        call(fn, out=[0.0] * 8)
    ro = np.zeros(8, out_dtype)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        call(fn, out=ro)
    buf = np.zeros(64, np.uint8)  # out overlapping the input
    src_dtype = {"f16_to_f32": np.uint16, "bf16_to_f32": np.uint16}.get(name, np.float32)
    src = buf[: 8 * np.dtype(src_dtype).itemsize].view(src_dtype)
    out = buf[4 : 4 + 8 * np.dtype(out_dtype).itemsize].view(out_dtype)
    with pytest.raises(ValueError, match="overlap"):
        call(fn, src=src, out=out)


@pytest.mark.parametrize("prefix", ["np_", pytest.param("c_", marks=needs_c)])
def test_bad_arguments_rows_and_geglu(prefix):
    s, z = np.ones(4, np.float32), np.zeros(4, np.float32)
    for name, src_dtype, out_dtype in (("dequant_u8_rows", np.uint8, np.float32), ("quant_u8_rows", np.float32, np.uint8)):
        rows, src = version(prefix, name), np.zeros((4, 6), src_dtype)
        rows(src, s, z, np.zeros((4, 6), out_dtype))
        with pytest.raises(ValueError, match="2 dims"):
            rows(src.ravel(), s, z, np.zeros(24, out_dtype))
        with pytest.raises(ValueError, match="scale"):
            rows(src, s[:3], z, np.zeros((4, 6), out_dtype))
        with pytest.raises(ValueError, match="dtype"):
            rows(src, s.astype(np.float64), z, np.zeros((4, 6), out_dtype))
        with pytest.raises(ValueError, match="dtype"):
            rows(src, s, z, np.zeros((4, 6), src_dtype))
        with pytest.raises(ValueError, match="size"):
            rows(src, s, z, np.zeros((4, 5), out_dtype))
    geglu = version(prefix, "geglu")
    p = np.zeros((3, 10), np.float32)
    geglu(p, np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="shape"):
        geglu(p, np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match="even"):
        geglu(np.zeros((3, 9), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="overlap"):
        geglu(p, p.reshape(-1)[:15].reshape(3, 5))
