"""The Display API through the file backend: outputs, orientation, pacing, retries, errors, CLI."""

import threading
import time

import numpy as np
import pytest
from PIL import Image

from frame.cli import main
from frame.display import DisplayConfig, DisplayError, PanelBusyError, open_display
from frame.display.base import Display
from frame.display.panels import get_panel

PHOTO = "tests/data/photos/rocket.jpg"


def _file_display(tmp_path, **settings):
    return open_display({"backend": "file", "panel": "spectra6-7.3", "output": str(tmp_path), "min_interval": 0,
                         **settings})


def test_file_backend_writes_the_panel_image_and_a_preview(tmp_path):
    display = _file_display(tmp_path)
    picture = display.show(Image.open(PHOTO))
    native = Image.open(tmp_path / "panel.png")
    preview = Image.open(tmp_path / "look.png")
    assert native.mode == "P" and native.size == (800, 480) and preview.size == (800, 480)
    indices = np.asarray(native)
    assert indices.max() < 6 and np.array_equal(indices, picture.panel_indices)
    assert native.getpalette()[:18] == [c for rgb in get_panel("spectra6-7.3").measured for c in rgb]
    np.testing.assert_array_equal(np.asarray(preview), display.palette.render(indices))


def test_portrait_mounting_turns_the_picture_for_the_panel(tmp_path):
    display = _file_display(tmp_path, orientation="portrait")
    assert display.size == (480, 800) and display.generation_size() == (768, 1280)
    picture = np.full((800, 480, 3), 255, np.uint8)
    picture[:40, :40] = 0  # black square at the viewer's top-left
    display.show(Image.fromarray(picture))
    native = np.asarray(Image.open(tmp_path / "panel.png"))
    assert native.shape == (480, 800)
    black = display.panel.inks.index("black")
    # panel turned 90 degrees clockwise: the viewer's top-left is the panel's bottom-left
    assert (native[-40:, :40] == black).all() and (native[:40, :40] != black).all()
    preview = np.asarray(Image.open(tmp_path / "look.png"))
    assert preview.shape == (800, 480, 3) and preview[:40, :40].max() < 10


def test_flips_mirror_the_panel_image(tmp_path):
    plain = _file_display(tmp_path / "a").show(Image.open(PHOTO)).panel_indices
    flipped = _file_display(tmp_path / "b", flip_horizontal=True).show(Image.open(PHOTO)).panel_indices
    assert flipped.shape == plain.shape and not np.array_equal(flipped, plain)


def test_caption_strip_is_crisp_black_on_white(tmp_path):
    display = _file_display(tmp_path, caption=True)
    picture = display.show(Image.open(PHOTO), caption="a rocket lifting off at dawn")
    strip = picture.indices[-20:]
    white, black = display.panel.inks.index("white"), display.panel.inks.index("black")
    assert set(np.unique(strip)) == {white, black} and (strip == black).sum() > 50


def test_error_screen_shows_the_message_in_black_and_white(tmp_path):
    display = _file_display(tmp_path)
    picture = display.show_error("model folder /models/sdxl is missing")
    assert set(np.unique(picture.indices)) == {display.panel.inks.index("white"), display.panel.inks.index("black")}
    assert (tmp_path / "panel.png").exists()


@pytest.mark.parametrize("panel", ["spectra6-7.3", "spectra6-4.0", "acep-4.0"])
def test_a_notice_is_solid_inks_in_large_type_with_a_red_band(tmp_path, panel):
    display = open_display({"backend": "file", "panel": panel, "output": str(tmp_path), "min_interval": 0})
    picture = display.show_notice("Making the first picture", ["Theme: sea", "Ready about 14:35"], "slowframe")
    inks = display.panel.inks
    assert set(np.unique(picture.indices)) == {inks.index(i) for i in ("white", "black", "red")}   # no dither
    rows = np.flatnonzero((picture.indices == inks.index("red")).all(axis=1))
    assert rows[0] == 0 and rows[-1] + 1 > display.size[1] * 0.15      # a red band across the top...
    title = picture.indices[: rows[-1]]
    assert (title == inks.index("white")).sum() > 1000                  # ...with the title in white on it
    body = picture.indices[rows[-1] + 1:]
    ink_rows = np.flatnonzero((body == inks.index("black")).any(axis=1))
    # large type: the first body line's letters stand at least 4% of the panel's height tall
    first_line = ink_rows[: np.argmax(np.diff(ink_rows) > 1)] if (np.diff(ink_rows) > 1).any() else ink_rows
    assert first_line[-1] - first_line[0] + 1 >= 0.04 * display.size[1]


def test_a_picture_being_made_gets_a_status_strip_with_a_progress_bar(tmp_path):
    display = _file_display(tmp_path)
    picture = display.show_developing(Image.open(PHOTO), "sea \u00b7 step 5/20 \u00b7 ready about 14:35", 0.25)
    inks = display.panel.inks
    strip = picture.indices[-38:]                                       # 8% of 480 rows
    assert set(np.unique(strip)) == {inks.index(i) for i in ("white", "black", "red")}
    bar = strip[0]
    assert (bar[:200] == inks.index("red")).all() and (bar[200:] == inks.index("black")).all()   # a quarter done
    assert (strip[6:] == inks.index("black")).sum() > 300                 # the text
    assert len(np.unique(picture.indices[:-38])) > 3                      # the picture above, dithered


