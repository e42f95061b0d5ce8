"""The validators of setting values, shared by `settings` and `stream_config`: each takes (label, value) and returns the
typed value or raises ConfigError naming the label, the value and what is accepted."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from spanner_cdc import names
from spanner_cdc.errors import ConfigError

Validator = Callable[[str, Any], Any]


def int_between(low: int, high: int) -> Callable[[str, Any], int]:
    """An integer in [low, high]: a TOML integer, or its text (a flag, an environment variable); never a boolean."""

    def parse(label: str, value: Any) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(label, value, f"an integer in [{low}, {high}]") from None
        if isinstance(value, bool) or not low <= number <= high:
            raise ConfigError(label, value, f"an integer in [{low}, {high}]")
        return number

    return parse


def seconds_at_least(low: float) -> Callable[[str, Any], float]:
    """A number of seconds >= low (a float: 2.5 is accepted)."""

    def parse(label: str, value: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(label, value, f"a number of seconds >= {low:g}") from None
        if isinstance(value, bool) or not number >= low:
            raise ConfigError(label, value, f"a number of seconds >= {low:g}")
        return number

    return parse


def fraction(label: str, value: Any) -> float:
    """A share of a whole, in (0, 1]: 0.5 or 50%."""
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ConfigError(label, value, "a fraction in (0, 1] such as 0.5, or a percentage such as 50%") from None
    if isinstance(value, bool) or not 0 < number <= 1:
        raise ConfigError(label, value, "a fraction in (0, 1] such as 0.5, or a percentage such as 50%")
    return number


def choice(*choices: str) -> Callable[[str, Any], str]:
    """One of `choices`, in any case; returned as spelled in `choices`."""

    def parse(label: str, value: Any) -> str:
        text = str(value).strip()
        for option in choices:
            if text.upper() == option.upper():
                return option
        raise ConfigError(label, value, "one of " + ", ".join(choices))

    return parse


def identifier(label: str, value: Any) -> str:
    """The identifier rule of names.IDENTIFIER (streams, namespaces), with its one message."""
    text = str(value)
    if not names.IDENTIFIER.fullmatch(text):
        raise ConfigError(label, value, names.IDENTIFIER_ACCEPTED)
    return text


def text(label: str, value: Any) -> str:
    """A non-empty string, stripped."""
    stripped = str(value).strip()
    if not stripped:
        raise ConfigError(label, value, "a non-empty string")
    return stripped


def boolean(label: str, value: Any) -> bool:
    """A TOML boolean: true or false (not 1, not "yes")."""
    if not isinstance(value, bool):
        raise ConfigError(label, value, "true or false")
    return value


def optional(parse: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    """`parse`, with None or "" meaning 'not set' (None)."""

    def parse_optional(label: str, value: Any) -> Any:
        return None if value in (None, "") else parse(label, value)

    return parse_optional


_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
SIZE_ACCEPTED = "a size in bytes from 1KB to 16GB: an integer, or a number with KB, MB or GB (powers of 1024)"


def byte_size(name: str, value: Any) -> int:
    """A size such as 268435456, `256MB` or `256 MiB` (units are powers of 1024), in [1 KB, 16 GB]."""
    match = None if isinstance(value, bool) else _SIZE.match(str(value))
    if match is None:
        raise ConfigError(name, value, SIZE_ACCEPTED)
    size = int(match.group(1)) * _UNITS[(match.group(2) or "").upper().replace("IB", "B")]
    if not 1 << 10 <= size <= 16 << 30:
        raise ConfigError(name, value, SIZE_ACCEPTED)
    return size


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
DURATION_ACCEPTED = "a duration: seconds, or a number with s, m, h or d (such as 24h or 7d), from 0 to 3650d"


def duration(name: str, value: Any) -> timedelta:
    """A duration such as 86400, `24h` or `7d`."""
    if isinstance(value, timedelta):
        return value
    match = None if isinstance(value, bool) else _DURATION.match(str(value))
    if match is None:
        raise ConfigError(name, value, DURATION_ACCEPTED)
    seconds = float(match.group(1)) * _SECONDS[match.group(2).lower()]
    if seconds > 3650 * 86_400:
        raise ConfigError(name, value, DURATION_ACCEPTED)
    return timedelta(seconds=seconds)
