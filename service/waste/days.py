"""UTC days and microseconds since the epoch: the time arithmetic of the waste rules.

A day is a UTC calendar day, numbered from 1970-01-01 (day 0); instants are integer
microseconds since the epoch, so day arithmetic is exact integer arithmetic.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Final

__all__ = ["DAY_US", "date_of", "datetime_at", "day_of", "micros", "parse_day"]

DAY_US: Final = 86_400_000_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY: Final = date(1970, 1, 1)


def micros(when: datetime) -> int:
    """Microseconds since the epoch of a tz-aware instant."""
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def datetime_at(us: int) -> datetime:
    """The UTC instant `us` microseconds after the epoch."""
    return _EPOCH + timedelta(microseconds=us)


def date_of(day: int) -> date:
    """The date of a day number."""
    return _EPOCH_DAY + timedelta(days=day)


def day_of(d: date) -> int:
    """The day number of a date."""
    return (d - _EPOCH_DAY).days


def parse_day(text: str | None) -> int | None:
    """`YYYY-MM-DD` -> days since epoch; None if missing or malformed."""
    if text is None or len(text) != 10:
        return None
    try:
        return day_of(date.fromisoformat(text))
    except ValueError:
        return None
