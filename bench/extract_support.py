"""Helpers of bench_extract: servers, writes, per-mode worker processes and process-tree memory sampling."""

from __future__ import annotations

import cProfile
import io
import json
import logging
import os
import pstats
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.settings import Settings, subprocess_env


@contextmanager
def bench_store(tmp: Path) -> Iterator[str]:
    """An embedded Postgres under `tmp` holding a migrated metadata store: its URL, for the run."""
    from spanner_cdc.devstack.embedded_pg import ensure_running
    from spanner_cdc.store import MetadataStore

    postgres = ensure_running(tmp / "postgres")
    try:
        url = postgres.create_database("bench")
        with MetadataStore.connect(url) as store:
            store.upgrade()
        yield url
    finally:
        postgres.stop()


PROJECT, INSTANCE = "bench-project", "bench-instance"
STREAM = "Everything"
DDL = [
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount FLOAT64, Status STRING(MAX))"
    " PRIMARY KEY (OrderId)",
    "CREATE TABLE Lines (OrderId INT64 NOT NULL, LineNo INT64 NOT NULL, Sku STRING(MAX), Qty INT64)"
    " PRIMARY KEY (OrderId, LineNo)",
    "CREATE CHANGE STREAM Everything FOR ALL",
]


def policy_args(partitions: int) -> list[str]:
    """A fixed number of partitions that never split or merge, so every run reads the same tokens."""
    return [
        "--policy-initial-partitions", str(partitions), "--policy-min-partitions", str(partitions),
        "--policy-max-partitions", str(partitions), "--policy-split-records", "100000000",
        "--policy-event-every", "none", "--policy-merge-idle", "none",
    ]  # fmt: skip


def new_database(server: LocalSpanner) -> Any:
    # the client (and open_database) read SPANNER_EMULATOR_HOST: point it at this part's server
    os.environ["SPANNER_EMULATOR_HOST"] = server.host
    return create_database(server.host, PROJECT, INSTANCE, f"b{uuid.uuid4().hex[:12]}", DDL, "GOOGLE_STANDARD_SQL")


def write_orders(database: Any, transactions: int, *, first_id: int = 0, lines: int = 3, spread: int = 1) -> datetime:
    """Each transaction: one order and `lines` lines (two data change records); returns the last commit time.

    `spread` multiplies the ids so that consecutive orders land in different partitions' key ranges.
    """
    last: datetime | None = None
    for i in range(first_id, first_id + transactions):
        key = i * spread
        with database.batch() as batch:
            batch.insert("Orders", ("OrderId", "Customer", "Amount", "Status"), [(key, f"customer-{i % 97}", i * 1.25, "NEW")])
            if lines:
                batch.insert("Lines", ("OrderId", "LineNo", "Sku", "Qty"), [(key, n, f"sku-{(i * 7 + n) % 1000}", n + 1) for n in range(lines)])
        last = batch.committed
    assert last is not None
    return last


def bulk_rows(database: Any, rows: int, *, per_transaction: int = 500) -> datetime:
    """`rows` inserted Lines rows, `per_transaction` per commit: few big data change records, many lake rows."""
    last: datetime | None = None
    for start in range(0, rows, per_transaction):
        count = min(per_transaction, rows - start)
        with database.batch() as batch:
            batch.insert(
                "Lines", ("OrderId", "LineNo", "Sku", "Qty"), [(start + n, 0, f"sku-{(start + n) % 1000}-padding", n) for n in range(count)]
            )
        last = batch.committed
    assert last is not None
    return last




# the benchmark's --profile N: the driver's cProfile of the last window, its N costliest calls, in the run's log
PROFILE_ENV = "SPANNER_CDC_BENCH_PROFILE"


