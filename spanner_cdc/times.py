"""How times and durations are written, each form in one place: RFC 3339 for records, ISO with Z for JSON, words for
messages, compact forms for people. Imports nothing of the project."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def rfc3339(value: datetime) -> str:
    """UTC, always six fractional digits, `Z`: 2022-09-27T12:30:00.123456Z."""
    utc = value.astimezone(UTC) if value.utcoffset() else value
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
        f".{utc.microsecond:06d}Z"
    )


def iso_z(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z, microseconds only when there are some."""
    if value is None:
        return None
    value = value.astimezone(UTC)
    spec = "microseconds" if value.microsecond else "seconds"
    return value.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def human_duration(seconds: float | None, missing: str = "-") -> str:
    """Compact, two units at most: <1s, 42s, 3m07s, 2h05m, 3d04h."""
    if seconds is None:
        return missing
    whole = int(seconds)
    if whole < 1:
        return "<1s"
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def spelled_duration(duration: timedelta) -> str:
    """A duration in words for messages: 7 days, 36 hours, 90 minutes, 3601 seconds."""
    seconds = int(duration.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def display_time(value: datetime | None, precise: bool = True) -> str:
    """Watermarks keep their microseconds (a window ends at E - 1 µs); wall-clock times do not need them."""
    if value is None:
        return "—"
    return value.strftime("%Y-%m-%d %H:%M:%S.%f UTC" if precise and value.microsecond else "%Y-%m-%d %H:%M:%S UTC")
