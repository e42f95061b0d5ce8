"""Driver side of token jobs (a wave of tokens in one job, or one token for Spark's writer): run them, read back their summaries (never data)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import ExtractError, NotFound, RetentionError, SourceError, SpannerCdcError
from spanner_cdc.lake.columns import PARTITION_COLUMN, spark_ddl
from spanner_cdc.names import short_token
from spanner_cdc.settings import Settings
from spanner_cdc.spark import shipping
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.datasource import SOURCE_NAME
from spanner_cdc.spark.spec import TokenJobSpec
from spanner_cdc.spark.wave_task import WAVE_FILES_DDL, WaveTasks, split_into, split_tasks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Errors an executor reports through the control file, so the driver raises the same type.
_ERROR_TYPES: dict[str, type[SpannerCdcError]] = {
    "RetentionError": RetentionError,
    "NotFound": NotFound,
    "SourceError": SourceError,
}

__all__ = ["SOURCE_NAME", "TokenJobSpec", "TokenOutcome", "plan_tasks", "run_token_job", "run_wave_job"]


def run_token_job(spark: SparkSession, spec: TokenJobSpec) -> ControlSummary:
    """Driver side, Spark's writer (SPANNER_CDC_LAKE_WRITER=spark): one Spark job reads the token on an executor
    and writes its rows with Spark's Parquet writer into the attempt's local staging; the control file comes back
    through the lake's storage."""
    from spanner_cdc.spark.session import ensure_source_registered

    ensure_source_registered(spark)
    frame = spark.read.format(SOURCE_NAME).schema(spark_ddl()).options(**spec.options()).load()
    job_error: Exception | None = None
    try:
        frame.write.mode("error").partitionBy(PARTITION_COLUMN).parquet(str(spec.data_dir))
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        job_error = exc
    return _summary(spec, job_error)


def _summary(spec: TokenJobSpec, job_error: Exception | None) -> ControlSummary:
    """The token's control file, or the error its job reported (in the file, or by failing)."""
    missing = (
        f"{spec.stream} {short_token(spec.token)}: the Spark job ended without its control file {spec.control_path}; "
        "the executors must reach the output root the driver names (a shared path, or a bucket)"
    )
    return _checked(spec, ControlSummary.read(spec.control_path), job_error, missing)


def _checked(spec: TokenJobSpec, summary: ControlSummary | None, job_error: Exception | None, missing: str) -> ControlSummary:
    """The token's summary, or the error it carries, or the job's own failure, or `missing` when there is none."""
    if summary is not None and summary.error_type:
        error_type = _ERROR_TYPES.get(summary.error_type, ExtractError)
        raise error_type(summary.error_message or summary.error_type)
    if job_error is not None:
        cause = shipping.explain(job_error) or _first_line(job_error)
        raise ExtractError(f"{spec.stream} {short_token(spec.token)}: the Spark job failed: {cause}") from job_error
    if summary is None:
        raise ExtractError(missing)
    return summary


@dataclass
class TokenOutcome:
    """One token of a wave job: its control summary and files, or the error that failed it alone."""

    spec: TokenJobSpec
    summary: ControlSummary | None = None
    listing: list[dict[str, Any]] = field(default_factory=list)
    error: Exception | None = None


