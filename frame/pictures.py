"""Opening picture files: bounded in bytes and pixels before decoding, and every failure one PictureError.

The frame opens pictures it did not make (``slowframe show PATH``) and pictures a power cut
may have cut short (the history, a finished job's result). Pillow reports a damaged file
as OSError, SyntaxError, ValueError, EOFError or a DecompressionBombError depending on
where the damage is; a 48 KB PNG can declare 20000x20000 pixels. The size is checked
from the header, before a single pixel is decoded.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

from PIL import Image

MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_PIXELS = 64_000_000   # a 64-megapixel photo fits; an e-ink panel shows at most 1600x1200


class PictureError(Exception):
    """A picture file cannot be shown; the message names the file and says why."""


def open_picture(path: str | Path) -> Image.Image:
    """The decoded picture at ``path``; PictureError when it is missing, not a regular file, too big or damaged."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise PictureError(f"{path}: no such file") from None
    except OSError as exc:
        raise PictureError(f"{path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise PictureError(f"{path}: not a regular file (a folder, a FIFO or a device?)")
    if info.st_size > MAX_FILE_BYTES:
        raise PictureError(f"{path}: {info.st_size / 1e6:.0f} MB is too big a file for a picture "
                           f"(at most {MAX_FILE_BYTES // 1_000_000} MB)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
            width, height = image.size
            if width * height > MAX_PIXELS:
                image.close()
                raise _too_big(path, f"{width}x{height} pixels")
            image.load()
    except PictureError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):   # Pillow's own, larger limit
        raise _too_big(path, "the size it declares") from None
    except Exception as exc:   # Pillow's errors for damaged files have many types; none is a bug of ours
        raise PictureError(f"{path}: not a picture that can be read ({type(exc).__name__}: {exc}); "
                           "it may be damaged or cut short") from None
    return image


def _too_big(path: Path, size: str) -> PictureError:
    return PictureError(f"{path}: {size} is more than the {MAX_PIXELS // 1_000_000} megapixels the frame "
                        "decodes; scale the picture down first")