def run_windows_worker(windows: list[tuple[datetime, datetime]]) -> int:
    """In a fresh process (one run mode's driver): extract the windows in order, print their timings as JSON."""
    from spanner_cdc.extract.window import run_window
    from spanner_cdc.settings import load_settings
    from spanner_cdc.spark.session import spark_session, stop_sessions

    settings = load_settings({})
    # the pipeline's INFO lines (wave job and task times) go to stderr, which the spawning bench keeps
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    began = time.perf_counter()
    spark_session(settings)
    out: dict[str, Any] = {"session_s": time.perf_counter() - began, "windows": []}
    profile_top = int(os.environ.get(PROFILE_ENV) or 0)
    for n, (start, end) in enumerate(windows):
        profile = cProfile.Profile() if profile_top and n == len(windows) - 1 else None
        with profile or nullcontext():
            summary = run_window(settings, start, end)
        out["windows"].append({"elapsed_s": summary.elapsed_s, "tokens": summary.extracted_tokens,
                               "records": summary.records, "complete": summary.complete})  # fmt: skip
        if profile is not None:
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(profile_top)
            print(f"cProfile of the last window, driver side:\n{text.getvalue()}", file=sys.stderr)
    stop_sessions()
    print(json.dumps(out))
    return 0


def spawn_windows_worker(
    settings: Settings, windows: list[tuple[datetime, datetime]], *, log_path: Path | None = None, **env: str
) -> dict[str, Any]:
    """run_windows_worker in a fresh process; its log (stderr) is kept at `log_path` if given."""
    spec = json.dumps([[s.isoformat(), e.isoformat()] for s, e in windows])
    command = [sys.executable, "-m", "bench.bench_extract", "--windows-worker", spec]
    done = subprocess.run(command, env=subprocess_env(settings, **env), capture_output=True, text=True, timeout=3600)
    if log_path is not None:
        log_path.write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"windows worker for {settings.spark_master} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass
class TreeMemory:
    """Peak resident memory of a process and its descendants, sampled every `interval` seconds."""

    pid: int
    interval: float = 0.1
    peaks: dict[str, int] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)  # each process's CPU seconds when last seen
    _stop: threading.Event = field(default_factory=threading.Event)

    def _role(self, proc: Any) -> str:
        name = " ".join(proc.cmdline()[:3]) if proc.is_running() else ""
        if proc.pid == self.pid:
            return "driver (python)"
        if "java" in name:
            return "JVM"
        if "pyspark" in " ".join(proc.cmdline()) or "python" in name:
            return "python workers"
        return "other"

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        totals: dict[str, int] = {}
        for proc in procs:
            try:
                role = self._role(proc)
                rss = proc.memory_info().rss
                times = proc.cpu_times()
            except psutil.Error:
                continue
            self.cpu[proc.pid] = times.user + times.system
            totals[role] = totals.get(role, 0) + rss
            key = f"max one {role}"
            self.peaks[key] = max(self.peaks.get(key, 0), rss)
        totals["tree total"] = sum(totals.values())
        for role, rss in totals.items():
            self.peaks[role] = max(self.peaks.get(role, 0), rss)

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> TreeMemory:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def extract_with_memory(
    settings: Settings, start: datetime, end: datetime, *, log_path: Path | None = None, cwd: Path | None = None, **env: str
) -> tuple[dict[str, Any], dict[str, float]]:
    """`spanner-cdc extract --json` in a subprocess (its own Spark driver) with its process tree's peak memory; its log
    (stderr) is kept at `log_path` if given. The peaks also hold "tree cpu s": the CPU of the process and its descendants
    (its JVM, the JVM's Python workers) as last sampled, every 0.1 s. `cwd`: run it there (another tree's code, with its
    PYTHONPATH in `env`: `python -m` puts the working directory first on the path)."""
    command = [sys.executable, "-m", "spanner_cdc", "extract", "--window-start", start.isoformat(),
               "--window-end", end.isoformat(), "--json"]  # fmt: skip
    process = subprocess.Popen(
        command, env=subprocess_env(settings, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )
    with TreeMemory(process.pid) as memory:
        out, err = process.communicate(timeout=3600)
    if log_path is not None:
        log_path.write_text(err)
    if process.returncode != 0:
        raise SystemExit(f"extract failed:\n{err[-3000:]}")
    return json.loads(out), {**memory.peaks, "tree cpu s": sum(memory.cpu.values())}


def window_after(last_commit: datetime) -> datetime:
    """A window end just after the last commit (E - 1 µs = the last commit)."""
    return last_commit + timedelta(microseconds=1)


def mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def free_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