# Settings.task_tokens, the tokens one task of a wave job lands (up to Settings.task_threads at once): Spark's cost
# per task (scheduling, a round trip to a Python worker, the JVM's side of it, a file per table) is far more than a
# small token's own work (~6 ms of CPU). At 1,000 small partitions, 16 a task rather than 4 cut the driver JVM's CPU
# 12.7 -> 9.1 s, and 64 rather than 16 the waves' time 31.7 / 40.7 -> 25.2 / 24.9 s (and the window's files 128 -> 32).
# 0, the default, sizes tasks by the cluster instead: as few tasks as fill a job's share of Spark's cores (the cores
# over the groups running at once), at most AUTO_TASK_TOKENS each. At 10,000 small partitions on local[2] that is one
# task per job: against 64 a task (512 a job both), the extract's process tree's CPU fell 28.2 -> 23.6 s, the local
# server's 9.1 -> 7.8 s, and the extract took 19.3 s instead of 23.1 s. A task
# writes one file per table for all its tokens, so this also bounds a window's files (tables x tasks); a task's
# memory stays flat (its tokens share its spool budget, `task_files.token_budgets`; past it rows go to local disk).
# Unknown cores (a Connect server's cluster): FALLBACK_TASK_TOKENS a task. 1 gives a task per token.
# Settings.task_threads, how many of a task's tokens it reads at once (threads in the task's Python worker): a small
# token mostly waits on its query, and those waits overlap. 1: one after another.
# Both travel to the executors in the job's WaveTasks.
AUTO_TASK_TOKENS = 512
FALLBACK_TASK_TOKENS = 64


def plan_tasks(specs: Sequence[TokenJobSpec], task_tokens: int = Settings.task_tokens, share: int | None = None) -> list[list[TokenJobSpec]]:
    """A wave job's tokens in tasks: of `task_tokens` each, or with 0 in as few tasks as fill the job's `share` of
    Spark's cores, at most AUTO_TASK_TOKENS each (`share` None, unknown: FALLBACK_TASK_TOKENS each)."""
    if task_tokens:
        return split_tasks(specs, task_tokens)
    if share is None:
        return split_tasks(specs, FALLBACK_TASK_TOKENS)
    return split_into(specs, max(-(-len(specs) // AUTO_TASK_TOKENS), share, 1))


def run_wave_job(
    spark: SparkSession, tasks: Sequence[Sequence[TokenJobSpec]], task_threads: int = Settings.task_threads
) -> list[TokenOutcome]:
    """Driver side: one Spark job lands many tokens (arrow writer), a task per few tokens (`spark/wave_task.py`, split
    by `plan_tasks`), each task's landed tokens in one file per table.

    Per-job costs (scheduling, a round trip to a Connect server) are paid once for the wave. Each token's control
    summary comes back as a row of the job (no control file), and its listing names the files holding its rows with
    its own count in each (a file shared with other tokens appears in each one's listing). A token that fails fails
    alone (its error is in its summary, its rows in no file); a job that fails as a whole fails every token of it.
    """
    specs = [spec for task in tasks for spec in task]
    job_error: Exception | None = None
    listings: dict[str, list[dict[str, Any]]] = {spec.token: [] for spec in specs}
    summaries: dict[str, ControlSummary] = {}
    try:
        for listing in _wave_rows(spark, WaveTasks(tasks, task_threads)):
            token, control = listing.pop("token"), listing.pop("control")
            if control is None:
                listings[token].append(listing)
            else:
                summaries[token] = ControlSummary.from_text(control)
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        job_error = exc
    outcomes = []
    for spec in specs:
        missing = f"{spec.stream} {short_token(spec.token)}: the wave job ended without the token's control summary"
        try:
            outcomes.append(TokenOutcome(spec, _checked(spec, summaries.get(spec.token), job_error, missing), listings[spec.token]))
        except Exception as exc:  # noqa: BLE001 - the token's own failure, handed to its caller
            outcomes.append(TokenOutcome(spec, error=exc))
    return outcomes


def _wave_rows(spark: SparkSession, tasks: WaveTasks) -> list[dict[str, Any]]:
    """The job's rows: an RDD job on a classic session, `mapInArrow` over a range on Spark Connect, which has no
    RDDs (its planning is paid on the long-lived server); why, in `WaveTasks`."""
    from spanner_cdc.spark.session import is_classic

    if is_classic(spark):
        numbers = spark.sparkContext.parallelize(range(len(tasks)), len(tasks))
        return numbers.mapPartitions(tasks.rows).collect()
    frame = spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(tasks, WAVE_FILES_DDL)
    return [row.asDict() for row in frame.collect()]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]
