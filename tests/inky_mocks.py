"""Real inky driver classes on fake hardware: gpiod, gpiodevice, spidev and smbus2 mocked.

The same approach as inky's own tests: the hardware modules are MagicMocks in
sys.modules, so the real drivers import and run on any machine. Needs the inky
package itself (pure Python): ``pip install --no-deps inky`` (done by .ci/run).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from unittest import mock

import pytest


class FakeSMBus:
    """smbus2.SMBus answering EEPROM reads with ``FakeSMBus.eeprom`` (None: no EEPROM, OSError)."""

    eeprom: bytes | None = None

    def __init__(self, bus: int):
        self.bus = bus

    def write_i2c_block_data(self, address, register, values):
        if self.eeprom is None:
            raise OSError(121, "Remote I/O error")

    def read_i2c_block_data(self, address, register, length):
        return list(self.eeprom[register:register + length])


def _drop_inky_modules():
    for name in [n for n in sys.modules if n == "inky" or n.startswith("inky.")]:
        del sys.modules[name]


@pytest.fixture
def fake_inky_hardware(monkeypatch):
    """Mocked hardware modules; yields (gpiod, gpiodevice, spidev, FakeSMBus)."""
    if importlib.util.find_spec("inky") is None:
        pytest.skip("the inky library is not installed (pip install --no-deps inky; .ci/run does)")
    gpiod, gpiodevice, spidev = mock.MagicMock(), mock.MagicMock(), mock.MagicMock()
    gpio = gpiodevice.find_chip_by_platform.return_value.request_lines.return_value
    gpio.get_value.return_value = gpiod.line.Value.ACTIVE  # BUSY high: panel idle
    smbus2 = types.ModuleType("smbus2")
    smbus2.SMBus = FakeSMBus
    monkeypatch.setattr(FakeSMBus, "eeprom", None)
    for name, module in (("gpiod", gpiod), ("gpiod.line", gpiod.line), ("gpiodevice", gpiodevice),
                         ("gpiodevice.platform", mock.MagicMock()), ("spidev", spidev), ("smbus2", smbus2)):
        monkeypatch.setitem(sys.modules, name, module)
    _drop_inky_modules()
    yield gpiod, gpiodevice, spidev, FakeSMBus
    _drop_inky_modules()


@pytest.fixture
def inky_drivers(fake_inky_hardware, monkeypatch):
    """make(panel) -> the real inky ``Inky`` driver for that panel, on fake hardware and a fake clock."""
    now = [0.0]
    fake_time = types.SimpleNamespace(sleep=lambda s: now.__setitem__(0, now[0] + s), monotonic=lambda: now[0],
                                      time=lambda: now[0])

    def make(panel, **kwargs):
        module = importlib.import_module(panel.inky_module)
        monkeypatch.setattr(module, "time", fake_time)
        return module.Inky(resolution=panel.size, **kwargs)

    return make
