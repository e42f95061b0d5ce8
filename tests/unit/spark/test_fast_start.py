"""The start caches' pure logic: the Spark home without pyspark's zip, and who may write the class archive."""

from __future__ import annotations

import os
from pathlib import Path

import pyspark
import pytest

from spanner_cdc.spark import fast_start
from spanner_cdc.spark.fast_start import ClassArchive, FastStart

PYSPARK = Path(pyspark.__file__).resolve().parent


def test_the_spark_home_is_pysparks_own_without_its_python_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    home = fast_start.spark_home(tmp_path)
    assert home is not None
    assert (home / "jars").resolve() == PYSPARK / "jars"
    assert (home / "bin" / "spark-submit").is_file()
    assert (PYSPARK / "python" / "lib" / "pyspark.zip").exists()  # what the links leave out
    assert not (home / "python").exists()
    assert fast_start.spark_home(tmp_path) == home  # built once


def test_a_spark_home_of_the_users_own_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "spark-3"
    (other / "jars").mkdir(parents=True)
    monkeypatch.setenv("SPARK_HOME", str(other))
    assert fast_start.spark_home(tmp_path / "cache") is None
    monkeypatch.setenv("SPARK_HOME", str(PYSPARK))  # pyspark's own: the zip-free links apply
    assert fast_start.spark_home(tmp_path / "cache") is not None


def test_off_disables_the_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fast_start.CACHE_ENV, "off")
    fast = FastStart.prepare(new_jvm=True)
    assert (fast.home, fast.archive, fast.java_options()) == (None, None, "")


def test_a_reused_jvm_gets_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fast_start.CACHE_ENV, str(tmp_path))
    assert FastStart.prepare(new_jvm=False) == FastStart()
    fast = FastStart.prepare(new_jvm=True)
    assert fast.home is not None and fast.archive is not None
    assert fast.java_options() == ""  # no archive written yet
    fast.archive.path.write_bytes(b"")
    assert fast.java_options() == f"-XX:SharedArchiveFile={fast.archive.path} {fast_start.QUIET}"


class Starts:
    """Records the writers start_writer would start."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.count += 1
        return type("Writer", (), {"pid": 1})()


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> Starts:
    recorded = Starts()
    monkeypatch.setattr(fast_start.subprocess, "Popen", recorded)
    return recorded


def test_one_writer_at_a_time_and_none_after_the_archive_or_repeated_failures(tmp_path: Path, starts: Starts) -> None:
    archive = ClassArchive(tmp_path / "driver-classes-k.jsa")
    archive.start_writer(tmp_path)
    assert starts.count == 1
    archive.path.with_suffix(".writing").write_text(str(os.getpid()))  # a live writer
    archive.start_writer(tmp_path)
    assert starts.count == 1
    archive.path.with_suffix(".writing").write_text("999999999")  # a dead one's lock
    archive.start_writer(tmp_path)
    assert starts.count == 2
    archive.path.with_suffix(".failures").write_text(str(fast_start.WRITE_TRIES))
    archive.start_writer(tmp_path)
    assert starts.count == 2
    archive.path.with_suffix(".failures").unlink()
    archive.path.write_bytes(b"")
    archive.start_writer(tmp_path)
    assert starts.count == 2


def test_the_archive_is_named_by_the_jvm_and_the_spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    home = fast_start.spark_home(tmp_path)
    assert home is not None
    first = ClassArchive.for_home(tmp_path, home)
    assert first is not None and first == ClassArchive.for_home(tmp_path, home)
    java = tmp_path / "jdk"
    (java / "bin").mkdir(parents=True)
    (java / "lib").mkdir()
    (java / "bin" / "java").touch()
    (java / "lib" / "modules").touch()
    monkeypatch.setenv("JAVA_HOME", str(java))
    assert ClassArchive.for_home(tmp_path, home) not in (None, first)


def test_a_new_archive_deletes_only_the_archives_no_driver_will_map_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    home = fast_start.spark_home(tmp_path)
    assert home is not None
    ours = ClassArchive.for_home(tmp_path, home)
    assert ours is not None
    key = home.name.removeprefix(fast_start.HOME_PREFIX)
    other_env = tmp_path / f"{fast_start.HOME_PREFIX}0123456789abcdef"  # another virtualenv's pyspark, still there
    other_env.mkdir()
    (other_env / "jars").symlink_to(PYSPARK / "jars")
    removed_env = tmp_path / f"{fast_start.HOME_PREFIX}fedcba9876543210"  # a deleted virtualenv's: links dangle
    removed_env.mkdir()
    (removed_env / "jars").symlink_to(tmp_path / "gone" / "jars")
    kept = tmp_path / "driver-classes-0123456789abcdef-1111111111111111.jsa"
    deleted = [
        tmp_path / f"driver-classes-{key}-2222222222222222.jsa",  # this Spark home, an older JVM or Spark
        tmp_path / "driver-classes-fedcba9876543210-3333333333333333.jsa",
        tmp_path / "driver-classes-4444444444444444.jsa",  # the name before archives named their Spark home
    ]
    for path in (ours.path, kept, *deleted, deleted[0].with_suffix(".log")):
        path.write_bytes(b"")
    ours.prune_others()
    assert sorted(tmp_path.glob("driver-classes-*")) == sorted([ours.path, kept])
    assert sorted(tmp_path.glob(f"{fast_start.HOME_PREFIX}*")) == sorted([home, other_env])
