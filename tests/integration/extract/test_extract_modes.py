"""The extract on a real standalone cluster (spark-submit of spark_jobs/extract_token.py) and through Spark Connect."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.devstack.spark_cluster import DEV_JAVA_OPTIONS, StandaloneCluster, spark_home
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.settings import subprocess_env
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload, one_window

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(52)]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def standalone_cluster() -> Iterator[StandaloneCluster]:
    with StandaloneCluster(cores=1, memory="1g") as cluster:
        yield cluster


def check_lake(settings: Any, work: SmallWorkload, summary: dict[str, Any]) -> None:
    assert summary["complete"] is True and summary["transaction_check"]["ok"] is True
    assert summary["records"] == len(work.expected)
    assert Counter(change_of(r) for r in published_rows(settings.output_root)) == Counter(work.expected)
    marker = Path(summary["marker_path"])
    assert marker.parent == LakeLayout(settings.output_root, STREAM, settings.namespace).windows_dir and marker.exists()


def test_standalone_cluster_through_spark_submit(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, standalone_cluster: StandaloneCluster
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=standalone_cluster.master_url)
    work, start, end = one_window(database, local_spanner)
    command = [
        str(spark_home() / "bin" / "spark-submit"), "--master", standalone_cluster.master_url,
        "--conf", f"spark.pyspark.python={sys.executable}", "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.executor.memory=1g", "--conf", "spark.ui.enabled=false",
        str(REPO / "spark_jobs" / "extract_token.py"),
        "--window-start", start.isoformat(), "--window-end", end.isoformat(), "--json",
    ]  # fmt: skip
    env = subprocess_env(settings, PYSPARK_PYTHON=sys.executable, SPARK_HOME=str(spark_home()))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    # spark-submit merges the driver's stderr (log lines) into its stdout: take the JSON object out of it
    summary, _ = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{\n") :])
    check_lake(settings, work, summary)
    assert summary["waves"] >= 2


def cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # ended since it was listed
        return []


def test_spark_connect_through_the_cli(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, spark_connect_server: Any
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url)
    work, start, end = one_window(database, local_spanner)
    command = [sys.executable, "-m", "spanner_cdc", "extract", "--window-start", start.isoformat(),
               "--window-end", end.isoformat(), "--json"]  # fmt: skip
    # this run hands the lake rows to Spark's own Parquet writer; the others write with pyarrow on the executor
    env = subprocess_env(dataclasses.replace(settings, lake_writer="spark"))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    check_lake(settings, work, json.loads(done.stdout))
    server = psutil.Process(spark_connect_server.processes[0].process.pid)
    # and its JVM, which lives for the run, has the dev stack's JIT thresholds and collector
    jvms = [argv for argv in map(cmdline, [server, *server.children(recursive=True)]) if argv[:1] and argv[0].endswith("java")]
    assert jvms and all(set(DEV_JAVA_OPTIONS.split()) <= set(argv) for argv in jvms), jvms
