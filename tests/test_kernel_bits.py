"""The C kernels give the bits recorded before the restructuring (tests/data/kernel_bits.json).

Fixed seeded inputs through every C kernel (the engine's and the dithering one); each output's
sha256 must equal the record made on the code before the kernels moved into .c files. The
elementwise kernels and the dithering loop give their numpy twins' bits on every machine (x86-64 and,
in .ci/arm64, aarch64); the fused attention's bits depend on the build target (the aarch64 build fuses
its multiply-adds into FMAs, x86-64's generic SSE2 one cannot), so they are recorded per machine
("@x86_64", "@aarch64") and only the builds recorded for this machine are compared.
"""

import hashlib
import json
import platform
from pathlib import Path

import numpy as np
import pytest

from engine.kernels import activations, attention, backend, conversions, norms, winograd
from frame.display import dither as D

RECORD = json.loads((Path(__file__).parent / "data" / "kernel_bits.json").read_text())

pytestmark = pytest.mark.skipif(backend.BACKEND != "c" or D.BACKEND != "c", reason="the C kernels are not built")


def h(*arrs):
    m = hashlib.sha256()
    for a in arrs:
        m.update(np.ascontiguousarray(a).tobytes())
    return m.hexdigest()


def kernel_outputs() -> dict[str, str]:
    rng = np.random.default_rng(1234)
    out = {}
    x = (rng.standard_normal(70001) * 3).astype(np.float32)
    bits16 = rng.integers(0, 65536, 70001, dtype=np.uint16)
    out["f16_to_f32"] = h(conversions.c_f16_to_f32(bits16, np.empty(70001, np.float32)))
    out["bf16_to_f32"] = h(conversions.c_bf16_to_f32(bits16, np.empty(70001, np.float32)))
    out["f32_to_f16"] = h(conversions.c_f32_to_f16(x * 1000, np.empty(70001, np.uint16)))
    q = rng.integers(0, 256, (37, 129), dtype=np.uint8)
    sc = rng.random(37).astype(np.float32); ze = (rng.random(37) * 255).astype(np.float32)
    out["dequant_u8_rows"] = h(conversions.c_dequant_u8_rows(q, sc, ze, np.empty((37, 129), np.float32)))
    # recorded from the kernels with one scale and zero point, now every row's own
    same = np.full(37, 0.0123, np.float32), np.full(37, 17.5, np.float32)
    out["dequant_u8"] = h(conversions.c_dequant_u8_rows(q, *same, np.empty((37, 129), np.float32)))
    one = np.full(1, 0.05, np.float32), np.full(1, 128.0, np.float32)
    out["quant_u8"] = h(conversions.c_quant_u8_rows(x[None], *one, np.empty((1, 70001), np.uint8)))
    out["gelu_erf"] = h(activations.c_gelu_erf(x, np.empty(70001, np.float32)))
    p = rng.standard_normal((33, 2 * 96)).astype(np.float32); b = rng.standard_normal(192).astype(np.float32)
    out["geglu"] = h(activations.c_geglu(p, np.empty((33, 96), np.float32), b))
    out["geglu_nobias"] = h(activations.c_geglu(p, np.empty((33, 96), np.float32)))
    s = (rng.standard_normal((29, 301)) * 8).astype(np.float32); sums = np.empty(29, np.float32)
    activations.c_softmax_rows(s, sums); out["softmax_rows"] = h(s, sums)
    w = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
    out["taps_first"] = h(conversions.c_taps_first(w, np.empty((24, 9, 16), np.float32)))
    xl = rng.standard_normal((45, 320)).astype(np.float32) * 2 + 1
    g = rng.standard_normal(320).astype(np.float32); be = rng.standard_normal(320).astype(np.float32)
    out["layer_norm"] = h(norms.c_layer_norm(xl, g, be, 1e-5, np.empty_like(xl)))
    mean = np.empty(45); m2 = np.empty(45)
    norms.c_row_moments(xl, mean, m2); out["row_moments"] = h(mean, m2)
    cout, cin = 24, 16
    u = np.zeros((16, cout, cin), np.float32)
    winograd.c_wino_weights(w, u, 2, 20); out["wino_weights"] = h(u)
    c, hh, ww = 16, 10, 14
    pp = rng.standard_normal((c, hh, ww)).astype(np.float32)
    th, tw = (hh - 2) // 2, (ww - 2) // 2
    v = np.zeros((16, c, th, tw), np.float32)
    winograd.c_wino_input(pp, v, 3, 13); out["wino_input"] = h(v)
    m = rng.standard_normal((16, 24, 4, 6)).astype(np.float32)
    y = np.empty((24, 8, 12), np.float32)
    winograd.c_wino_output(m, y, 0, 24); out["wino_output"] = h(y)
    for variant in (1, 2, 3):
        for (l, lk, d) in ((77, 130, 64), (200, 77, 80), (64, 256, 32)):
            qq = rng.standard_normal((l, d)).astype(np.float32) * 0.2
            kk = rng.standard_normal((lk, d)).astype(np.float32)
            vv = rng.standard_normal((lk, d)).astype(np.float32)
            o = np.empty_like(qq)
            ok = attention.c_attention_head(qq, kk, vv, o, np.empty(attention.attention_work(lk, d), np.float32), variant)
            if ok:
                out[f"attention_head_v{variant}_{l}x{lk}x{d}@{platform.machine()}"] = h(o)
    img = rng.random((61, 83, 3)).astype(np.float32)
    for name in sorted(D.METHODS):
        pal = np.ascontiguousarray(rng.random((7, 3)))
        t = D.colour_table(pal)
        for serp in (True, False):
            out[f"diffuse_{name}_{int(serp)}"] = h(D.c_diffuse(img, pal, t, D.METHODS[name], serp))
    return out


def test_every_c_kernel_gives_the_recorded_bits():
    got = kernel_outputs()
    recorded = {k: v for k, v in RECORD.items() if k in got or not k.startswith("attention_head_")}
    assert set(recorded) <= set(got), sorted(set(recorded) - set(got))
    changed = sorted(k for k in recorded if got[k] != recorded[k])
    assert not changed, f"kernels whose output bits changed: {changed}"
