"""Finding Google's Spanner emulator: the named binary, else the gcloud SDK's folder; a missing one says how to install it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from spanner_cdc.devstack import emulator
from spanner_cdc.devstack.emulator import BINARY_ENV, EmulatorNotFound, find_emulator


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_variable_names_the_binary_and_a_bad_one_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = executable(tmp_path / "somewhere" / "emulator_main")
    monkeypatch.setenv(BINARY_ENV, str(binary))
    assert find_emulator() == binary
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(EmulatorNotFound, match=f"{BINARY_ENV}=.*missing.*gcloud components install cloud-spanner-emulator"):
        find_emulator()


def test_else_the_sdk_folder_and_where_none_holds_it_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    sdk = tmp_path / "sdk"
    monkeypatch.setattr(emulator, "_sdk_roots", lambda: (tmp_path / "other", sdk))
    with pytest.raises(EmulatorNotFound) as refused:
        find_emulator()
    message = str(refused.value)
    assert "gcloud components install cloud-spanner-emulator" in message and "gcr.io/cloud-spanner-emulator/emulator" in message
    binary = executable(sdk / "bin" / "cloud_spanner_emulator" / "emulator_main")
    assert find_emulator() == binary


def test_its_tests_skip_in_one_line_where_it_is_absent_and_fail_where_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures.emulator import REQUIRE_ENV, emulator_binary_or_skip

    def absent() -> Path:
        raise EmulatorNotFound("Google's Cloud Spanner emulator was not found; install it")

    monkeypatch.setattr("tests.fixtures.emulator.find_emulator", absent)
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="was not found; install it"):
        emulator_binary_or_skip()
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV} is set: Google's Cloud Spanner emulator was not found"):
        emulator_binary_or_skip()


def test_a_ground_truth_rewritten_as_the_emulator_records_it(tmp_path: Path) -> None:
    from spanner_cdc.devstack.emulator import record_ground_truth_as_the_emulator
    from spanner_cdc.devstack.workload import load_ground_truth

    path = tmp_path / "truth.jsonl"
    line = {"commit_timestamp": "2026-12-06T05:42:10.172907Z", "table": "singers", "mod_type": "UPDATE", "keys": {"singer_id": "7"},
            "new_values": {"updated_at": "2028-09-13T10:35:44.743458Z", "first_name": "x.y"},
            "old_values": {"updated_at": "2028-09-13T10:35:44Z", "first_name": None}, "transaction_tag": "app=workload", "transaction": 3}
    path.write_text(json.dumps(line) + "\n")
    record_ground_truth_as_the_emulator(path)
    [row] = load_ground_truth(path)
    assert row.new_values == {"updated_at": "2028-09-13T10:35:44Z", "first_name": "x.y"}
    assert row.old_values == {"updated_at": "2028-09-13T10:35:44Z", "first_name": None}
    assert (row.transaction_tag, row.transaction, row.keys) == ("", 3, {"singer_id": "7"})
    assert row.commit_timestamp.isoformat() == "2026-12-06T05:42:10.172907+00:00"  # the commit timestamp keeps its microseconds


def test_the_demo_on_the_emulator_refuses_a_partition_mode_the_emulator_lacks_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from spanner_cdc.cli import main as cli

    assert cli.main(["demo", "--source", "emulator", "--partition-mode", "MUTABLE_KEY_RANGE"]) == 2
    err = capsys.readouterr().err
    assert err == ("spanner-cdc: error: --partition-mode MUTABLE_KEY_RANGE: Google's emulator has only IMMUTABLE_KEY_RANGE "
                   "(--source emulator)\n")


def test_the_demo_streams_config_on_the_emulator_is_scheduled_by_the_minute(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from spanner_cdc.devstack.demo import write_streams_config
    from spanner_cdc.devstack.demo_emulator import SCHEDULE
    from spanner_cdc.settings import CONFIG_ENV, load_settings
    from spanner_cdc.stream_config import load_streams

    path = tmp_path / "streams.toml"
    write_streams_config(path, datetime(2026, 12, 6, 6, 11, tzinfo=UTC), schedule=SCHEDULE)
    [stream] = load_streams(load_settings({}, env={CONFIG_ENV: str(path)})).values()
    assert stream.schedule == "* * * * *" and stream.start_date == datetime(2026, 12, 6, 6, 11, tzinfo=UTC)
