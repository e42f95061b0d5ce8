"""Extract one claimed token over one window: run its Spark job, publish its files, commit in one store transaction."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import ConfigError, ExtractError, SpannerCdcError
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.lake.layout import LakeLayout, compact_time
from spanner_cdc.lake.publish import clear_journal, clear_staging, prepare_attempt, publish
from spanner_cdc.lake.storage import join
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.names import short_token
from spanner_cdc.settings import Settings, env_name
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.spec import TokenJobSpec
from spanner_cdc.spark.token_job import run_token_job
from spanner_cdc.store.models import Claim, LeaseLost, ManifestFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spanner_cdc.store import MetadataStore

log = logging.getLogger(__name__)

# Settings.liveness "lock" (default): a run's claims are also tied to its life (store.liveness), so a re-run takes a
# dead run's tokens over at once; "lease": only the lease (Settings.lease_s) frees them (behind a pooler that does not
# keep sessions, such as PgBouncer in transaction mode, a session lock says nothing about a run).
# How often a running extract checks that it still holds its liveness lock (it re-takes it after a
# Postgres restart); the lease is renewed less often, every third of it.
LIVENESS_CHECK_S = 2.0
@dataclass(frozen=True)
class TokenResult:
    """What one token's extract landed; `records` counts lake rows (one per mod)."""

    token: str
    records: int
    files: int
    finished: bool
    watermark: datetime
    promoted_children: list[str] = field(default_factory=list)
    data_change_records: int = 0
    read_from: datetime | None = None
    read_to: datetime | None = None
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class ExtractJob:
    """What every token of one extract call shares."""

    store: MetadataStore
    spark: SparkSession
    layout: LakeLayout
    lineage_id: int
    stream: str
    window_start: datetime
    window_end: datetime
    read_method: str
    connection: dict[str, Any]  # project, instance, database, emulator_host, dialect, heartbeat_ms
    # the tuning of Settings the job's driver side uses (defaults: Settings'); the writer is chosen once: "arrow"
    # lands a wave's tokens in groups (extract/wave.py), "spark" a token per job (here)
    writer: str = Settings.lake_writer
    group_tokens: int = Settings.wave_group_tokens
    task_tokens: int = Settings.task_tokens
    task_share: int | None = None  # task_tokens 0: how many of Spark's cores a group's job may fill (None: unknown)
    task_threads: int = Settings.task_threads
    file_bytes: int = Settings.target_file_size  # a landed file rolls to the next past this
    policy: str = ""  # the window's landing policy as JSON text ("" for none) and its HMAC key as hex (never shown)
    policy_secret: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.writer != "arrow" and self.layout.is_url:
            raise ConfigError(env_name("lake_writer"), self.writer, "arrow when the output root is a bucket (Spark's own Parquet writer would need the Hadoop GCS / S3 connectors)")


