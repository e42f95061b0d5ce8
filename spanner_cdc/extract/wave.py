"""Extract a wave of claimed tokens in groups: one Spark job and one store transaction per group."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from spanner_cdc.errors import ExtractError
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.token import (
    ExtractJob,
    LeaseKeeper,
    TokenResult,
    attempt_spec,
    cleanup_checks,
    raise_failures,
    record_failure,
)
from spanner_cdc.lake.layout import task_file_stem
from spanner_cdc.lake.publish import begin_task, clear_tasks, sweep_crashed
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.names import short_token
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.spec import TokenJobSpec
from spanner_cdc.spark.token_job import TokenOutcome, plan_tasks, run_wave_job
from spanner_cdc.store.models import Claim, Completion, ManifestFile

log = logging.getLogger(__name__)

# Settings.wave_group_tokens, the most tokens one Spark job (and one store transaction) lands: a huge wave is still
# committed in steps, and a job that fails as a whole sends at most this many tokens back to READY. 1 gives a job per
# token (as before waves were grouped; the benchmark compares the two).
START_THREADS = 8  # a group's task journals written at once


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
    while_waiting: Callable[[], None] | None = None,
) -> list[TokenResult]:
    """Land the claims in groups, `concurrency` groups at a time (`while_waiting`: see `wait_for_groups`).

    A group's tokens are read by one Spark job (a task per few tokens, each task's landed tokens in one file per
    table), and those whose files were published are committed in one store transaction (`complete_many`: each
    still a compare-and-set; tokens whose rows share a file commit together or not at all, so a lost claim leaves
    nothing of its rows, and a token that failed in its task is in no file). Raises after all have run if any failed, as `extract_claims` does.

    Before any group starts, one listing of the lake's staging finds what crashed attempts of these tokens left
    (`lake/publish.sweep_crashed`); a token whose cleanup failed fails here and is not read.
    """
    out = _Outcomes()
    swept = _sweep(job, claims, out, on_start, on_done)
    with LeaseKeeper(job.store, lease) as keeper, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [
            pool.submit(_run_group, job, group, keeper, out, on_start, on_done) for group in groups(swept, concurrency, job.group_tokens)
        ]
        wait_for_groups(futures, while_waiting)
    return raise_failures(job, claims, out.results, out.errors)


def wait_for_groups(futures: Sequence[Future[Any]], while_waiting: Callable[[], None] | None = None) -> None:
    """Each group's end, in order. `while_waiting` runs once, in this thread, when the first group has ended and
    others still run: this thread is idle then, and the groups' code has been through its own imports, so what
    `while_waiting` imports (the close's Iceberg modules, `lake/iceberg.import_ahead`) does not meet them halfway."""
    if while_waiting is not None and len(futures) > 1:
        _done, pending = wait(futures, return_when=FIRST_COMPLETED)
        if pending:
            while_waiting()
    for future in futures:
        future.result()


def _sweep(
    job: ExtractJob,
    claims: Sequence[Claim],
    out: _Outcomes,
    on_start: Callable[[Claim], None] | None,
    on_done: Callable[[Claim, TokenResult | None], None] | None,
) -> list[Claim]:
    """The claims whose crashed attempts' leftovers are cleaned up (`sweep_crashed`); the others failed."""
    committed, running = cleanup_checks(job)
    try:
        failures: dict[str, BaseException] = dict(sweep_crashed(job.layout, [c.token for c in claims], committed=committed, running=running))
    except Exception as exc:  # the staging area could not be listed or read: no token of the wave can start
        failures = dict.fromkeys((c.token for c in claims), exc)
    for claim in claims:
        if claim.token in failures:
            if on_start:
                on_start(claim)
            record_failure(job, claim, failures[claim.token])
            out.errors.append((claim, failures[claim.token]))
            if on_done:
                on_done(claim, None)
    return [claim for claim in claims if claim.token not in failures]


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
        landed, journaled = _land(job, group, out)
        results = _commit(job, landed, journaled, out, started)
        out.results.extend(results.values())
    except BaseException as exc:  # the group's commit itself failed: every token not yet failed fails
        failed = {claim.token for claim, _ in out.errors}
        out.errors.extend((claim, exc) for claim in group if claim.token not in failed and claim.token not in results)
    finally:
        for claim in group:
            keeper.release(claim)
            if on_done:
                on_done(claim, results.get(claim.token))


def _land(job: ExtractJob, group: list[Claim], out: _Outcomes) -> tuple[list[_Landed], dict[str, set[str]]]:
    """Journal each task's files, run the group's Spark job, and check what each token landed; failures are recorded.
    Also returns the journaled tasks: each one's stem and tokens."""
    read_to = inclusive_end(job.window_end)
    by_token = {claim.token: claim for claim in group}
    planned = [_named(job, task) for task in plan_tasks([attempt_spec(job, c, c.read_from, read_to) for c in group], job.task_tokens, job.task_share)]

    def journaled(task: list[TokenJobSpec]) -> BaseException | None:
        try:
            begin_task(job.layout, task[0].file_stem, lineage_id=job.lineage_id, window_start=job.window_start,
                       window_end=job.window_end, task=[(s.token, by_token[s.token].attempt) for s in task])  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the failure of the task's tokens, recorded below
            return exc
        return None

    # each journal is a write to the lake: they wait together
    with ThreadPoolExecutor(max_workers=min(len(planned), START_THREADS) or 1) as pool:
        failures = {spec.token: failure for task, failure in zip(planned, pool.map(journaled, planned), strict=True) for spec in task}
    for claim in group:
        failure = failures[claim.token]
        if failure is not None:
            record_failure(job, claim, failure)
            out.errors.append((claim, failure))
    tasks = [task for task in planned if failures[task[0].token] is None]
    stems = {task[0].file_stem: {s.token for s in task} for task in tasks}
    ready = [s for task in tasks for s in task]
    for spec in ready:
        log.info("%s %s: reading %s .. %s in a wave job", job.stream, short_token(spec.token), spec.read_from.isoformat(),
                 read_to.isoformat())  # fmt: skip
    if ready:
        log.info("%s: a wave job of %d token(s) in %d task(s)", job.stream, len(ready), len(tasks))
    began = time.monotonic()
    outcomes = run_wave_job(job.spark, tasks, job.task_threads) if tasks else []
    _log_job_time(job, outcomes, time.monotonic() - began)
    checked: list[tuple[TokenOutcome, BaseException | None]] = []
    for outcome in outcomes:
        try:
            if outcome.error is not None:
                raise outcome.error
            failpoint("after_job")
            _check_rows(job, outcome)
            checked.append((outcome, None))
        except Exception as exc:
            checked.append((outcome, exc))
    return _completions(job, by_token, checked, out), stems


def _named(job: ExtractJob, task: list[TokenJobSpec]) -> list[TokenJobSpec]:
    """A task's specs with the start of its files' names (deterministic in its tokens and their ranges)."""
    stem = task_file_stem(job.lineage_id, [(s.token, s.read_from, s.read_to) for s in task])
    return [replace(spec, file_stem=stem) for spec in task]


def _check_rows(job: ExtractJob, outcome: TokenOutcome) -> None:
    assert outcome.summary is not None
    rows = sum(int(row["rows"]) for row in outcome.listing)
    if rows != outcome.summary.rows:
        raise ExtractError(
            f"{job.stream} {short_token(outcome.spec.token)}: the job read {outcome.summary.rows} rows but {rows} were "
            "landed; not committing"
        )


def _completions(
    job: ExtractJob, by_token: dict[str, Claim], checked: list[tuple[TokenOutcome, BaseException | None]], out: _Outcomes
) -> list[_Landed]:
    """Each landed token's completion; tokens whose rows share a file make one group (committed together or not at
    all), and a token that failed fails its whole group: a file holding its rows must not be committed."""
    sharing = _file_groups([outcome for outcome, _ in checked])
    failed = {sharing[o.spec.token]: (o.spec.token, exc) for o, exc in checked if exc is not None}
    files = _manifest_files(job, [o for o, _ in checked])
    landed: list[_Landed] = []
    for outcome, exc in checked:
        claim, spec = by_token[outcome.spec.token], outcome.spec
        group = sharing[spec.token]
        if exc is None and group in failed:
            culprit = failed[group][0]
            exc = ExtractError(f"{job.stream} {short_token(spec.token)}: its rows share a file with {short_token(culprit)}, "
                               f"which failed ({failed[group][1]}); not committing")  # fmt: skip
        if exc is not None:
            record_failure(job, claim, exc)
            out.errors.append((claim, exc))
            continue
        summary = outcome.summary
        assert summary is not None
        completion = Completion(
            claim, watermark=summary.watermark, finished=summary.finished, children=tuple(summary.children),
            files=tuple(files.get(spec.token, ())), records=summary.rows, window_start=job.window_start,
            window_end=job.window_end, started=tuple(summary.started), moves=tuple(summary.moves), group=group,
        )  # fmt: skip
        landed.append(_Landed(claim, spec, summary, completion))
    return landed


def _file_groups(outcomes: Sequence[TokenOutcome]) -> dict[str, str]:
    """Each token's group: the first token (in the job's order) of the tokens linked to it by shared files."""
    parent = {o.spec.token: o.spec.token for o in outcomes}

    def root(token: str) -> str:
        while parent[token] != token:
            parent[token] = token = parent[parent[token]]
        return token

    first_of: dict[str, str] = {}
    for outcome in outcomes:
        for row in outcome.listing:
            first = first_of.setdefault(row["path"], outcome.spec.token)
            a, b = root(first), root(outcome.spec.token)
            if a != b:
                parent[b] = a
    return {token: root(token) for token in parent}


def _manifest_files(job: ExtractJob, outcomes: Sequence[TokenOutcome]) -> dict[str, list[ManifestFile]]:
    """The job's files, each once, carried by the first token whose rows it holds: its range spans its tokens'."""
    held: dict[str, list[tuple[TokenJobSpec, dict[str, Any]]]] = {}
    for outcome in outcomes:
        for row in outcome.listing:
            held.setdefault(row["path"], []).append((outcome.spec, row))
    carried: dict[str, list[ManifestFile]] = {}
    for path in sorted(held):
        parts = held[path]
        first = parts[0][1]
        carried.setdefault(parts[0][0].token, []).append(ManifestFile(
            path=path, token=parts[0][0].token, range_start=min(s.read_from for s, _ in parts),
            range_end=max(s.read_to for s, _ in parts), window_start=job.window_start, window_end=job.window_end,
            rows=sum(int(row["rows"]) for _, row in parts), bytes=int(first["bytes"]), table_name=first["table"],
        ))  # fmt: skip
    return carried


def _log_job_time(job: ExtractJob, outcomes: Sequence[TokenOutcome], wall_s: float) -> None:
    """How much of a wave job's time its tasks spent reading and landing (the rest is Spark's: scheduling,
    starting Python workers), from the executors' own clocks in the control files."""
    tasks = [o.summary.elapsed_s for o in outcomes if o.summary is not None]
    if tasks:
        log.info("%s: a wave job of %d token(s) took %.2fs; its tasks %.2fs in all (longest %.2fs, CPU %.2fs)",
                 job.stream, len(outcomes), wall_s, sum(tasks), max(tasks),
                 sum(o.summary.cpu_s for o in outcomes if o.summary is not None))  # fmt: skip


def _commit(
    job: ExtractJob, landed: list[_Landed], journaled: dict[str, set[str]], out: _Outcomes, started: float
) -> dict[str, TokenResult]:
    """The landed tokens in one store transaction (their files were published first); lost claims are reported. The
    journal of each task whose tokens all committed is cleared; the others' stay for their retries."""
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
    done, held = set(batch.landed), set(batch.held_back)
    # lost claims come in the batch's order: another worker owns those tokens now; the files this attempt published
    # for them are in no manifest, and their window's close deletes them
    out.errors.extend(zip([i.claim for i in landed if i.claim.token not in done | held], batch.lost, strict=True))
    for item in landed:
        if item.claim.token in held:  # still ours, but its rows share a file with a lost claim's: back to READY
            held_back = ExtractError(f"{job.stream} {short_token(item.claim.token)}: not committed, its rows share a "
                                     "file with a token whose claim was lost; READY again for a retry")  # fmt: skip
            record_failure(job, item.claim, held_back)
            out.errors.append((item.claim, held_back))
    promoted = _promoted_by(landed, batch.promoted)
    elapsed = time.monotonic() - started
    results: dict[str, TokenResult] = {}
    for item in landed:
        if item.claim.token not in done:
            continue
        failpoint("after_commit")
        summary = item.summary
        results[item.claim.token] = TokenResult(
            token=item.claim.token, records=summary.rows, files=len(item.completion.files), finished=summary.finished,
            watermark=summary.watermark, promoted_children=promoted.get(item.claim.token, []),
            data_change_records=summary.data_records, read_from=item.spec.read_from, read_to=item.spec.read_to,
            elapsed_s=elapsed,
        )  # fmt: skip
    try:
        clear_tasks(job.layout, [stem for stem, tokens in journaled.items() if tokens <= done])
    except Exception as exc:  # noqa: BLE001 - committed all the same; the next wave's sweep finds them committed
        log.warning("%s: could not clear the journals of a committed wave job: %s", job.stream, exc)
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
