"""The JSON line of one journal entry, as both of the local server's journals append it."""

from __future__ import annotations

import json
from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode


def journal_line(entry: dict[str, Any]) -> bytes:
    """`entry` as one UTF-8 JSON line that json.loads reads back as the same entry.

    msgspec encodes an entry in about a tenth of json's time (the journals' encoding was ~10% of the server's
    CPU under the workload generator). What it refuses (integers beyond 64 bits, keys that are not strings)
    goes json's way. It would write a non-finite float as null, but no entry holds one: row values are
    normalized first (values.normalize keeps NaN and the infinities as their wire text)."""
    try:
        return _encode(entry) + b"\n"
    except (TypeError, OverflowError, ValueError):
        return json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
