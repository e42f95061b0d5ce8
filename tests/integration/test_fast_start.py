"""A driver's start caches for real: the background writer's class archive is mapped by the next driver's JVM, whose
Python workers import the installed pyspark rather than Spark's zipped copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spanner_cdc.spark import fast_start
from spanner_cdc.spark.fast_start import FastStart

pytestmark = [pytest.mark.integration, pytest.mark.heavy(47)]

DRIVER = """
import json, pathlib
from pyspark import SparkContext
from spanner_cdc.spark.session import spark_session

def where(batches):
    import pyarrow as pa, pyspark
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"file": [pyspark.__file__]})

spark = spark_session("local[1]")
jvm = SparkContext._gateway.proc.pid
maps = pathlib.Path(f"/proc/{jvm}/maps").read_text()
worker = spark.range(1).mapInArrow(where, "file string").collect()[0].file
print(json.dumps({"worker_pyspark": worker, "maps": maps}))
"""


def test_the_archive_written_in_the_background_is_mapped_by_the_next_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fast_start.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    fast = FastStart.prepare(new_jvm=True)
    assert fast.home is not None and fast.archive is not None and not fast.archive.ready
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    # the writer starts a classic driver even in a process marked for Connect (a user's SPARK_REMOTE, or inherited
    # from a process that made a Connect session)
    marked = {**env, "SPARK_CONNECT_MODE_ENABLED": "1", "SPARK_REMOTE": "sc://127.0.0.1:1"}
    writer = subprocess.run([sys.executable, "-m", fast_start.WRITER_MODULE, str(fast.archive.path)], env=marked,
                            capture_output=True, text=True, timeout=900)  # fmt: skip
    assert writer.returncode == 0, writer.stderr[-3000:]
    assert fast.archive.ready
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("driver-classes")) == [fast.archive.path.name]
    # -Xshare:on: a JVM that cannot map the archive it is given refuses to start
    driver = subprocess.run([sys.executable, "-c", DRIVER], env={**env, "JDK_JAVA_OPTIONS": "-Xshare:on"},
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert driver.returncode == 0, driver.stderr[-3000:]
    seen = json.loads(driver.stdout.strip().splitlines()[-1])
    assert str(fast.archive.path) in seen["maps"]
    assert ".zip" not in seen["worker_pyspark"] and seen["worker_pyspark"].endswith("pyspark/__init__.py")
    assert not fast.archive.path.with_suffix(".writing").exists()  # the next driver started no writer
