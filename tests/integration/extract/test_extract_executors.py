"""A standalone worker and a stock Spark Connect server that see none of the driver's files get the package from the
driver (spark_py_files): a window lands exactly; with nothing shipped the user's one line names the cause and the setting."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import spanner_cdc
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.devstack.spark_cluster import ConnectServer, StandaloneCluster, hiding
from spanner_cdc.spark import shipping
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.test_extract_crash import start_extract
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload, one_window

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(55)]
REPO = Path(__file__).resolve().parents[3]
# what the worker cannot see: the driver's virtualenv (its interpreter, pyspark, the editable install's path) and the
# package's source tree
HIDDEN = (Path(sys.prefix), Path(spanner_cdc.__file__).parent)


def require_mount_namespace(tmp_path_factory: pytest.TempPathFactory) -> None:
    probe = tmp_path_factory.mktemp("probe")
    if shutil.which("unshare") is None or subprocess.run(hiding([str(probe)], ["true"]), capture_output=True).returncode:
        pytest.skip("a mount namespace of its own for Spark's processes needs unshare(1) and the right to mount (root)")


@pytest.fixture(scope="module")
def foreign_worker(executor_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and worker run from the executor Python's own pyspark, the worker in a mount namespace where
    HIDDEN are empty directories; the cluster's `python3` is the executor Python."""
    require_mount_namespace(tmp_path_factory)
    with StandaloneCluster(
        cores=1, memory="1g", python=str(executor_python), home=executor_spark(executor_python), hidden=HIDDEN,
        work_dir=tmp_path_factory.mktemp("foreign"),
    ) as cluster:  # fmt: skip
        yield cluster


def executor_spark(executor_python: Path) -> Path:
    """The Spark distribution in the executor Python: pyspark's own files, nothing of the driver's."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return executor_python.parent.parent / "lib" / version / "site-packages" / "pyspark"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zip `spanner-cdc spark-package` builds."""
    out = tmp_path_factory.mktemp("ship") / "spanner_cdc.zip"
    done = subprocess.run([sys.executable, "-m", "spanner_cdc", "spark-package", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and f"{shipping.ENV}={out}" in done.stdout, done
    return out


@pytest.fixture(scope="module")
def stock_connect_server(executor_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """`start-connect-server.sh` of the executor Python's pyspark, with that Python (no spanner_cdc), in a filesystem
    view without HIDDEN."""
    require_mount_namespace(tmp_path_factory)
    with ConnectServer(
        master="local[2]", python=str(executor_python), home=executor_spark(executor_python), hidden=HIDDEN,
        work_dir=tmp_path_factory.mktemp("stock-connect"),
    ) as server:  # fmt: skip
        yield server


def run_extract(settings: Any, start: datetime, end: datetime, monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[int, str, str]:
    # the driver names no interpreter of its own: this process's PYSPARK_PYTHON (a local session sets it) stays out
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", shipping.ENV, "SPARK_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    process = start_extract(settings, start, end, **env)
    out, err = process.communicate(timeout=600)
    return process.returncode, out, err


def check_lake(settings: Any, work: SmallWorkload, summary: dict[str, Any]) -> None:
    assert summary["complete"] is True and summary["transaction_check"]["ok"] is True
    assert summary["records"] == len(work.expected)
    assert Counter(change_of(r) for r in published_rows(settings.output_root)) == Counter(work.expected)


def test_the_worker_sees_neither_the_driver_virtualenv_nor_the_package(foreign_worker: StandaloneCluster) -> None:
    (worker,) = [p for p in foreign_worker.processes if p.name.startswith("standalone worker")]
    pid = worker.process.pid
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    for path in HIDDEN:
        assert any(path.iterdir()), path  # here, the driver's
        assert not any(Path(f"/proc/{pid}/root{path}").iterdir()), path  # the worker's view: empty


def test_a_window_on_the_foreign_worker_with_the_package_shipped_is_exact(
    foreign_worker: StandaloneCluster, executor_python: Path, package: Path, make_spanner_database: Any,
    local_spanner: LocalSpanner, extract_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=foreign_worker.master_url)
    work, start, end = one_window(database, local_spanner)
    # the user's Spark configuration names the executors' interpreter, which an in-process driver honours as
    # spark-submit does: here a wrapper of the executor Python (the cluster's python3) that notes each start
    started = tmp_path / "started"
    wrapper = tmp_path / "executor-python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {started}\nexec {executor_python} "$@"\n')
    wrapper.chmod(0o755)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(f"spark.pyspark.python {wrapper}\n")
    before = set(foreign_worker.worker_dirs[0].glob("app-*"))
    code, out, err = run_extract(settings, start, end, monkeypatch, SPARK_CONF_DIR=str(conf_dir), **{shipping.ENV: str(package)})
    assert code == 0, err[-4000:]
    check_lake(settings, work, json.loads(out))
    # the run's executor ran on the worker, which fetched the zip Spark shipped into its directory
    (app,) = set(foreign_worker.worker_dirs[0].glob("app-*")) - before
    assert [path.name for path in app.glob("*/*.zip")] == [package.name]
    assert "pyspark.daemon" in started.read_text()  # the executors' Python workers, by the configured interpreter


def test_with_nothing_shipped_the_one_line_names_the_cause_and_the_setting(
    foreign_worker: StandaloneCluster, make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=foreign_worker.master_url)
    _, start, end = one_window(database, local_spanner)
    # the user's Spark configuration lets a task fail once (Spark tries 4 times by default): the same error, sooner
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.task.maxFailures 1\n")
    code, _, err = run_extract(settings, start, end, monkeypatch, SPARK_CONF_DIR=str(conf_dir))
    assert code == 1, err[-4000:]
    # the command's error is its last line (above it: the run's log lines, at the level the test suite sets), and
    # neither the executor's traceback nor py4j's message reaches the terminal
    *_, last = err.strip().splitlines()
    assert last.startswith("spanner-cdc: error:"), err[-4000:]
    assert "the Spark executors cannot import spanner_cdc" in last and f"{shipping.SETTING} ({shipping.ENV})" in last, last
    assert "Traceback" not in err and "No module named" not in err and "collectAndServe" not in err, err[-4000:]


def test_a_window_on_a_stock_connect_server_with_the_package_shipped_is_exact(
    stock_connect_server: ConnectServer, package: Path, make_spanner_database: Any, local_spanner: LocalSpanner,
    extract_settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    pid = stock_connect_server.processes[0].process.pid
    assert not any(Path(f"/proc/{pid}/root{HIDDEN[0]}").iterdir())  # the server sees no driver's virtualenv
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=stock_connect_server.url)
    work, start, end = one_window(database, local_spanner)
    code, out, err = run_extract(settings, start, end, monkeypatch, **{shipping.ENV: str(package)})
    assert code == 0, err[-4000:]
    check_lake(settings, work, json.loads(out))
