"""A wave task's files: each token spooled apart while it reads, then the tokens that landed written into one file per table."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from spanner_cdc.lake import layout, storage
from spanner_cdc.lake.columns import rows_by_table
from spanner_cdc.spark.spec import TokenJobSpec

ROW_GROUP_ROWS = 65_536
# a spool is read once, right after: lz4 costs little and keeps a large token's spool a fraction of its Arrow size
_SPOOL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def content_digest(specs: Sequence[TokenJobSpec]) -> str:
    """What the task's files hold: the tokens that landed in them, over their ranges, cut where (`lake/layout.py`)."""
    return layout.content_digest([(s.token, s.read_from, s.read_to) for s in specs], specs[0].file_bytes if specs else 0)


class TokenSpool:
    """One token's rows by table, in Arrow IPC files on the executor's local disk (nothing published).

    A token's rows wait here until it has read its whole range: only then may they go into a file it shares with
    the task's other tokens, so a token that fails leaves no row in any file. IPC, not Parquet: the rows are encoded
    once, when the task writes its files. Each batch goes to disk as it comes, so memory stays flat.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.writers: dict[str, Any] = {}
        self.paths: dict[str, Path] = {}
        self.rows: dict[str, int] = {}

    def write(self, batch: pa.RecordBatch) -> None:
        for table, rows in rows_by_table(batch):
            if table not in self.writers:
                self.directory.mkdir(parents=True, exist_ok=True)
                self.paths[table] = path = self.directory / f"{len(self.paths):05d}.arrows"
                self.writers[table] = pa.ipc.new_stream(pa.OSFile(str(path), "wb"), rows.schema, options=_SPOOL_OPTIONS)
                self.rows[table] = 0
            self.writers[table].write_batch(rows)
            self.rows[table] += rows.num_rows

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()

    def drop(self) -> None:
        """A failed token: close and delete its rows (workers are reused: no handle may leak)."""
        for writer in self.writers.values():
            try:
                writer.close()
            except Exception:  # noqa: S110 - the read already failed; that error is the one to report
                pass
        self.writers.clear()
        self.paths.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def batches(self, table: str) -> Any:
        with pa.memory_map(str(self.paths[table])) as source:
            yield from pa.ipc.open_stream(source)


@dataclass
class _OpenFile:
    table: str
    sequence: int
    writer: Any
    scratch: Path
    bytes_in: int = 0
    rows_by_token: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskFile:
    """One published file of a task: its table, location, size, and the rows each token has in it (in order)."""

    table: str
    path: str
    bytes: int
    rows_by_token: tuple[tuple[str, int], ...]


class TaskFiles:
    """The task's files: one per table for all its landed tokens, a new one once a file holds `max_bytes` of rows
    (in Arrow's measure, so the cut falls in the same place on a retry), each published whole under its name."""

    def __init__(self, destination: Callable[[str, int], str], scratch_dir: Path, max_bytes: int) -> None:
        self.destination = destination
        self.scratch_dir = scratch_dir
        self.max_bytes = max(1, max_bytes)
        self.published: list[TaskFile] = []
        self._open_file: _OpenFile | None = None

    def write_table(self, table: str, parts: Sequence[tuple[str, TokenSpool]]) -> None:
        """Every token's rows of `table`, in the tokens' order, in row groups of ROW_GROUP_ROWS."""
        try:
            self._write_parts(table, parts)
        except BaseException:
            if self._open_file is not None:  # never published: its scratch goes (a hidden file beside its name)
                self._open_file.writer.close()
                self._open_file.scratch.unlink(missing_ok=True)
            raise
        finally:
            self._open_file = None

    def _write_parts(self, table: str, parts: Sequence[tuple[str, TokenSpool]]) -> None:
        current: _OpenFile | None = None
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for token, spool in parts:
            for batch in spool.batches(table):
                if current is None or current.bytes_in >= self.max_bytes:
                    if current is not None:
                        self._flush(current, pending)
                        pending, pending_rows = [], 0
                        self._publish(current)
                    current = self._open(table, 0 if current is None else current.sequence + 1, batch.schema)
                pending.append(batch)
                pending_rows += batch.num_rows
                current.bytes_in += batch.nbytes
                current.rows_by_token[token] = current.rows_by_token.get(token, 0) + batch.num_rows
                if pending_rows >= ROW_GROUP_ROWS:
                    self._flush(current, pending)
                    pending, pending_rows = [], 0
        if current is not None:
            self._flush(current, pending)
            self._publish(current)

    def _open(self, table: str, sequence: int, schema: pa.Schema) -> _OpenFile:
        import pyarrow.parquet as pq

        scratch = storage.scratch_for(self.destination(table, sequence), self.scratch_dir)
        self._open_file = _OpenFile(table, sequence, pq.ParquetWriter(scratch, schema, compression="snappy"), scratch)
        return self._open_file

    @staticmethod
    def _flush(file: _OpenFile, batches: list[pa.RecordBatch]) -> None:
        if batches:
            file.writer.write_table(pa.Table.from_batches(batches), row_group_size=ROW_GROUP_ROWS)

    def _publish(self, file: _OpenFile) -> None:
        file.writer.close()
        self._open_file = None
        path = self.destination(file.table, file.sequence)
        try:
            size = storage.put_file(file.scratch, path)
        except BaseException:
            file.scratch.unlink(missing_ok=True)  # an upload that failed leaves its scratch (a rename does not)
            raise
        self.published.append(TaskFile(file.table, path, size, tuple(file.rows_by_token.items())))
