"""Pure helpers of the extract waves: ready tokens as XCom payloads, batches under max_map_length, UI labels."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from spanner_cdc.names import short_token

TokenPayload = dict[str, str]


class TokenLike(Protocol):
    @property
    def token(self) -> str: ...

    @property
    def read_from(self) -> dt.datetime: ...

    @property
    def read_to(self) -> dt.datetime: ...


def payload(task: TokenLike) -> TokenPayload:
    """A ready token as JSON-able XCom: the token and the range this wave reads."""
    label = getattr(task, "label", None) or (
        f"{short_token(task.token)} {task.read_from:%H:%M:%S}–{task.read_to:%H:%M:%S}"
    )
    return {
        "token": task.token,
        "read_from": task.read_from.isoformat(),
        "read_to": task.read_to.isoformat(),
        "label": str(label),
    }


def batches(items: Sequence[TokenPayload], limit: int) -> list[list[TokenPayload]]:
    """One token per mapped task while they fit under `limit` mapped tasks, else evenly filled batches."""
    if limit < 1:
        raise ValueError(f"max_map_length must be >= 1, got {limit}")
    if len(items) <= limit:
        return [[item] for item in items]
    size = math.ceil(len(items) / limit)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def batch_label(batch: Sequence[TokenPayload]) -> str:
    """What the UI shows for a mapped extract: the token and its range, or the first one and how many more."""
    if not batch:
        return "no tokens"
    first = batch[0].get("label") or short_token(batch[0]["token"])
    more = len(batch) - 1
    return first if not more else f"{first} (+{more} more token{'s' if more > 1 else ''})"


def tokens_of(batch: Iterable[TokenPayload]) -> list[str]:
    return [item["token"] for item in batch]


def totals(results: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Sum the per-batch counts the extract tasks return."""
    total = {"tokens": 0, "records": 0, "files": 0, "finished": 0, "promoted_children": 0}
    for result in results:
        for key in total:
            total[key] += int(result.get(key, 0))
    return total
