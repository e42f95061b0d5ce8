"""Start a standalone Spark master + worker and a Spark Connect server from the pyspark wheel, on loopback."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from spanner_cdc.errors import SpannerCdcError
from spanner_cdc.spark.session import JIT_OPTIONS

log = logging.getLogger(__name__)

# The JVMs started here (a Connect server, a standalone master and its workers) live for a run of tests, a bench or a
# dev session, not for months: the drivers' JIT thresholds (spark/session.py) and the serial collector, which on a
# small heap spends a fraction of G1's CPU. A Connect server's JVM CPU over `test_extract_crash.py`: 36.8 s -> 23.7 s.
DEV_JAVA_OPTIONS = f"{JIT_OPTIONS} -XX:+UseSerialGC"

HOST = "127.0.0.1"
START_TIMEOUT_S = 120.0


def spark_home() -> Path:
    """The pyspark package directory holds bin/, sbin/ and jars/: a complete Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def spark_env(work_dir: Path, python: str = sys.executable, home: Path | None = None) -> dict[str, str]:
    """The environment of the JVMs started here: `python` is the cluster's Python, the `python3` first on its PATH
    (Spark's default for executors when the driver names none) and its PYSPARK_PYTHON."""
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(home or spark_home()),
            "PATH": os.pathsep.join([str(Path(python).parent), env.get("PATH", os.defpath)]),
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(work_dir / "logs"),
            "SPARK_PID_DIR": str(work_dir),
            "SPARK_WORKER_DIR": str(work_dir / "worker"),
            # no fixed-port REST submission server next to the master
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
    )
    env.pop("SPARK_CONF_DIR", None)
    return env


class SparkProcess:
    """One Spark JVM started by this process, in its own process group, logging to a file."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - kept open for the process's life
        self.process = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.info("spark: started %s (pid %s), log %s", name, self.process.pid, log_path)

    def wait_for(self, text: str, timeout: float = START_TIMEOUT_S) -> None:
        """Block until `text` appears in the log (the JVM says it is up); fail if the process dies first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_path.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        tail = self.log_path.read_text(errors="replace")[-3000:]
        self.stop()
        raise SpannerCdcError(f"spark: {self.name} did not start (waiting for {text!r}); log tail:\n{tail}")

    def stop(self) -> None:
        """SIGTERM the process group we created (the launcher scripts exec or fork the JVM), then SIGKILL."""
        if self.process.poll() is None:
            for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._log.close()


