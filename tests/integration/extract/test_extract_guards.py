"""The extract refuses windows it cannot serve, up front and with a message that says what to do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.cli.main import main
from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.settings import subprocess_env
from spanner_cdc.store import MetadataStore
from spanner_cdc.times import parse_rfc3339
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = pytest.mark.integration
# a day of server time passes in under two real seconds
CLOCK_RATE = 50_000.0


@pytest.fixture(scope="module")
def ageing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSpanner]:
    with LocalSpanner(clock_rate=CLOCK_RATE, log_path=tmp_path_factory.mktemp("ageing") / "server.log") as server:
        yield server


def server_now(server: LocalSpanner) -> Any:
    return parse_rfc3339(server.control.status()["now"])


def run_cli(settings: Any, start: Any, end: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    for key, value in subprocess_env(settings).items():
        if key.startswith(("SPANNER_CDC_", "SPANNER_EMULATOR_HOST")):
            monkeypatch.setenv(key, value)
    return main(["extract", "--window-start", start.isoformat(), "--window-end", end.isoformat()])


def test_windows_out_of_retention_or_before_the_stream_are_refused(
    ageing_server: LocalSpanner, extract_settings: Any, store: MetadataStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", ageing_server.host)
    database = create_database(ageing_server.host, PROJECT, INSTANCE, unique_database_id("r"), (), "GOOGLE_STANDARD_SQL")
    workload.setup_database(database, "GOOGLE_STANDARD_SQL", "aged")
    database.update_ddl(["ALTER CHANGE STREAM aged SET OPTIONS (retention_period = '1d')"]).result(60)  # the minimum
    created = server_now(ageing_server)
    settings = extract_settings(database.database_id, "aged", emulator_host=ageing_server.host)

    assert run_cli(settings, created - timedelta(hours=2), created - timedelta(hours=1), monkeypatch) == 2
    error = capsys.readouterr().err
    assert "ends before change stream aged was created" in error and "choose a window after its creation" in error

    while server_now(ageing_server) < created + timedelta(days=1, hours=1):  # wait for the server's clock
        time.sleep(0.05)
    assert run_cli(settings, created, created + timedelta(hours=1), monkeypatch) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("spanner-cdc: error: window start ")
    assert "has left change stream aged's retention period (1 day)" in error
    assert "retention_period" in error and "--namespace" in error
    # refused before anything was bootstrapped or landed
    lineage = store.get_lineage("aged", settings.namespace)
    assert store.partitions(lineage.id) == []
    assert not Path(settings.output_root).exists()


def test_bad_windows_are_usage_errors(extract_settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    settings = extract_settings("nodb", "s")
    for key, value in subprocess_env(settings).items():
        if key.startswith("SPANNER_CDC_"):
            monkeypatch.setenv(key, value)
    assert main(["extract", "--window-start", "2024-05-01T11:00:00Z", "--window-end", "2024-05-01T10:00:00Z"]) == 2
    assert "--window-end 2024-05-01T10:00:00+00:00 must be after --window-start" in capsys.readouterr().err
    assert main(["extract", "--window-start", "2024-05-01 10:00", "--window-end", "2024-05-01T11:00:00Z"]) == 2
    assert "invalid --window-start='2024-05-01 10:00'" in capsys.readouterr().err
