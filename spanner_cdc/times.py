"""How times and durations are read and written, each form in one place: the one UTC coercion, the one RFC 3339 parser,
RFC 3339 for records, ISO with Z for JSON, words for messages, compact forms for people. Imports nothing of the project."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_fromisoformat = datetime.fromisoformat
_SPANNER_FORM = re.compile(r"....-..-..T..:..:..\.[0-9]{1,9}Z", re.DOTALL).fullmatch


def utc(value: datetime, *, assume_utc: bool = False) -> datetime:
    """The one UTC coercion: an aware datetime as a plain `datetime` in UTC, to the microsecond. Subclasses (Airflow's
    pendulum datetimes, the Spanner client's datetimes with nanoseconds) become plain datetimes. A naive datetime is
    taken as UTC with `assume_utc`, else refused with ValueError (callers raise their own error, naming the field)."""
    if value.tzinfo is UTC and type(value) is datetime:  # already one (what the store's sessions return): no conversion
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        if not assume_utc:
            raise ValueError(f"{value.isoformat()} has no time zone")
        value = value.replace(tzinfo=UTC)
    else:
        value = value.astimezone(UTC)
    if type(value) is datetime:
        return value
    return datetime(value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond, tzinfo=UTC)


def utc_or_none(value: datetime | None) -> datetime | None:
    """`utc` of a value that may be missing (a nullable column)."""
    return None if value is None else utc(value)


def parse_rfc3339(text: str) -> datetime:
    """The one RFC 3339 parser: `2024-05-01T09:00:00.123456789Z` or with an offset (`t`, `z` too; 0 to 9 fraction
    digits, cut to microseconds) -> an aware datetime in UTC. Anything else (no zone, no seconds, spaces around it, another
    ISO 8601 form) raises ValueError."""
    # The form is checked by hand and the numbers by fromisoformat (a superset of RFC 3339): a regular expression cost
    # twice the parse, and decoders parse every distinct commit timestamp. The form Spanner sends (`T`, 1 to 9 fraction
    # digits, `Z`) first, by one match of its separators and fraction (no groups): the checks below for that form only,
    # at 1.2-1.3x a bare fromisoformat instead of 2.5x. Left to fromisoformat, the fraction would let "0.1\nZ" through.
    if type(text) is str and _SPANNER_FORM(text):
        try:
            return _fromisoformat(text)  # a Z gives tzinfo UTC itself
        except ValueError:
            raise ValueError(f"not an RFC 3339 timestamp: {text!r}") from None
    n = len(text) if type(text) is str else 0
    zone_at = n - 1 if n and text[-1] in "Zz" else n - 6
    if (
        n < 20 or text[4:17:3] not in ("--T::", "--t::")  # the separators at 4, 7, 10, 13 and 16
        or (zone_at == n - 6 and (text[zone_at] not in "+-" or text[n - 3] != ":"))
        or (zone_at != 19 and (text[19] != "." or not 21 <= zone_at <= 29 or not (digits := text[20:zone_at]).isdigit() or not digits.isascii()))
    ):  # fmt: skip
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    if text[10] == "t" or text[-1] == "z":
        text = f"{text[:10]}T{text[11:-1]}{text[-1].upper()}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}") from None
    return parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)


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
