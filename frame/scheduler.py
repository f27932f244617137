"""When pictures go up: fixed times or continuous, quiet hours, and the clock it all runs on.

The frame generates one picture ahead: a job starts as soon as the previous picture is
on the panel, and the finished picture waits until it is due:

- continuous (no ``schedule.times``): due as soon as it is ready;
- fixed times: due at the first scheduled time after the previous new picture went up,
  or at once when that time has already passed while it was being generated (a slow
  picture is shown late, never skipped, and never two for one time);
- either way, a picture due inside quiet hours waits until they end.

Everything takes the time as an argument (``Clock`` gives it), so tests run days of
schedule in microseconds with a fake clock.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol

from frame.config import QuietHours, ScheduleSettings


class Clock(Protocol):
    """Local wall-clock time (naive: schedule times are what the wall clock reads, across DST
    changes too) and monotonic seconds for intervals."""

    def now(self) -> dt.datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clock."""

    def now(self) -> dt.datetime:
        return dt.datetime.now()

    def monotonic(self) -> float:
        return time.monotonic()


def _at(day: dt.date, t: dt.time, tz: dt.tzinfo | None) -> dt.datetime:
    return dt.datetime.combine(day, t, tzinfo=tz)


def quiet_hours_at(schedule: ScheduleSettings, when: dt.datetime) -> QuietHours | None:
    """The quiet hours ``when`` falls in, or None."""
    t = when.timetz().replace(tzinfo=None)
    return next((q for q in schedule.quiet_hours if q.contains(t)), None)


def quiet_until(schedule: ScheduleSettings, when: dt.datetime) -> dt.datetime:
    """The first moment at or after ``when`` outside every quiet-hours range (ranges may chain)."""
    for _ in range(len(schedule.quiet_hours) + 1):
        hours = quiet_hours_at(schedule, when)
        if hours is None:
            return when
        end = _at(when.date(), hours.end, when.tzinfo)
        if end <= when:
            end = _at(when.date() + dt.timedelta(days=1), hours.end, when.tzinfo)
        when = end
    return when   # ranges covering the whole day: never quiet-free; the config check warns about times inside


def next_time(schedule: ScheduleSettings, after: dt.datetime) -> dt.datetime | None:
    """The first scheduled time strictly after ``after``; None when the schedule is continuous."""
    if not schedule.times:
        return None
    for days in range(2):
        day = after.date() + dt.timedelta(days=days)
        for t in schedule.times:
            candidate = _at(day, t, after.tzinfo)
            if candidate > after:
                return candidate
    raise AssertionError("a daily time always comes within two days")


def due_at(schedule: ScheduleSettings, ready: dt.datetime, last_new: dt.datetime | None) -> dt.datetime:
    """When a picture finished at ``ready`` should go up, given when the previous new one did."""
    due = ready
    if last_new is not None:
        slot = next_time(schedule, last_new)
        if slot is not None and slot > ready:
            due = slot
    return quiet_until(schedule, due)


def describe_wait(due: dt.datetime, now: dt.datetime) -> str:
    """'at 19:00' / 'tomorrow at 07:00' / 'on Mon 07:00' for status lines."""
    days = (due.date() - now.date()).days
    if days <= 0:
        return f"at {due:%H:%M}"
    if days == 1:
        return f"tomorrow at {due:%H:%M}"
    return f"on {due:%a %H:%M}"
