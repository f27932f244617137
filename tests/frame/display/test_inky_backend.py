"""The inky backend against inky's real driver classes, with gpiod/gpiodevice/spidev/smbus2 mocked.

What must hold: the driver gets exactly our ink indices as its native codes (no
re-dithering by inky, nothing out of range), for every supported panel; the panel is
found through the HAT EEPROM; busy timeouts are retried.
"""

import warnings

import numpy as np
import pytest
from PIL import Image

from inky_mocks import fake_inky_hardware, inky_drivers  # noqa: F401 (fixtures)

from frame.display import DisplayConfig, DisplayError, open_display
from frame.display.inky_backend import InkyDisplay, detect_panel
from frame.display.panels import PANELS, get_panel

PHOTO = "tests/data/photos/coffee.jpg"


def _unpack(packed, shape):
    """inky packs two 4-bit codes per byte: the codes again, in the packed order."""
    packed = np.asarray(packed, dtype=np.uint8)
    return np.stack([packed >> 4, packed & 0x0F], axis=1).reshape(shape)


@pytest.mark.parametrize("panel_name", list(PANELS))
def test_driver_receives_exactly_our_indices(inky_drivers, panel_name):
    panel = get_panel(panel_name)
    driver = inky_drivers(panel)
    sent = []
    driver._update = lambda *bufs: sent.append(bufs)  # what show() hands the SPI layer
    display = InkyDisplay(DisplayConfig(panel=panel_name, min_interval=0), driver=driver)
    picture = display.show(Image.open(PHOTO))

    codes = np.asarray(panel.native_codes, dtype=np.uint8)[picture.panel_indices]
    np.testing.assert_array_equal(np.asarray(driver.buf), codes)  # no re-dither, same codes
    assert len(sent) == 1
    packed = np.concatenate([np.asarray(b, dtype=np.uint8) for b in sent[0]])
    sent_codes = _unpack(packed, (-1,))
    assert set(np.unique(sent_codes)) <= set(panel.native_codes)  # nothing out of range
    # the same multiset of codes goes out, whatever rotation/split the driver applies
    np.testing.assert_array_equal(np.bincount(sent_codes, minlength=8), np.bincount(codes.ravel(), minlength=8))
    if panel_name in ("acep-7.3", "spectra6-7.3", "acep-5.7", "acep-4.0"):  # no driver-side rotation
        np.testing.assert_array_equal(sent_codes.reshape(codes.shape), codes)


@pytest.mark.parametrize("panel_name", ["spectra6-7.3", "acep-7.3"])
def test_a_full_refresh_goes_through_the_real_driver_to_spi(inky_drivers, fake_inky_hardware, panel_name):
    gpiod, gpiodevice, spidev, _ = fake_inky_hardware
    panel = get_panel(panel_name)
    display = InkyDisplay(DisplayConfig(panel=panel_name, min_interval=0), driver=inky_drivers(panel))
    picture = display.show(Image.open(PHOTO))
    spi = spidev.SpiDev.return_value
    # every byte written to SPI, in order (drivers use xfer3 in blocks or xfer byte by byte)
    wire = bytes(b for call in spi.method_calls if call[0] in ("xfer", "xfer2", "xfer3", "writebytes")
                 for b in call.args[0])
    codes = np.asarray(panel.native_codes, dtype=np.uint8)[picture.panel_indices].ravel()
    packed = bytes(((codes[::2] << 4) | codes[1::2]).astype(np.uint8))
    assert packed in wire, "the picture did not reach SPI as our codes"


@pytest.mark.parametrize("variant, panel_name", [(14, "acep-5.7"), (15, "acep-4.0"), (16, "acep-4.0"),
                                                 (20, "acep-7.3"), (22, "spectra6-7.3"), (26, "spectra6-7.3"),
                                                 (21, "spectra6-13.3"), (27, "spectra6-13.3"),
                                                 (25, "spectra6-4.0")])
def test_panel_is_detected_from_the_hat_eeprom(fake_inky_hardware, variant, panel_name):
    *_, smbus = fake_inky_hardware
    from inky.eeprom import EPDType

    panel = get_panel(panel_name)
    smbus.eeprom = EPDType(panel.width, panel.height, color="7colour", pcb_variant=12,
                           display_variant=variant).encode()
    assert detect_panel() is panel
    display = open_display({"panel": "auto", "min_interval": 0})
    assert display.panel is panel and type(display.driver).__module__ == panel.inky_module


def test_no_eeprom_and_foreign_boards_get_clear_messages(fake_inky_hardware):
    *_, smbus = fake_inky_hardware
    with pytest.raises(DisplayError, match="no Inky HAT EEPROM answered.*set display.panel"):
        open_display({"panel": "auto"})
    from inky.eeprom import EPDType

    smbus.eeprom = EPDType(400, 300, color="red", pcb_variant=12, display_variant=6).encode()
    with pytest.raises(DisplayError, match="variant 6 .*Red wHAT.*not a colour Inky Impression"):
        detect_panel()


class BusyDriver:
    """A stand-in driver whose refresh times out like inky's _busy_wait does."""

    def __init__(self, panel, timeouts):
        self.panel, self.timeouts, self.shows = panel, timeouts, 0
        self.buf = None

    def set_image(self, image):
        assert image.mode == "P"
        self.buf = np.asarray(self.panel.native_codes, np.uint8)[np.asarray(image)]

    def set_border(self, colour):
        pass

    def show(self):
        self.shows += 1
        warnings.warn("Busy Wait: Timed out after 0.30s", stacklevel=1)  # short waits are harmless
        if self.timeouts:
            self.timeouts -= 1
            warnings.warn("Busy Wait: Timed out after 32.00s", stacklevel=1)


def test_busy_timeouts_from_inky_are_retried():
    panel = get_panel("spectra6-7.3")
    driver = BusyDriver(panel, timeouts=1)
    display = InkyDisplay(DisplayConfig(panel=panel.name, min_interval=0, busy_retries=1), driver=driver)
    display.show(Image.new("RGB", (800, 480), (255, 255, 255)))
    assert driver.shows == 2
    driver = BusyDriver(panel, timeouts=3)
    display = InkyDisplay(DisplayConfig(panel=panel.name, min_interval=0, busy_retries=1), driver=driver)
    with pytest.raises(DisplayError, match="refresh failed 2 times.*stayed busy"):
        display.show(Image.new("RGB", (800, 480)))


def test_a_driver_that_changes_our_picture_is_refused():
    panel = get_panel("acep-7.3")

    class Redithering(BusyDriver):
        def set_image(self, image):
            self.buf = np.zeros((480, 800), np.uint8)

    display = InkyDisplay(DisplayConfig(panel=panel.name, min_interval=0), driver=Redithering(panel, 0))
    with pytest.raises(DisplayError, match="changed the picture"):
        display.show(Image.open(PHOTO))
