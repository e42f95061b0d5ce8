"""Driver side of one token's Spark job: run it, then read back its control file (never its data)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spanner_cdc.errors import ExtractError, NotFound, RetentionError, SourceError, SpannerCdcError
from spanner_cdc.lake.columns import PARTITION_COLUMN, spark_ddl
from spanner_cdc.names import short_token
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.datasource import SOURCE_NAME
from spanner_cdc.spark.executor import FILES_DDL
from spanner_cdc.spark.spec import TokenJobSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Errors an executor reports through the control file, so the driver raises the same type.
_ERROR_TYPES: dict[str, type[SpannerCdcError]] = {
    "RetentionError": RetentionError,
    "NotFound": NotFound,
    "SourceError": SourceError,
}

__all__ = ["SOURCE_NAME", "TokenJobSpec", "run_token_job"]


def run_token_job(spark: SparkSession, spec: TokenJobSpec) -> ControlSummary:
    """Driver side: one Spark job reads the token on an executor and writes Parquet to the attempt's staging dir.

    Data never passes through the driver; only the control file is read back here.
    """
    from spanner_cdc.spark.session import ensure_source_registered

    ensure_source_registered(spark)
    ddl = FILES_DDL if spec.writer == "arrow" else spark_ddl()
    frame = spark.read.format(SOURCE_NAME).schema(ddl).options(**spec.options()).load()
    job_error: Exception | None = None
    try:
        if spec.writer == "arrow":
            frame.collect()  # a row per staged file: the data itself stays on the executor's disk
        else:
            frame.write.mode("error").partitionBy(PARTITION_COLUMN).parquet(str(spec.data_dir))
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        job_error = exc
    summary = ControlSummary.read(spec.control_path)
    if summary is not None and summary.error_type:
        error_type = _ERROR_TYPES.get(summary.error_type, ExtractError)
        raise error_type(summary.error_message or summary.error_type)
    if job_error is not None:
        raise ExtractError(f"{spec.stream} {short_token(spec.token)}: the Spark job failed: {_first_line(job_error)}") from job_error
    if summary is None:
        raise ExtractError(
            f"{spec.stream} {short_token(spec.token)}: the Spark job ended without its control file {spec.control_path}; "
            "the executors must share the output root's filesystem with the driver"
        )
    return summary


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]
