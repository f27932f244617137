"""Putting pictures on an Inky Impression: one friendly API over pluggable backends.

    from frame.display import open_display, fit_size

    with open_display({"panel": "auto"}) as display:    # the panel named by the HAT's EEPROM
        width, height = display.generation_size()         # e.g. 1280x768 for an 800x480 panel
        display.show(picture, caption="a lighthouse at dusk")
        ...
        display.show_error("model folder /models/sdxl is missing")

``open_display(config)`` takes a DisplayConfig, the YAML ``display:`` mapping, or None
(defaults: the ``inky`` backend with EEPROM detection). The ``file`` backend writes
``panel.png`` (the palette-index picture the panel gets) and ``look.png`` (what it
will look like) instead, in the same code paths: use it on a PC and in tests.

A Display fits each picture to the panel (Lanczos; cover with a saliency crop by
default), adds the optional caption strip, dithers it perceptually (frame.display.dither)
and refreshes the panel: one refresh at a time, never sooner than ``min_interval``
seconds after the previous one, busy timeouts retried. ``show`` blocks for the whole
refresh (30-45 s on real panels): call it from a worker, never from a button callback.
"""

from __future__ import annotations

from collections.abc import Mapping

from frame.display.base import Display, DitheredPicture
from frame.display.config import DisplayConfig
from frame.display.dither import DEFAULT_METHOD, METHODS, DitherSettings
from frame.display.errors import DisplayError, PanelBusyError
from frame.display.fit import SDXL_AREA, bucket_for, fit_picture
from frame.display.palette import Palette
from frame.display.panels import PANELS, Panel, get_panel
from frame.display.text import caption_height

__all__ = [
    "DEFAULT_METHOD", "METHODS", "PANELS", "Display", "DisplayConfig", "DisplayError", "DitheredPicture",
    "DitherSettings", "Palette", "Panel", "PanelBusyError", "fit_picture", "fit_size", "get_panel", "open_display",
]


def open_display(config: DisplayConfig | Mapping | None = None, **kwargs) -> Display:
    """The display described by ``config`` (a DisplayConfig, a ``display:`` mapping, or None).

    Raises DisplayError with what to fix when the panel, library or settings are wrong.
    ``kwargs`` go to the backend (tests pass ``clock``/``sleep``, or an inky ``driver``).
    """
    if not isinstance(config, DisplayConfig):
        config = DisplayConfig.from_mapping(config)
    if config.backend == "file":
        from frame.display.file_backend import FileDisplay

        return FileDisplay(config, **kwargs)
    from frame.display.inky_backend import InkyDisplay

    return InkyDisplay(config, **kwargs)


def fit_size(panel: Panel | str, orientation: str = "landscape", caption: bool = False,
             max_area: int = SDXL_AREA) -> tuple[int, int]:
    """The SDXL generation size for ``panel`` mounted in ``orientation``: (width, height).

    64-px steps, at most ``max_area`` pixels, aspect ratio nearest the picture area (the
    panel less the caption strip when ``caption``), so the picture needs almost no cropping.
    """
    panel = get_panel(panel) if isinstance(panel, str) else panel
    config = DisplayConfig(backend="file", panel=panel.name, orientation=orientation)
    width, height = panel.size if config.rotation in (0, 180) else (panel.height, panel.width)
    if caption:
        height -= caption_height(height)
    return bucket_for(width, height, max_area)
