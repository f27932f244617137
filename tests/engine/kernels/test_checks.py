"""engine.kernels.checks: the C kernels and their numpy twins refuse the same bad arguments."""

import numpy as np
import pytest

from kernel_testing import needs_c, version


def _calls(n=8):
    f32, u16, u8 = np.zeros(n, np.float32), np.zeros(n, np.uint16), np.zeros(n, np.uint8)
    return {
        "f16_to_f32": lambda fn, out=None, src=None: fn(u16 if src is None else src, np.zeros(n, np.float32) if out is None else out),
        "bf16_to_f32": lambda fn, out=None, src=None: fn(u16 if src is None else src, np.zeros(n, np.float32) if out is None else out),
        "f32_to_f16": lambda fn, out=None, src=None: fn(f32 if src is None else src, np.zeros(n, np.uint16) if out is None else out),
        "dequant_u8": lambda fn, out=None, src=None: fn(u8 if src is None else src, 1.0, 0.0, np.zeros(n, np.float32) if out is None else out),
        "quant_u8": lambda fn, out=None, src=None: fn(f32 if src is None else src, 1.0, 0.0, np.zeros(n, np.uint8) if out is None else out),
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
    src_dtype = {"f16_to_f32": np.uint16, "bf16_to_f32": np.uint16, "dequant_u8": np.uint8}.get(name, np.float32)
    src = buf[: 8 * np.dtype(src_dtype).itemsize].view(src_dtype)
    out = buf[4 : 4 + 8 * np.dtype(out_dtype).itemsize].view(out_dtype)
    with pytest.raises(ValueError, match="overlap"):
        call(fn, src=src, out=out)


@pytest.mark.parametrize("prefix", ["np_", pytest.param("c_", marks=needs_c)])
def test_bad_arguments_rows_and_geglu(prefix):
    rows, geglu = version(prefix, "dequant_u8_rows"), version(prefix, "geglu")
    q, s, z = np.zeros((4, 6), np.uint8), np.ones(4, np.float32), np.zeros(4, np.float32)
    rows(q, s, z, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="2 dims"):
        rows(q.ravel(), s, z, np.zeros(24, np.float32))
    with pytest.raises(ValueError, match="scale"):
        rows(q, s[:3], z, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        rows(q, s.astype(np.float64), z, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="size"):
        rows(q, s, z, np.zeros((4, 5), np.float32))
    p = np.zeros((3, 10), np.float32)
    geglu(p, np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="shape"):
        geglu(p, np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match="even"):
        geglu(np.zeros((3, 9), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="overlap"):
        geglu(p, p.reshape(-1)[:15].reshape(3, 5))
