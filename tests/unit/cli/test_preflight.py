"""The checks commands run before starting anything: each refusal names the flag, file, host or port at fault."""

from __future__ import annotations

import socket
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spanner_cdc.cli.commands import _preflight
from spanner_cdc.devstack.demo import next_commands
from spanner_cdc.errors import ConfigError, SourceError, SparkStartError, UsageError
from spanner_cdc.settings import Settings


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_window_must_end_after_its_start() -> None:
    at = datetime(2024, 5, 1, 10, tzinfo=UTC)
    with pytest.raises(UsageError, match="--window-end 2024-05-01T10:00:00\\+00:00 must be after --window-start"):
        _preflight.check_window(at, at)
    _preflight.check_window(at, at.replace(hour=11))


def test_no_stream_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--stream"):
        _preflight.require_stream(Settings())
    assert _preflight.require_stream(Settings(stream="orders")) == "orders"


def test_a_spark_connect_url_with_nothing_listening_is_named() -> None:
    url = f"sc://127.0.0.1:{closed_port()}"
    with pytest.raises(SparkStartError, match=f"cannot reach the Spark Connect server at {url} \\(Connection refused\\)"):
        _preflight.check_spark_master(Settings(spark_master=url))
    _preflight.check_spark_master(Settings(spark_master="local[1]"))  # nothing to reach


def test_an_emulator_host_with_nothing_listening_is_named() -> None:
    host = f"127.0.0.1:{closed_port()}"
    with pytest.raises(SourceError, match=f"cannot reach Spanner at SPANNER_EMULATOR_HOST={host}"):
        _preflight.check_emulator_host(Settings(emulator_host=host))
    with pytest.raises(ConfigError, match="host:port"):
        _preflight.check_emulator_host(Settings(emulator_host="localhost"))
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        _preflight.check_emulator_host(Settings(emulator_host=f"127.0.0.1:{listening.getsockname()[1]}"))


def test_a_credentials_file_that_is_not_there_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS=.*key.json"):
        _preflight.check_credentials_file(Settings())
    _preflight.check_credentials_file(Settings(emulator_host="127.0.0.1:9010"))  # the emulator needs none
    (tmp_path / "key.json").write_text("{}")
    _preflight.check_credentials_file(Settings())


def test_a_taken_port_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"--port {port}: 127.0.0.1:{port} is taken"):
            _preflight.check_port_free(port)
    _preflight.check_port_free(closed_port())


def test_the_demo_summary_commands_carry_a_home_that_is_not_the_default() -> None:
    assert next_commands(Settings()) == [
        "spanner-cdc lineage list", "spanner-cdc lineage show --stream demo_stream",
        "spanner-cdc lake show --stream demo_stream", "make up",
    ]  # fmt: skip
    home = next_commands(replace(Settings(), home=Path("/tmp/my home")))
    assert home[-1] == "spanner-cdc up --home '/tmp/my home'" and all("--home '/tmp/my home'" in c for c in home)


def test_a_window_end_ahead_of_spanner_is_refused_with_when_or_waited_for_with_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    from datetime import timedelta

    from spanner_cdc.source import client

    end = datetime(2024, 5, 1, 11, tzinfo=UTC)
    clock = iter([end - timedelta(seconds=25), end - timedelta(seconds=15), end - timedelta(seconds=5), end])
    monkeypatch.setattr(client, "server_now", lambda database, dialect=None: next(clock))
    with pytest.raises(UsageError, match="--window-end 2024-05-01T11:00:00Z is in the future .*extracted from "
                                         "2024-05-01T11:00:00Z, in 25 s; .*--wait"):
        _preflight.wait_for_window_end(None, end, wait=False, out=io.StringIO())
    slept: list[float] = []
    monkeypatch.setattr(_preflight.time, "sleep", slept.append)
    out = io.StringIO()
    _preflight.wait_for_window_end(None, end, wait=True, out=out)
    assert [line.rsplit(", ", 1)[1] for line in out.getvalue().splitlines()] == ["15 s to go", "5 s to go"]
    assert slept == [10.0, 5.0]


def test_a_librarys_warning_stays_off_stderr_where_a_user_error_is_one_line() -> None:
    """As platformdirs' RuntimeDirWarning did: a warning a library raises while a command runs goes to the log at debug,
    and the user's error stays the only line (a process of its own: pytest records warnings itself)."""
    import subprocess
    import sys

    script = (
        "import sys, warnings\n"
        "from spanner_cdc.cli import main\n"
        "from spanner_cdc.cli.commands import demo\n"
        "from spanner_cdc.errors import UsageError\n"
        "def fails(args):\n"
        "    warnings.warn('XDG_RUNTIME_DIR is not set', RuntimeWarning)\n"
        "    raise UsageError('--hours 0: expected 1 to 24')\n"
        "demo.run_demo = fails\n"
        "sys.exit(main.main(sys.argv[1:]))\n"
    )
    quiet = subprocess.run([sys.executable, "-W", "default", "-c", script, "demo"], capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 2 and quiet.stderr == "spanner-cdc: error: --hours 0: expected 1 to 24\n", quiet.stderr
    shown = subprocess.run([sys.executable, "-W", "default", "-c", script, "--debug", "demo"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert "XDG_RUNTIME_DIR is not set" in shown.stderr  # with --debug it is logged
