"""What the daemon puts on the panel besides pictures: the first screen and previews of the picture being made.

The loop runs with a fake clock, a runner the test drives (it posts progress and previews
as the worker would) and the file display, recording what each refresh showed.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from PIL import Image

from daemon_frames import CONFIG, Frame
from frame.display.file_backend import FileDisplay
from frame.worker import JobPreview, PreviewRequest

PICTURE, PREVIEW = (200, 120, 40), (40, 120, 200)   # the colours ManualRunner's pictures and previews have


class Recording(FileDisplay):
    """The file display, noting what each refresh was: ("notice", title, lines), ("preview", status,
    progress, colour), ("picture", colour) or ("error", text)."""

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.seen: list[tuple] = []

    def show(self, image, caption=None):
        self.seen.append(("picture", image.convert("RGB").getpixel((0, 0))))
        return super().show(image, caption)

    def show_developing(self, image, status, progress):
        self.seen.append(("preview", status, progress, image.convert("RGB").getpixel((0, 0))))
        return super().show_developing(image, status, progress)

    def show_notice(self, title, lines, footer=""):
        self.seen.append(("notice", title, tuple(lines)))
        return super().show_notice(title, lines, footer)

    def show_error(self, text, title="slowframe could not make a picture"):
        self.seen.append(("error", text))
        return super().show_error(text, title)


def continuous(display: str = "", schedule: str = 'quiet_hours: ["22:00-06:00"]') -> str:
    """The test config with no schedule times (pictures go up when ready) and extra display keys."""
    config = CONFIG.replace('schedule: {times: ["07:00", "19:00"], quiet_hours: ["22:00-06:00"]}',
                            f"schedule: {{{schedule}}}")
    return config.replace("min_interval: 180}", f"min_interval: 180{', ' + display if display else ''}}}")


@pytest.fixture
def frames(tmp_path):
    """Start a Frame with the Recording display: frames(config, start); each is shut down after the test."""
    started: list[Frame] = []

    def start(config: str, at: dt.datetime) -> Frame:
        frame = Frame(tmp_path, config, start=at, display_class=Recording)
        started.append(frame)
        return frame

    yield start
    for frame in started:
        frame.close()


def kinds(f: Frame) -> list[str]:
    return [seen[0] for seen in f.display.seen]


def test_a_fresh_frame_says_at_once_what_it_is_making(tmp_path, frames):
    f = frames(continuous(), dt.datetime(2025, 3, 1, 8, 0))
    # within the first turn of the loop (the daemon turns every second): no clock advance at all
    assert f.display.seen == [("notice", "Making the first picture",
                               ("Theme: sea", "Ready time: known after the first step",
                                "It shows here as it develops."))]
    expected = FileDisplay(f.display.config.__class__(backend="file", panel="spectra6-7.3",
                                                      output=str(tmp_path / "expected"), min_interval=0))
    expected.show_notice("Making the first picture", list(f.display.seen[0][2]),
                         "slowframe \u00b7 2025-03-01 08:00 \u00b7 `slowframe status` for more")
    assert Image.open(f.display.panel_path).tobytes() == Image.open(expected.panel_path).tobytes()
    assert f.daemon.history.entries() == []


def test_a_fresh_frame_in_quiet_hours_still_says_so_at_once(frames):
    f = frames(continuous(), dt.datetime(2025, 3, 1, 23, 0))
    assert kinds(f) == ["notice"]


def test_a_fresh_frame_without_a_model_says_where_to_copy_one(tmp_path, frames):
    (tmp_path / "frame.yaml").write_text(continuous().replace("path: model", "path: later"))
    f = frames("", dt.datetime(2025, 3, 1, 8, 0))
    [(kind, title, lines)] = f.display.seen
    assert (kind, title) == ("notice", "No model yet")
    assert lines[0] == f"Copy an SDXL model folder to {tmp_path / 'later'}."
    assert str(tmp_path / "frame.yaml") in lines[1]
    f.clock.advance(seconds=600)
    f.step()
    assert kinds(f) == ["notice"]   # said once, in large type: not again as an error screen


def test_a_restarted_frame_with_pictures_shows_no_first_screen(frames):
    f = frames(continuous(), dt.datetime(2025, 3, 1, 8, 0))
    f.runner.finish()
    f.at(8, 10)
    assert kinds(f) == ["notice", "picture"]
    f.close()
    g = frames(continuous(), dt.datetime(2025, 3, 1, 9, 0))
    g.at(9, 30)
    assert g.display.seen == []


def make_progress(f: Frame, step: int, seconds_per_step: float = 600.0) -> None:
    f.runner.progress(step, seconds_per_step=seconds_per_step)
    f.runner.preview(step, colour=(40, 120, 200 - step))


def test_previews_come_every_n_minutes_with_theme_step_and_ready_time(tmp_path, frames):
    f = frames(continuous("preview: 30"), dt.datetime(2025, 3, 1, 8, 0))
    request = f.runner.preview_request
    assert request == PreviewRequest(tmp_path / "state" / "job" / "preview.png", every_seconds=900)
    make_progress(f, 1)
    f.at(8, 10)
    f.at(8, 29)
    assert kinds(f) == ["notice"]                     # 30 minutes from the first screen
    make_progress(f, 3)
    f.at(8, 30)
    assert f.display.seen[-1] == ("preview", "sea \u00b7 step 3/20 \u00b7 ready about 11:20", 0.15,
                                  (40, 120, 197))
    f.at(8, 59)
    assert kinds(f) == ["notice", "preview"]
    f.at(9, 0)
    assert kinds(f) == ["notice", "preview"]          # no newer preview: nothing to show again
    make_progress(f, 7)
    f.at(9, 1)
    assert f.display.seen[-1][:2] == ("preview", "sea \u00b7 step 7/20 \u00b7 ready about 11:11")
    assert f.daemon.history.entries() == [] and f.daemon.shown_id is None
    f.runner.finish()
    f.at(9, 5)
    [entry] = f.daemon.history.entries()             # the picture, not a preview
    assert Image.open(entry.image).convert("RGB").getpixel((0, 0)) == PICTURE
    assert f.display.seen[-1] == ("picture", PICTURE)


def test_auto_previews_come_every_quarter_of_the_making_time(frames):
    f = frames(continuous(), dt.datetime(2025, 3, 1, 8, 0))
    assert f.runner.preview_request.every_steps == 2   # 20 steps: 8 files for 4 previews
    assert f.runner.preview_request.decoder == "linear"
    make_progress(f, 1, seconds_per_step=60)        # 20 minutes a picture: a preview every 5
    f.at(8, 4)
    assert kinds(f) == ["notice"]
    f.at(8, 5)
    assert kinds(f) == ["notice", "preview"]
    make_progress(f, 9, seconds_per_step=60)
    f.at(8, 9)
    assert kinds(f) == ["notice", "preview"]
    f.at(8, 10)
    assert kinds(f) == ["notice", "preview", "preview"]


def test_a_restarted_frame_keeps_the_auto_preview_cadence_of_the_picture_it_resumes(frames):
    f = frames(continuous(), dt.datetime(2025, 3, 1, 8, 0))
    make_progress(f, 1, seconds_per_step=60)        # 20 minutes a picture: a preview every 5
    f.at(8, 2)
    f.close()
    g = frames(continuous(), dt.datetime(2025, 3, 1, 8, 3))
    g.runner.preview(2)                             # the resumed worker's first preview, before its first step time
    g.at(8, 7)
    assert kinds(g) == ["notice"]                   # still nothing in the history: the first screen again
    g.at(8, 8)
    assert kinds(g) == ["notice", "preview"]        # one interval after it, as the saved step time says


def test_previews_never_come_sooner_than_min_interval(frames):
    f = frames(continuous("preview: 1"), dt.datetime(2025, 3, 1, 8, 0))
    times = []
    for second in range(0, 1200, 20):
        f.clock.set(dt.datetime(2025, 3, 1, 8, 0) + dt.timedelta(seconds=second))
        make_progress(f, 1 + second // 100, seconds_per_step=20)
        before = len(f.display.seen)
        f.step()
        if len(f.display.seen) > before:
            times.append(second)
    assert times == [180, 360, 540, 720, 900, 1080]   # each 180 s after the last refresh, not every 60 s


def test_quiet_hours_hold_previews(frames):
    f = frames(continuous("preview: 10"), dt.datetime(2025, 3, 1, 21, 30))
    make_progress(f, 1, seconds_per_step=3600)
    f.at(21, 45)
    assert f.display.seen[-1][1] == "sea \u00b7 step 1/20 \u00b7 ready tomorrow about 16:45"   # 19 h to go
    for hour, minute, day in ((22, 0, 1), (23, 30, 1), (3, 0, 2), (5, 59, 2)):
        make_progress(f, 1 + hour % 5, seconds_per_step=3600)
        f.at(hour, minute, day)
    assert kinds(f) == ["notice", "preview"]
    f.at(6, 0, day=2)
    assert kinds(f) == ["notice", "preview", "preview"]


def test_previews_off_asks_the_worker_for_none_and_shows_none(frames):
    f = frames(continuous("preview: off"), dt.datetime(2025, 3, 1, 8, 0))
    assert f.runner.preview_request is None
    assert "It shows here as it develops." not in f.display.seen[0][2]
    f.runner.progress(5, seconds_per_step=60)
    f.at(12, 0)
    assert kinds(f) == ["notice"]


def test_a_picture_made_ahead_for_a_scheduled_time_is_not_previewed_over_the_current_one(frames):
    config = continuous("preview: 10", schedule='times: ["07:00", "19:00"]')
    f = frames(config, dt.datetime(2025, 3, 1, 7, 30))
    make_progress(f, 1, seconds_per_step=60)
    f.at(7, 40)
    assert kinds(f) == ["notice", "preview"]   # the first picture goes up when ready: previews show it
    f.runner.finish()
    f.at(8, 0)
    assert kinds(f) == ["notice", "preview", "picture"]
    for hour, minute in ((8, 30), (12, 0), (18, 59)):   # the next is made for 19:00: this one stays
        make_progress(f, 2 + hour % 7, seconds_per_step=3600)
        f.at(hour, minute)
    assert kinds(f) == ["notice", "preview", "picture"]
    f.at(19, 0)                                # 19:00 came and the picture is late: now it is previewed
    assert kinds(f) == ["notice", "preview", "picture", "preview"]


def test_a_picture_chosen_with_the_buttons_stays_until_the_browse_timeout(frames):
    f = frames(continuous("preview: 10, browse_timeout: 30"), dt.datetime(2025, 3, 1, 8, 0))
    f.runner.finish()
    f.at(8, 5)
    first = f.daemon.history.entries()[0].id
    make_progress(f, 1)
    f.at(8, 15)
    assert kinds(f) == ["notice", "picture", "preview"]
    f.press(5)                                   # A: previous, from a preview: the newest picture
    f.at(8, 20)
    assert f.display.seen[-1] == ("picture", PICTURE) and f.daemon.shown_id == first
    make_progress(f, 2)
    f.at(8, 49)
    assert kinds(f)[-1] == "picture"             # browse_timeout 30 minutes from 8:20
    f.at(8, 50)
    assert kinds(f)[-1] == "preview"
    f.press(6, held=0.3)                         # B: hold = latest; browsing never shows a preview
    f.at(8, 55)
    assert f.display.seen[-1] == ("picture", PICTURE)
    assert [e.id for e in f.daemon.history.entries()] == [first]


@pytest.mark.parametrize("value, message", [
    ("sometimes", "display.preview: expected a number or one of auto, off, got 'sometimes'"),
    ("0", "display.preview: 0.0 minutes must be more than 0"),
    ("yes", "display.preview: expected a number or one of auto, off, got True"),
])
def test_a_bad_preview_setting_is_reported_at_its_place(tmp_path, value, message):
    from frame.config import check_config

    path = tmp_path / "frame.yaml"
    path.write_text(continuous(f"preview: {value}"))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("display:"))
    column = path.read_text().splitlines()[line - 1].index(f"preview: {value}") + len("preview: ") + 1
    errors = [str(p) for p in check_config(path) if p.severity == "error"]
    assert errors == [f"{path}:{line}:{column}: error: {message}"]


def test_the_panel_previews_the_workers_file_as_it_is(tmp_path, frames):
    f = frames(continuous("preview: 10"), dt.datetime(2025, 3, 1, 8, 0))
    f.runner.progress(4, seconds_per_step=60)
    path = f.runner.preview_request.path
    gradient = np.tile(np.linspace(0, 255, 160, dtype=np.uint8)[None, :, None], (96, 1, 3))
    Image.fromarray(gradient, "RGB").save(path)
    f.daemon.events.put(JobPreview(f.runner.job.id, path, 4, 20))   # as the worker reports it
    f.at(8, 10)
    expected = FileDisplay(f.display.config.__class__(backend="file", panel="spectra6-7.3",
                                                      output=str(tmp_path / "expected"), min_interval=0))
    expected.show_developing(Image.open(path), "sea \u00b7 step 4/20 \u00b7 ready about 08:26", 0.2)
    assert Image.open(f.display.panel_path).tobytes() == Image.open(expected.panel_path).tobytes()


def test_changing_when_previews_come_keeps_the_panel_open_and_resting(frames):
    f = frames(continuous("preview: 10"), dt.datetime(2025, 3, 1, 8, 0))
    f.config_path.write_text(continuous("preview: 20, browse_timeout: 5"))
    f.clock.advance(seconds=10)
    f.step()
    assert f.daemon.config.display.preview == 20.0 and len(f.displays) == 1
    assert f.display.seconds_until_ready() == 170   # min_interval still counts from the first screen
    make_progress(f, 2)
    f.at(8, 19)
    assert kinds(f) == ["notice"]                   # the new 20 minutes apply at once
    f.at(8, 20)
    assert kinds(f) == ["notice", "preview"]


def test_a_model_decoded_by_its_tiny_decoder_is_previewed_by_it_too(frames):
    f = frames(continuous().replace("preset: rpi}", "preset: rpi, decoder: tiny}"), dt.datetime(2025, 3, 1, 8, 0))
    assert f.runner.started[0][0].decoder == "tiny" and f.runner.preview_request.decoder == "tiny"
