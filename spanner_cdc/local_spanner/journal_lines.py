"""What the local server's two journals share: the JSON line of one entry and the file's appending end."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from spanner_cdc.local_spanner.group_commit import deferred

_encode = msgspec.json.Encoder().encode
_BUFFER = 1 << 20  # a group commit's entries reach the file in one write when it syncs


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


class AppendedJournal:
    """A journal file's appending end: each entry one line, on its way to the disk when appended, or, inside a
    group commit, when the group ends (before its callers are answered).

    `lock` guards the open file when several threads append (the catalog's journal); the change stream journal is
    written under the engine's lock and takes none, so the fsync at a group's end does not hold the engine."""

    def __init__(self, path: Path, fsync: bool, lock: AbstractContextManager[Any] | None = None) -> None:
        self.path = path
        self.fsync = fsync
        self._lock: AbstractContextManager[Any] = lock if lock is not None else nullcontext()
        self._file: BinaryIO | None = None

    def _open_for_append(self) -> None:
        self._file = self.path.open("ab", buffering=_BUFFER)

    def append(self, entry: dict[str, Any]) -> None:
        line = journal_line(entry)
        with self._lock:
            assert self._file is not None
            self._file.write(line)
        if not deferred(self):
            self.sync()

    def sync(self) -> None:
        self.flush()
        self.to_disk()

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def to_disk(self) -> None:
        if self.fsync:
            with self._lock:
                if self._file is not None:
                    os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
