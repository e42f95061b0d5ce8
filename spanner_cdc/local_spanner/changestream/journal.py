"""Append-only JSON-lines journal of the change stream engine: streams, partition reshapes and records."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

JOURNAL_NAME = "journal.jsonl"


class Journal:
    """Every state change is one line; replaying the lines in order rebuilds the engine.

    A torn last line (a crash in the middle of a write) is cut off on open, so the file stays a
    sequence of whole entries."""

    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / JOURNAL_NAME
        self._fsync = fsync
        self._entries, good_size = self._load()
        with open(self.path, "ab") as handle:
            if handle.tell() != good_size:
                log.warning("changestream journal %s: cutting a torn last entry at byte %s", self.path, good_size)
                handle.truncate(good_size)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends

    def _load(self) -> tuple[list[dict[str, Any]], int]:
        if not self.path.exists():
            return [], 0
        entries: list[dict[str, Any]] = []
        good = 0
        with open(self.path, "rb") as handle:
            for line in handle:
                if not line.endswith(b"\n"):
                    break
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    break
                good += len(line)
        return entries, good

    def replay(self) -> Iterator[dict[str, Any]]:
        """The entries found on open, once (memory is released as they are consumed)."""
        entries, self._entries = self._entries, []
        yield from entries

    def write(self, entry: dict[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError(f"journal {self.path} is closed")
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
