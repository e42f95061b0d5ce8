"""The local server's catalog journal: instances, databases, DDL and committed rows as JSON lines under --data-dir."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanner_cdc.local_spanner.journal_lines import AppendedJournal

log = logging.getLogger(__name__)

JOURNAL_NAME = "catalog.jsonl"
CLOCK_MARK_NAME = "clock.json"


class Journal(AppendedJournal):
    """Append-only; every entry is flushed before the call that wrote it returns (or, inside a group commit, before
    the group's callers are answered), so a killed server keeps it."""

    def __init__(self, data_dir: Path, fsync: bool = False) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(data_dir / JOURNAL_NAME, fsync, threading.Lock())
        self._truncate_torn_tail()
        self._open_for_append()

    def _truncate_torn_tail(self) -> None:
        # a crash in the middle of a write leaves a last line without newline: that entry never committed
        if not self.path.exists():
            return
        with self.path.open("rb+") as handle:
            data = handle.read()
            if data and not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                log.warning("journal %s: dropping a torn last entry (%d bytes)", self.path, len(data) - cut)
                handle.truncate(cut)

    def entries(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)

class ClockMark:
    """A server time no reader can have seen beyond; a restarted clock starts after it, so heartbeats stay true."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CLOCK_MARK_NAME

    def read(self) -> str | None:
        try:
            return str(json.loads(self.path.read_text(encoding="utf-8"))["not_before"])
        except FileNotFoundError:
            return None

    def write(self, not_before: str) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"not_before": not_before}), encoding="utf-8")
        os.replace(temporary, self.path)
