"""Extract a wave of claimed tokens in groups: one Spark job and one store transaction per group."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from spanner_cdc.errors import ExtractError
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.token import (
    ExtractJob,
    LeaseKeeper,
    TokenResult,
    manifest_files,
    raise_failures,
    record_failure,
    start_attempt,
)
from spanner_cdc.lake.publish import clear_journal
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.names import short_token
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.spec import TokenJobSpec
from spanner_cdc.spark.token_job import TokenOutcome, run_wave_job
from spanner_cdc.store.models import Claim, Completion

log = logging.getLogger(__name__)

# Settings.wave_group_tokens, the most tokens one Spark job (and one store transaction) lands: a huge wave is still
# committed in steps, and a job that fails as a whole sends at most this many tokens back to READY. 1 gives a job per
# token (as before waves were grouped; the benchmark compares the two).
START_THREADS = 8  # a group's attempts started at once (journals written, a crashed attempt's files removed)


@dataclass
class _Landed:
    """A token of the group whose job succeeded: what its completion commits."""

    claim: Claim
    spec: TokenJobSpec
    summary: ControlSummary
    completion: Completion


@dataclass
class _Outcomes:
    results: list[TokenResult] = field(default_factory=list)
    errors: list[tuple[Claim, BaseException]] = field(default_factory=list)


def groups(claims: Sequence[Claim], concurrency: int, group_tokens: int) -> list[list[Claim]]:
    """The wave split into `concurrency` groups or fewer (each at most `group_tokens`), in claim order."""
    size = min(group_tokens, max(1, math.ceil(len(claims) / max(1, concurrency))))
    return [list(claims[i : i + size]) for i in range(0, len(claims), size)]


def extract_wave(
    job: ExtractJob,
    claims: Sequence[Claim],
    *,
    concurrency: int,
    lease: timedelta,
    on_start: Callable[[Claim], None] | None = None,
    on_done: Callable[[Claim, TokenResult | None], None] | None = None,
) -> list[TokenResult]:
    """Land the claims in groups, `concurrency` groups at a time; each token is committed or failed on its own.

    A group's tokens are read by one Spark job (a task per few tokens), and those whose files were published are
    committed in one store transaction (`complete_many`: each still a compare-and-set, a lost claim leaves
    nothing). Raises after all have run if any failed, as `extract_claims` does.
    """
    out = _Outcomes()
    with LeaseKeeper(job.store, lease) as keeper, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [
            pool.submit(_run_group, job, group, keeper, out, on_start, on_done) for group in groups(claims, concurrency, job.group_tokens)
        ]
        for future in futures:
            future.result()
    return raise_failures(job, claims, out.results, out.errors)


def _run_group(
    job: ExtractJob,
    group: list[Claim],
    keeper: LeaseKeeper,
    out: _Outcomes,
    on_start: Callable[[Claim], None] | None,
    on_done: Callable[[Claim, TokenResult | None], None] | None,
) -> None:
    started = time.monotonic()
    for claim in group:
        if on_start:
            on_start(claim)
        keeper.hold(claim)
    results: dict[str, TokenResult] = {}
    try:
        landed = _land(job, group, out)
        results = _commit(job, landed, out, started)
        out.results.extend(results.values())
    except BaseException as exc:  # the group's commit itself failed: every token not yet failed fails
        failed = {claim.token for claim, _ in out.errors}
        out.errors.extend((claim, exc) for claim in group if claim.token not in failed and claim.token not in results)
    finally:
        for claim in group:
            keeper.release(claim)
            if on_done:
                on_done(claim, results.get(claim.token))


def _land(job: ExtractJob, group: list[Claim], out: _Outcomes) -> list[_Landed]:
    """Start each token's attempt, run the group's Spark job, and check each token's files; failures are recorded."""
    read_to = inclusive_end(job.window_end)
    specs: dict[str, TokenJobSpec] = {}

    def start(claim: Claim) -> TokenJobSpec | BaseException:
        try:
            return start_attempt(job, claim, claim.read_from, read_to)
        except Exception as exc:  # noqa: BLE001 - this token's failure, recorded below
            return exc

    # each start waits on the lake (its journal synced to disk, or uploaded): the group's starts wait together
    with ThreadPoolExecutor(max_workers=min(len(group), START_THREADS) or 1) as pool:
        started = list(pool.map(start, group))
    for claim, spec in zip(group, started, strict=True):
        if isinstance(spec, BaseException):
            record_failure(job, claim, spec)
            out.errors.append((claim, spec))
        else:
            specs[claim.token] = spec
    for spec in specs.values():
        log.info("%s %s: reading %s .. %s in a wave job of %d", job.stream, short_token(spec.token),
                 spec.read_from.isoformat(), read_to.isoformat(), len(specs))  # fmt: skip
    by_token = {claim.token: claim for claim in group}
    landed: list[_Landed] = []
    began = time.monotonic()
    outcomes = run_wave_job(job.spark, list(specs.values()), job.task_tokens, job.task_threads) if specs else []
    _log_job_time(job, outcomes, time.monotonic() - began)
    for outcome in outcomes:
        claim, spec = by_token[outcome.spec.token], outcome.spec
        try:
            if outcome.error is not None:
                raise outcome.error
            assert outcome.summary is not None
            failpoint("after_job")
            landed.append(_landed(job, claim, spec, outcome.summary, outcome.listing))
        except Exception as exc:
            record_failure(job, claim, exc)
            out.errors.append((claim, exc))
    return landed


