"""Executor side of token jobs: read the partition, build lake batches, land them as Parquet (a wave task's files)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pyarrow as pa

from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import rows_by_table
from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext
from spanner_cdc.lake.layout import task_file_stem, task_object_name, token_digest
from spanner_cdc.model.records import ChangeRecord, DataChangeRecord
from spanner_cdc.policy import applier_from
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.spec import TokenJobSpec
from spanner_cdc.spark.task_files import (
    HOLD_BYTES,
    StreamedFiles,
    TaskFile,
    TaskFiles,
    TokenSpool,
    build_held,
    content_digest,
    token_budgets,
)

FILES_SCHEMA = pa.schema([("table", pa.string()), ("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64())])
# a wave job's rows: each file named by its token, and a row per token (no file) carrying its control summary
WAVE_SCHEMA = FILES_SCHEMA.append(pa.field("token", pa.string())).append(pa.field("control", pa.string()))
log = logging.getLogger(__name__)
ROW_GROUP_ROWS = 65_536
MAX_BUFFERED_BYTES = 64 << 20
PUBLISH_THREADS = 8  # a token's files published at once (one per table)


def envelope_batches(
    spec: TokenJobSpec, records: Iterable[ChangeRecord], summary: ControlSummary, hold: list[EnvelopeBatcher] | None = None,
    hold_bytes: int = HOLD_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Data change records -> bounded lake batches; every record (control ones too) is noted in `summary`. `hold`: a
    token whose rows all fit in `hold_bytes` yields none; its batcher, rows not built, goes into `hold` instead (a wave
    task builds its small tokens' rows together: `TokenSpool.hold`). The stream's policy applies before a row is built:
    a record of a table that does not land is counted (its timestamp moves the partition on) and left out."""
    batcher = EnvelopeBatcher(
        EnvelopeContext(spec.stream, spec.read_method, spec.token, spec.window_start, spec.window_end),
        max_rows=spec.max_rows,
    )
    policy = applier_from(spec.policy, spec.policy_secret)
    taken = False
    for record in records:
        if isinstance(record, DataChangeRecord):
            landing = record if policy is None else policy.record(record)
            if landing is None:
                summary.excluded(record)
                continue
            summary.landed(landing, batcher.add(landing))
            if batcher.full:
                batch = batcher.take()
                if batch is not None:
                    taken = True
                    yield batch
        else:
            summary.observe(record)
    if hold is not None and not taken and batcher.held_bytes <= hold_bytes:
        hold.append(batcher)
        return
    batch = batcher.take()
    if batch is not None:
        yield batch


