"""Append-only JSON-lines journal of the change stream engine: streams, partition reshapes and records."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanner_cdc.local_spanner.journal_lines import AppendedJournal

log = logging.getLogger(__name__)

JOURNAL_NAME = "journal.jsonl"


class Journal(AppendedJournal):
    """Every state change is one line; replaying the lines in order rebuilds the engine.

    A torn last line (a crash in the middle of a write) is cut off before the first new write, so
    the file stays a sequence of whole entries."""

    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(directory / JOURNAL_NAME, fsync)
        self._good_size: int | None = None  # bytes of whole entries, known once replayed

    def replay(self) -> Iterator[dict[str, Any]]:
        """The entries in the file, streamed (the file can be larger than what fits in memory twice)."""
        good = 0
        if self.path.exists():
            with open(self.path, "rb") as handle:
                for line in handle:
                    if not line.endswith(b"\n"):
                        break
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        break
                    good += len(line)
                    yield entry
        self._good_size = good

    def write(self, entry: dict[str, Any]) -> None:
        if self._file is None:
            self._open()
        self.append(entry)

    def _open(self) -> None:
        if self._good_size is None:
            for _ in self.replay():
                pass
        with open(self.path, "ab") as handle:
            if handle.tell() != self._good_size:
                log.warning("changestream journal %s: cutting a torn last entry at byte %s", self.path, self._good_size)
                handle.truncate(self._good_size)
        self._open_for_append()