class LeaseKeeper:
    """Renews the leases of running claims, and checks the run's liveness lock, from one background thread."""

    def __init__(self, store: MetadataStore, lease: timedelta) -> None:
        self.store = store
        self.lease = lease
        self._claims: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def hold(self, claim: Claim) -> None:
        with self._lock:
            self._claims[claim.token] = claim

    def release(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop(claim.token, None)

    def _run(self) -> None:
        interval = self.lease.total_seconds() / 3
        renewed = time.monotonic()
        while not self._stop.wait(min(interval, LIVENESS_CHECK_S)):
            try:
                self.store.keep_alive()
            except Exception as exc:  # the store is down: try again next round
                log.warning("checking the run's liveness lock failed: %s", exc)
            if time.monotonic() - renewed < interval:
                continue
            renewed = time.monotonic()
            with self._lock:
                claims = list(self._claims.values())
            self._renew(claims)

    def _renew(self, claims: list[Claim]) -> None:
        """Every held lease of a lineage in one statement (a run holding many tokens renews them in one round trip)."""
        by_lineage: dict[int, list[Claim]] = {}
        for claim in claims:
            by_lineage.setdefault(claim.lineage_id, []).append(claim)
        for held in by_lineage.values():
            try:
                _, lost = self.store.renew_many(held, self.lease)
            except Exception as exc:  # a store hiccup: try again next round, the lease has slack
                log.warning("renewing %d lease(s) failed: %s", len(held), exc)
                continue
            for claim in lost:
                log.warning(
                    "%s: lease lost while extracting: attempt %s of %s no longer holds it",
                    short_token(claim.token), claim.attempt, claim.owner,
                )  # fmt: skip
                self.release(claim)


def attempt_spec(job: ExtractJob, claim: Claim, read_from: datetime, read_to: datetime) -> TokenJobSpec:
    """What an attempt's job reads and where it lands (no I/O)."""
    attempt_dir = join(
        job.layout.staging_location(claim.token),
        f"{compact_time(read_from)}-{compact_time(read_to)}-a{claim.attempt}-{uuid.uuid4().hex[:8]}",
    )
    return TokenJobSpec(
        stream=job.stream, token=claim.token, read_from=read_from, read_to=read_to, window_start=job.window_start,
        window_end=job.window_end, read_method=job.read_method, attempt_dir=attempt_dir,
        lake_root=job.layout.location, lineage_id=job.lineage_id, file_bytes=job.file_bytes, policy=job.policy,
        policy_secret=job.policy_secret, **job.connection,
    )  # fmt: skip


def cleanup_checks(job: ExtractJob) -> tuple[Callable[[datetime, datetime], set[str]], Callable[[Sequence[tuple[str, int]]], bool]]:
    """What the cleanup of a crashed attempt asks the store (`lake/publish.py`): the manifest's paths of a window of the
    job's lineage (kept), and whether any of some (token, attempt)s is still RUNNING (then nothing is deleted)."""

    def committed(window_start: datetime, window_end: datetime) -> set[str]:
        return {f.path for f in job.store.manifest(job.lineage_id, window_start=window_start, window_end=window_end)}

    return committed, partial(job.store.any_attempt_running, job.lineage_id)


def prepare(job: ExtractJob, spec: TokenJobSpec) -> None:
    """The lake's one step before an attempt of a token's own job (`lake/publish.py`): what a crashed attempt left,
    cleaned up."""
    committed, running = cleanup_checks(job)
    prepare_attempt(job.layout, spec.token, committed=committed, running=running)


def extract_claim(job: ExtractJob, claim: Claim) -> TokenResult:
    """Read the claimed token over [read_from, E - 1 µs], land it, and commit it (or record the failure)."""
    started = time.monotonic()
    token = claim.token
    read_from, read_to = claim.read_from, inclusive_end(job.window_end)
    if read_from > read_to:  # nothing left in this window (claim filters these out; kept for safety)
        promoted = job.store.complete(claim, watermark=read_to, finished=False)
        return TokenResult(token, 0, 0, False, read_to, promoted, 0, read_from, read_to)
    try:
        spec = attempt_spec(job, claim, read_from, read_to)
        prepare(job, spec)
        log.info("%s %s: reading %s .. %s (attempt %s)", job.stream, short_token(token), read_from.isoformat(), read_to.isoformat(), claim.attempt)
        summary = run_token_job(job.spark, spec)
        failpoint("after_job")
        files = publish(
            spec.data_dir, job.layout, lineage_id=job.lineage_id, token=token, range_start=read_from, range_end=read_to,
            window_start=job.window_start, window_end=job.window_end,
        )  # fmt: skip
        landed = sum(f.rows for f in files)
        if landed != summary.rows:
            raise ExtractError(
                f"{job.stream} {short_token(token)}: the job read {summary.rows} rows but {landed} were staged; not committing"
            )
    except LeaseLost:
        raise
    except Exception as exc:
        record_failure(job, claim, exc)
        raise
    failpoint("after_publish")
    promoted = _commit(job, claim, summary, files)
    failpoint("after_commit")
    clear_journal(job.layout, token)
    clear_staging(spec.attempt_dir)
    elapsed = time.monotonic() - started
    log.info(
        "%s %s: landed %d rows in %d files in %.1fs (executor %.1fs, %.1fs CPU); watermark %s%s",
        job.stream, short_token(token), summary.rows, len(files), elapsed, summary.elapsed_s, summary.cpu_s,
        summary.watermark.isoformat(), f", finished, children ready: {len(promoted)}" if summary.finished else "",
    )  # fmt: skip
    return TokenResult(
        token=token,
        records=summary.rows,
        files=len(files),
        finished=summary.finished,
        watermark=summary.watermark,
        promoted_children=list(promoted),
        data_change_records=summary.data_records,
        read_from=read_from,
        read_to=read_to,
        elapsed_s=elapsed,
    )


def _commit(job: ExtractJob, claim: Claim, summary: ControlSummary, files: list[ManifestFile]) -> list[str]:
    """The landed range, its files, children, starts and moves in one store transaction; the children made READY."""
    try:
        return job.store.complete(
            claim,
            watermark=summary.watermark,
            finished=summary.finished,
            children=summary.children,
            started=summary.started,
            moves=summary.moves,
            files=files,
            records=summary.rows,
            window_start=job.window_start,
            window_end=job.window_end,
        )
    except LeaseLost:
        raise  # another worker owns the token now; what this one published has the same names as its files
    except Exception as exc:
        record_failure(job, claim, exc)  # the files stay journaled: the retry removes or replaces them
        raise


def record_failure(job: ExtractJob, claim: Claim, exc: BaseException) -> None:
    log.error("%s %s: extract failed: %s", job.stream, short_token(claim.token), exc)
    try:
        job.store.fail(claim, f"{type(exc).__name__}: {exc}")
    except SpannerCdcError as store_exc:  # LeaseLost or store down: the lease expiry releases it anyway
        log.warning("%s %s: could not record the failure: %s", job.stream, short_token(claim.token), store_exc)


def extract_claims(
    job: ExtractJob,
    claims: Sequence[Claim],
    *,
    concurrency: int,
    lease: timedelta,
    on_start: Callable[[Claim], None] | None = None,
    on_done: Callable[[Claim, TokenResult | None], None] | None = None,
) -> list[TokenResult]:
    """Run the claims' jobs `concurrency` at a time; every token is committed or failed on its own.

    Raises after all have run if any failed: the project's error of the first failure (e.g. a
    RetentionError) or an ExtractError naming how many failed.
    """
    results: list[TokenResult] = []
    errors: list[tuple[Claim, BaseException]] = []

    def run(claim: Claim) -> None:
        if on_start:
            on_start(claim)
        keeper.hold(claim)
        result: TokenResult | None = None
        try:
            result = extract_claim(job, claim)
            results.append(result)
        except BaseException as exc:
            errors.append((claim, exc))
        finally:
            keeper.release(claim)
            if on_done:
                on_done(claim, result)

    with LeaseKeeper(job.store, lease) as keeper, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for future in [pool.submit(run, claim) for claim in claims]:
            future.result()
    return raise_failures(job, claims, results, errors)


def raise_failures(
    job: ExtractJob, claims: Sequence[Claim], results: list[TokenResult], errors: list[tuple[Claim, BaseException]]
) -> list[TokenResult]:
    """The results in claim order, or, if any token failed, the project's error of the first failure (e.g. a
    RetentionError) when it is the only one, else an ExtractError naming how many failed."""
    if errors:
        claim, first = errors[0]
        if len(errors) == 1 and isinstance(first, SpannerCdcError):
            raise first
        raise ExtractError(
            f"{job.stream}: {len(errors)} of {len(claims)} tokens failed (committed: {len(results)}); "
            f"first: {short_token(claim.token)}: {first}; the failed tokens are READY again for a retry"
        ) from first
    order = {claim.token: i for i, claim in enumerate(claims)}
    return sorted(results, key=lambda r: order[r.token])
