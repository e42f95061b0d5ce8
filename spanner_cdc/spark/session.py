"""Spark sessions for the three run modes chosen by the master URL: local[*], spark:// standalone, sc:// Connect."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from spanner_cdc import names
from spanner_cdc.compat import pyspark as pyspark_compat
from spanner_cdc.errors import ConfigError, SparkStartError
from spanner_cdc.masking import mask_spark_master
from spanner_cdc.spark import registry, shipping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)

APP_NAME = "spanner-cdc-extract"
LOCAL, STANDALONE, CONNECT = "local", "standalone", "connect"
LOOPBACK = ("127.0.0.1", "localhost", "::1")

# SQL settings every token job relies on; runtime settings, so they apply to Connect sessions too.
RUNTIME_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # the lake contract: timestamps are microseconds, UTC-adjusted (Spark's default is INT96)
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # write each table's rows as they stream in (one open file per table) instead of sorting the task's
    # output by table first, which would buffer and spill the whole token before writing anything
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "64",
}


def run_mode(master: str) -> str:
    if master.startswith("sc://"):
        return CONNECT
    if master.startswith("local"):
        return LOCAL
    return STANDALONE  # a classic driver here, executors elsewhere: spark://, yarn, k8s:// (handed to Spark as they are)


# Spark's default console logging prints INFO/WARN lines about its own startup on every command run.
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def log4j2_config() -> Path:
    """A quiet log4j2 configuration for in-process drivers (errors only), written once per machine."""
    path = Path(tempfile.gettempdir()) / "spanner-cdc-spark-log4j2.properties"
    if not path.exists() or path.read_text() != LOG4J2:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(LOG4J2)
        os.replace(tmp, path)
    return path


# The driver JVM's optimizing compiler (C2) takes a method only after 10x the calls and loops it takes by default: a
# driver lives for one extract, and C2 otherwise spends much of its JVM's CPU compiling code that runs a few thousand
# times; C1 still compiles hot code early (`python -m bench.bench_check`, `python -m bench.bench_scale`).
JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)


def classic_conf(master: str) -> dict[str, str]:
    """Static settings of an in-process driver (local, or against a standalone, YARN or Kubernetes master)."""
    conf = {
        # Spark puts these defaults before the driver's and the executors' extraJavaOptions, so options a user set there
        # (spark-defaults.conf) still apply, after ours; a standalone cluster's executors live for one extract too
        "spark.driver.defaultJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j2_config()} {JIT_OPTIONS}",
        "spark.executor.defaultJavaOptions": JIT_OPTIONS,
        "spark.python.worker.reuse": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    }
    host = urlparse(master).hostname if master.startswith("spark://") else "127.0.0.1"
    if host in LOOPBACK:
        # a loopback cluster's executors must reach the driver on loopback too
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if run_mode(master) == LOCAL:
        # local executors run the data source with this interpreter, which has the package installed; a cluster's
        # executors use the cluster's or the user's spark.pyspark.python (spark-defaults.conf, which this would
        # override), else PYSPARK_PYTHON, and get the package by spark_py_files
        conf["spark.pyspark.python"] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
    if master.startswith("spark://"):
        conf["spark.executor.memory"] = "1g"
    conf.update(shipping.classic_conf())
    return conf


_lock = threading.Lock()  # the dicts below
_creating = threading.Lock()  # held while a session is created
_sessions: dict[str, SparkSession] = {}
_starting: dict[str, tuple[Future[SparkSession], _Held]] = {}


def _alive(session: SparkSession) -> bool:
    stopped = getattr(session, "is_stopped", None)
    if stopped is not None:
        return not stopped
    return pyspark_compat.context_running(session.sparkContext)


def spark_session(settings: Settings | str) -> SparkSession:
    """The process's session for the master in `settings` (created once, then reused by every token job).

    For local and standalone masters an already running classic session of this process is reused
    (the test suite's single local session); Connect sessions are per server URL. A session that
    `start_in_background` is starting is waited for (its start's error is raised here).
    """
    master = settings if isinstance(settings, str) else settings.spark_master
    with _lock:
        starting = _starting.pop(master, None)
    if starting is not None:
        future, held = starting
        held.show()
        started = future.result()
        if _alive(started):  # not stopped since (stop_sessions)
            return started
    return _open(master)


def still_starting(settings: Settings) -> bool:
    """Whether `start_in_background` is starting this process's session for the master in `settings`, not up yet."""
    with _lock:
        starting = _starting.get(settings.spark_master)
    return starting is not None and not starting[0].done()


class _Held:
    """What a start in the background shows (its log records, its JVM's stderr), held until the run takes the session:
    a run that fails while planning shows its own error alone. Once shown, later output passes as it comes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shown = False
        self._records: list[logging.LogRecord] = []
        self._lines: list[bytes] = []

    def hold(self, record: logging.LogRecord) -> bool:
        """Whether the record may pass now; if not, it is kept for `show`."""
        with self._lock:
            if not self._shown:
                self._records.append(record)
            return self._shown

    def relay(self, stream: Any) -> None:
        """Pass on (or hold) the lines of a child's stderr pipe, in a thread of its own until the pipe closes."""

        def run() -> None:
            with stream:
                for line in iter(stream.readline, b""):
                    with self._lock:
                        if self._shown:
                            _write_stderr(line)
                        else:
                            self._lines.append(line)

        threading.Thread(target=run, name="spark-stderr", daemon=True).start()

    def show(self) -> None:
        with self._lock:
            self._shown = True
            for record in self._records:
                logging.getLogger(record.name).handle(record)
            for line in self._lines:
                _write_stderr(line)
            self._records, self._lines = [], []


def _write_stderr(line: bytes) -> None:
    stream = sys.stderr
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        buffer.write(line)
    else:
        stream.write(line.decode(errors="replace"))
    stream.flush()


_background = threading.local()  # .held: the _Held of the start this thread runs


class _HoldBackground(logging.Filter):
    """On the loggers of a start's modules: a record logged by a background start's thread waits in its _Held
    (whichever module logs it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        held = getattr(_background, "held", None)
        return held is None or held.hold(record)


log.addFilter(_HoldBackground())


def start_in_background(settings: Settings) -> None:
    """Begin the session for the master in `settings` in a thread of its own, so that what the caller does next
    (planning a window: imports, queries, the store) overlaps a driver JVM's start (~2.5 s); `spark_session` takes it.

    The same session, started the same way, except: a JVM started from this thread is spawned in a session of its
    own (a Ctrl-C at the terminal does not reach it, as pyspark's own start ignores SIGINT), and what the start shows
    waits for `spark_session` (a run that never takes it, failing while planning, shows one line: its error).
    """
    master = settings.spark_master
    with _lock:
        session = _sessions.get(master)
        if master in _starting or (session is not None and _alive(session)):
            return
        future: Future[SparkSession] = Future()
        held = _Held()
        _starting[master] = (future, held)

    def start() -> None:
        _background.held = held
        try:
            future.set_result(_open(master))
        except BaseException as exc:  # handed to spark_session's caller
            future.set_exception(exc)

    threading.Thread(target=start, name="spark-start", daemon=True).start()


def _open(master: str) -> SparkSession:
    with _creating:  # one start at a time; _lock is only ever held briefly, so nothing else waits for a JVM
        with _lock:
            session = _sessions.get(master)
        connect = run_mode(master) == CONNECT
        if connect:
            _stop_classic_driver(master)
        if session is not None and _alive(session):
            if connect:  # a classic driver started since this session was made dropped pyspark's marker of Connect,
                os.environ[names.SPARK_CONNECT_MODE] = "1"  # which its DataFrame functions ask (without it they build classic Columns)
            return session
        session = _create(master)
        set_runtime_conf(session)
        with _lock:
            _sessions[master] = session
        return session


def _stop_classic_driver(master: str) -> None:
    """One process, one kind of Spark: pyspark refuses a Connect session while this process runs a classic driver
    (SESSION_ALREADY_EXIST), so a driver started here for an earlier local or standalone master is stopped first."""
    if pyspark_compat.active_context() is None:
        return
    log.info("spark: stopping this process's driver before connecting to %s", mask_spark_master(master))
    with _lock:
        classic = [other for other in _sessions if run_mode(other) != CONNECT]
        stopping = [_sessions.pop(other) for other in classic]
    for session in stopping:
        session.stop()
    running = pyspark_compat.active_context()
    if running is not None:
        running.stop()


def _create(master: str) -> SparkSession:
    from pyspark.sql import SparkSession

    if run_mode(master) == CONNECT:
        log.info("spark: connecting to Spark Connect server %s", mask_spark_master(master))
        session = SparkSession.builder.remote(master).appName(APP_NAME).getOrCreate()
        shipping.ship_to_connect(session)
        return session
    drop_connect_markers()  # before asking pyspark for the active session: with a marker it answers with Connect's
    active = SparkSession.getActiveSession()
    if active is not None and is_classic(active) and _alive(active):
        return active
    log.info("spark: starting a driver for master %s", master)
    workers_run_this_python()
    return start_driver(master, APP_NAME)


def set_runtime_conf(session: Any) -> None:
    for key, value in RUNTIME_CONF.items():
        session.conf.set(key, value)


def workers_run_this_python() -> None:
    """Spark starts the data source's planner process from PYSPARK_PYTHON, not from spark.pyspark.python: without
    it, that process is whatever `python3` is first on PATH, which lacks the package."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


JVM_START_ATTEMPTS = 2  # a JVM that dies on start under load usually starts on the next try
JVM_HINT = (
    "check that JAVA_HOME names a Java 17 runtime (or is unset, with `java` on PATH) and that the machine "
    "has free memory for the driver (spark.driver.memory / SPARK_DRIVER_MEMORY, default 1g)"
)


def check_java(master: str) -> None:
    """A local or standalone driver is a JVM started here: refuse at once when there is no java to start."""
    if run_mode(master) == CONNECT:
        return
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise ConfigError(
                "JAVA_HOME", java_home, "the directory of a Java 17 runtime (with bin/java), or unset to use java on PATH"
            )
    elif shutil.which("java") is None:
        raise SparkStartError(f"Spark needs Java for master {master}: no `java` on PATH and JAVA_HOME is unset; "
                              "install a Java 17 runtime or set JAVA_HOME to one")  # fmt: skip


# Either marker makes the classic builder refuse (CONNECT_URL_NOT_SET) or connect somewhere else, although the master
# asked for a local or standalone driver.
CONNECT_MARKERS = names.SPARK_CONNECT_MARKERS


def drop_connect_markers() -> None:
    """The master decides: the Connect markers are dropped for good, since pyspark keeps asking them after the start
    (with the marker back, a classic process's DataFrame calls try to start a remote session)."""
    for name in CONNECT_MARKERS:
        os.environ.pop(name, None)


def classic_session(master: str, app_name: str) -> SparkSession:
    """A classic driver's SparkSession for `master` with classic_conf (or this process's running one)."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    drop_connect_markers()
    settings = classic_conf(master)
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    session = SparkSession.builder.config(conf=conf).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def is_classic(session: Any) -> bool:
    """A session of this process's own driver, not a Connect session (which pyspark may hand out as the active one)."""
    return not type(session).__module__.startswith("pyspark.sql.connect")


def spark_cores(session: Any) -> int | None:
    """The cores Spark runs this session's tasks on, when it says: a classic driver's default parallelism, or the
    N of a Connect server's local[N] master; None otherwise (a Connect server's cluster, or local[*] elsewhere)."""
    if is_classic(session):
        return int(session.sparkContext.defaultParallelism)
    try:
        master = session.conf.get("spark.master", None)
    except Exception as exc:  # noqa: BLE001 - an older server's refusal: the cores are unknown, not an error
        log.debug("spark: the Connect server's master is unknown: %s", exc)
        return None
    return local_cores(master)


def local_cores(master: str | None) -> int | None:
    """N of a `local[N]` or `local[N,retries]` master, 1 of `local`, None for any other."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\d+)(?:,\s*\d+)?\]", master or "")
    return int(match.group(1)) if match else None


def start_driver(master: str, app_name: str) -> SparkSession:
    """A classic driver's SparkSession (`classic_session`), started once more when the JVM exits before it is up;
    then one line that says what to check."""
    from pyspark.errors import PySparkRuntimeError

    for attempt in range(1, JVM_START_ATTEMPTS + 1):
        try:
            with pyspark_compat.gateway_popen(spawn_ignoring_sigint):
                return classic_session(master, app_name)
        except PySparkRuntimeError as exc:
            if exc.getCondition() != "JAVA_GATEWAY_EXITED":
                raise
            if attempt < JVM_START_ATTEMPTS:
                log.warning("spark: the driver JVM for %s exited while starting; starting it once more", master)
    raise SparkStartError(
        f"Spark's driver JVM for master {master} exited while starting ({JVM_START_ATTEMPTS} tries; "
        f"its own messages, if any, are above): {JVM_HINT}"
    )


# pyspark starts spark-submit with a preexec_fn (it keeps Ctrl-C away from the JVM). A preexec_fn makes Python
# fork() instead of vfork(), and fork() runs gRPC's fork handlers in the child: while the Spanner client's gRPC
# threads are busy, a few children in a hundred abort there, before exec, so no JVM ever starts and pyspark
# reports JAVA_GATEWAY_EXITED. Spawned without a preexec_fn, no fork handler runs; SIGINT is ignored in this
# process around the spawn instead (a Ctrl-C in those milliseconds is lost), which the child inherits through exec.
def spawn_ignoring_sigint(args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Popen without preexec_fn; the child starts with SIGINT ignored when this is the main thread (only it may
    change handlers); from another thread the child starts in a session of its own, out of the terminal's reach
    (it still exits with this process: Spark's gateway ends when its stdin closes)."""
    kwargs.pop("preexec_fn", None)
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        held = getattr(_background, "held", None)
        if held is None or "stderr" in kwargs:
            return subprocess.Popen(args, start_new_session=True, **kwargs)
        child = subprocess.Popen(args, start_new_session=True, stderr=subprocess.PIPE, **kwargs)
        held.relay(child.stderr)
        return child
    if handler is None:
        return subprocess.Popen(args, **kwargs)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.Popen(args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, handler)


def ensure_source_registered(session: SparkSession) -> None:
    """Register the `spanner_change_stream`, `spanner_snapshot` and `spanner_current_state` data sources once per session."""
    from spanner_cdc.spark.datasource import SpannerChangeStreamDataSource
    from spanner_cdc.spark.snapshot_job import SpannerSnapshotDataSource
    from spanner_cdc.spark.state_job import StateDataSource

    registry.register(session, SpannerChangeStreamDataSource, SpannerSnapshotDataSource, StateDataSource)


def live_sessions() -> list[SparkSession]:
    """The sessions this process has open now: a command run in a process that already had them (a caller of `main`
    in its own process, such as the test suite) leaves these running when it ends (`stop_sessions(keep=...)`)."""
    with _lock:
        return [session for session in _sessions.values() if _alive(session)]


def stop_sessions(keep: Sequence[SparkSession] = ()) -> None:
    """Stop the sessions this process created (a Connect session only disconnects; the server lives on), except
    those in `keep` (by identity: the ones the process had before a command started, which are its caller's).

    A start no run took (a run that failed while planning, or found nothing to extract) is not waited for: it is
    forgotten, with what it would have shown, and its driver ends with this process (Spark's gateway exits when its
    stdin closes); in a process that goes on, it becomes the process's session as any start does."""
    keep = [session for session in keep if _alive(session)]
    with _lock:
        _starting.clear()
        stopping = [(master, session) for master, session in _sessions.items() if not any(session is k for k in keep)]
        for master, _ in stopping:
            del _sessions[master]
    registry.forget(keep)
    for master, session in stopping:
        try:
            _stop(session)
        except Exception as exc:  # stopping is best effort at exit
            log.debug("spark: stopping the session for %s failed: %s", master, exc)


def _stop(session: SparkSession) -> None:
    session.stop()
