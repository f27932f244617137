"""The pairing screen: what the panel shows so a phone can pair with the web app (frame.web.auth).

The web app makes the one-time code and asks the daemon (the ``pairing`` command) to show
it; the daemon draws this screen in the panel's own size, so nothing of it is cropped, and
its text in pure black on white, so the dithering keeps the QR code readable by a camera.
"""

from __future__ import annotations

import io
import re

from PIL import Image

CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"   # no 0/O, 1/I/L: read off a panel, typed on a phone
CODE_LENGTH = 8                                     # ~40 bits, for 10 minutes and 5 tries
CODE = re.compile(f"^[{CODE_ALPHABET}]{{{CODE_LENGTH}}}$")
ADDRESS = re.compile(r"^https?://[A-Za-z0-9.:\[\]-]{1,100}/?$")   # http://slowframe.local/, http://[fe80::1]:8080


def pairing_card(url: str, code: str, size: tuple[int, int]) -> Image.Image:
    """The screen the panel shows to pair a phone: the address, the code and a QR code of both."""
    import segno   # only here: the pairing card is the one QR code the frame draws

    from frame.display.text import error_screen   # not at the top: the web app reads the code's format from
                                                  # here and must not load the display (numpy, ~20 MB)

    width, height = size
    side = min(width, height)
    qr_side, gap = side * 11 // 20, side // 20
    message = (f"To pair a phone with this frame, open\n{url}\non a phone on the same network and enter this "
               "code, or scan the QR code.\n\nThe code works once, for 10 minutes.")
    landscape = width >= height   # the QR code beside the text, or under it
    text_size = (width - qr_side - gap, height) if landscape else (width, height - qr_side - gap)
    screen = error_screen(message, text_size, title=f"Code: {code[:4]} {code[4:]}",
                          footer="This screen stays until the next picture.")
    card = Image.new("RGB", size, (255, 255, 255))
    card.paste(screen, (0, 0))
    buffer = io.BytesIO()
    segno.make(f"{url.rstrip('/')}/pair?code={code}", error="m").save(buffer, kind="png", scale=1, border=2)
    buffer.seek(0)
    qr = Image.open(buffer).convert("RGB").resize((qr_side, qr_side), Image.NEAREST)
    card.paste(qr, (width - qr_side - gap, (height - qr_side) // 2) if landscape else
               ((width - qr_side) // 2, height - qr_side - gap))
    return card
