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


# A token's rows stay in memory up to this many bytes (Arrow's measure), and go to disk past it: a small token (the
# usual case, a few rows) then costs no file of its own. Writing, reading back and removing a file and its directory
# took ~6 ms of a small token's ~8-16 ms in a task on this machine's disk (its metadata writes, not its bytes). A task
# of many tokens shares TASK_SPOOL_MEMORY_BYTES among them (`token_budgets`): a task's memory stays flat whatever its
# tokens' number and sizes.
SPOOL_MEMORY_BYTES = 1 << 20
TASK_SPOOL_MEMORY_BYTES = 64 << 20
# A token whose rows stay under this (the envelope batcher's rough measure: their texts, ~200 bytes a row besides) is
# held unbuilt (`TokenSpool.hold`): its rows are built with the task's other small tokens' at once (`build_held`).
# Building a batch costs ~0.5 ms whatever its rows and splitting it by table ~0.1 ms more, more than the few rows of a
# small partition; held in Python objects a token takes a few times this, so a task holds at most TASK_HOLD_BYTES of
# them in all (a few times that in memory).
HOLD_BYTES = 256 << 10
TASK_HOLD_BYTES = 16 << 20


def token_budgets(tokens: int) -> tuple[int, int]:
    """(spool memory bytes, hold bytes) of each token of a task of `tokens`: the task's budgets shared, at most the
    per-token ones (64 tokens get 1 MiB and 256 KiB each, 512 tokens 128 KiB and 32 KiB)."""
    tokens = max(1, tokens)
    return min(SPOOL_MEMORY_BYTES, TASK_SPOOL_MEMORY_BYTES // tokens), min(HOLD_BYTES, TASK_HOLD_BYTES // tokens)


class TokenSpool:
    """One token's rows by table, held on the executor until the token has read its whole range (nothing published).

    Only then may its rows go into a file it shares with the task's other tokens, so a token that fails leaves no row
    in any file. A spool keeps its batches in memory while they are small (`memory_bytes`); past that it moves them
    to Arrow IPC files on local disk and writes each later batch there as it comes, so memory stays flat whatever the
    token's size. IPC, not Parquet: the rows are encoded once, when the task writes its files.
    """

    def __init__(self, directory: Path, memory_bytes: int = SPOOL_MEMORY_BYTES) -> None:
        self.directory = directory
        self.memory_bytes = memory_bytes
        self.writers: dict[str, Any] = {}
        self.paths: dict[str, Path] = {}
        self.rows: dict[str, int] = {}
        self.held: dict[str, list[pa.RecordBatch]] = {}
        self.held_bytes = 0
        self.unbuilt: Any = None  # hold(): a small token's envelope batcher, its rows not built yet

    def hold(self, batcher: Any) -> None:
        """A small token's rows, not built yet (an EnvelopeBatcher none was taken from, nothing written before):
        `build_held` builds them with the task's other held tokens' before the task writes its files."""
        if self.rows or self.spilled:
            raise ValueError("hold: the token has rows written already")
        self.unbuilt = batcher
        self.rows = batcher.table_rows()

    @property
    def tables(self) -> list[str]:
        """The tables the token has rows of, in the order they came."""
        return list(self.rows)

    @property
    def spilled(self) -> bool:
        return bool(self.paths)

    def write(self, batch: pa.RecordBatch) -> None:
        for table, rows in rows_by_table(batch):
            self.rows[table] = self.rows.get(table, 0) + rows.num_rows
            if not self.spilled:
                self.held.setdefault(table, []).append(rows)
                self.held_bytes += rows.nbytes
                if self.held_bytes > self.memory_bytes:
                    self._spill()
                continue
            self._writer(table, rows.schema).write_batch(rows)

    def _spill(self) -> None:
        """Past the memory bound: every held batch to disk, in order; later batches go there as they come."""
        held, self.held, self.held_bytes = self.held, {}, 0
        for table, batches in held.items():
            writer = self._writer(table, batches[0].schema)
            for rows in batches:
                writer.write_batch(rows)

    def _writer(self, table: str, schema: pa.Schema) -> Any:
        writer = self.writers.get(table)
        if writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.paths[table] = path = self.directory / f"{len(self.paths):05d}.arrows"
            writer = self.writers[table] = pa.ipc.new_stream(pa.OSFile(str(path), "wb"), schema, options=_SPOOL_OPTIONS)
        return writer

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()

    def drop(self) -> None:
        """A failed token: close and delete its rows (workers are reused: no handle may leak)."""
        self.unbuilt = None
        for writer in self.writers.values():
            try:
                writer.close()
            except Exception:  # noqa: S110 - the read already failed; that error is the one to report
                pass
        self.writers.clear()
        self.held, self.held_bytes = {}, 0
        self.rows.clear()
        if self.paths:
            self.paths.clear()
            shutil.rmtree(self.directory, ignore_errors=True)

    def batches(self, table: str) -> Any:
        if self.unbuilt is not None:
            raise ValueError("batches: the token's rows are not built yet (build_held)")
        if table in self.held:
            yield from self.held[table]
            return
        with pa.memory_map(str(self.paths[table])) as source:
            yield from pa.ipc.open_stream(source)


def build_held(spools: Sequence[TokenSpool]) -> None:
    """The held tokens' rows (`TokenSpool.hold`) built together, in the spools' order, a batch per ~max_rows rows,
    each split by table once; every token then holds its own rows of each table (slices of those batches), as if it
    had written them itself: the same rows, in the same order."""
    from spanner_cdc.lake.envelope import EnvelopeBatcher

    held = [spool for spool in spools if spool.unbuilt is not None]
    while held:
        group: list[TokenSpool] = []
        rows = 0
        limit = held[0].unbuilt.max_rows
        while held and (not group or rows + len(held[0].unbuilt) <= limit):
            spool = held.pop(0)
            group.append(spool)
            rows += len(spool.unbuilt)
        batch = EnvelopeBatcher.joined([spool.unbuilt for spool in group]).take()
        tables = dict(rows_by_table(batch)) if batch is not None else {}
        offsets = dict.fromkeys(tables, 0)
        for spool in group:
            spool.unbuilt = None
            for table, count in spool.rows.items():
                spool.held.setdefault(table, []).append(tables[table].slice(offsets[table], count))
                offsets[table] += count
        if {t: offsets[t] for t in tables} != {t: b.num_rows for t, b in tables.items()}:
            raise AssertionError("build_held: the tokens' rows by table do not add up to the built batch's")


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


Encode = Callable[[Callable[[], None]], None]


def _at_once(work: Callable[[], None]) -> None:
    work()


class _TableFile:
    """One table's rows, batch after batch, into files of the task: a new one once a file holds `max_bytes` of rows (in
    Arrow's measure, so the cut falls in the same place on a retry), row groups of ROW_GROUP_ROWS. `encode` runs each
    row group's write (Parquet's encoding), at once or in a thread of the caller's; `closed` takes each finished file."""

    def __init__(self, table: str, files: TaskFiles, encode: Encode, closed: Callable[[_OpenFile], None]) -> None:
        self.table, self.files, self.encode, self.closed = table, files, encode, closed
        self.current: _OpenFile | None = None
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0

    def add(self, token: str, batch: pa.RecordBatch) -> None:
        current = self.current
        if current is None or current.bytes_in >= self.files.max_bytes:
            if current is not None:
                self._flush()
                self._close()
            current = self.current = self.files._open(self.table, 0 if current is None else current.sequence + 1, batch.schema)
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        current.bytes_in += batch.nbytes
        current.rows_by_token[token] = current.rows_by_token.get(token, 0) + batch.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def finish(self) -> None:
        if self.current is not None:
            self._flush()
            self._close()

    def abort(self) -> None:
        """Never published: its open file's scratch goes (a hidden file beside its name)."""
        if self.current is not None:
            scratch, writer = self.current.scratch, self.current.writer
            self.current, self.pending = None, []
            self.encode(lambda: _discard(writer, scratch))

    def _flush(self) -> None:
        batches, writer = self.pending, self.current.writer if self.current is not None else None
        self.pending, self.pending_rows = [], 0
        if batches and writer is not None:
            self.encode(lambda: writer.write_table(pa.Table.from_batches(batches), row_group_size=ROW_GROUP_ROWS))

    def _close(self) -> None:
        file, self.current = self.current, None
        assert file is not None
        self.encode(file.writer.close)
        self.closed(file)


def _discard(writer: Any, scratch: Path) -> None:
    try:
        writer.close()
    finally:
        scratch.unlink(missing_ok=True)


class TaskFiles:
    """The task's files: one per table for all its landed tokens, a new one once a file holds `max_bytes` of rows
    (in Arrow's measure, so the cut falls in the same place on a retry), each published whole under its name."""

    def __init__(self, destination: Callable[[str, int], str], scratch_dir: Path, max_bytes: int) -> None:
        self.destination = destination
        self.scratch_dir = scratch_dir
        self.max_bytes = max(1, max_bytes)
        self.published: list[TaskFile] = []

    def write_table(self, table: str, parts: Sequence[tuple[str, TokenSpool]]) -> None:
        """Every token's rows of `table`, in the tokens' order, in row groups of ROW_GROUP_ROWS; each file published
        as soon as it is full."""
        file = _TableFile(table, self, _at_once, self._publish)
        try:
            for token, spool in parts:
                for batch in spool.batches(table):
                    file.add(token, batch)
            file.finish()
        except BaseException:
            file.abort()
            raise

    def _open(self, table: str, sequence: int, schema: pa.Schema) -> _OpenFile:
        import pyarrow.parquet as pq

        scratch = storage.scratch_for(self.destination(table, sequence), self.scratch_dir)
        return _OpenFile(table, sequence, pq.ParquetWriter(scratch, schema, compression="snappy"), scratch)

    def _publish(self, file: _OpenFile) -> None:
        path = self.destination(file.table, file.sequence)
        try:
            size = storage.put_file(file.scratch, path)
        except BaseException:
            file.scratch.unlink(missing_ok=True)  # an upload that failed leaves its scratch (a rename does not)
            raise
        self.published.append(TaskFile(file.table, path, size, tuple(file.rows_by_token.items())))


class StreamedFiles(TaskFiles):
    """A task of one token: its rows go straight into the task's files as they are read, no spool, each row group encoded
    in `encoder` (a thread: Parquet's encoding releases the GIL, so it overlaps the reading); the files are the same (names,
    cuts) as TaskFiles would write from the token's spool. Nothing is published before `publish`, which the caller calls
    once the token has read its whole range: a token that fails leaves no file (`abort`)."""

    def __init__(self, destination: Callable[[str, int], str], scratch_dir: Path, max_bytes: int, encoder: Any) -> None:
        super().__init__(destination, scratch_dir, max_bytes)
        self.encoder = encoder
        self.tables: dict[str, _TableFile] = {}
        self.finished: list[_OpenFile] = []
        self.waiting: list[Any] = []  # the encoder's work not yet done, oldest first

    def _encode(self, work: Callable[[], None]) -> None:
        while len(self.waiting) >= 2:  # at most two row groups wait for the encoder: memory stays flat
            self.waiting.pop(0).result()
        self.waiting.append(self.encoder.submit(work))

    def write(self, token: str, batch: pa.RecordBatch) -> None:
        for table, rows in rows_by_table(batch):
            file = self.tables.get(table)
            if file is None:
                file = self.tables[table] = _TableFile(table, self, self._encode, self.finished.append)
            file.add(token, rows)

    def publish(self) -> list[TaskFile]:
        """Every table's files finished, encoded, then published, by table and sequence (as TaskFiles would)."""
        for table in sorted(self.tables):
            self.tables[table].finish()
        self._drain()
        for file in sorted(self.finished, key=lambda f: (f.table, f.sequence)):
            self._publish(file)
        return self.published

    def abort(self) -> None:
        """A failed token (or task): every file closed and its scratch removed; none is published."""
        from concurrent.futures import wait

        waiting, self.waiting = self.waiting, []
        wait(waiting)  # the encoder's work ends first (an error of its own is not this abort's to raise)
        for file in self.tables.values():
            file.encode = _at_once
            file.abort()
        for done in self.finished:
            done.scratch.unlink(missing_ok=True)

    def _drain(self) -> None:
        waiting, self.waiting = self.waiting, []
        errors = [future.exception() for future in waiting]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
