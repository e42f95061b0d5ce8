"""Executors get the package by Spark's own mechanisms: no forced interpreter on a cluster, the zip named by one
setting, and one line naming that setting when an executor cannot import the package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spanner_cdc.errors import ConfigError, ExtractError
from spanner_cdc.settings import load_settings
from spanner_cdc.spark import shipping
from spanner_cdc.spark.session import CONNECT, STANDALONE, classic_conf, run_mode
from spanner_cdc.spark.token_job import _checked
from tests.unit.extract.test_token import spec

CLUSTERS = ["spark://10.0.0.5:7077", "yarn", "k8s://https://10.0.0.1:6443"]


@pytest.fixture(autouse=True)
def _nothing_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(shipping.ENV, raising=False)
    monkeypatch.delenv("SPANNER_CDC_CONFIG", raising=False)


def test_a_local_master_runs_this_interpreter_and_ships_nothing() -> None:
    conf = classic_conf("local[2]")
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == sys.executable
    assert "spark.submit.pyFiles" not in conf


@pytest.mark.parametrize("master", CLUSTERS)
def test_a_clusters_interpreter_is_the_clusters_and_the_setting_ships_the_zip(master: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings({"spark_master": master}).spark_master == master  # accepted as it is
    assert run_mode(master) == STANDALONE  # a classic driver here, handed to Spark
    conf = classic_conf(master)
    assert "spark.pyspark.python" not in conf and "spark.pyspark.driver.python" not in conf
    assert "spark.submit.pyFiles" not in conf
    monkeypatch.setenv(shipping.ENV, "hdfs:///apps/spanner_cdc.zip")
    assert classic_conf(master)["spark.submit.pyFiles"] == "hdfs:///apps/spanner_cdc.zip"
    assert run_mode("sc://host:15002") == CONNECT


def test_other_masters_are_refused_naming_what_is_accepted() -> None:
    with pytest.raises(ConfigError, match=r"invalid --spark-master='mesos://h:5050': expected .*yarn or k8s://"):
        load_settings({"spark_master": "mesos://h:5050"})


def test_a_connect_session_gets_the_zip_as_a_python_artifact(monkeypatch: pytest.MonkeyPatch) -> None:
    added: list[tuple[tuple[str, ...], dict[str, bool]]] = []

    class Session:
        def addArtifacts(self, *paths: str, **kwargs: bool) -> None:  # noqa: N802 (pyspark's name)
            added.append((paths, kwargs))

    shipping.ship_to_connect(Session())
    assert added == []
    monkeypatch.setenv(shipping.ENV, "/opt/ship/spanner_cdc.zip")
    shipping.ship_to_connect(Session())
    assert added == [(("/opt/ship/spanner_cdc.zip",), {"pyfile": True})]


def test_an_executor_without_the_package_fails_the_token_with_one_line_naming_the_setting(tmp_path: Path) -> None:
    job_error = RuntimeError(
        "An error occurred while calling o123.collectToPython.\n: org.apache.spark.SparkException: Job aborted\n"
        "  File \"/usr/lib/python3/worker.py\", line 1, in main\nModuleNotFoundError: No module named 'spanner_cdc'\n"
    )
    with pytest.raises(ExtractError) as raised:
        _checked(spec(tmp_path), None, job_error, "missing")
    message = str(raised.value)
    assert "\n" not in message
    assert "cannot import spanner_cdc: set spark_py_files (SPANNER_CDC_SPARK_PY_FILES)" in message
    other = RuntimeError("An error occurred while calling o1.save.\n: java.io.IOException: disk full")
    with pytest.raises(ExtractError, match=r"the Spark job failed: An error occurred while calling o1.save.$"):
        _checked(spec(tmp_path), None, other, "missing")


def test_the_package_zip_is_importable_on_its_own(tmp_path: Path) -> None:
    out = shipping.build_package(tmp_path / "ship" / "spanner_cdc.zip")
    names = zipfile.ZipFile(out).namelist()
    assert "spanner_cdc/__init__.py" in names and "spanner_cdc/spark/shipping.py" in names
    assert "spanner_cdc/store/sql/0001_create_lineage_tables.sql" in names
    assert not [n for n in names if "__pycache__" in n]
    code = f"import sys; sys.path.insert(0, {str(out)!r}); import spanner_cdc.names as n; print(n.__file__)"
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.strip().startswith(str(out))