class RecordingDisplay(Display):
    """A backend that records refreshes on a fake clock; can fail with busy timeouts."""

    def __init__(self, failures=0, **settings):
        self.now = 1000.0
        self.sleeps = []
        self.calls = []
        self.failures = failures
        super().__init__(get_panel("acep-7.3"), DisplayConfig(backend="file", panel="acep-7.3", **settings),
                         clock=lambda: self.now, sleep=self._sleep)

    def _sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def _refresh(self, panel_indices):
        self.calls.append(self.now)
        self.now += 40.0  # a refresh takes 40 s
        if self.failures:
            self.failures -= 1
            raise PanelBusyError("Busy Wait: Timed out after 32.00s")


def test_refreshes_keep_the_minimum_interval():
    display = RecordingDisplay(min_interval=300)
    picture = Image.new("RGB", (800, 480), (200, 100, 50))
    display.show(picture)
    assert display.seconds_until_ready() == pytest.approx(300)
    display.now += 100
    display.show(picture)
    assert display.sleeps == [pytest.approx(200)]
    assert display.calls[1] - (display.calls[0] + 40) == pytest.approx(300)


def test_busy_timeouts_are_retried_then_reported():
    picture = Image.new("RGB", (800, 480))
    display = RecordingDisplay(failures=2, busy_retries=2, min_interval=0)
    display.show(picture)
    assert len(display.calls) == 3 and display.refreshes == 1
    display = RecordingDisplay(failures=5, busy_retries=1, min_interval=0)
    with pytest.raises(DisplayError, match="refresh failed 2 times"):
        display.show(picture)


def test_one_refresh_at_a_time():
    active, overlaps = [], []

    class Slow(Display):
        def _refresh(self, panel_indices):
            active.append(1)
            overlaps.append(len(active))
            time.sleep(0.05)
            active.pop()

    display = Slow(get_panel("acep-7.3"), DisplayConfig(backend="file", panel="acep-7.3", min_interval=0))
    picture = display.render(Image.new("RGB", (800, 480)))
    threads = [threading.Thread(target=display.refresh, args=(picture,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1, 1, 1, 1]


@pytest.mark.parametrize("settings, message", [
    ({"panle": "acep-7.3"}, "did you mean 'panel'"),
    ({"panel": "acep-9"}, "acep-4.0, acep-5.7"),
    ({"saturation": "high"}, "expected a number"),
    ({"saturation": 2}, "between 0 and 1"),
    ({"caption": "yes"}, "true or false"),
    ({"orientation": "sideways"}, "landscape, portrait"),
    ({"min_interval": -5}, "cannot be negative"),
    ({"preview": "sometimes"}, "expected a number or one of auto, off"),
    ({"preview": 0}, "minutes must be more than 0"),
    ({"browse_timeout": -1}, "minutes cannot be negative"),
    ({"backend": "file", "panel": "auto"}, "is not one of"),
])
def test_bad_settings_say_which_key_and_what_is_allowed(settings, message):
    with pytest.raises(DisplayError, match=message):
        DisplayConfig.from_mapping(settings)


def test_inky_backend_without_the_library_says_how_to_fix(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "inky", None)
    monkeypatch.setitem(sys.modules, "inky.inky_e673", None)
    with pytest.raises(DisplayError, match="backend: file"):
        open_display({"panel": "spectra6-7.3"})


def test_cli_panels_lists_every_panel(capsys):
    assert main(["panels"]) == 0
    out = capsys.readouterr().out
    for name in ("acep-4.0", "acep-5.7", "acep-7.3", "spectra6-4.0", "spectra6-7.3", "spectra6-13.3"):
        assert name in out
    assert "1600x1200" in out and "black (2, 2, 2)" in out


@pytest.mark.parametrize("panel_name, inks", [("spectra6-4.0", 6), ("acep-5.7", 7)])
def test_cli_dither_writes_a_native_order_palette_png(tmp_path, capsys, panel_name, inks):
    out = tmp_path / "out.png"
    assert main(["dither", PHOTO, str(out), "--panel", panel_name, "--method", "sierra3", "--fit", "contain",
                 "--look", str(tmp_path / "p.png"), "--score"]) == 0
    image = Image.open(out)
    panel = get_panel(panel_name)
    assert image.mode == "P" and image.size == panel.size
    assert np.asarray(image).max() < inks
    assert image.getpalette()[:3 * inks] == [c for rgb in panel.measured for c in rgb]
    assert "S-CIELAB" in capsys.readouterr().out


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    assert main(["dither", str(tmp_path / "missing.jpg"), str(tmp_path / "o.png"), "--panel", "acep-7.3"]) == 1
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.jpg").write_text("not a picture")
    assert main(["dither", str(tmp_path / "bad.jpg"), str(tmp_path / "o.png"), "--panel", "acep-7.3"]) == 1
    assert main(["dither", PHOTO, str(tmp_path / "o.png"), "--panel", "acep-7.3", "--fit", "none"]) == 1
    assert "--fit cover" in capsys.readouterr().err


def test_cli_show_uses_the_configs_display_section(tmp_path, capsys):
    config = tmp_path / "slowframe.yaml"
    config.write_text(f"display:\n  backend: file\n  panel: spectra6-13.3\n  output: {tmp_path / 'out'}\n"
                      "  min_interval: 0\n")
    assert main(["show", PHOTO, "--config", str(config), "--caption", "a rocket"]) == 0
    assert Image.open(tmp_path / "out" / "panel.png").size == (1600, 1200)
    config.write_text("display:\n  backend: file\n  panel: spectra6-13.3\n  colour: red\n")
    assert main(["show", PHOTO, "--config", str(config)]) == 1
    assert "unknown key 'colour'" in capsys.readouterr().err
