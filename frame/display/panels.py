"""The Inky Impression panels slowframe drives: resolution, inks in native order, palettes, driver.

Each panel's inks are listed in the controller's native colour order; a dithered
picture's index i means ink i of its panel. ``measured`` is what the inks look like on
a real panel (sRGB, as seen under daylight-ish light), the palette the ditherer aims
with; units differ, so a unit's own measurements can replace it (``palette`` in the
display config, see frame.display.config). ``nominal`` and ``inky_saturated`` are the
inky library's DESATURATED_PALETTE and SATURATED_PALETTE for the same driver.
"""

from __future__ import annotations

from dataclasses import dataclass

from frame.display.errors import DisplayError

RGB = tuple[int, int, int]

_ACEP_INKS = ("black", "white", "green", "blue", "red", "yellow", "orange")
_ACEP_NOMINAL: tuple[RGB, ...] = ((0, 0, 0), (255, 255, 255), (0, 255, 0), (0, 0, 255), (255, 0, 0),
                                  (255, 255, 0), (255, 140, 0))
# inky_uc8159.SATURATED_PALETTE: Pimoroni's published look of the 4" and 5.7" inks
_UC8159_SATURATED: tuple[RGB, ...] = ((57, 48, 57), (255, 255, 255), (58, 91, 70), (61, 59, 94),
                                      (156, 72, 75), (208, 190, 71), (177, 106, 73))
# inky_ac073tc1a.SATURATED_PALETTE: the same for the 7.3" 7-colour panel
_AC073_SATURATED: tuple[RGB, ...] = ((0, 0, 0), (217, 242, 255), (3, 124, 76), (27, 46, 198),
                                     (245, 80, 34), (255, 255, 68), (239, 121, 44))

_SPECTRA_INKS = ("black", "white", "yellow", "red", "blue", "green")
_SPECTRA_NOMINAL: tuple[RGB, ...] = ((0, 0, 0), (255, 255, 255), (255, 255, 0), (255, 0, 0), (0, 0, 255),
                                     (0, 255, 0))
_SPECTRA_SATURATED: tuple[RGB, ...] = ((0, 0, 0), (161, 164, 165), (208, 190, 71), (156, 72, 75),
                                       (61, 59, 94), (58, 91, 70))
# a Spectra 6 7.3" panel measured with a colorimeter (esp32-photoframe's published values)
_SPECTRA_MEASURED: tuple[RGB, ...] = ((2, 2, 2), (179, 182, 171), (201, 184, 0), (117, 10, 0), (0, 47, 107),
                                      (33, 69, 40))


@dataclass(frozen=True)
class Panel:
    """One Inky Impression model."""

    name: str
    title: str
    width: int
    height: int
    inks: tuple[str, ...]
    native_codes: tuple[int, ...]     # the controller's code for each ink
    measured: tuple[RGB, ...]         # what each ink looks like (default palette)
    measured_source: str
    nominal: tuple[RGB, ...]          # inky's DESATURATED_PALETTE (pure colours)
    inky_saturated: tuple[RGB, ...]   # inky's SATURATED_PALETTE
    inky_module: str                  # the inky driver module; its class is always ``Inky``
    eeprom_variants: tuple[int, ...]  # display_variant values in the HAT EEPROM

    @property
    def size(self) -> tuple[int, int]:
        return (self.width, self.height)

    @property
    def family(self) -> str:
        return "spectra6" if len(self.inks) == 6 else "7-colour"


PANELS: dict[str, Panel] = {p.name: p for p in (
    Panel("acep-4.0", 'Inky Impression 4" 7-colour (UC8159)', 640, 400, _ACEP_INKS, tuple(range(7)),
          _UC8159_SATURATED, "Pimoroni's saturated palette", _ACEP_NOMINAL, _UC8159_SATURATED,
          "inky.inky_uc8159", (15, 16)),
    Panel("acep-5.7", 'Inky Impression 5.7" 7-colour (UC8159)', 600, 448, _ACEP_INKS, tuple(range(7)),
          _UC8159_SATURATED, "Pimoroni's saturated palette", _ACEP_NOMINAL, _UC8159_SATURATED,
          "inky.inky_uc8159", (14,)),
    Panel("acep-7.3", 'Inky Impression 7.3" 7-colour (AC073TC1A)', 800, 480, _ACEP_INKS, tuple(range(7)),
          _AC073_SATURATED, "Pimoroni's saturated palette", _ACEP_NOMINAL, _AC073_SATURATED,
          "inky.inky_ac073tc1a", (20,)),
    Panel("spectra6-4.0", 'Inky Impression 4" Spectra 6 (E640)', 600, 400, _SPECTRA_INKS, (0, 1, 2, 3, 5, 6),
          _SPECTRA_MEASURED, "colorimeter, a 7.3\" Spectra 6 unit", _SPECTRA_NOMINAL, _SPECTRA_SATURATED,
          "inky.inky_e640", (25,)),
    Panel("spectra6-7.3", 'Inky Impression 7.3" Spectra 6 (E673)', 800, 480, _SPECTRA_INKS, (0, 1, 2, 3, 5, 6),
          _SPECTRA_MEASURED, "colorimeter, a 7.3\" Spectra 6 unit", _SPECTRA_NOMINAL, _SPECTRA_SATURATED,
          "inky.inky_e673", (22, 26)),
    Panel("spectra6-13.3", 'Inky Impression 13.3" Spectra 6 (EL133UF1)', 1600, 1200, _SPECTRA_INKS,
          (0, 1, 2, 3, 5, 6), _SPECTRA_MEASURED, "colorimeter, a 7.3\" Spectra 6 unit", _SPECTRA_NOMINAL,
          _SPECTRA_SATURATED, "inky.inky_el133uf1", (21, 27)),
)}


def get_panel(name: str) -> Panel:
    """The panel called ``name`` (see ``slowframe panels``); DisplayError naming the choices otherwise."""
    try:
        return PANELS[name]
    except KeyError:
        raise DisplayError(f"unknown panel {name!r}: use one of {', '.join(PANELS)}") from None


def panel_for_eeprom_variant(variant: int) -> Panel | None:
    """The panel whose HAT EEPROM says ``display_variant == variant``, or None."""
    for panel in PANELS.values():
        if variant in panel.eeprom_variants:
            return panel
    return None
