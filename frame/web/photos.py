"""Pictures in the web app: a phone's photo checked and made ready for the panel, and thumbnails.

A photo is checked in bytes (the request's limit) and pixels before a pixel is decoded:
the header of a 48 KB PNG can declare 100 megapixels. JPEGs (phone photos) are decoded at
reduced scale by the decoder itself (Image.draft), so a 64-megapixel photo costs ~8 MB;
other formats are decoded whole and so are allowed fewer pixels. What goes to the daemon
is a PNG no larger than the largest panel needs; the daemon's display fits and dithers it.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import BinaryIO

from PIL import Image, ImageOps

MAX_UPLOAD_BYTES = 25 * 1024 * 1024
MAX_JPEG_PIXELS = 64_000_000     # decoded at 1/2..1/8 scale
MAX_OTHER_PIXELS = 12_000_000    # decoded whole: 36 MB as RGB, the most the Pi's web process should hold
PANEL_SIDE = 1600                # the largest panel (13.3" Spectra 6) is 1600x1200
THUMB_SIDE = 360


class PhotoError(ValueError):
    """A file that cannot be put on the panel; the message says why and what to do."""


def _open_checked(file: BinaryIO) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)   # the limits below are ours
            image = Image.open(file)
    except Image.DecompressionBombError:
        raise PhotoError(f"the picture declares more than {2 * Image.MAX_IMAGE_PIXELS // 1_000_000} megapixels; "
                         "it is refused") from None
    except Exception:   # Pillow's errors for what is not a picture have many types
        raise PhotoError("this is not a picture the frame can read (use a JPEG or PNG photo)") from None
    width, height = image.size
    limit = MAX_JPEG_PIXELS if image.format == "JPEG" else MAX_OTHER_PIXELS
    if width * height > limit:
        raise PhotoError(f"the picture is {width}x{height} pixels ({width * height / 1e6:.0f} megapixels); a "
                         f"{image.format or 'picture'} file may have at most {limit // 1_000_000} megapixels: "
                         "scale it down first")
    return image


def prepare_photo(file: BinaryIO) -> BinaryIO:
    """The photo in ``file`` as a PNG in an unnamed temporary file (for the daemon), turned upright by its EXIF
    orientation and no larger than the largest panel needs; PhotoError when it cannot be used."""
    image = _open_checked(file)
    try:
        if image.format == "JPEG":
            image.draft("RGB", (PANEL_SIDE, PANEL_SIDE))   # the decoder's own downscaling: far less memory
        image = ImageOps.exif_transpose(image)
        image.thumbnail((PANEL_SIDE, PANEL_SIDE))
        image = image.convert("RGB")
    except PhotoError:
        raise
    except Exception:
        raise PhotoError("the picture is damaged or cut short; try sending it again") from None
    out = tempfile.TemporaryFile()
    image.save(out, format="PNG", compress_level=1)
    out.seek(0)
    return out


def thumbnail(file: BinaryIO, target: Path) -> None:
    """A JPEG thumbnail of the history picture in ``file`` at ``target`` (replaced atomically)."""
    image = _open_checked(file)
    image.draft("RGB", (THUMB_SIDE, THUMB_SIDE))
    image.thumbnail((THUMB_SIDE, THUMB_SIDE))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    image.convert("RGB").save(tmp, format="JPEG", quality=82)
    os.replace(tmp, target)
