"""Committed row versions of one database, kept for its version_retention_period, and reads at a timestamp."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from spanner_cdc.local_spanner.keysets import Key, Rows

DEFAULT_VERSION_RETENTION = timedelta(hours=1)
_SWEEP_EVERY = 4096  # writes between sweeps of keys whose last version is an old delete

Version = tuple[datetime, "dict[str, Any] | None"]  # (commit timestamp, row or None once deleted)


@dataclass
class _Table:
    keys: dict[Key, list[Version]] = field(default_factory=dict)
    last_commit: datetime | None = None  # newest commit that wrote this table (conflict checks)


class Versions:
    """Every version of every row since the retention horizon; the newest one equals the database's current row."""

    def __init__(self) -> None:
        self.tables: dict[str, _Table] = {}
        self.dropped: dict[str, list[tuple[datetime, _Table]]] = {}  # name -> (dropped at, its history), oldest first
        self._writes = 0

    def write(self, table: str, key: Key, commit_ts: datetime, row: dict[str, Any] | None, horizon: datetime | None) -> None:
        entry = self.tables.setdefault(table, _Table())
        versions = entry.keys.get(key)
        if versions is None:
            if row is not None:
                entry.keys[key] = [(commit_ts, row)]
        else:
            versions.append((commit_ts, row))
            if horizon is not None and len(versions) > 2:
                _prune(versions, horizon)
        entry.last_commit = commit_ts
        self._writes += 1
        if horizon is not None and self._writes % _SWEEP_EVERY == 0:
            self.sweep(horizon)

    def sweep(self, horizon: datetime) -> None:
        """Forget versions no read at or after `horizon` can see (a deleted row disappears entirely)."""
        for name in list(self.dropped):
            self.dropped[name] = [(at, old) for at, old in self.dropped[name] if at > horizon]
            if not self.dropped[name]:
                del self.dropped[name]
        for entry in self.tables.values():
            for key in list(entry.keys):
                versions = entry.keys[key]
                _prune(versions, horizon)
                if versions[-1][1] is None and versions[-1][0] <= horizon:
                    del entry.keys[key]

    def drop_table(self, table: str, at: datetime | None = None) -> None:
        """Forget the table's versions; with `at` (the DROP's timestamp) a read before `at` still sees them."""
        entry = self.tables.pop(table, None)
        if entry is not None and at is not None:
            self.dropped.setdefault(table, []).append((at, entry))

    def last_commit(self, table: str, key: Key | None = None) -> datetime | None:
        """Newest commit that wrote the row `key` (or any row of `table`)."""
        entry = self.tables.get(table)
        if entry is None:
            return None
        if key is None:
            return entry.last_commit
        versions = entry.keys.get(key)
        return None if versions is None else versions[-1][0]

    def rows_at(self, table: str, timestamp: datetime) -> Rows:
        """The table's rows as committed at `timestamp` (every commit at or before it, none after); a table dropped
        after `timestamp` answers with its rows then."""
        entry = self.tables.get(table)
        for dropped_at, old in self.dropped.get(table, ()):
            if timestamp < dropped_at:
                entry = old
                break
        if entry is None:
            return {}
        out: Rows = {}
        for key, versions in entry.keys.items():
            if versions[-1][0] <= timestamp:  # the usual case: the row has not changed since
                row = versions[-1][1]
            else:
                index = bisect_right(versions, timestamp, key=lambda v: v[0])
                row = versions[index - 1][1] if index else None
            if row is not None:
                out[key] = row
        return out


def _prune(versions: list[Version], horizon: datetime) -> None:
    # keep the newest version at or before the horizon: it is what a read at the horizon sees
    index = bisect_right(versions, horizon, key=lambda v: v[0])
    if index > 1:
        del versions[: index - 1]
