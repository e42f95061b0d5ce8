"""The class archive's writer (`python -m spanner_cdc.spark.archive_writer <archive>`, started in the background by
`fast_start`): a driver of its own runs a tiny job, and its JVM writes the classes it loaded as it exits."""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spanner_cdc.spark.fast_start import DUMP_WAIT_S, ClassArchive

log = logging.getLogger(__name__)


def run_a_driver(java_options: str) -> int | None:
    """A local driver that loads what an extract's driver loads (a wave job's RDD of Python tasks, SQL, Python data
    sources and workers, Parquet), then its JVM's exit code: the JVM ends when this process closes its stdin."""
    from pyspark import SparkContext

    from spanner_cdc.spark.session import (
        classic_session,
        ensure_source_registered,
        start_driver,
        workers_run_this_python,
    )

    workers_run_this_python()
    spark = classic_session(start_driver("local[1]", "spanner-cdc-class-archive", java_options))
    jvm: subprocess.Popen[bytes] = SparkContext._gateway.proc  # type: ignore[attr-defined,union-attr]
    ensure_source_registered(spark)
    spark.sparkContext.parallelize(range(2), 2).mapPartitions(lambda numbers: ({"n": n} for n in numbers)).collect()
    with tempfile.TemporaryDirectory(prefix="spanner-cdc-archive-") as tmp:
        frame = spark.range(100).selectExpr("id", "CAST(id AS STRING) AS text", "current_timestamp() AS at")
        frame.mapInArrow(lambda batches: batches, frame.schema).write.parquet(f"{tmp}/t")
        spark.read.parquet(f"{tmp}/t").groupBy("text").count().collect()
    spark.stop()
    assert jvm.stdin is not None
    jvm.stdin.close()
    return jvm.wait(timeout=DUMP_WAIT_S)



def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    archive, began = ClassArchive(Path(argv[0])), time.monotonic()
    written = archive.write(run_a_driver)
    log.info(
        "class archive %s: %s in %.1fs", archive.path, "written" if written else "not written", time.monotonic() - began
    )
    return 0 if written else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
