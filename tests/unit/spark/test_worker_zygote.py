"""The process a local driver's Python daemon is forked from: Spark's protocol with the daemon on the streams it
launched, the daemon a child of the zygote, and every fallback to the daemon running itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from spanner_cdc.names import WORKER_DAEMON_MODULE
from spanner_cdc.spark import worker_zygote
from spanner_cdc.spark.session import classic_conf


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    (tmp_path / "zygote").mkdir()
    process, path = worker_zygote.spawn(tmp_path / "zygote")  # a daemon may connect at once: the socket is bound
    try:
        yield process, path
    finally:
        process.kill()
        process.wait(timeout=60)


def _launch_daemon(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The daemon as Spark launches it: its module, pipes for standard input and output."""
    return subprocess.Popen(
        [sys.executable, "-m", WORKER_DAEMON_MODULE, "pyspark.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={**os.environ, **env},
    )  # fmt: skip


def _listener(port: int) -> psutil.Process:
    """The process listening on the daemon's port (the one that forks the workers)."""
    for connection in psutil.net_connections("tcp4"):
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
            return psutil.Process(connection.pid)
    raise AssertionError(f"nothing listens on {port}")


def _port(daemon: subprocess.Popen[bytes]) -> int:
    assert daemon.stdout is not None
    return int(struct.unpack("!i", daemon.stdout.read(4))[0])


def test_the_daemon_spark_launches_is_forked_from_the_zygote_and_ends_when_spark_closes_its_input(
    zygote: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, path = zygote
    daemon = _launch_daemon({worker_zygote.ENV: path})
    listener = _listener(_port(daemon))  # the port arrived on the launched process's own standard output
    assert listener.pid != daemon.pid and listener.ppid() == process.pid  # a child of the zygote
    assert daemon.poll() is None  # the launched process stands in for it
    assert daemon.stdin is not None
    daemon.stdin.close()  # how Spark stops its daemon
    assert daemon.wait(timeout=60) == 0
    psutil.wait_procs([listener], timeout=60)
    assert not listener.is_running() or listener.status() == psutil.STATUS_ZOMBIE
    assert process.poll() is None  # the zygote serves the next driver's daemon


def test_a_signal_to_the_launched_process_reaches_the_daemon(zygote: tuple[subprocess.Popen[bytes], str]) -> None:
    _process, path = zygote
    daemon = _launch_daemon({worker_zygote.ENV: path})
    listener = _listener(_port(daemon))
    daemon.send_signal(signal.SIGTERM)  # Spark's destroy()
    gone, _alive = psutil.wait_procs([listener], timeout=60)
    assert gone and daemon.wait(timeout=60) == 0


def test_the_zygote_ends_with_the_process_that_started_it(zygote: tuple[subprocess.Popen[bytes], str]) -> None:
    process, path = zygote
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=60) == 0 and not Path(path).parent.exists()


def test_without_a_zygote_the_daemon_runs_itself(tmp_path: Path) -> None:
    assert worker_zygote.hand_over(str(tmp_path / "none")) is False  # nothing changed here: run yourself
    daemon = _launch_daemon({worker_zygote.ENV: str(tmp_path / "none")})
    try:
        assert _listener(_port(daemon)).pid == daemon.pid
    finally:
        daemon.kill()
        daemon.wait(timeout=60)


def test_a_zygote_that_closes_without_forking_leaves_the_daemon_to_run_itself(tmp_path: Path) -> None:
    path = str(tmp_path / "socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    daemon = _launch_daemon({worker_zygote.ENV: path})
    conn, _ = server.accept()
    conn.close()  # before any pid: the launched process keeps its streams
    try:
        assert _listener(_port(daemon)).pid == daemon.pid
    finally:
        daemon.kill()
        daemon.wait(timeout=60)
        server.close()


def test_a_daemon_of_another_python_is_not_forked_here(zygote: tuple[subprocess.Popen[bytes], str]) -> None:
    _process, path = zygote
    request = json.dumps({"executable": "/another/python", "env": {}, "cwd": "/", "argv": []}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(path)
        socket.send_fds(conn, [len(request).to_bytes(4, "big")], [0, 1, 2])
        conn.sendall(request)
        assert conn.recv(64) == b""  # closed without a pid: that daemon runs itself


def test_only_a_local_driver_names_a_zygote() -> None:
    assert classic_conf("local[2]", zygote="/tmp/z")[f"spark.executorEnv.{worker_zygote.ENV}"] == "/tmp/z"
    assert not any(key.startswith("spark.executorEnv.") for key in classic_conf("local[2]"))
