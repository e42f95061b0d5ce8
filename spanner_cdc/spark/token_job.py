"""One token's Spark job: the spec shipped to executors, the executor-side read, and the driver-side run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spanner_cdc.errors import ExtractError, NotFound, RetentionError, SourceError, SpannerCdcError
from spanner_cdc.lake.rows import DEFAULT_MAX_ROWS, EnvelopeBatcher, EnvelopeContext
from spanner_cdc.lake.schema import PARTITION_COLUMN, spark_ddl
from spanner_cdc.records import ChangeRecord, DataChangeRecord
from spanner_cdc.spark.control import CONTROL_NAME, ControlSummary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SOURCE_NAME = "spanner_change_stream"
DATA_DIR = "data"
# Errors an executor reports through the control file, so the driver raises the same type.
_ERROR_TYPES: dict[str, type[SpannerCdcError]] = {
    "RetentionError": RetentionError,
    "NotFound": NotFound,
    "SourceError": SourceError,
}


@dataclass(frozen=True)
class TokenJobSpec:
    """Everything an executor needs to read one token over [read_from, read_to]; travels as data source options."""

    project: str
    instance: str
    database: str
    emulator_host: str | None
    stream: str
    dialect: str
    heartbeat_ms: int
    token: str
    read_from: datetime
    read_to: datetime
    window_start: datetime
    window_end: datetime
    read_method: str
    attempt_dir: str
    max_rows: int = DEFAULT_MAX_ROWS

    @property
    def data_dir(self) -> Path:
        return Path(self.attempt_dir) / DATA_DIR

    @property
    def control_path(self) -> Path:
        return Path(self.attempt_dir) / CONTROL_NAME

    def options(self) -> dict[str, str]:
        options = {}
        for key, value in asdict(self).items():
            if value is None:
                continue
            options[key] = value.isoformat() if isinstance(value, datetime) else str(value)
        return options

    @classmethod
    def from_options(cls, options: Any) -> TokenJobSpec:
        # Spark lower-cases data source option keys; every field name here is lower case already.
        get = options.get
        return cls(
            project=get("project"),
            instance=get("instance"),
            database=get("database"),
            emulator_host=get("emulator_host") or None,
            stream=get("stream"),
            dialect=get("dialect"),
            heartbeat_ms=int(get("heartbeat_ms")),
            token=get("token"),
            read_from=datetime.fromisoformat(get("read_from")),
            read_to=datetime.fromisoformat(get("read_to")),
            window_start=datetime.fromisoformat(get("window_start")),
            window_end=datetime.fromisoformat(get("window_end")),
            read_method=get("read_method"),
            attempt_dir=get("attempt_dir"),
            max_rows=int(get("max_rows") or DEFAULT_MAX_ROWS),
        )


def envelope_batches(spec: TokenJobSpec, records: Iterable[ChangeRecord], summary: ControlSummary) -> Iterator[pa.RecordBatch]:
    """Data change records -> bounded lake batches; every record (control ones too) is noted in `summary`."""
    batcher = EnvelopeBatcher(
        EnvelopeContext(spec.stream, spec.read_method, spec.token, spec.window_start, spec.window_end),
        max_rows=spec.max_rows,
    )
    for record in records:
        if isinstance(record, DataChangeRecord):
            summary.observe(record, batcher.add(record))
            if batcher.full:
                batch = batcher.take()
                if batch is not None:
                    yield batch
        else:
            summary.observe(record)
    batch = batcher.take()
    if batch is not None:
        yield batch


_databases: dict[tuple[str, str, str, str | None], Any] = {}
_databases_lock = threading.Lock()


def _database(spec: TokenJobSpec) -> Any:
    """One client per executor process and database: Python workers are reused across tasks."""
    from spanner_cdc.settings import Settings
    from spanner_cdc.spanner_client import open_database

    key = (spec.project, spec.instance, spec.database, spec.emulator_host)
    with _databases_lock:
        if key not in _databases:
            settings = Settings(
                project=spec.project, instance=spec.instance, database=spec.database, emulator_host=spec.emulator_host
            )
            _databases[key] = open_database(settings)
        return _databases[key]


def read_token(spec: TokenJobSpec) -> Iterator[pa.RecordBatch]:
    """Executor side: read the token's range, yield its lake batches, then write the control file.

    The control file is written only after the last record, so its presence means the whole
    range was read; a failure writes it with the error instead, and re-raises.
    """
    from spanner_cdc.reader import PartitionReader

    summary = ControlSummary(spec.token, spec.read_from, spec.read_to)
    reader = PartitionReader(_database(spec), spec.stream, dialect=spec.dialect, heartbeat_ms=spec.heartbeat_ms)
    try:
        yield from envelope_batches(spec, reader.read(spec.token, spec.read_from, spec.read_to), summary)
    except Exception as exc:
        summary.resumes = reader.resumes
        summary.error_type = type(exc).__name__
        summary.error_message = str(exc)
        summary.write(spec.control_path)
        raise
    summary.resumes = reader.resumes
    summary.write(spec.control_path)


def run_token_job(spark: SparkSession, spec: TokenJobSpec) -> ControlSummary:
    """Driver side: one Spark job reads the token on an executor and writes Parquet to the attempt's staging dir.

    Data never passes through the driver; only the control file is read back here.
    """
    from spanner_cdc.spark.session import ensure_source_registered

    ensure_source_registered(spark)
    frame = spark.read.format(SOURCE_NAME).schema(spark_ddl()).options(**spec.options()).load()
    job_error: Exception | None = None
    try:
        frame.write.mode("error").partitionBy(PARTITION_COLUMN).parquet(str(spec.data_dir))
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        job_error = exc
    summary = ControlSummary.read(spec.control_path)
    if summary is not None and summary.error_type:
        error_type = _ERROR_TYPES.get(summary.error_type, ExtractError)
        raise error_type(summary.error_message or summary.error_type)
    if job_error is not None:
        raise ExtractError(f"{spec.stream} {spec.token[:16]}: the Spark job failed: {_first_line(job_error)}") from job_error
    if summary is None:
        raise ExtractError(
            f"{spec.stream} {spec.token[:16]}: the Spark job ended without its control file {spec.control_path}; "
            "the executors must share the output root's filesystem with the driver"
        )
    return summary


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]
