"""Spark's Python daemon for the extract's drivers (`spark.python.daemon.module`): pyspark's own, with the executor
side's modules imported once, in the daemon, before it forks a worker per task slot.

Each Python worker imported them on its first task: the Spanner client, pyarrow, and pandas (pyarrow imports it at
its first array built from a list), ~1.1 s of CPU a worker, paid by every worker of every extract (two in local[2]).
Imported in the daemon (`worker_zygote.preimport`) they are there in each forked worker at no cost, and frozen out of the cyclic GC first
(`gc.freeze`), so a worker's collections neither walk them nor copy their pages. Importing starts no thread and opens
no channel, so forking after it is safe; a failed import leaves each worker to import on its own, as before.

A local driver started here has a process that imported them already, while its JVM started (`worker_zygote.py`):
the daemon Spark launches then hands its streams over and is forked from that process instead.
"""

from __future__ import annotations

import os

from spanner_cdc.spark import worker_zygote
from spanner_cdc.spark.worker_zygote import preimport

__all__ = ["main", "preimport"]


def main() -> None:
    zygote = os.environ.get(worker_zygote.ENV)
    if zygote and worker_zygote.hand_over(zygote):  # forked from a process that imported them while the JVM started
        return
    preimport()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
