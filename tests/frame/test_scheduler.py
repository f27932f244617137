"""When a finished picture goes up: fixed times, continuous, quiet hours."""

from __future__ import annotations

import datetime as dt

from frame.config import QuietHours, ScheduleSettings
from frame.scheduler import describe_wait, due_at, next_time, quiet_hours_at, quiet_until


def at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2025, 3, day, hour, minute)


def t(text: str) -> dt.time:
    return dt.time.fromisoformat(text)


TWICE_A_DAY = ScheduleSettings(times=(t("07:00"), t("19:00")))
NIGHTS_OFF = (QuietHours(t("22:30"), t("07:00")),)


def test_next_time_is_the_first_scheduled_time_strictly_after():
    assert next_time(TWICE_A_DAY, at(1, 6, 59)) == at(1, 7)
    assert next_time(TWICE_A_DAY, at(1, 7)) == at(1, 19)
    assert next_time(TWICE_A_DAY, at(1, 19, 30)) == at(2, 7)
    assert next_time(ScheduleSettings(), at(1, 12)) is None


def test_continuous_shows_a_picture_as_soon_as_it_is_ready():
    assert due_at(ScheduleSettings(), ready=at(1, 13, 17), last_new=at(1, 9)) == at(1, 13, 17)


def test_a_picture_made_ahead_waits_for_the_next_time():
    assert due_at(TWICE_A_DAY, ready=at(1, 10), last_new=at(1, 7)) == at(1, 19)
    assert due_at(TWICE_A_DAY, ready=at(1, 21), last_new=at(1, 19)) == at(2, 7)


def test_a_late_picture_goes_up_when_ready_and_never_two_for_one_time():
    # generation took longer than the gap: the 19:00 slot was missed, so it shows at once...
    assert due_at(TWICE_A_DAY, ready=at(1, 20, 30), last_new=at(1, 7)) == at(1, 20, 30)
    # ...and the next one waits for 07:00, not for the slot that was already used late
    assert due_at(TWICE_A_DAY, ready=at(1, 20, 45), last_new=at(1, 20, 30)) == at(2, 7)


def test_the_very_first_picture_goes_up_at_once():
    assert due_at(TWICE_A_DAY, ready=at(1, 10), last_new=None) == at(1, 10)


def test_quiet_hours_across_midnight():
    schedule = ScheduleSettings(quiet_hours=NIGHTS_OFF)
    assert quiet_hours_at(schedule, at(1, 23)) == NIGHTS_OFF[0]
    assert quiet_hours_at(schedule, at(2, 6, 59)) == NIGHTS_OFF[0]
    assert quiet_hours_at(schedule, at(2, 7)) is None
    assert quiet_hours_at(schedule, at(1, 22, 29)) is None
    assert quiet_until(schedule, at(1, 23, 15)) == at(2, 7)
    assert quiet_until(schedule, at(2, 3)) == at(2, 7)
    assert quiet_until(schedule, at(2, 12)) == at(2, 12)


def test_a_picture_due_in_quiet_hours_waits_until_they_end():
    continuous = ScheduleSettings(quiet_hours=NIGHTS_OFF)
    assert due_at(continuous, ready=at(1, 23, 40), last_new=at(1, 20)) == at(2, 7)
    fixed = ScheduleSettings(times=(t("06:00"), t("18:00")), quiet_hours=NIGHTS_OFF)
    assert due_at(fixed, ready=at(1, 20), last_new=at(1, 18)) == at(2, 7)   # 06:00 falls in quiet hours


def test_chained_quiet_hours_are_waited_out_together():
    schedule = ScheduleSettings(quiet_hours=(QuietHours(t("12:00"), t("13:00")), QuietHours(t("13:00"), t("14:30"))))
    assert quiet_until(schedule, at(1, 12, 10)) == at(1, 14, 30)


def test_describe_wait():
    now = at(1, 10)
    assert describe_wait(at(1, 19), now) == "at 19:00"
    assert describe_wait(at(2, 7), now) == "tomorrow at 07:00"
    assert describe_wait(at(4, 7), now) == "on Tue 07:00"


def test_a_week_of_a_slow_frame_on_a_fixed_schedule():
    """Pictures take 5 h to make and start as soon as the previous one is up: each goes up at
    the next of 07:00 and 19:00 after its predecessor, never inside the quiet hours."""
    schedule = ScheduleSettings(times=(t("07:00"), t("19:00")), quiet_hours=(QuietHours(t("23:00"), t("06:00")),))
    shown = [at(1, 7)]
    for _ in range(14):
        ready = shown[-1] + dt.timedelta(hours=5)
        shown.append(due_at(schedule, ready, shown[-1]))
    assert [s.strftime("%d %H:%M") for s in shown[:5]] == ["01 07:00", "01 19:00", "02 07:00", "02 19:00",
                                                          "03 07:00"]
    assert all(s.time() in (t("07:00"), t("19:00")) for s in shown)
