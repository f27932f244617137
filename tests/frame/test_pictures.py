"""open_picture: bounded before decoding, and a damaged or hostile file is one PictureError."""

from __future__ import annotations

import io
import os
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from frame.pictures import MAX_PIXELS, PictureError, open_picture


def png_bytes(size=(32, 24)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 120, 40)).save(buffer, format="PNG")
    return buffer.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring width x height, with a tiny compressed body: a decompression bomb."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)   # 1-bit greyscale
    body = zlib.compress(b"\0" * (1 + (width + 7) // 8) * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def test_a_good_picture_opens(tmp_path):
    (tmp_path / "a.png").write_bytes(png_bytes())
    assert open_picture(tmp_path / "a.png").size == (32, 24)


def test_a_small_file_declaring_20000_by_20000_is_refused_before_decoding(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(bomb_png(20000, 20000))
    assert path.stat().st_size < 100_000
    with pytest.raises(PictureError, match="is more than the 64 megapixels the frame decodes"):
        open_picture(path)
    path.write_bytes(bomb_png(9000, 8000))    # under Pillow's own limit, over ours
    with pytest.raises(PictureError, match="9000x8000 pixels is more than the 64 megapixels"):
        open_picture(path)


def test_a_truncated_picture_is_a_picture_error(tmp_path):
    data = png_bytes((300, 200))
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(PictureError, match="cut.png: not a picture that can be read"):
        open_picture(tmp_path / "cut.png")


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "not a regular file"),
    (lambda p: os.mkfifo(p), "not a regular file"),
])
def test_missing_files_folders_and_fifos_are_refused_without_blocking(tmp_path, make, message):
    path = tmp_path / "x.png"
    make(path)
    with pytest.raises(PictureError, match=message):
        open_picture(path)


def test_the_pixel_limit_allows_a_large_photo():
    assert MAX_PIXELS >= 6000 * 4000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=2000), flips=st.lists(st.tuples(st.integers(0, 2000),
                                                                             st.integers(0, 255)), max_size=6))
def test_damaged_pngs_open_or_give_a_picture_error(tmp_path, cut, flips):
    data = bytearray(png_bytes((40, 30)))
    for where, value in flips:
        data[where % len(data)] = value
    path = tmp_path / "damaged.png"
    path.write_bytes(bytes(data[: max(cut, 8)] if cut < len(data) else data))
    try:
        image = open_picture(path)
    except PictureError:
        return
    assert image.size[0] * image.size[1] <= MAX_PIXELS