class _Launched:
    def __init__(self, work_dir: Path | None, python: str = sys.executable, home: Path | None = None) -> None:
        self._tmp = None if work_dir is not None else tempfile.TemporaryDirectory(prefix="spanner-cdc-spark-")
        self.work_dir = Path(work_dir) if work_dir is not None else Path(self._tmp.name)  # type: ignore[union-attr]
        self.home = home or spark_home()
        self.env = spark_env(self.work_dir, python, self.home)
        self.processes: list[SparkProcess] = []

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StandaloneCluster(_Launched):
    """A master and `workers` workers (`cores`, `memory` each) on loopback: `master_url` is spark://127.0.0.1:<port>.

    Each worker has directories of its own (SPARK_WORKER_DIR, SPARK_LOCAL_DIRS under `worker-<n>/`), shared
    with no other worker nor the driver; `env` adds to the workers' environment (e.g. an object store's endpoint).
    `python` is the cluster's Python (`spark_env`), `home` the Spark distribution the JVMs run from (pyspark's
    package directory; by default this process's), and the workers run in a filesystem view of their own without
    the `hidden` directories (each covered by an empty tmpfs under `unshare --mount`; needs root), as a worker on
    another machine sees none of the driver's files.
    """

    def __init__(
        self, *, cores: int = 1, memory: str = "1g", work_dir: Path | None = None, workers: int = 1,
        env: dict[str, str] | None = None, python: str = sys.executable, home: Path | None = None,
        hidden: Sequence[Path] = (),
    ) -> None:  # fmt: skip
        super().__init__(work_dir, python, home)
        self.hidden = [str(path) for path in hidden]
        self.port = free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.worker_dirs: list[Path] = []
        self.env["SPARK_DAEMON_JAVA_OPTS"] = DEV_JAVA_OPTIONS  # spark-class gives them to the master's and workers' JVMs
        try:
            master = SparkProcess(
                "standalone master",
                [str(self.home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", HOST, "--port", str(self.port), "--webui-port", str(free_port())],
                self.env,
                self.work_dir / "logs" / "master.log",
            )  # fmt: skip
            self.processes.append(master)
            master.wait_for("I have been elected leader")
            for number in range(workers):
                self._start_worker(number, cores, memory, env or {})
        except BaseException:
            self.stop()
            raise

    def _start_worker(self, number: int, cores: int, memory: str, extra_env: dict[str, str]) -> None:
        # one worker keeps the original layout (work_dir/worker); more get worker-<n>/ each
        base = self.work_dir / ("worker" if number == 0 else f"worker-{number}")
        local = base / "local"
        local.mkdir(parents=True, exist_ok=True)
        env = {**self.env, **extra_env, "SPARK_WORKER_DIR": str(base), "SPARK_LOCAL_DIRS": str(local), "TMPDIR": str(local)}
        command = [str(self.home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", self.master_url,
                   "--host", HOST, "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                   "--work-dir", str(base)]  # fmt: skip
        log_path = self.work_dir / "logs" / f"worker-{number}.log"
        worker = SparkProcess(f"standalone worker {number}", hiding(self.hidden, command), env, log_path)
        self.processes.append(worker)
        worker.wait_for("Successfully registered with master")
        self.worker_dirs.append(base)


# the mount namespace's first process mounts an empty tmpfs over each hidden directory, then becomes the command
_HIDE = 'while [ "$1" != -- ]; do mount -t tmpfs -o size=1m,mode=0755 hidden "$1" || exit 1; shift; done; shift; exec "$@"'


def hiding(hidden: Sequence[str], command: list[str]) -> list[str]:
    """`command` in a mount namespace of its own where the `hidden` directories are empty (the same pid: nothing forks)."""
    if not hidden:
        return command
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HIDE, "sh", *hidden, "--", *command]


class ConnectServer(_Launched):
    """`sbin/start-connect-server.sh --wait` in the foreground on loopback: `url` is sc://127.0.0.1:<port>.

    `master` is where the server runs its jobs: local[N] by default, or a standalone cluster's URL; `env` adds
    to the server's environment, which its local executors inherit (e.g. an object store's endpoint). `python`,
    `home` and `hidden` as StandaloneCluster's (the server's Python, its Spark, what its filesystem view lacks).
    """

    def __init__(
        self, *, master: str = "local[2]", work_dir: Path | None = None, conf: dict[str, str] | None = None,
        env: dict[str, str] | None = None, python: str = sys.executable, home: Path | None = None,
        hidden: Sequence[Path] = (),
    ) -> None:  # fmt: skip
        super().__init__(work_dir, python, home)
        self.env.update(env or {})
        self.port = free_port()
        self.url = f"sc://{HOST}:{self.port}"
        settings = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.pyspark.python": python,
            "spark.python.worker.reuse": "true",
            "spark.driver.defaultJavaOptions": DEV_JAVA_OPTIONS,  # as classic_conf: before any extraJavaOptions
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
            **(conf or {}),
        }
        command = [str(self.home / "sbin" / "start-connect-server.sh"), "--wait", "--master", master]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        try:
            hidden_paths = [str(path) for path in hidden]
            log_path = self.work_dir / "logs" / "connect.log"
            server = SparkProcess("Spark Connect server", hiding(hidden_paths, command), self.env, log_path)
            self.processes.append(server)
            server.wait_for("Spark Connect server started")
        except BaseException:
            self.stop()
            raise
