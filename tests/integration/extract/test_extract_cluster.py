"""A two-worker standalone cluster whose workers and driver share no directory lands a splitting window in S3."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.devstack.spark_cluster import DEV_JAVA_OPTIONS, StandaloneCluster
from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.spark.session import JIT_OPTIONS
from spanner_cdc.store import MetadataStore
from tests.fixtures.object_store import ObjectStore
from tests.integration.extract.lake_reading import change_of, rows_of
from tests.integration.extract.test_extract_crash import committed_paths, extract
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(57)]
USER_OPTION = "-Dspanner.cdc.test.user.option=kept"


@pytest.fixture(scope="module")
def two_workers(s3_server: ObjectStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    # the workers know the object store from their own environment, as cloud workers do
    with StandaloneCluster(cores=1, memory="1g", workers=2, env=s3_server.env, work_dir=tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


def test_two_workers_sharing_only_the_bucket_land_a_splitting_window_exactly(
    two_workers: StandaloneCluster, s3_server: ObjectStore, make_spanner_database: Any, local_spanner: LocalSpanner,
    extract_settings: Any, store: MetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    for key, value in s3_server.env.items():  # this process reads the bucket back
        monkeypatch.setenv(key, value)
    database = make_spanner_database(DDL)
    settings = extract_settings(
        database.database_id, STREAM, output_root=s3_server.root(f"cluster-{database.database_id}"),
        spark_master=two_workers.master_url, concurrency=2,
    )  # fmt: skip
    work = SmallWorkload(database)
    start = datetime.now(UTC)
    work.phase(range(0, 6))
    local_spanner.control.split(database.name, STREAM)
    work.phase(range(6, 12))
    local_spanner.control.split(database.name, STREAM)
    work.phase(range(12, 18))
    end = datetime.now(UTC)
    # the driver runs from a directory of its own, with its own temporary directory
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    # the user's own Spark configuration, with JVM options for the executors that must reach them beside the project's
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(f"spark.executor.extraJavaOptions {USER_OPTION}\n")
    assert extract(settings, start, end, TMPDIR=str(driver_dir), SPARK_CONF_DIR=str(conf_dir), **s3_server.env) == 0
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    published = published_locations(layout.location)
    assert set(published) == committed_paths(store, settings)
    marker = json.loads(storage.read_bytes(layout.marker_location(start, end)) or b"{}")
    assert sorted(f"{layout.location}/{f['path']}" for f in marker["files"]) == published
    assert marker["transaction_check"]["ok"] and marker["rows"] == len(work.expected)
    assert Counter(change_of(r) for r in rows_of(published)) == Counter(work.expected)
    # both workers ran executors of the job, each in its own directories
    for worker_dir in two_workers.worker_dirs:
        assert list(worker_dir.glob("app-*/*")), f"no executor ran on {worker_dir}"
    assert len({d.resolve() for d in two_workers.worker_dirs}) == 2
    assert not any(driver_dir.rglob("*.parquet"))
    # each executor's JVM has the driver's JIT thresholds (it lives for this extract too), and the user's own options
    # from spark-defaults.conf: its command heads its stderr
    launches = [path.read_text().splitlines()[0] for d in two_workers.worker_dirs for path in d.glob("app-*/*/stderr")]
    assert launches and all(f'"{option}"' in line for line in launches for option in [*JIT_OPTIONS.split(), USER_OPTION]), launches
    # the master's and the workers' JVMs, which live for this module, have the dev stack's options
    for process in two_workers.processes:
        assert set(DEV_JAVA_OPTIONS.split()) <= set(psutil.Process(process.process.pid).cmdline()), process.name
