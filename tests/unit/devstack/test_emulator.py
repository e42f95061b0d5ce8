"""Finding Google's Spanner emulator: the named binary, else the gcloud SDK's folder; a missing one says how to install it."""

from __future__ import annotations

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
