"""The driver JVM's spawn in a process whose gRPC threads are busy: every child reaches exec, with SIGINT ignored."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from spanner_cdc.spark.session import spawn_ignoring_sigint

pytestmark = [pytest.mark.integration, pytest.mark.heavy(17)]  # it mostly waits: started beside the busy modules, not last

SPAWNS = 400  # pyspark's own spawn (fork) lost 1-15 children in 200 here; see the comment in session.py


def _echo(request: bytes, context: object) -> bytes:
    return request


@pytest.fixture(scope="module")
def busy_grpc() -> Iterator[None]:
    """A gRPC server and a client calling it without pause, in this process: the Spanner client's situation."""
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler("t.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(_echo)})
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    echo = channel.unary_unary("/t.Echo/Echo")
    stop = threading.Event()

    def calls() -> None:
        while not stop.is_set():
            echo(b"x", timeout=10)

    callers = [threading.Thread(target=calls, daemon=True) for _ in range(2)]
    for caller in callers:
        caller.start()
    echo(b"x", timeout=10)  # the channel is up before the first spawn
    try:
        yield
    finally:
        stop.set()
        for caller in callers:
            caller.join(10)
        channel.close()
        server.stop(None)


def _ignore_sigint_in_child() -> None:  # what pyspark's launch_gateway hands Popen
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_every_spawn_reaches_exec_while_grpc_is_busy(busy_grpc: None) -> None:
    codes = []
    for _ in range(SPAWNS):
        child = spawn_ignoring_sigint(["true"], stdin=subprocess.PIPE, preexec_fn=_ignore_sigint_in_child)
        child.stdin.close()  # type: ignore[union-attr]
        codes.append(child.wait(30))
    lost = [code for code in codes if code != 0]
    assert not lost, f"{len(lost)} of {SPAWNS} children died before exec (exit codes {sorted(set(lost))})"


def test_the_child_starts_with_sigint_ignored_and_this_process_keeps_its_handler(busy_grpc: None) -> None:
    before = signal.getsignal(signal.SIGINT)
    child = spawn_ignoring_sigint(["grep", "^SigIgn:", "/proc/self/status"], stdout=subprocess.PIPE, text=True)
    out, _ = child.communicate(timeout=30)
    ignored = int(out.split()[1], 16)
    assert ignored & (1 << (signal.SIGINT - 1)), out
    assert signal.getsignal(signal.SIGINT) is before


CLASSIC_IN_A_CONNECT_MARKED_PROCESS = """
import os
from spanner_cdc.spark.session import spark_session
session = spark_session("local[1]")
print(session.sparkContext.parallelize(range(4), 2).map(lambda n: n * 2).sum())
print(session.range(3).count(), os.environ.get("SPARK_CONNECT_MODE_ENABLED"), os.environ.get("SPARK_REMOTE"))
print(session.conf.get("spark.sql.session.timeZone"))
"""


def test_a_local_master_starts_a_classic_driver_in_a_process_marked_for_connect() -> None:
    """A child of a process that made a Connect session inherits pyspark's marker; the master still decides: an RDD job
    and a DataFrame run on the local driver, with the runtime settings."""
    import os
    import sys

    env = {**os.environ, "SPARK_CONNECT_MODE_ENABLED": "1", "SPARK_REMOTE": "sc://127.0.0.1:1"}
    result = subprocess.run(
        [sys.executable, "-c", CLASSIC_IN_A_CONNECT_MARKED_PROCESS], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines()]
    assert lines[0] == ["12"]
    # three rows counted by a local driver; the markers are gone, so later DataFrame calls stay classic
    assert lines[1] == ["3", "None", "None"]
    assert lines[2] == ["UTC"]


def test_a_connect_master_after_a_local_driver_in_one_process(spark_connect_server: Any) -> None:
    """pyspark refuses a Connect session beside a running classic driver: the driver this process started goes first."""
    from pyspark.sql import functions as F

    from spanner_cdc.spark.session import spark_session, stop_sessions

    try:
        local = spark_session("local[1]")
        assert local.range(3).count() == 3
        remote = spark_session(spark_connect_server.url)
        # functions resolve against the Connect session (pyspark's marker is set by the remote builder)
        assert remote.range(4).select((F.col("id") + 1).alias("n")).agg(F.sum("n")).collect()[0][0] == 10
        assert local.sparkContext._jsc is None  # the local driver was stopped
        remote.stop()
        again = spark_session("local[1]")  # a classic driver again, though pyspark's Connect marker was set here
        assert again.sparkContext._jsc is not None and again.range(2).count() == 2
    finally:
        stop_sessions()


def test_a_connect_session_taken_again_after_a_local_driver_builds_connect_columns(spark_connect_server: Any) -> None:
    """The process's Connect session, still open, taken again after a local driver ran (whose start dropped pyspark's
    Connect marker): the local driver is stopped and DataFrame functions resolve against Connect again. (Seen in
    `make test`: a module's local driver between two Connect sessions of a worker failed with 'Column' object is not
    callable.)"""
    from pyspark.sql import functions as F

    from spanner_cdc.spark.session import spark_session, stop_sessions

    try:
        remote = spark_session(spark_connect_server.url)
        assert remote.range(2).count() == 2
        local = spark_session("local[1]")
        assert local.range(3).select((F.col("id") + 1).alias("n")).agg(F.sum("n")).collect()[0][0] == 6
        again = spark_session(spark_connect_server.url)
        assert again is remote
        assert again.range(4).select((F.col("id") + 1).alias("n")).agg(F.sum("n")).collect()[0][0] == 10
        assert local.sparkContext._jsc is None  # the local driver was stopped
    finally:
        stop_sessions()


def test_a_driver_spawned_from_another_thread_is_out_of_the_terminals_reach() -> None:
    """Only the main thread may ignore SIGINT around the spawn: elsewhere the child gets a session of its own, so a
    Ctrl-C at the terminal reaches this process and not the JVM (which still ends when its stdin closes)."""
    import os

    children: list[subprocess.Popen[bytes]] = []
    spawn = threading.Thread(target=lambda: children.append(spawn_ignoring_sigint(["sleep", "30"], stdin=subprocess.PIPE)))
    spawn.start()
    spawn.join(30)
    (child,) = children
    try:
        assert os.getsid(child.pid) == child.pid != os.getsid(0)
    finally:
        child.kill()
        child.wait(30)


def test_a_stopped_local_driver_is_followed_by_one_whose_accumulators_count() -> None:
    from spanner_cdc.spark.session import spark_session, stop_sessions

    try:
        first = spark_session("local[1]")
        assert first.range(3).count() == 3
        stop_sessions()
        again = spark_session("local[1]")
        assert again is not first
        counter = again.sparkContext.accumulator(0)
        again.sparkContext.parallelize(range(10), 2).foreach(lambda n: counter.add(n))
        assert counter.value == 45
    finally:
        stop_sessions()


def test_a_wave_jobs_cores_come_from_spark_itself(spark_connect_server: Any) -> None:
    """task_tokens 0 sizes a job's tasks by Spark's cores: a local driver's parallelism, a Connect server's local[N]."""
    from spanner_cdc.spark.session import spark_cores, spark_session, stop_sessions
    from tests.fixtures.spark import CONNECT_MASTER

    try:
        assert spark_cores(spark_session("local[1]")) == 1
        assert spark_cores(spark_session(spark_connect_server.url)) == int(CONNECT_MASTER.removeprefix("local[").rstrip("]"))
    finally:
        stop_sessions()
