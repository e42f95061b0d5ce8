"""A session started in the background is the one spark_session hands out next, or its start's error is raised there."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from spanner_cdc.errors import SparkStartError
from spanner_cdc.spark import session

RELEASE = threading.Event()  # a start under way ends when it is set


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """session._open replaced (no JVM: this is the handoff's logic alone): each call's (master, thread) recorded; it
    returns once RELEASE is set; a master starting with "bad" fails as a JVM that cannot start does."""
    calls: list[tuple[str, str]] = []
    release = RELEASE
    release.clear()

    def fake_open(master: str) -> Any:
        calls.append((master, threading.current_thread().name))
        release.wait(10)
        if master.startswith("bad"):
            raise SparkStartError(f"no driver for {master}")
        return SimpleNamespace(master=master, thread=threading.current_thread().name, is_stopped=False)

    monkeypatch.setattr(session, "_open", fake_open)
    monkeypatch.setattr(session, "_starting", {})
    monkeypatch.setattr(session, "_sessions", {})  # a live session an earlier test of this process opened is not ours
    yield calls
    release.set()


def test_the_caller_gets_the_session_started_in_the_background(opened: list[tuple[str, str]]) -> None:
    session.start_in_background(SimpleNamespace(spark_master="local[2]"))  # type: ignore[arg-type]
    session.start_in_background(SimpleNamespace(spark_master="local[2]"))  # type: ignore[arg-type]  # one start
    threading.Timer(0.2, RELEASE.set).start()  # the caller asks before the start has finished
    started = session.spark_session("local[2]")
    assert (started.master, started.thread) == ("local[2]", "spark-start")
    assert opened == [("local[2]", "spark-start")]
    session.spark_session("local[2]")  # later calls open (and reuse) it as before, not the finished start again
    assert opened[1:] == [("local[2]", threading.current_thread().name)]


def test_a_failed_background_start_is_raised_to_the_caller(opened: list[tuple[str, str]]) -> None:
    session.start_in_background(SimpleNamespace(spark_master="bad://x"))  # type: ignore[arg-type]
    threading.Timer(0.2, RELEASE.set).start()
    with pytest.raises(SparkStartError, match="no driver for bad://x"):
        session.spark_session("bad://x")
    assert opened == [("bad://x", "spark-start")]


def test_stopping_the_sessions_forgets_a_start_no_run_took_without_waiting_for_it(
    opened: list[tuple[str, str]],
) -> None:
    session.start_in_background(SimpleNamespace(spark_master="local[2]"))  # type: ignore[arg-type]
    ((starting, _),) = session._starting.values()
    session.stop_sessions()  # a run that failed while planning: its error is not held up by the JVM's start
    assert not starting.done() and session._starting == {}
    RELEASE.set()
    session.spark_session("local[2]")  # a later caller opens the session itself (here after the start is up)
    assert opened[1:] == [("local[2]", threading.current_thread().name)]


def test_a_background_starts_output_waits_until_the_run_takes_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import os
    import time

    written: list[bytes] = []
    monkeypatch.setattr(session, "_write_stderr", written.append)
    caplog.set_level(logging.INFO, logger=session.log.name)
    held = session._Held()
    read, write = os.pipe()
    held.relay(os.fdopen(read, "rb"))  # as a JVM's stderr pipe

    def start() -> None:  # what a background start logs, from its own thread, whichever module logs it
        session._background.held = held
        session.log.info("spark: starting a driver for master %s", "local[2]")
        session.log.info("spark: driver up")

    starting = threading.Thread(target=start)
    starting.start()
    starting.join()
    session.log.info("spark: not a start's")  # the caller's own thread logs as ever
    os.write(write, b"jvm: first\n")
    deadline = time.monotonic() + 10
    while not held._lines and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held._lines == [b"jvm: first\n"]
    assert written == [] and [r.getMessage() for r in caplog.records] == ["spark: not a start's"]  # a run that fails
    held.show()  # now shows its own error alone
    assert written == [b"jvm: first\n"] and [r.getMessage() for r in caplog.records] == [
        "spark: not a start's",
        "spark: starting a driver for master local[2]",
        "spark: driver up",
    ]
    os.write(write, b"jvm: later\n")
    os.close(write)
    while len(written) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert written == [b"jvm: first\n", b"jvm: later\n"]  # once taken, lines pass as they come


def test_asking_again_while_a_start_is_under_way_does_not_wait_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`extract` asks twice (the command, then the window's run), and stops its sessions when it fails while planning:
    neither waits for the start under way (which holds the lock of starts), so the window is planned, or the error
    shown, while the JVM starts."""
    started, release = threading.Event(), threading.Event()

    def slow_create(master: str) -> Any:  # the JVM's start, inside the real _open
        started.set()
        release.wait(10)
        return SimpleNamespace(master=master, is_stopped=False, conf=SimpleNamespace(set=lambda key, value: None))

    monkeypatch.setattr(session, "_create", slow_create)
    monkeypatch.setattr(session, "_starting", {})
    monkeypatch.setattr(session, "_sessions", {})
    session.start_in_background(SimpleNamespace(spark_master="local[2]"))  # type: ignore[arg-type]
    assert started.wait(10)
    again = threading.Thread(target=session.start_in_background, args=(SimpleNamespace(spark_master="local[2]"),))
    again.start()
    again.join(5)
    stop = threading.Thread(target=session.stop_sessions)
    stop.start()
    stop.join(5)
    waited = again.is_alive(), stop.is_alive()
    release.set()
    assert waited == (False, False)
    assert session.spark_session("local[2]").master == "local[2]"  # the start, up by now, is the process's session


def test_a_command_stops_the_sessions_it_opened_and_leaves_its_callers_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run by `main` in a process that already had a session (a caller's: the test suite's) leaves that one
    open, under every master it answered for, and stops the ones it opened; the stopped ones' sources are forgotten."""
    from spanner_cdc.spark import registry

    class Fake:
        def __init__(self) -> None:
            self.is_stopped = False
            self.dataSource = SimpleNamespace(register=lambda source: None)

        def stop(self) -> None:
            self.is_stopped = True

    class Source:
        @staticmethod
        def name() -> str:
            return "fake_source"

    callers, ours = Fake(), Fake()
    monkeypatch.setattr(session, "_starting", {})
    monkeypatch.setattr(session, "_sessions", {"local[2]": callers})
    monkeypatch.setattr(registry, "_registered", set())
    kept = session.live_sessions()
    assert kept == [callers]
    session._sessions.update({"local[1]": callers, "sc://127.0.0.1:1": ours})  # the command's master, its Connect session
    registry.register(callers, Source)
    registry.register(ours, Source)
    session.stop_sessions(keep=kept)
    assert (callers.is_stopped, ours.is_stopped) == (False, True)
    assert session._sessions == {"local[2]": callers, "local[1]": callers}
    assert registry._registered == {(id(callers), "fake_source")}
    session.stop_sessions()  # the caller's own stop, at its end: everything
    assert callers.is_stopped and session._sessions == {} and registry._registered == set()


def test_a_session_is_still_starting_only_while_its_background_start_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the run uses to fill its wait for the driver's JVM (the close's Iceberg imports), and only then."""
    from concurrent.futures import Future

    from spanner_cdc.settings import Settings

    future: Future[object] = Future()
    monkeypatch.setattr(session, "_starting", {"local[2]": (future, None)})
    assert session.still_starting(Settings(spark_master="local[2]"))
    assert not session.still_starting(Settings(spark_master="local[1]"))  # nothing starting for that master
    future.set_result(object())
    assert not session.still_starting(Settings(spark_master="local[2]"))