_pools: dict[tuple[int, str, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _process_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """The worker process's pool `name` of `threads` (keyed by pid too: a forked child must not use its parent's
    threads), kept across tokens and tasks: a small token's landing costs less than starting threads for it."""
    key = (os.getpid(), name, threads)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(threads, thread_name_prefix=name)
        return pool


_databases: dict[tuple[str, str, str, str | None], Any] = {}
_databases_lock = threading.Lock()


def _database(spec: TokenJobSpec | Any) -> Any:
    """One client per executor process and database: Python workers are reused across tasks."""
    from spanner_cdc.settings import Settings
    from spanner_cdc.source.client import open_database

    key = (spec.project, spec.instance, spec.database, spec.emulator_host)
    with _databases_lock:
        if key not in _databases:
            settings = Settings(
                project=spec.project, instance=spec.instance, database=spec.database, emulator_host=spec.emulator_host
            )
            _databases[key] = open_database(settings)
        return _databases[key]


def _read(
    spec: TokenJobSpec, summary: ControlSummary, hold: list[EnvelopeBatcher] | None = None, hold_bytes: int = HOLD_BYTES
) -> Iterator[pa.RecordBatch]:
    from spanner_cdc.read_options import ReadOptions
    from spanner_cdc.source.reader import PartitionReader

    reader = PartitionReader(
        _database(spec), spec.stream, dialect=spec.dialect, heartbeat_ms=spec.heartbeat_ms, partition_mode=spec.partition_mode,
        read_options=ReadOptions.from_text(spec.read_options),
    )
    try:
        yield from envelope_batches(spec, reader.read(spec.token, spec.read_from, spec.read_to), summary, hold, hold_bytes)
    finally:
        summary.resumes = reader.resumes


class _Clock:
    """A token's wall time and the CPU of the thread that reads it: a task's tokens read side by side in threads of one
    worker, so the process's CPU would count the others' too, and asking for it costs ~0.1-1 ms in a busy worker (the
    kernel sums every thread's), a thread's ~1 µs."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def stamp(self, summary: ControlSummary) -> None:
        summary.elapsed_s = time.perf_counter() - self.wall
        summary.cpu_s = time.thread_time() - self.cpu


def _failed(spec: TokenJobSpec, summary: ControlSummary, exc: BaseException) -> None:
    summary.fail(exc)
    summary.write(spec.control_path)


def read_token(spec: TokenJobSpec) -> Iterator[pa.RecordBatch]:
    """Executor side, Spark writer: yield the token's lake batches, then write the control file.

    The control file is written only after the last record, so its presence means the whole
    range was read; a failure writes it with the error instead, and re-raises.
    """
    summary, clock = ControlSummary(spec.token, spec.read_from, spec.read_to), _Clock()
    try:
        yield from _read(spec, summary)
    except Exception as exc:
        _failed(spec, summary, exc)
        raise
    clock.stamp(summary)
    summary.write(spec.control_path)


class TableFiles:
    """One Parquet file per table, each published whole at its deterministic lake name when closed.

    Rows are buffered per table into row groups of ~ROW_GROUP_ROWS, and everything buffered is flushed
    once it passes MAX_BUFFERED_BYTES, so memory stays bounded whatever the partition's size. A file is
    written to scratch first (beside its name when the lake is local, in the executor's own temporary
    directory when it is a bucket) and appears under its name only complete: renamed, or uploaded once.
    """

    def __init__(self, destination: Callable[[str], str], scratch_dir: Path, max_buffered: int = MAX_BUFFERED_BYTES) -> None:
        self.destination = destination
        self.scratch_dir = scratch_dir
        self.max_buffered = max_buffered
        self.writers: dict[str, tuple[Any, Path]] = {}
        self.rows: dict[str, int] = {}
        self.pending: dict[str, list[pa.RecordBatch]] = {}
        self.pending_rows: dict[str, int] = {}
        self.pending_bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        for table, rows in rows_by_table(batch):
            self.pending.setdefault(table, []).append(rows)
            self.pending_rows[table] = self.pending_rows.get(table, 0) + rows.num_rows
            self.pending_bytes += rows.nbytes
            if self.pending_rows[table] >= ROW_GROUP_ROWS:
                self._flush(table)
        if self.pending_bytes >= self.max_buffered:
            for table in list(self.pending):
                self._flush(table)

    def _flush(self, table: str) -> None:
        import pyarrow.parquet as pq

        batches = self.pending.pop(table, [])
        self.pending_rows.pop(table, None)
        if not batches:
            return
        self.pending_bytes -= sum(b.nbytes for b in batches)
        if table not in self.writers:
            scratch = storage.scratch_for(self.destination(table), self.scratch_dir)
            self.writers[table] = (pq.ParquetWriter(scratch, batches[0].schema, compression="snappy"), scratch)
            self.rows[table] = 0
        self.writers[table][0].write_table(pa.Table.from_batches(batches), row_group_size=ROW_GROUP_ROWS)
        self.rows[table] += sum(b.num_rows for b in batches)

    def abort(self) -> None:
        """Close and drop the files of a failed read (workers are reused: no handle may leak); none is published."""
        for writer, scratch in self.writers.values():
            try:
                writer.close()
            except Exception:  # noqa: S110 - the read already failed; that error is the one to report
                pass
            scratch.unlink(missing_ok=True)
        self.writers.clear()
        self.pending.clear()

    def close(self) -> pa.RecordBatch:
        """Flush, close and publish every file; the listing (table, path, rows, bytes) is the job's only output."""
        for table in list(self.pending):
            self._flush(table)
        for writer, _ in self.writers.values():
            writer.close()
        names = sorted(self.writers)
        paths = [self.destination(t) for t in names]
        scratches = [self.writers[t][1] for t in names]
        # each publish waits on a disk flush (or an upload): wait on them together (one file needs no thread)
        if len(names) > 1:
            sizes = list(_process_pool("publish", PUBLISH_THREADS).map(storage.put_file, scratches, paths))
        else:
            sizes = [storage.put_file(scratch, path) for scratch, path in zip(scratches, paths, strict=True)]
        self.writers.clear()
        return pa.RecordBatch.from_arrays(
            [
                pa.array(names, pa.string()),
                pa.array(paths, pa.string()),
                pa.array([self.rows[t] for t in names], pa.int64()),
                pa.array(sizes, pa.int64()),
            ],
            schema=FILES_SCHEMA,
        )


def spool_token(spec: TokenJobSpec, directory: Path, tokens: int = 1) -> tuple[ControlSummary, TokenSpool | None]:
    """One token of a wave task of `tokens` read into a spool of its own (with its share of the task's memory,
    `token_budgets`): its summary, and its spool (None when it failed).

    A token that fails ends quietly: its summary carries its error (the driver fails that token alone) and its rows
    are dropped, so the task's other tokens still land in the same job. A task that dies returns no row: its tokens
    fail with the job.
    """
    summary, clock = ControlSummary(spec.token, spec.read_from, spec.read_to), _Clock()
    memory_bytes, hold_bytes = token_budgets(tokens)
    spool = TokenSpool(directory / token_digest(spec.token), memory_bytes)
    held: list[EnvelopeBatcher] = []
    try:
        for batch in _read(spec, summary, held, hold_bytes):
            spool.write(batch)
        spool.close()
        if held:  # a small token: its rows are built with the task's other small ones (build_held)
            spool.hold(held[0])
    except Exception as exc:  # noqa: BLE001 - reported in the token's summary row
        log.warning("%s %s: token failed in its wave job: %s", spec.stream, spec.token, exc)
        spool.drop()
        summary.fail(exc)
        return summary, None
    clock.stamp(summary)
    return summary, spool


def _summary_row(summary: ControlSummary) -> pa.RecordBatch:
    """The token's control summary as the one row of a wave job's listing without a file."""
    return _summary_rows([summary])


def _summary_rows(summaries: list[ControlSummary]) -> pa.RecordBatch:
    """The tokens' control summaries as rows of a wave job's listing without a file, one batch for a task's tokens."""
    count = len(summaries)
    return pa.RecordBatch.from_arrays(
        [pa.nulls(count, pa.string()), pa.nulls(count, pa.string()), pa.array([0] * count, pa.int64()), pa.array([0] * count, pa.int64()),
         pa.array([s.token for s in summaries], pa.string()), pa.array([s.to_text() for s in summaries], pa.string())],
        schema=WAVE_SCHEMA,
    )  # fmt: skip


def land_wave_tokens(specs: list[TokenJobSpec], threads: int) -> Iterator[pa.RecordBatch]:
    """A wave task's tokens: each read into a spool of its own, up to `threads` at once; then the rows of those that
    read their whole range written, in the tokens' order, into one file per table (a new one past
    `spec.file_bytes`), published under names deterministic in what they hold (`spark/task_files.py`).

    Rows: one per file and token (the token's rows in that file, the file's bytes), then each token's summary row,
    in the tokens' order. A small token mostly waits (its query's first rows), and gRPC releases the GIL: tokens read
    side by side overlap those waits. The task ends only when no token of it is still reading, whatever ends it.
    """
    if len(specs) == 1:  # a task of one token (a big partition's, say): no spool, its files written as it reads
        yield from _land_alone(specs[0])
        return
    directory = Path(tempfile.gettempdir()) / "spanner-cdc" / uuid.uuid4().hex
    try:
        spooled = _spool_all(specs, threads, directory)
        landed = [(spec, spool) for spec, (_, spool) in zip(specs, spooled, strict=True) if spool is not None]
        build_held([spool for _, spool in landed])
        yield from _file_rows(_write_files(landed, directory / "files") if landed else [])
        yield _summary_rows([summary for summary, _ in spooled])
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _land_alone(spec: TokenJobSpec) -> Iterator[pa.RecordBatch]:
    """land_wave_tokens of a task of one token: its rows written into the task's files while it reads (Parquet's encoding
    in a thread of the worker, beside the reading), published once it has read its whole range; the same rows as the
    listing and summary a spooled token gives, and the same files. A token that fails publishes nothing."""
    summary, clock = ControlSummary(spec.token, spec.read_from, spec.read_to), _Clock()
    files = StreamedFiles(_destination([spec]), Path(tempfile.gettempdir()) / "spanner-cdc" / uuid.uuid4().hex, spec.file_bytes,
                          _process_pool("encode", 1))  # fmt: skip
    try:
        for batch in _read(spec, summary):
            files.write(spec.token, batch)
        clock.stamp(summary)
        published = files.publish()
    except Exception as exc:  # noqa: BLE001 - reported in the token's summary row, as a spooled token's
        log.warning("%s %s: token failed in its wave job: %s", spec.stream, spec.token, exc)
        files.abort()
        summary.fail(exc)
        published = []
    yield from _file_rows(published)
    yield _summary_row(summary)


def _file_rows(files: Iterable[TaskFile]) -> Iterator[pa.RecordBatch]:
    """A row per file and token of it: the token's rows in that file, the file's bytes."""
    for file in files:
        tokens = [token for token, _ in file.rows_by_token]
        yield pa.RecordBatch.from_pydict(
            {"table": [file.table] * len(tokens), "path": [file.path] * len(tokens),
             "rows": [rows for _, rows in file.rows_by_token], "bytes": [file.bytes] * len(tokens),
             "token": tokens, "control": [None] * len(tokens)},
            schema=WAVE_SCHEMA,
        )  # fmt: skip


def _spool_all(specs: list[TokenJobSpec], threads: int, directory: Path) -> list[tuple[ControlSummary, TokenSpool | None]]:
    if threads <= 1 or len(specs) <= 1:
        return [spool_token(spec, directory, len(specs)) for spec in specs]
    pool = _process_pool("token", threads)
    futures = [pool.submit(spool_token, spec, directory, len(specs)) for spec in specs]
    try:
        return [future.result() for future in futures]
    finally:  # a task that ends early (an error) leaves no token reading behind it
        for future in futures:
            future.cancel()
        wait(futures)


def _destination(landed: list[TokenJobSpec]) -> Callable[[str, int], str]:
    """Where a task's file of a table goes: named for the tokens that landed in it and their ranges (`lake/layout.py`)."""
    first = landed[0]
    stem = first.file_stem or task_file_stem(first.lineage_id, [(s.token, s.read_from, s.read_to) for s in landed])
    content = content_digest(landed)

    def destination(table: str, sequence: int) -> str:
        return task_object_name(first.lake_root, stem=stem, content=content, table=table, window_start=first.window_start, sequence=sequence)

    return destination


def _write_files(landed: list[tuple[TokenJobSpec, TokenSpool]], scratch: Path) -> list[TaskFile]:
    """The landed tokens' rows in one file per table (rolled past the size), named for what they hold."""
    first = landed[0][0]
    files = TaskFiles(_destination([spec for spec, _ in landed]), scratch, first.file_bytes)
    for table in sorted({table for _, spool in landed for table in spool.tables}):
        files.write_table(table, [(spec.token, spool) for spec, spool in landed if table in spool.rows])
    return files.published
