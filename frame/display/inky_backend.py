"""The ``inky`` display: a Pimoroni Inky Impression on the Pi's SPI bus, through the inky library.

inky (and gpiod, gpiodevice, spidev, smbus2 beneath it) is imported only when such a
display is opened, so everything else runs on any PC. With ``panel: auto`` the model
comes from the HAT's EEPROM (I2C bus 1, address 0x50), as inky.auto does.

We dither ourselves and hand inky a palette ("P") image it passes through untouched:
on the 7-colour drivers a "P" image's values go straight into the buffer; on the
Spectra 6 drivers a "P" image with exactly six palette colours is quantised without
dithering, so we give the six pure colours in native order and each index maps onto
itself. After set_image the driver's buffer is compared with what we meant to send,
so a change in inky can never put its own dithering (or stray codes) on the panel.
"""

from __future__ import annotations

import importlib
import logging
import re
import warnings

import numpy as np
from PIL import Image

from frame.display.base import Display
from frame.display.config import DisplayConfig
from frame.display.errors import DisplayError, PanelBusyError
from frame.display.panels import PANELS, Panel, get_panel, panel_for_eeprom_variant
from frame.paths import BOOT_PARTITION

log = logging.getLogger("slowframe.display")

SETUP_HINT = ("On the Pi: enable SPI and I2C (raspi-config), add dtoverlay=spi0-0cs to "
              f"{BOOT_PARTITION / 'config.txt'}, make sure no other program uses the panel's pins "
              "(BCM 8, 17, 22, 27), and check the HAT is seated.")
# a refresh wait (28-45 s in inky's drivers) that ran out, as opposed to the short power-on waits
_BUSY_TIMEOUT = re.compile(r"(?:Busy|Refresh) Wait: Timed out (?:waiting for busy )?after ([0-9.]+)s")
_REFRESH_WAIT_S = 10.0


def _import(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DisplayError(
            f"the inky display needs the inky library and its GPIO/SPI modules ({exc}). "
            "On the Pi: pip install 'slowframe[pi]'. On a PC use display.backend: file.") from exc


def detect_panel() -> Panel:
    """The panel named by the Inky HAT's EEPROM; DisplayError when there is none or it is not supported."""
    eeprom = _import("inky.eeprom")
    try:
        info = eeprom.read_eeprom()
    except (OSError, RuntimeError) as exc:
        raise DisplayError(f"cannot read the Inky HAT EEPROM on I2C bus 1: {exc}. {SETUP_HINT}") from exc
    if info is None:
        raise DisplayError("no Inky HAT EEPROM answered on I2C bus 1 (address 0x50). Enable I2C, check the HAT, "
                           f"or set display.panel to your model: {', '.join(PANELS)}")
    panel = panel_for_eeprom_variant(info.display_variant)
    if panel is None:
        name = info.get_variant() or "unknown"
        raise DisplayError(f"the HAT EEPROM names display variant {info.display_variant} ({name}), which is not a "
                           f"colour Inky Impression slowframe supports: {', '.join(PANELS)}")
    log.info("detected %s from the HAT EEPROM (variant %d)", panel.title, info.display_variant)
    return panel


def open_driver(panel: Panel):
    """A new inky driver object for ``panel`` (no hardware is touched until its first show)."""
    module = _import(panel.inky_module)
    try:
        return module.Inky(resolution=panel.size)
    except (OSError, RuntimeError, ValueError) as exc:
        raise DisplayError(f"{panel.title}: inky could not open the panel: {exc}. {SETUP_HINT}") from exc


class InkyDisplay(Display):
    """A Display on a real Inky Impression. ``driver`` is for tests: an inky ``Inky`` object."""

    def __init__(self, config: DisplayConfig, *, driver=None, **kwargs):
        panel = detect_panel() if config.panel == "auto" else get_panel(config.panel)
        super().__init__(panel, config, **kwargs)
        self.driver = driver if driver is not None else open_driver(panel)

    def palette_image(self, panel_indices: np.ndarray) -> Image.Image:
        """The "P" image inky passes through unchanged (see the module docstring)."""
        image = Image.fromarray(np.ascontiguousarray(panel_indices, dtype=np.uint8), "P")
        colours = self.panel.nominal if self.panel.family == "spectra6" else self.palette.shown
        image.putpalette([c for rgb in colours for c in rgb])
        return image

    def expected_buffer(self, panel_indices: np.ndarray) -> np.ndarray:
        """The controller codes the driver's buffer must hold for these ink indices."""
        return np.asarray(self.panel.native_codes, dtype=np.uint8)[panel_indices]

    def _refresh(self, panel_indices: np.ndarray) -> None:
        driver = self.driver
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                driver.set_image(self.palette_image(panel_indices))
                got = np.asarray(driver.buf)
                if got.shape != panel_indices.shape or not np.array_equal(got, self.expected_buffer(panel_indices)):
                    raise DisplayError(f"{self.panel.title}: the inky library changed the picture we dithered "
                                       f"(inky {getattr(driver, '__module__', '?')}); please report this with "
                                       "your inky version (pip show inky)")
                driver.set_border(self.panel.native_codes[self.panel.inks.index("white")])
                driver.show()
            except (OSError, RuntimeError) as exc:
                raise DisplayError(f"{self.panel.title}: refresh failed: {exc}. {SETUP_HINT}") from exc
        for warning in caught:
            message = str(warning.message)
            timeout = _BUSY_TIMEOUT.search(message)
            if timeout and float(timeout.group(1)) >= _REFRESH_WAIT_S:
                raise PanelBusyError(f"the panel stayed busy: inky says {message!r}")
            log.info("inky: %s", message)