def _log_job_time(job: ExtractJob, outcomes: Sequence[TokenOutcome], wall_s: float) -> None:
    """How much of a wave job's time its tasks spent reading and landing (the rest is Spark's: scheduling,
    starting Python workers), from the executors' own clocks in the control files."""
    tasks = [o.summary.elapsed_s for o in outcomes if o.summary is not None]
    if tasks:
        log.info("%s: a wave job of %d token(s) took %.2fs; its tasks %.2fs in all (longest %.2fs, CPU %.2fs)",
                 job.stream, len(outcomes), wall_s, sum(tasks), max(tasks),
                 sum(o.summary.cpu_s for o in outcomes if o.summary is not None))  # fmt: skip


def _landed(job: ExtractJob, claim: Claim, spec: TokenJobSpec, summary: ControlSummary, listing: list[dict[str, Any]]) -> _Landed:
    files = manifest_files(job, spec, listing)
    rows = sum(f.rows for f in files)
    if rows != summary.rows:
        raise ExtractError(
            f"{job.stream} {short_token(claim.token)}: the job read {summary.rows} rows but {rows} were staged; not committing"
        )
    completion = Completion(
        claim, watermark=summary.watermark, finished=summary.finished, children=tuple(summary.children),
        files=tuple(files), records=summary.rows, window_start=job.window_start, window_end=job.window_end,
        started=tuple(summary.started), moves=tuple(summary.moves),
    )  # fmt: skip
    return _Landed(claim, spec, summary, completion)


def _commit(job: ExtractJob, landed: list[_Landed], out: _Outcomes, started: float) -> dict[str, TokenResult]:
    """The landed tokens in one store transaction (their files were published first); lost claims are reported."""
    if not landed:
        return {}
    for _ in landed:
        failpoint("after_publish")
    try:
        batch = job.store.complete_many([item.completion for item in landed])
    except Exception as exc:
        for item in landed:  # the files stay journaled: the retry removes or replaces them
            record_failure(job, item.claim, exc)
        raise
    done = set(batch.landed)
    # lost claims come in the batch's order: another worker owns those tokens now, and what this one
    # published has the same names as its files
    out.errors.extend(zip([i.claim for i in landed if i.claim.token not in done], batch.lost, strict=True))
    promoted = _promoted_by(landed, batch.promoted)
    elapsed = time.monotonic() - started
    results: dict[str, TokenResult] = {}
    for item in landed:
        if item.claim.token not in done:
            continue
        failpoint("after_commit")
        clear_journal(job.layout, item.claim.token)  # a wave's attempt staged nothing: its summary came as a row
        summary = item.summary
        results[item.claim.token] = TokenResult(
            token=item.claim.token, records=summary.rows, files=len(item.completion.files), finished=summary.finished,
            watermark=summary.watermark, promoted_children=promoted.get(item.claim.token, []),
            data_change_records=summary.data_records, read_from=item.spec.read_from, read_to=item.spec.read_to,
            elapsed_s=elapsed,
        )  # fmt: skip
    log.info("%s: a wave job landed %d token(s), %d rows, in one commit (%.1fs); children ready: %d",
             job.stream, len(results), sum(r.records for r in results.values()), elapsed, len(batch.promoted))  # fmt: skip
    return results


def _promoted_by(landed: list[_Landed], promoted: Sequence[str]) -> dict[str, list[str]]:
    """Each child the batch made READY, credited to one landed token that announced it (counts add up per wave)."""
    credited: dict[str, list[str]] = {}
    for child in promoted:
        announcer = next(
            (
                item.claim.token
                for item in landed
                if any(c.token == child for r in item.summary.children for c in r.child_partitions)
                or any(child in r.partition_tokens for r in item.summary.started)
            ),
            landed[0].claim.token,
        )
        credited.setdefault(announcer, []).append(child)
    return credited
