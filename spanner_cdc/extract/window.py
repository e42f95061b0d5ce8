"""The extract pipeline of one window: plan (retention guard, bootstrap), waves of token jobs, close (check + marker)."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import ConfigError, ExtractError, UsageError, setting
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.inputs import layout_of, store_of, stream_of, utc_given
from spanner_cdc.extract.planning import check_retention, effective_start, root_partitions
from spanner_cdc.lake import storage
from spanner_cdc.lake.completeness import completeness_record
from spanner_cdc.lake.layout import LakeLayout, check_output_root
from spanner_cdc.lake.markers import earlier_completeness, read_marker, write_marker
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.names import LIVE_READ_METHOD, READ_METHODS, short_token

if TYPE_CHECKING:
    from spanner_cdc.extract.token import TokenResult
    from spanner_cdc.policy import Policy
    from spanner_cdc.settings import Settings
    from spanner_cdc.store import MetadataStore
    from spanner_cdc.store.models import ManifestFile

log = logging.getLogger(__name__)

__all__ = [
    "TokenTask",
    "WindowPlan",
    "WindowSummary",
    "Progress",
    "RunSource",
    "close_window",
    "extract_tokens",
    "plan_window",
    "ready_tasks",
    "run_window",
]

# How often a run whose remaining tokens are all held by another run looks again: a dead holder's
# tokens come back at the next look (liveness), a live holder's when it lands them.
HELD_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class TokenTask:
    """A READY token and the range this window reads of it: [read_from, read_to] (inclusive)."""

    token: str
    read_from: datetime
    read_to: datetime

    @property
    def label(self) -> str:
        short = self.token if len(self.token) <= 10 else "…" + self.token[-10:]
        return f"{short} {self.read_from:%H:%M:%S}–{self.read_to:%H:%M:%S}"


@dataclass(frozen=True)
class WindowPlan:
    stream: str
    namespace: str
    lineage_id: int
    window_start: datetime
    window_end: datetime
    ready: list[TokenTask]
    effective_start: datetime
    # seconds of the plan spent in the metadata store (the rest: the stream's metadata and root partitions from Spanner)
    store_s: float = 0.0


@dataclass
class WindowSummary:
    """The outcome of a window; `records` counts lake rows (one per mod), `tokens` the partitions alive in it."""

    stream: str
    namespace: str
    window_start: datetime
    window_end: datetime
    complete: bool
    tokens: int
    records: int
    files: int
    transaction_check: dict[str, Any]
    pending: list[str]
    marker_path: str | None
    elapsed_s: float
    waves: int = 0
    extracted_tokens: int = 0
    # the window's completeness record (`lake/completeness.py`), once complete: as its marker and snapshot carry it
    completeness: dict[str, Any] | None = None
    # where this run's time went, in seconds: plan (bootstrap included), plan_store (the plan's part in the metadata
    # store, the rest being Spanner's answers), claim (the store's, every wave), waves (their Spark jobs and commits,
    # claims included), close (check, marker, lake commit)
    phases: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["window_start"] = self.window_start.isoformat()
        data["window_end"] = self.window_end.isoformat()
        data["elapsed_s"] = round(self.elapsed_s, 3)
        data["phases"] = {name: round(seconds, 3) for name, seconds in self.phases.items()}
        return data


@dataclass
class Progress:
    """Counts for a progress display: tokens done / running / waiting, rows landed, current wave."""

    wave: int = 0
    done: int = 0
    running: int = 0
    waiting: int = 0
    records: int = 0
    failed: int = 0
    tokens: list[str] = field(default_factory=list)


ProgressCallback = Callable[[Progress], None]


class RunSource:
    """The database of one run and what is asked of it once: a client (with its session thread) and the
    dialect and partition mode per run (run_window, catch_up), not per wave. Opened at first use, so a
    caller can hand one to several steps (the CLI's catch_up and run_window) before any needs it."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._modes: dict[str, str] = {}

    @cached_property
    def database(self) -> Any:
        from spanner_cdc.source.client import open_database

        return open_database(self._settings)

    @cached_property
    def dialect(self) -> str:
        from spanner_cdc.source.client import detect_dialect

        return detect_dialect(self.database, self._settings.dialect)

    def partition_mode(self, stream: str) -> str:
        from spanner_cdc.source.partition_mode import detect_partition_mode

        if stream not in self._modes:
            self._modes[stream] = detect_partition_mode(self.database, stream, self.dialect)
        return self._modes[stream]


def _window(window_start: datetime, window_end: datetime) -> tuple[datetime, datetime]:
    start, end = utc_given(window_start, setting("window_start")), utc_given(window_end, setting("window_end"))
    if end <= start:
        raise UsageError(f"{setting('window_end')} {end.isoformat()} must be after {setting('window_start')} {start.isoformat()}")
    return start, end


def _read_method(read_method: str) -> str:
    if read_method not in READ_METHODS:
        raise ConfigError("read_method", read_method, "one of " + ", ".join(READ_METHODS))
    return read_method


def _tasks(store: MetadataStore, lineage_id: int, window_end: datetime) -> list[TokenTask]:
    last = inclusive_end(window_end)
    return [TokenTask(token, start, last) for token, start in store.ready_reads(lineage_id, window_end)]


def plan_window(
    settings: Settings,
    window_start: datetime,
    window_end: datetime,
    *,
    read_method: str = LIVE_READ_METHOD,
    source: RunSource | None = None,
) -> WindowPlan:
    """Check retention, bootstrap the lineage if new, release dead workers' leases, list the ready tokens."""
    from spanner_cdc.source.client import stream_metadata

    start, end = _window(window_start, window_end)
    stream, _ = stream_of(settings), _read_method(read_method)
    check_output_root(settings.output_root)
    source = source or RunSource(settings)
    database, dialect = source.database, source.dialect
    meta = stream_metadata(database, stream, dialect)
    effective = effective_start(stream, meta.created_at, start, end)
    in_store, source_s = time.monotonic(), 0.0
    with store_of(settings) as store:
        lineage = store.ensure_lineage(stream, settings.namespace, database=database.name)
        store.record_retention(lineage.id, meta.retention)  # what the UI measures the headroom against
        begins = store.lineage_start(lineage.id)  # None: not bootstrapped yet
        if begins is None or not store.window_status(lineage.id, start, end).complete:
            check_retention(stream, effective, meta.retention, settings.namespace)
            asking = time.monotonic()
            root_start, roots = root_partitions(
                database, stream, dialect=dialect, heartbeat_ms=settings.heartbeat_ms, at=effective,
                retention=meta.retention, namespace=settings.namespace, read_options=settings.read_options,
            )  # fmt: skip
            source_s = time.monotonic() - asking
            if begins is None:
                created = store.bootstrap(lineage.id, root_start, roots)
                log.info("%s: lineage %s bootstrapped with %d root partitions at %s", stream, lineage.name, created, root_start.isoformat())
            elif begins > inclusive_end(end):
                raise UsageError(
                    f"window [{start.isoformat()}, {end.isoformat()}) ends before lineage {lineage.name} begins "
                    f"({begins.isoformat()}): extract it into a new {setting('namespace')} (a backfill)"
                )
        store.expire_leases(lineage.id)
        store.open_window(lineage.id, start, end)
        ready = _tasks(store, lineage.id, end)
    store_s = time.monotonic() - in_store - source_s
    return WindowPlan(stream, settings.namespace, lineage.id, start, end, ready, effective, store_s)


def ready_tasks(settings: Settings, window_start: datetime, window_end: datetime) -> list[TokenTask]:
    """The next wave: tokens READY now (children promoted by the last wave, tokens of dead workers)."""
    start, end = _window(window_start, window_end)
    with store_of(settings) as store:
        lineage = store.get_lineage(stream_of(settings), settings.namespace)
        store.expire_leases(lineage.id)
        return _tasks(store, lineage.id, end)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def extract_tokens(
    settings: Settings,
    window_start: datetime,
    window_end: datetime,
    tokens: Sequence[str],
    *,
    read_method: str = LIVE_READ_METHOD,
    owner: str | None = None,
    progress: ProgressCallback | None = None,
    source: RunSource | None = None,
    phases: dict[str, float] | None = None,
) -> list[TokenResult]:
    """Claim exactly these tokens, run their Spark jobs (at most settings.concurrency at once), publish, commit.

    With the arrow writer the tokens go in at most settings.concurrency groups, a Spark job and one store
    transaction per group (`extract/wave.py`). `source` is the run's database (opened here without one).

    Tokens that cannot be claimed (finished, read to the window end, or leased by a live worker) are skipped.
    `phases["claim_s"]`, when given, adds the time the claim took.
    """
    from spanner_cdc.extract.token import ExtractJob, extract_claims
    from spanner_cdc.extract.wave import extract_wave
    from spanner_cdc.lake.iceberg import import_ahead
    from spanner_cdc.spark.session import spark_session, still_starting

    start, end = _window(window_start, window_end)
    stream, method = stream_of(settings), _read_method(read_method)
    if not tokens:
        return []
    lease, liveness = settings.lease, settings.liveness == "lock"
    # Spark, the dialect and the partition mode first: a JVM start must not eat into the leases of claimed tokens
    source = source or RunSource(settings)
    dialect, partition_mode = source.dialect, source.partition_mode(stream)
    landing, secret = _landing_policy(settings, start, end)  # before the claims: a missing key fails the run up front
    _warn_unmatched(settings, source, landing)
    if still_starting(settings):  # the close's Iceberg modules meanwhile: the run waits for the driver's JVM
        import_ahead(settings)
    spark = spark_session(settings)
    with store_of(settings) as store:
        claiming = time.monotonic()
        lineage = store.get_lineage(stream, settings.namespace)
        claims = store.claim(
            lineage.id, window_end=end, owner=owner or _owner(), lease=lease, tokens=list(tokens), liveness=liveness
        )
        claimed_s = time.monotonic() - claiming
        if phases is not None:
            phases["claim_s"] = phases.get("claim_s", 0.0) + claimed_s
        log.info("%s: claimed %d of %d token(s) in %.2fs", stream, len(claims), len(tokens), claimed_s)
        skipped = sorted(set(tokens) - {c.token for c in claims})
        if skipped:
            log.info("%s: %d token(s) not claimable (done, or leased by another worker): %s", stream, len(skipped), ", ".join(short_token(t) for t in skipped))
        if not claims:
            return []
        failpoint("after_claim")
        job = ExtractJob(
            store=store,
            spark=spark,
            layout=layout_of(settings),
            lineage_id=lineage.id,
            stream=stream,
            window_start=start,
            window_end=end,
            read_method=method,
            connection=_connection(settings, dialect, partition_mode),
            writer=settings.lake_writer,
            group_tokens=settings.wave_group_tokens,
            task_tokens=settings.task_tokens,
            task_share=_task_share(spark, settings.concurrency),
            task_threads=settings.task_threads,
            file_bytes=settings.target_file_size,
            policy="" if landing.empty else str(landing),
            policy_secret=secret,
        )
        tracker = _ProgressTracker(Progress(waiting=len(claims), tokens=[c.token for c in claims]), progress)
        # the writer, chosen once: pyarrow on the executors lands a group of tokens per Spark job and commits them
        # together; Spark's own Parquet writer needs a job (and a commit) per token
        if job.writer == "arrow":  # the close's Iceberg modules, if not imported yet, while later groups still run
            return extract_wave(job, claims, concurrency=settings.concurrency, lease=lease, on_start=tracker.started,
                                on_done=tracker.done, while_waiting=partial(import_ahead, settings))  # fmt: skip
        return extract_claims(job, claims, concurrency=settings.concurrency, lease=lease, on_start=tracker.started, on_done=tracker.done)


def _task_share(spark: Any, concurrency: int) -> int | None:
    """The cores a group's job may fill: Spark's cores over the groups running at once (None: Spark does not say)."""
    from spanner_cdc.spark.session import spark_cores

    cores = spark_cores(spark)
    return None if cores is None else max(1, cores // max(1, concurrency))


def _landing_policy(settings: Settings, start: datetime, end: datetime) -> tuple[Policy, str]:
    """The window's landing policy (the one it began under, `lake/window_policy.py`) and its HMAC key as hex, read
    from its source now (held in memory, handed to the executors with their specs, written nowhere)."""
    from spanner_cdc.lake.window_policy import window_policy
    from spanner_cdc.policy import resolve_key

    landing = window_policy(layout_of(settings), start, end, settings.policy)
    return landing, resolve_key(landing).hex()


def _warn_unmatched(settings: Settings, source: RunSource, landing: Policy) -> None:
    """Each column rule that names no column of a watched table, logged (a typo would land the clear value); the
    snapshot refuses them. Asked only of a policy with column rules: one schema read per call."""
    if not landing.rules():
        return
    from spanner_cdc.policy import unmatched_rules
    from spanner_cdc.source.snapshot_tables import watched_tables

    stream = stream_of(settings)
    tables = {t.name: (*t.keys, *t.columns) for t in watched_tables(source.database, stream, source.dialect)}
    for problem in unmatched_rules(landing, tables):
        log.warning("%s: landing policy %s: %s", stream, landing.fingerprint, problem)


def _connection(settings: Settings, dialect: str, partition_mode: str) -> dict[str, Any]:
    """What an executor needs to open the database, as the token job's options."""
    return {
        "project": settings.project,
        "instance": settings.instance,
        "database": settings.database,
        "emulator_host": settings.emulator_host,
        "dialect": dialect,
        "partition_mode": partition_mode,
        "heartbeat_ms": settings.heartbeat_ms,
        "read_options": str(settings.read_options),
    }


class _ProgressTracker:
    """Counts tokens waiting, running, done and failed, and tells `progress` after each change."""

    def __init__(self, state: Progress, progress: ProgressCallback | None) -> None:
        self.state, self.progress = state, progress

    def started(self, claim: Any) -> None:
        self.state.waiting -= 1
        self.state.running += 1
        if self.progress:
            self.progress(self.state)

    def done(self, claim: Any, result: TokenResult | None) -> None:
        self.state.running -= 1
        if result is None:
            self.state.failed += 1
        else:
            self.state.done += 1
            self.state.records += result.records
        if self.progress:
            self.progress(self.state)


def close_window(settings: Settings, window_start: datetime, window_end: datetime) -> WindowSummary:
    """If every partition is done with the window: check transactions, write the marker, mark it complete."""
    started = time.monotonic()
    start, end = _window(window_start, window_end)
    stream = stream_of(settings)
    with store_of(settings) as store:
        lineage = store.get_lineage(stream, settings.namespace)
        # one closer at a time per window: a second run of the window waits here, then finds it closed
        with store.window_lock(lineage.id, start, end):
            summary = _close_locked(settings, store, lineage.id, start, end)
    summary.elapsed_s = time.monotonic() - started
    return summary


def _close_locked(settings: Settings, store: MetadataStore, lineage_id: int, start: datetime, end: datetime) -> WindowSummary:
    """close_window's body, under the window's lock: the check, the marker and the COMPLETE row."""
    stream, layout = stream_of(settings), layout_of(settings)
    status = store.window_status(lineage_id, start, end)
    files = store.manifest(lineage_id, window_start=start, window_end=end)
    summary = WindowSummary(
        stream=stream,
        namespace=settings.namespace,
        window_start=start,
        window_end=end,
        complete=False,
        tokens=status.partitions,
        records=sum(f.rows for f in files),
        files=len(files),
        transaction_check={},
        pending=sorted(token for tokens in status.pending.values() for token in tokens),
        marker_path=None,
        elapsed_s=0.0,
    )
    if not status.complete:
        log.info("%s: window [%s, %s) not complete: %d token(s) pending", stream, start.isoformat(), end.isoformat(), len(summary.pending))
        return summary
    row = next((w for w in store.windows(lineage_id) if (w.start, w.end) == (start, end)), None) if status.closed else None
    if row is not None and row.marker_path and storage.exists(row.marker_path):
        # closed before (a re-run, or another run of the window that closed it first): nothing can land
        # in it any more, so its check and marker stand
        summary.complete, summary.marker_path = True, row.marker_path
        summary.transaction_check = dict(row.transaction_check or {})
        summary.completeness = (read_marker(row.marker_path) or {}).get("completeness")
        return summary
    # A token that fell behind lands older commits with a later window's files: check the window's
    # transactions in every file whose range overlaps it, whatever window extracted it.
    overlapping = [f for f in store.manifest(lineage_id) if f.range_start <= inclusive_end(end) and f.range_end >= start]
    from spanner_cdc.lake.window_policy import window_policy

    landing = window_policy(layout, start, end, settings.policy)
    # a transaction's records of tables the policy leaves out never land: the check then asks for no more records
    # than the transaction had (and no duplicate) rather than for all of them (docs/governance.md)
    check = _transaction_check(settings, overlapping, start, end, partial=landing.filters_tables or settings.policy.filters_tables)
    summary.transaction_check = check
    if not check["ok"]:
        store.record_failed_check(lineage_id, start, end, check)
        raise ExtractError(
            f"{stream}: window [{start.isoformat()}, {end.isoformat()}) failed the transaction check "
            f"({check['mismatched']} of {check['transactions']} transactions with a record count other than "
            f"number_of_records_in_transaction, {check['duplicate_rows']} duplicate rows; e.g. {check['examples'][:3]}); "
            "the window is not marked complete"
        )
    record = _completeness(store, layout, lineage_id, start, end, files, check, landing)
    marker = write_marker(
        layout, lineage_id=lineage_id, window_start=start, window_end=end, files=files, check=check, completeness=record
    )
    from spanner_cdc.lake.iceberg import land_window  # pyiceberg and pyarrow: the close's, not the plan's

    # after the marker, before the window is closed: a close killed in between commits on its re-run, once
    land_window(settings, layout, window_start=start, window_end=end, files=files, completeness=record)
    store.close_window(
        lineage_id, start, end, records=summary.records, files=summary.files, transaction_check=check, marker_path=str(marker)
    )
    summary.complete, summary.marker_path, summary.completeness = True, str(marker), record
    log.info(
        "%s: window [%s, %s) complete: %d rows in %d files, %d transactions checked",
        stream, start.isoformat(), end.isoformat(), summary.records, summary.files, check["transactions"],
    )  # fmt: skip
    return summary


def _completeness(
    store: MetadataStore, layout: LakeLayout, lineage_id: int, start: datetime, end: datetime,
    files: Sequence[ManifestFile], check: dict[str, Any], landing: Policy,
) -> dict[str, Any]:  # fmt: skip
    """The window's completeness record (a re-run after a killed close keeps the one its marker has)."""
    earlier = earlier_completeness(layout, start, end, files)
    if earlier is not None:
        return earlier
    return completeness_record(
        stream=layout.stream, namespace=layout.namespace, window_start=start, window_end=end,
        low_watermark=store.low_watermark(lineage_id), check=check, policy=landing,
    )  # fmt: skip


def _transaction_check(
    settings: Settings, files: Sequence[ManifestFile], start: datetime, end: datetime, *, partial: bool = False
) -> dict[str, Any]:
    """The check of the files overlapping the window: read in this process when the manifest says they are
    small (no Spark job, which costs more than the reading), counted by Spark where they are otherwise, so
    the driver's memory stays bounded whatever the window's size."""
    paths, rows = [f.path for f in files], sum(f.rows for f in files)
    if rows <= settings.check_driver_rows:
        from spanner_cdc.lake.check import driver_transaction_check  # pyarrow: the close's, not the plan's

        return driver_transaction_check(paths, window_start=start, window_end=end, partial=partial)
    from spanner_cdc.spark.check import transaction_check
    from spanner_cdc.spark.session import spark_session

    log.info("%s: checking %d rows in %d files with Spark", settings.stream, rows, len(paths))
    return transaction_check(spark_session(settings), paths, window_start=start, window_end=end, partial=partial)


def _held_elsewhere(store: MetadataStore, lineage_id: int, end: datetime) -> list[str]:
    """Tokens another run (or a planned task) holds that still have part of the window to read."""
    return store.held_tokens(lineage_id, end)


def _wait_for_held_tokens(settings: Settings, end: datetime) -> list[TokenTask]:
    """Nothing is ready, but tokens of the window are held elsewhere: look again every HELD_POLL_S until some
    are READY (their run died or their lease passed, or their children were promoted), or none is held."""
    interval = min(HELD_POLL_S, settings.lease_s / 4)
    with store_of(settings) as store:
        lineage = store.get_lineage(stream_of(settings), settings.namespace)
        announced: set[str] = set()
        while True:
            store.expire_leases(lineage.id)
            ready = _tasks(store, lineage.id, end)
            held = _held_elsewhere(store, lineage.id, end)
            if ready or not held:
                return ready
            if not announced.issuperset(held):
                log.info("%s: waiting for %d token(s) held by another run: %s", settings.stream, len(held), ", ".join(short_token(t) for t in held))
                announced.update(held)
            time.sleep(interval)  # polling the store: the tokens are another process's to land or drop


def run_window(
    settings: Settings,
    window_start: datetime,
    window_end: datetime,
    *,
    read_method: str = LIVE_READ_METHOD,
    max_waves: int = 20,
    progress: ProgressCallback | None = None,
    source: RunSource | None = None,
) -> WindowSummary:
    """Plan, then waves of ready tokens (children born in the window join later waves), then close."""
    started = time.monotonic()
    from spanner_cdc.spark.session import start_in_background

    _window(window_start, window_end)  # a bad window stops the run before the database is asked anything (settings were checked as loaded)
    start_in_background(settings)  # a driver's JVM starts while the window is planned
    source = source or RunSource(settings)
    planning = time.monotonic()
    plan = plan_window(settings, window_start, window_end, read_method=read_method, source=source)
    phases = {"plan_s": time.monotonic() - planning, "plan_store_s": plan.store_s, "claim_s": 0.0}
    log.info("%s: window planned in %.2fs: %d token(s) ready", settings.stream, phases["plan_s"], len(plan.ready))
    start, end = plan.window_start, plan.window_end
    extracting = time.monotonic()
    tasks, waves, extracted, records = plan.ready, 0, 0, 0
    owner = _owner()
    while waves < max_waves:
        if not tasks:
            # waiting for another run spends no wave: only extracting does
            tasks = _wait_for_held_tokens(settings, end)
            if not tasks:
                break
            continue
        waves += 1
        base = records

        def wave_progress(state: Progress, wave: int = waves, base: int = base, done: int = extracted) -> None:
            if progress:
                progress(Progress(wave, done + state.done, state.running, state.waiting, base + state.records, state.failed))

        results = extract_tokens(
            settings, start, end, [t.token for t in tasks], read_method=read_method, owner=owner, progress=wave_progress,
            source=source, phases=phases,
        )  # fmt: skip
        extracted += len(results)
        records += sum(r.records for r in results)
        if not results:
            # another run claimed them first: not a wave of ours; wait for what it holds instead
            waves -= 1
            tasks = []
            continue
        tasks = ready_tasks(settings, start, end)
    phases["waves_s"] = time.monotonic() - extracting
    failpoint("before_close")
    summary = close_window(settings, start, end)
    summary.phases = {**phases, "close_s": summary.elapsed_s}  # close_window's own time
    summary.waves, summary.extracted_tokens = waves, extracted
    summary.elapsed_s = time.monotonic() - started
    return summary


def catch_up(
    settings: Settings,
    before: datetime,
    *,
    read_method: str = LIVE_READ_METHOD,
    max_waves: int = 20,
    source: RunSource | None = None,
) -> list[WindowSummary]:
    """Finish, oldest first, the windows of this lineage that end at or before `before` and were left open.

    A token carried over from an open window must be read up to *that* window's end before a later
    window reads it further; otherwise its older commits would land with the later window.
    """
    from spanner_cdc.errors import NotFound

    before = utc_given(before, "window start")
    with store_of(settings) as store:
        try:
            lineage = store.get_lineage(stream_of(settings), settings.namespace)
        except NotFound:
            return []  # a new lineage: nothing was left open
        left_open = sorted((w.start, w.end) for w in store.windows(lineage.id) if w.state != "COMPLETE" and w.end <= before)
    summaries = []
    source = source or RunSource(settings)
    for start, end in left_open:
        log.info("%s: window [%s, %s) was left open by an earlier run: finishing it first", settings.stream, start, end)
        summary = run_window(settings, start, end, read_method=read_method, max_waves=max_waves, source=source)
        if not summary.complete:
            raise ExtractError(
                f"{settings.stream}: the earlier window [{start.isoformat()}, {end.isoformat()}) is still not complete "
                f"({len(summary.pending)} tokens pending); run again to continue it before later windows"
            )
        summaries.append(summary)
    return summaries
