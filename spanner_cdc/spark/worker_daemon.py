"""Spark's Python daemon for the extract's drivers (`spark.python.daemon.module`): pyspark's own, with the executor
side's modules imported once, in the daemon, before it forks a worker per task slot.

Each Python worker imported them on its first task: the Spanner client, pyarrow, and pandas (pyarrow imports it at
its first array built from a list), ~1.1 s of CPU a worker, paid by every worker of every extract (two in local[2]).
Imported in the daemon they are there in each forked worker at no cost, and frozen out of the cyclic GC first
(`gc.freeze`), so a worker's collections neither walk them nor copy their pages. Importing starts no thread and opens
no channel, so forking after it is safe; a failed import leaves each worker to import on its own, as before.

A local driver started here has a process that imported them already, while its JVM started (`worker_zygote.py`):
the daemon Spark launches then hands its streams over and is forked from that process instead.
"""

from __future__ import annotations

import gc
import os
import sys

from spanner_cdc.spark import worker_zygote


def preimport(report: bool = True) -> str | None:
    """The modules a wave task's worker uses, imported here; a failure is reported (printed, or returned with
    `report` False), never raised."""
    failure = None
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401
        import pyspark.worker  # noqa: F401 - pyspark's worker main, imported by each forked worker otherwise
        from google.cloud import spanner  # noqa: F401

        from spanner_cdc.source import reader  # noqa: F401
        from spanner_cdc.spark import executor, reused_worker, wave_task  # noqa: F401

        pa.array(["imported"])  # pyarrow imports pandas at its first array from a list
    except Exception as exc:  # noqa: BLE001 - the workers then import what they use themselves
        failure = f"spanner-cdc worker daemon: preimport failed ({exc!r}); each worker imports its own modules"
        if report:
            print(failure, file=sys.stderr)
    gc.collect()
    gc.freeze()
    return failure


def main() -> None:
    zygote = os.environ.get(worker_zygote.ENV)
    if zygote and worker_zygote.hand_over(zygote):  # forked from a process that imported them while the JVM started
        return
    preimport()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
