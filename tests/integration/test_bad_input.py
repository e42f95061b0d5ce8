"""Bad input, tried as a new user would: one stderr line naming the field, non-zero exit, nothing written anywhere."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy.engine import make_url

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.settings import Settings, subprocess_env
from spanner_cdc.store import MetadataStore
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.heavy(50)]

STREAM = "orders_stream"
WINDOW = ["--window-start", "2024-05-01T10:00:00Z", "--window-end", "2024-05-01T11:00:00Z"]
SECRET = "Pw-never-echoed-7f3a"  # trust auth ignores it; no output may show it
CLI = str(Path(sys.executable).with_name("spanner-cdc"))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends; nothing listens on it


@dataclass(frozen=True)
class Case:
    """argv / env of one bad input, the field as the user wrote it and words of what is accepted."""

    argv: list[str]
    field: str
    accepted: str
    env: dict[str, str] = field(default_factory=dict)
    config: str | None = None  # TOML text of a file named by SPANNER_CDC_CONFIG
    exit_code: int = 2
    # a window after the stream was created, which a run without the up-front check would extract
    live_window: bool = False
    # a window that ends an hour from now, which a change stream query would wait for without a word
    future_window: bool = False
    # bound of the run: a case that used to hang has a short one
    timeout: float = 180


def extract(*flags: str) -> list[str]:
    return ["extract", *WINDOW, *flags]


CASES: dict[str, Any] = {
    # timestamps and windows
    "window start not RFC 3339": Case(["extract", "--window-start", "yesterday", "--window-end", "2024-05-01T11:00:00Z"],
                                      "--window-start", "RFC 3339 timestamp with Z or an offset"),
    "window with no time zone": Case(["extract", "--window-start", "2024-05-01T10:00:00", "--window-end", "2024-05-01T11:00:00"],
                                     "--window-start", "with Z or an offset"),
    "window end before start": Case(["extract", "--window-start", "2024-05-01T11:00:00Z", "--window-end", "2024-05-01T10:00:00Z"],
                                    "--window-end", "must be after --window-start"),
    "read end before start": Case(["read", "--start", "2024-05-01T11:00:00Z", "--end", "2024-05-01T10:00:00Z"],
                                  "--end", "must be at or after --start"),
    # stream names
    "stream name not an identifier": Case(extract("--stream", "orders stream"), "--stream", "an identifier"),
    "stream that does not exist": Case(extract("--stream", "no_such_stream"), "change stream no_such_stream",
                                       "does not exist", exit_code=1),
    # flag choices and ranges
    "dialect not a choice": Case(extract("--dialect", "MYSQL"), "--dialect", "one of auto, GOOGLE_STANDARD_SQL, POSTGRESQL"),
    "output format not a choice": Case(["read", "--start", "now", "--format", "xml"], "--format", "one of jsonl, text"),
    "heartbeat below its range": Case(extract("--heartbeat-ms", "999"), "--heartbeat-ms", "an integer in [1000, 300000]"),
    "heartbeat out of range in the env": Case(extract(), "SPANNER_CDC_HEARTBEAT_MS", "an integer in [1000, 300000]",
                                              env={"SPANNER_CDC_HEARTBEAT_MS": "500000"}),
    "concurrency not a number": Case(extract("--concurrency", "many"), "--concurrency", "an integer in [1, 256]"),
    "namespace not an identifier": Case(extract("--namespace", "my-ns"), "--namespace", "an identifier"),
    "spark master of an unknown kind": Case(extract("--spark-master", "mesos://h:5050"), "--spark-master", "sc://host:port"),
    # config file keys
    "config file with an unknown key": Case(extract(), "colour", "one of project, instance", config='colour = "blue"\n'),
    "config file value out of range": Case(extract(), "heartbeat_ms (in ", "an integer in [1000, 300000]",
                                           config="heartbeat_ms = 10\n"),
    "config file that is not TOML": Case(extract(), "SPANNER_CDC_CONFIG", "valid TOML", config="project = \n"),
    "config file that does not exist": Case(extract(), "SPANNER_CDC_CONFIG", "the path of an existing TOML file",
                                            env={"SPANNER_CDC_CONFIG": "/nonexistent/spanner-cdc.toml"}),
    "stream table with a bad key": Case(["extract", "--stream", "orders", *WINDOW], "streams.orders.heartbeat_ms",
                                        "an integer in [1000, 300000]",
                                        config='[streams.orders]\nchange_stream = "orders_stream"\n'
                                               'start_date = 2024-01-01T00:00:00Z\nheartbeat_ms = 10\n'),
    # URLs and unreachable services
    "metadata URL not Postgres": Case(extract("--metadata-url", "sqlite:///cdc.db"), "--metadata-url", "a Postgres URL"),
    "metadata URL with a password and a non-Postgres scheme": Case(
        extract("--metadata-url", f"mysql://cdc:{SECRET}@127.0.0.1/cdc"), "--metadata-url", "a Postgres URL"
    ),
    "Postgres on a closed port": Case(extract("--metadata-url", f"postgresql://cdc:{SECRET}@127.0.0.1:{closed_port()}/cdc"),
                                      "metadata store", "", exit_code=1),
    "Spanner emulator host on a closed port": Case(extract(), "cannot reach Spanner", "SPANNER_EMULATOR_HOST",
                                                   env={"SPANNER_EMULATOR_HOST": f"127.0.0.1:{closed_port()}"}, exit_code=1,
                                                   timeout=15),
    "read from an emulator host on a closed port": Case(["read", "--start", "2024-05-01T10:00:00Z"], "cannot reach Spanner",
                                                        "SPANNER_EMULATOR_HOST", exit_code=1, timeout=15,
                                                        env={"SPANNER_EMULATOR_HOST": f"127.0.0.1:{closed_port()}"}),
    "Spanner emulator host that does not resolve": Case(extract(), "SPANNER_EMULATOR_HOST=no-such-host.invalid:9010",
                                                        "cannot reach Spanner",
                                                        env={"SPANNER_EMULATOR_HOST": "no-such-host.invalid:9010"}, exit_code=1,
                                                        timeout=15),
    "credentials file that does not exist": Case(extract(), "GOOGLE_APPLICATION_CREDENTIALS", "an existing service account key file",
                                                 env={"SPANNER_EMULATOR_HOST": "",
                                                      "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"}),
    "Spark Connect server not listening": Case(extract("--spark-master", f"sc://127.0.0.1:{closed_port()}"),
                                               "sc://127.0.0.1:", "cannot reach the Spark Connect server", exit_code=1,
                                               timeout=15),
    "window end in the future": Case(extract(), "--window-end", "is in the future", future_window=True, timeout=15),
    "no stream given": Case(extract(), "--stream", "a change stream name", env={"SPANNER_CDC_STREAM": ""}),
    "JAVA_HOME without a java": Case(extract(), "JAVA_HOME", "Java 17 runtime", env={"JAVA_HOME": "/nonexistent/jdk"}),
    # the lake
    "output root that is a file": Case(extract(), "--output-root", "lake is a file", live_window=True),
    "output root under a directory this user cannot write": Case(extract(), "--output-root", "is not writable",
                                                                 live_window=True),
    "demo lake not a path nor a bucket": Case(["demo", "--output-root", "gcs://bucket/lake"], "--output-root",
                                              "gs://bucket/prefix or s3://bucket/prefix"),
}  # fmt: skip


@pytest.fixture(scope="module")
def secret_url(pg_url: str) -> str:
    """The module's store URL with a password (when the fixture's has none; trust auth ignores it)."""
    url = make_url(pg_url)
    return url.render_as_string(hide_password=False) if url.password else url.set(password=SECRET).render_as_string(False)


@pytest.fixture(scope="module")
def store(secret_url: str) -> Iterator[MetadataStore]:
    metadata = MetadataStore.connect(secret_url)
    metadata.upgrade()
    yield metadata
    metadata.close()


@pytest.fixture(scope="module")
def database_id(local_spanner: LocalSpanner) -> str:
    database = create_database(local_spanner.host, PROJECT, INSTANCE, unique_database_id("bad"), (), "GOOGLE_STANDARD_SQL")
    workload.setup_database(database, "GOOGLE_STANDARD_SQL", STREAM)
    return str(database.database_id)


def row_counts(url: str) -> dict[str, int]:
    """Rows of every table of the store (lineage, partitions, attempts, windows, manifest, migrations)."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = sqlalchemy.inspect(conn).get_table_names()
            return {t: int(conn.execute(sqlalchemy.text(f'SELECT count(*) FROM "{t}"')).scalar_one()) for t in tables}
    finally:
        engine.dispose()


