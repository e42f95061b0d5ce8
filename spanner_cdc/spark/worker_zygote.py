"""A process, imported ahead, that a local driver's Python daemon is forked from: its imports overlap the JVM's start.

A local driver's Python daemon (`worker_daemon.py`) imports the executor side's modules (~1 s of a core) when the
first job asks Spark for a worker: after the driver's JVM is up, on the path of every extract. A local driver started
here first starts this process (`start`), which imports the same modules while the JVM starts and the window is
planned, then waits. When Spark launches the daemon module, the daemon hands its standard streams (SCM_RIGHTS), its
environment, directory and arguments over this process's Unix socket (`hand_over`); a child forked here becomes the
daemon (pyspark's own manager, on those streams), and the process Spark launched stays as its stand-in: it passes on
Spark's signals and ends when the daemon ends.

A Connect server the dev stack starts on a local master (`devstack/spark_cluster.ConnectServer`) gets one as well:
the server starts a daemon per session, and each is then a fork, not a fresh import.

Nothing here may fail a run: a daemon that cannot reach this process (none started, gone, an executor of a cluster)
imports and runs itself, as before. This process ends when the process that started it does (its standard input
closes).
"""

from __future__ import annotations

import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from spanner_cdc import names

ENV = names.WORKER_ZYGOTE_ENV  # the socket's path, in the daemon's environment (spark.executorEnv)
STREAMS = (0, 1, 2)
HAND_OVER_WAIT_S = 60.0  # how long a daemon waits for the fork before it runs itself; the imports take ~1-2 s
MAX_REQUEST = 1 << 20

_lock = threading.Lock()
_running: tuple[subprocess.Popen[bytes], str] | None = None


def preimport(report: bool = True) -> str | None:
    """The modules a wave task's worker uses, imported here; a failure is reported (printed, or returned with
    `report` False), never raised."""
    failure = None
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401
        import pyspark.worker  # noqa: F401 - pyspark's worker main, imported by each forked worker otherwise
        from google.cloud import spanner  # noqa: F401

        from spanner_cdc.source import reader  # noqa: F401
        from spanner_cdc.spark import executor, reused_worker, wave_task  # noqa: F401

        pa.array(["imported"])  # pyarrow imports pandas at its first array from a list
    except Exception as exc:  # noqa: BLE001 - the workers then import what they use themselves
        failure = f"spanner-cdc worker daemon: preimport failed ({exc!r}); each worker imports its own modules"
        if report:
            print(failure, file=sys.stderr)
    gc.collect()
    gc.freeze()
    return failure


def start() -> str | None:
    """The socket of this process's zygote, started at the first call (or again if it ended); None if it cannot be."""
    global _running
    if not hasattr(os, "pidfd_open"):  # Linux's: the stand-in waits on the daemon, which is not its child, with it
        return None
    with _lock:
        if _running is not None and _running[0].poll() is None:
            return _running[1]
        try:
            _running = spawn(Path(tempfile.mkdtemp(prefix="spanner-cdc-zygote-")))  # the directory is private
        except OSError:
            return None
        return _running[1]


def spawn(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A zygote listening at `directory`/socket, which it removes with the directory when it ends. The socket is bound
    here, before the process starts: a daemon that connects while it starts or imports waits in the backlog."""
    path = str(directory / "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(64)
        env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}  # what Spark gives the daemon
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(listener.fileno()), path], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, env=env, pass_fds=[listener.fileno()],
            start_new_session=True,  # out of the terminal's reach, as the JVM that launches the daemon
        )  # fmt: skip
    finally:
        listener.close()  # the zygote has its own
    return process, path


def hand_over(path: str) -> bool:
    """In the process Spark launched as its daemon: have the zygote at `path` fork the daemon on this process's
    streams, then stand in for it until it ends (True). False, with nothing changed, when it cannot: run yourself."""
    if not hasattr(os, "pidfd_open"):
        return False
    request = json.dumps({"executable": sys.executable, "env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(HAND_OVER_WAIT_S)
            conn.connect(path)
            socket.send_fds(conn, [len(request).to_bytes(4, "big")], list(STREAMS))
            conn.sendall(request)
            pid = int(_read_line(conn))  # the forked child waits for the go below before it touches the streams
            conn.sendall(b"go\n")
    except (OSError, ValueError):
        return False
    _stand_in(pid)
    return True


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            raise ValueError("the zygote closed the connection")
        data += chunk
    return data.decode().strip()


def _stand_in(pid: int) -> None:
    """Pass Spark's signals to the daemon and return when it has ended; the streams are its own now."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in STREAMS:
        os.dup2(null, fd)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: _send(pid, received))
    try:
        ended = os.pidfd_open(pid)
    except OSError:  # it ended already
        return
    poller = select.poll()
    poller.register(ended, select.POLLIN)
    while not poller.poll():
        pass


def _send(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:
        pass


def serve(listening: int, path: str) -> None:
    """The zygote: import, then fork a daemon for each request on the `listening` socket until standard input closes."""
    listener = socket.socket(fileno=listening)
    failure = preimport(report=False)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the forked daemons are reaped by the kernel
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(listener, select.POLLIN)
    try:
        while True:
            for fd, _event in poller.poll():
                if fd == 0:
                    if not os.read(0, 4096):
                        return  # the driver's process ended
                else:
                    conn, _ = listener.accept()
                    with conn:
                        _fork_daemon(listener, conn, failure)
    finally:
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def _fork_daemon(listener: socket.socket, conn: socket.socket, failure: str | None) -> None:
    conn.settimeout(HAND_OVER_WAIT_S)
    fds: list[int] = []
    try:
        head, fds, _flags, _addr = socket.recv_fds(conn, 4, len(STREAMS))
        size = int.from_bytes(head, "big")
        if len(fds) != len(STREAMS) or len(head) != 4 or size > MAX_REQUEST:
            return
        request = json.loads(_read_exactly(conn, size))
        if request.get("executable") != sys.executable:  # a daemon of another Python runs itself
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                listener.close()
                conn.sendall(f"{os.getpid()}\n".encode())
                if _read_line(conn) == "go":  # the daemon's process is waiting for this one, not running itself
                    conn.close()
                    code = _become_daemon(request, fds, failure)
            except BaseException:  # noqa: BLE001 - the child never returns into the zygote's loop
                pass
            finally:
                os._exit(code)
    except (OSError, ValueError):
        return
    finally:
        for fd in fds:
            os.close(fd)


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("the request ended early")
        data += chunk
    return data


def _become_daemon(request: dict[str, Any], fds: list[int], failure: str | None) -> int:
    """In the forked child: the daemon's streams, environment, directory and arguments, then pyspark's manager."""
    for target, fd in zip(STREAMS, fds, strict=True):
        os.dup2(fd, target)
    for fd in fds:
        if fd not in STREAMS:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    if failure:
        print(failure, file=sys.stderr, flush=True)
    from pyspark.daemon import manager

    try:
        manager()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    return 0


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
