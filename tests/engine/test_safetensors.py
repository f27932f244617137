"""engine.safetensors.read_header on hostile headers: only ModelFileError, named tensors, bounded work."""

from __future__ import annotations

import json
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import ModelFileError
from engine.safetensors import SafetensorsWriter, read_header

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def write_raw(path, header: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def write_header(path, header: dict, data_bytes: int) -> None:
    write_raw(path, json.dumps(header).encode(), bytes(data_bytes))


def good_header() -> dict:
    return {"__metadata__": {"format": "pt"},
            "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "b": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]}}


def test_a_good_header_reads():
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.safetensors"
        write_header(path, good_header(), 32)
        tensors = read_header(path)
    assert {n: (t.shape, t.nbytes) for n, t in tensors.items()} == {"a": ((2, 3), 24), "b": ((4,), 8)}


@pytest.mark.parametrize("shape, offsets", [
    ([2 ** 64, 1], [0, 8]),             # a dimension past 64 bits
    ([2 ** 62, 2 ** 62], [0, 16]),      # whole numbers whose product overflows int64
    ([-1, 4], [0, 16]),
    ([1.5, 2], [0, 12]),
    ([True, 2], [0, 8]),
    ("22", [0, 16]),
    ([[2], 2], [0, 16]),
    ([4], [0, 2 ** 64]),
    ([4], [-16, 0]),
    ([4], [0]),
    ([1] * 40, [0, 4]),
])
def test_impossible_shapes_and_offsets_name_the_tensor(tmp_path, shape, offsets):
    path = tmp_path / "m.safetensors"
    write_header(path, {"weird.weight": {"dtype": "F32", "shape": shape, "data_offsets": offsets}}, 16)
    with pytest.raises(ModelFileError, match=r"m\.safetensors: .*'weird\.weight'"):
        read_header(path)


@pytest.mark.parametrize("dtype", [["F32"], {"x": 1}, None, 5, "F128"])
def test_an_unknown_or_unhashable_dtype_is_named(tmp_path, dtype):
    path = tmp_path / "m.safetensors"
    write_header(path, {"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}, 4)
    with pytest.raises(ModelFileError, match="tensor 'w' has unknown dtype"):
        read_header(path)


def test_overlapping_tensors_are_refused_with_both_names(tmp_path):
    path = tmp_path / "m.safetensors"
    write_header(path, {"first": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "second": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, 16)
    with pytest.raises(ModelFileError, match="'first' and 'second' overlap"):
        read_header(path)


def test_deeply_nested_json_is_refused_without_recursing(tmp_path):
    path = tmp_path / "m.safetensors"
    write_raw(path, b'{"__metadata__": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    with pytest.raises(ModelFileError, match="nested more than"):
        read_header(path)


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
    path = tmp_path / "m.safetensors"
    header = good_header()
    header["__metadata__"]["note"] = "[" * 500 + '\\"{' * 100
    write_header(path, header, 32)
    assert set(read_header(path)) == {"a", "b"}


def test_a_huge_entry_is_quoted_briefly(tmp_path):
    path = tmp_path / "m.safetensors"
    write_header(path, {"w": {"dtype": "F32", "shape": list(range(100_000)), "data_offsets": [0, 4]}}, 4)
    with pytest.raises(ModelFileError) as caught:
        read_header(path)
    assert len(str(caught.value)) < 400


def test_the_writer_output_reads_back(tmp_path):
    path = tmp_path / "m.safetensors"
    import numpy as np
    with open(path, "wb") as f:
        w = SafetensorsWriter(f, [("x", "F32", (3, 2)), ("empty", "F32", (0,)), ("y", "U8", (5,))])
        w.write("x", np.ones((3, 2), np.float32))
        w.write("empty", np.zeros((0,), np.float32))
        w.write("y", np.arange(5, dtype=np.uint8))
        w.close()
    assert {n: t.shape for n, t in read_header(path).items()} == {"x": (3, 2), "empty": (0,), "y": (5,)}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20)
entries = st.fixed_dictionaries(
    {}, optional={"dtype": st.sampled_from(["F32", "F16", "U8", "I64", "X"]) | json_values,
                  "shape": st.lists(st.integers(min_value=-2, max_value=2 ** 66), max_size=5) | json_values,
                  "data_offsets": st.lists(st.integers(min_value=-2, max_value=2 ** 66), max_size=3) | json_values})


@FUZZ
@given(header=st.dictionaries(st.text(max_size=10), entries | json_values, max_size=6),
       data_bytes=st.integers(min_value=0, max_value=256))
def test_fuzzed_headers_give_only_model_file_errors(tmp_path, header, data_bytes):
    path = tmp_path / "m.safetensors"
    write_raw(path, json.dumps(header, allow_nan=True).encode(), bytes(data_bytes))
    try:
        tensors = read_header(path)
    except ModelFileError:
        return
    spans = sorted((t.offset, t.offset + t.nbytes) for t in tensors.values() if t.nbytes)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert all(end <= path.stat().st_size for _, end in spans)


@FUZZ
@given(blob=st.binary(max_size=600), flip=st.integers(min_value=0, max_value=10_000), to=st.integers(0, 255))
def test_mutated_header_bytes_give_only_model_file_errors_in_bounded_memory(tmp_path, blob, flip, to):
    raw = bytearray(json.dumps(good_header()).encode() + blob)
    raw[flip % len(raw)] = to
    path = tmp_path / "m.safetensors"
    write_raw(path, bytes(raw), bytes(64))
    tracemalloc.start()
    try:
        read_header(path)
    except ModelFileError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