def files_under(root: Path) -> list[Path]:
    return sorted(root.rglob("*")) if root.is_dir() else []


@dataclass
class Place:
    """Where a case runs: its output root and working directory, and the user it runs as."""

    output_root: Path
    cwd: Path
    user: int | None = None


def place_for(name: str, tmp: Path) -> Place:
    if name == "output root that is a file":
        (tmp / "lake").write_text("not a directory\n")
    if name == "output root under a directory this user cannot write":
        # root may write anywhere: run this case as nobody, in a directory nobody can read but not write
        tmp.chmod(0o755)
        locked = tmp / "locked"
        locked.mkdir(mode=0o555)
        locked.chmod(0o555)
        return Place(locked / "lake", tmp, 65534 if os.geteuid() == 0 else None)
    return Place(tmp / "lake", tmp)


def run(argv: list[str], env: dict[str, str], place: Place, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    as_user: list[str] = []
    if place.user is not None:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux) to run the CLI as another user")
        as_user = ["setpriv", f"--reuid={place.user}", f"--regid={place.user}", "--clear-groups"]
    return subprocess.run([*as_user, CLI, *argv], env=env, cwd=place.cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_bad_input_gets_one_line_and_changes_nothing(
    case: Case, request: pytest.FixtureRequest, store: MetadataStore, secret_url: str, database_id: str,
    local_spanner: LocalSpanner, tmp_path: Path,
) -> None:  # fmt: skip
    name = request.node.callspec.id
    with tempfile.TemporaryDirectory(prefix="bad-input-") as tmp_name:
        tmp = Path(tmp_name)
        place = place_for(name, tmp)
        settings = Settings(
            project=PROJECT, instance=INSTANCE, database=database_id, stream=STREAM, metadata_url=secret_url,
            output_root=place.output_root, spark_master="local[1]", emulator_host=local_spanner.host,
            namespace="bad_input", home=tmp / "home",
        )  # fmt: skip
        env = subprocess_env(settings, **case.env)
        if case.config is not None:
            (tmp / "cdc.toml").write_text(case.config)
            env["SPANNER_CDC_CONFIG"] = str(tmp / "cdc.toml")
            for key in (line.partition("=")[0].strip() for line in case.config.splitlines()):
                env.pop("SPANNER_CDC_" + key.upper(), None)  # the variable would win over the file
        lake_before, rows_before = files_under(place.output_root), row_counts(secret_url)

        argv = case.argv
        if case.live_window:  # after the stream's creation, and ended (a future end is refused on its own)
            end = datetime.now(UTC)
            argv = [*argv[:1], "--window-start", (end - timedelta(seconds=1)).isoformat(), "--window-end", end.isoformat(),
                    *argv[len(WINDOW) + 1:]]  # fmt: skip
        if case.future_window:
            start = datetime.now(UTC)
            argv = [*argv[:1], "--window-start", start.isoformat(), "--window-end", (start + timedelta(hours=1)).isoformat(),
                    *argv[len(WINDOW) + 1:]]  # fmt: skip
        result = run(argv, env, place, timeout=case.timeout)

        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        line = lines[0]
        print(f"{name}: {line}")  # the list of cases and their messages, with -s
        assert line.startswith("spanner-cdc: error: "), line
        assert case.field in line and case.accepted in line, line
        assert result.returncode == case.exit_code, line
        assert "Traceback" not in result.stderr + result.stdout
        assert SECRET not in result.stderr + result.stdout
        assert row_counts(secret_url) == rows_before
        assert files_under(place.output_root) == lake_before
        if name == "output root that is a file":
            assert place.output_root.read_text() == "not a directory\n"


def counting_java(root: Path) -> tuple[Path, Path]:
    """A JAVA_HOME whose bin/java logs each JVM launch (its arguments, a line each), then runs the real java."""
    real = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if os.environ.get("JAVA_HOME") else shutil.which("java")
    assert real is not None, "no java to wrap"
    home, launches = root / "java-home", root / "java-launches.txt"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{launches}"\nexec "{Path(real).resolve()}" "$@"\n')
    java.chmod(0o755)
    return home, launches


def test_a_driver_jvm_that_does_not_start_is_retried_once_then_one_line_says_what_to_check(
    store: MetadataStore, secret_url: str, database_id: str, local_spanner: LocalSpanner, tmp_path: Path
) -> None:
    """A JVM that refuses to start for real: a driver heap far below what the JVM accepts.

    Every start is counted where it happens, at the java binary: each getOrCreate runs spark-submit, whose
    launcher JVM builds the driver's command, then the driver JVM itself. (Counting the driver's message on
    stdout alone once missed a start: pyspark's fork() of spark-submit could die before exec, see session.py.)
    """
    start = datetime.now(UTC)  # after the stream was created (the module fixture)
    settings = Settings(
        project=PROJECT, instance=INSTANCE, database=database_id, stream=STREAM, metadata_url=secret_url,
        output_root=tmp_path / "lake", spark_master="local[1]", emulator_host=local_spanner.host,
        namespace="jvm_start", home=tmp_path / "home",
    )  # fmt: skip
    java_home, launches = counting_java(tmp_path)
    env = subprocess_env(settings, SPARK_DRIVER_MEMORY="1k", JAVA_HOME=str(java_home))
    window = ["--window-start", start.isoformat(), "--window-end", (start + timedelta(seconds=10)).isoformat()]

    result = run(["extract", *window, "--wait"], env, Place(tmp_path / "lake", tmp_path))  # the window ends in 10 s

    started = launches.read_text().splitlines() if launches.exists() else []
    seen = f"stdout: {result.stdout!r}\nstderr: {result.stderr}\njava launches:\n" + "\n".join(started)
    assert result.returncode == 1, seen
    assert "Traceback" not in result.stderr and SECRET not in result.stderr + result.stdout, seen
    # two starts: spark-submit ran Spark's launcher twice, and the run said it starts once more, once
    launchers = [line for line in started if "org.apache.spark.launcher.Main" in line]
    assert len(launchers) == 2, seen
    assert result.stderr.count("exited while starting; starting it once more") == 1, seen
    assert result.stderr.startswith("waiting for the window's end "), seen  # --wait said what it waited for
    # each start reached its driver JVM, which was refused for the 1k heap and said so on stdout
    drivers = [line for line in started if line not in launchers and "org.apache.spark.deploy.SparkSubmit" in line]
    assert len(drivers) == 2 and all("-Xmx1k" in line.split() for line in drivers), seen
    assert result.stdout.count("Error occurred during initialization of VM") == 2, seen
    errors = [line for line in result.stderr.splitlines() if line.startswith("spanner-cdc: error: ")]
    assert errors == [result.stderr.splitlines()[-1]], seen
    assert "driver JVM for master local[1] exited while starting (2 tries" in errors[0]
    assert "JAVA_HOME" in errors[0] and "java` on PATH" in errors[0] and "SPARK_DRIVER_MEMORY" in errors[0]
    # nothing landed: the only file is the window's landing-policy record, kept before any token is read
    landed = [p for p in files_under(tmp_path / "lake") if p.is_file()]
    assert [p.parent.name for p in landed] == ["_policies"], landed


BACKFILL_CASES = {
    "stream not configured": ({"stream": "nope"}, "invalid stream='nope': expected one of the configured streams: orders"),
    "start not a date-time": ({"start": "yesterday"}, "invalid start='yesterday': expected an ISO 8601 date-time"),
    "end before start": ({"start": "2024-06-01T02:00:00Z"}, "invalid end='2024-06-01T01:00:00+00:00': expected a date-time after start"),
    "heartbeat out of range": ({"heartbeat_ms": 10}, "invalid heartbeat_ms=10: expected an integer in [1000, 300000]"),
    "output root not a path": ({"output_root": "   "}, "invalid output_root='   ': expected a non-empty string"),
}  # fmt: skip


@pytest.mark.parametrize(("form", "message"), list(BACKFILL_CASES.values()), ids=list(BACKFILL_CASES))
def test_the_backfill_form_refuses_bad_values_before_reading_anything(
    form: dict[str, Any], message: str, store: MetadataStore, secret_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from airflow.sdk.exceptions import AirflowFailException

    from spanner_cdc.orchestration.backfill import validate

    config = tmp_path / "streams.toml"
    config.write_text('[streams.orders]\nchange_stream = "orders_stream"\nstart_date = 2024-01-01T00:00:00Z\n')
    for key in [k for k in os.environ if k.startswith("SPANNER_CDC_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SPANNER_CDC_CONFIG", str(config))
    monkeypatch.setenv("SPANNER_CDC_METADATA_URL", secret_url)
    monkeypatch.setenv("SPANNER_CDC_OUTPUT_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", f"127.0.0.1:{closed_port()}")  # refused before Spanner is asked
    rows_before = row_counts(secret_url)
    params = {"stream": "orders", "start": "2024-06-01T00:00:00Z", "end": "2024-06-01T01:00:00Z", **form}

    with pytest.raises(AirflowFailException) as refused:
        validate(params, "manual__bad_input")

    assert str(refused.value).startswith("backfill refused: " + message)
    assert "\n" not in str(refused.value) and SECRET not in str(refused.value)
    # the task log's line, with no chained traceback of where in the checks the refusal was found
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    assert row_counts(secret_url) == rows_before
    assert not (tmp_path / "lake").exists()


def test_a_bad_window_or_a_missing_stream_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """No metadata URL (the CLI on a laptop): the refusal comes before the embedded Postgres or a JVM starts, and is the
    only line on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPANNER_CDC_", "SPANNER_EMULATOR"))}
    home = tmp_path / "home"
    cases = {
        "--stream": ["extract", *WINDOW, "--home", str(home)],
        "must be after --window-start": ["extract", "--stream", STREAM, "--home", str(home),
                                         "--window-start", "2024-05-01T11:00:00Z", "--window-end", "2024-05-01T10:00:00Z"],
    }  # fmt: skip
    for words, argv in cases.items():
        result = subprocess.run([CLI, *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
        assert not (home / "postgres").exists(), "the embedded Postgres was started before the refusal"


@pytest.mark.timeout(60)
def test_up_on_a_taken_port_names_the_port(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPANNER_CDC_", "AIRFLOW"))}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([CLI, "up", "--port", str(port), "--home", str(tmp_path / "home")], env=env,
                                capture_output=True, text=True, timeout=50)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"spanner-cdc: error: --port {port}: 127.0.0.1:{port} is taken (Address already in use); "
                                          "stop what listens there or give another --port"]  # fmt: skip
    assert not (tmp_path / "home" / "postgres").exists()
