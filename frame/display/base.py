"""The Display every backend extends (fit, caption, dither, orient, refresh one at a time) and its DitheredPicture.

A backend only implements ``_refresh(indices)``: put (panel_height, panel_width) ink
indices, native orientation and order, on the panel, raising PanelBusyError when the
panel's BUSY line times out. Everything else lives here, so the ``inky`` and ``file``
backends behave the same in every code path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from frame.display.config import DisplayConfig
from frame.display.dither import DitherSettings, dither
from frame.display.errors import DisplayError, PanelBusyError
from frame.display.fit import fit_picture
from frame.display.palette import Palette
from frame.display.panels import Panel
from frame.display.text import (caption_height, caption_strip, error_screen, notice_screen, status_height,
                                status_strip)

log = logging.getLogger("slowframe.display")


@dataclass(frozen=True)
class DitheredPicture:
    """One dithered picture: ink indices as the viewer sees them, and as the panel gets them."""

    indices: np.ndarray         # (height, width) in the viewer's orientation
    panel_indices: np.ndarray   # (panel.height, panel.width), native orientation
    palette: Palette

    def palette_image(self) -> Image.Image:
        """A mode "P" image of the viewer-oriented indices, palette = the measured inks."""
        image = Image.fromarray(self.indices, "P")
        image.putpalette(self.palette.flat())
        return image


class Display:
    """A panel showing pictures: ``show(image, caption=None)``, ``show_error(text)``.

    Thread-safe: refreshes are serialised, and each waits until ``min_interval`` seconds
    have passed since the previous one ended. A refresh whose BUSY line times out is
    retried ``busy_retries`` times before DisplayError is raised.
    """

    def __init__(self, panel: Panel, config: DisplayConfig = DisplayConfig(), *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.panel = panel
        self.config = config
        self.palette = Palette.for_panel(panel, config.palette)
        self.settings = DitherSettings(config.method, config.saturation, config.tone)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last_end: float | None = None
        self.refreshes = 0

    # ------------------------------------------------------------ geometry

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of a picture as the viewer sees the mounted panel."""
        w, h = self.panel.size
        return (h, w) if self.config.rotation in (90, 270) else (w, h)

    def generation_size(self, max_area: int | None = None) -> tuple[int, int]:
        """The SDXL size (64-px steps, about one megapixel) with the aspect nearest the picture area."""
        from frame.display import SDXL_AREA, fit_size

        return fit_size(self.panel, self.config.orientation, self.config.caption, max_area or SDXL_AREA)

    # ------------------------------------------------------------ pictures

    def compose(self, image: Image.Image, caption: str | None = None) -> list[Image.Image]:
        """The picture fitted to the panel and, when captions are on, the caption strip under it."""
        w, h = self.size
        if caption is not None and self.config.caption:
            strip = caption_height(h)
            picture = fit_picture(image, (w, h - strip), self.config.fit, self.config.crop)
            return [picture, caption_strip(caption, w, strip)]
        return [fit_picture(image, (w, h), self.config.fit, self.config.crop)]

    def render(self, image: Image.Image, caption: str | None = None) -> DitheredPicture:
        """Fit, caption and dither a picture without touching the panel.

        The picture and the caption strip are dithered apart, so no error from the picture
        spills into the text.
        """
        indices = np.vstack([dither(part, self.palette, self.settings) for part in self.compose(image, caption)])
        return DitheredPicture(indices, self._to_panel(indices), self.palette)

    def _to_panel(self, indices: np.ndarray) -> np.ndarray:
        out = indices
        if self.config.flip_horizontal:
            out = out[:, ::-1]
        if self.config.flip_vertical:
            out = out[::-1, :]
        # the viewer's picture is the panel's turned `rotation` clockwise: turn it back
        out = np.rot90(out, k=self.config.rotation // 90)
        out = np.ascontiguousarray(out)
        assert out.shape == (self.panel.height, self.panel.width), out.shape
        return out

    # ------------------------------------------------------------ refreshing

    def seconds_until_ready(self) -> float:
        """How long a ``show`` now would wait for the minimum interval (0 when ready)."""
        if self._last_end is None:
            return 0.0
        return max(0.0, self._last_end + self.config.min_interval - self._clock())

    def show(self, image: Image.Image, caption: str | None = None) -> DitheredPicture:
        """Put a picture on the panel (blocks for the whole refresh, 30-45 s on real panels).

        ``caption`` (e.g. the prompt) is drawn under the picture when the config's
        ``caption`` is on. Returns the DitheredPicture that was shown.
        """
        picture = self.render(image, caption)
        self.refresh(picture)
        return picture

    def show_error(self, text: str, title: str = "slowframe could not make a picture") -> DitheredPicture:
        """Put an error screen with ``text`` on the panel (e.g. when generation keeps failing)."""
        stamp = time.strftime("%Y-%m-%d %H:%M")
        screen = error_screen(text, self.size, title=title, footer=f"{stamp} - details: journalctl -u slowframe")
        indices = dither(screen, self.palette, self.settings)
        picture = DitheredPicture(indices, self._to_panel(indices), self.palette)
        self.refresh(picture)
        return picture

    def show_developing(self, image: Image.Image, status: str, progress: float) -> DitheredPicture:
        """Put a picture still being made on the panel, with a status strip under it: ``status`` (theme, step,
        ready time) over a bar in the accent ink filled to ``progress`` (0..1)."""
        w, h = self.size
        strip = status_height(h)
        picture = dither(fit_picture(image, (w, h - strip), self.config.fit, self.config.crop), self.palette,
                         self.settings)
        indices = np.vstack([picture, self._inks(status_strip(status, w, strip, progress, self.accent))])
        shown = DitheredPicture(indices, self._to_panel(indices), self.palette)
        self.refresh(shown)
        return shown

    def show_notice(self, title: str, lines: list[str], footer: str = "") -> DitheredPicture:
        """Put a notice on the panel in large type: what the frame is doing, or what it needs from you."""
        indices = self._inks(notice_screen(title, lines, self.size, self.accent, footer))
        shown = DitheredPicture(indices, self._to_panel(indices), self.palette)
        self.refresh(shown)
        return shown

    @property
    def accent(self) -> tuple[int, int, int]:
        """The pure colour of the ink screens are accented in: red, which every panel has."""
        return self.palette.nominal[self.palette.inks.index("red")]

    def _inks(self, screen: Image.Image) -> np.ndarray:
        """Ink indices for a screen drawn in the inks' pure colours: each pixel the ink nearest in colour, no
        dithering, so text and bars come out solid."""
        pixels = np.asarray(screen.convert("RGB"), np.int32)
        packed, inverse = np.unique((pixels[..., 0] << 16) | (pixels[..., 1] << 8) | pixels[..., 2],
                                    return_inverse=True)
        colours = np.stack([packed >> 16, (packed >> 8) & 255, packed & 255], -1)
        nominal = np.asarray(self.palette.nominal, np.int32)
        nearest = ((colours[:, None, :] - nominal[None, :, :]) ** 2).sum(-1).argmin(1).astype(np.uint8)
        return nearest[inverse].reshape(pixels.shape[:2])

    def refresh(self, picture: DitheredPicture) -> None:
        """Send a rendered picture to the panel: serialised, rate-limited, busy timeouts retried."""
        with self._lock:
            wait = self.seconds_until_ready()
            if wait > 0:
                log.info("waiting %.0f s before the next refresh (min_interval %.0f s)", wait, self.config.min_interval)
                self._sleep(wait)
            attempts = self.config.busy_retries + 1
            for attempt in range(1, attempts + 1):
                try:
                    self._refresh(picture.panel_indices)
                    break
                except PanelBusyError as exc:
                    log.warning("refresh %d of %d: %s", attempt, attempts, exc)
                    if attempt == attempts:
                        raise DisplayError(f"{self.panel.title}: refresh failed {attempts} times: {exc}. "
                                           "Check the ribbon cable and the HAT seating, then restart.") from exc
                finally:
                    self._last_end = self._clock()
            self.refreshes += 1

    def _refresh(self, panel_indices: np.ndarray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release the hardware (nothing to do for most backends)."""

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
