"""Test helper of the fault campaigns: a past history that splits and merges, extract runs to kill, secret scans."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.failpoints import FAILPOINT_ENV

HOUR = dt.timedelta(hours=1)
PROJECT, INSTANCE = "local-project", "local-instance"
CHANGE_STREAM = "campaign_stream"
SPANNER_CDC = str(Path(sys.executable).with_name("spanner-cdc"))
REPO = Path(__file__).resolve().parents[3]


def server_now(server: LocalSpanner) -> dt.datetime:
    return dt.datetime.fromisoformat(str(server.control.status()["now"]).replace("Z", "+00:00"))


def wait_for_server_time(server: LocalSpanner, when: dt.datetime, rate: float) -> None:
    """Sleep (real time) until the accelerated server clock has passed `when`."""
    while (now := server_now(server)) < when:
        time.sleep(min(5.0, max(0.05, (when - now).total_seconds() / rate)))


@dataclass(frozen=True)
class History:
    """`hours` whole past hours of workload on a server whose clock now runs at real time, after them."""

    server: LocalSpanner
    database: str
    windows: list[tuple[dt.datetime, dt.datetime]]
    ground_truth: Path
    transactions: int


@contextmanager
def past_history(
    root: Path, *, hours: int, transactions: int, seed: int, workload_seconds: float,
    lead: dt.timedelta = dt.timedelta(minutes=30),
) -> Iterator[History]:
    """The workload over `hours` windows that end at the wall clock's last whole hour (earlier when the set-up took
    less than `lead` of server time), written at an accelerated
    clock while the server's default policy splits and merges partitions (every 20 server minutes; the
    policy's seed is `seed`); then the server runs at real time, past the last window."""
    from spanner_cdc.devstack import workload
    from spanner_cdc.devstack.spanner_server import create_database

    last_hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    # the stream exists before the first window: `lead` of server time covers the server's start and the schema set-up
    # at the accelerated rate: a set-up past it would put the windows in the wall clock's future
    clock_start = last_hour - hours * HOUR - lead
    rate = hours * 3600 * 0.9 / workload_seconds  # the workload ends inside the last window
    data = root / "spanner"
    server = LocalSpanner(data_dir=data, clock_start=clock_start, clock_rate=rate, log_path=root / "local-spanner.log",
                          extra_args=["--policy-seed", str(seed)])  # fmt: skip
    with server:
        database = create_database(server.host, PROJECT, INSTANCE, "campaign")
        workload.setup_database(database, "GOOGLE_STANDARD_SQL", CHANGE_STREAM, "OLD_AND_NEW_VALUES")
        now = server_now(server)
        first = now.replace(minute=0, second=0, microsecond=0) + HOUR
        windows = [(first + k * HOUR, first + (k + 1) * HOUR) for k in range(hours)]
        wait_for_server_time(server, first, rate)
        truth = root / "ground_truth.jsonl"
        workload.run_workload(database, transactions=transactions, tx_per_second=transactions / workload_seconds,
                              seed=seed, ground_truth=truth)  # fmt: skip
        wait_for_server_time(server, windows[-1][1] + dt.timedelta(minutes=1), rate)
        # Real time from here on (the clock resumes where it was): at the accelerated rate the history would
        # leave the stream's one-day retention while the campaign runs.
        server.clock_start, server.clock_rate = None, 1.0
        server.restart()
        yield History(server, "campaign", windows, truth, transactions)


@dataclass
class Run:
    """One `spanner-cdc extract` process; its output goes to files (they are scanned for the password)."""

    label: str
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    started: float
    killed: bool = False
    in_flight: bool = False  # killed while it held a claimed token
    stopped: bool = False  # killed while stopped at one of its failpoints (SPANNER_CDC_FAILPOINT's "stop")
    returncode: int | None = None
    elapsed_s: float = 0.0

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill_group(self) -> bool:
        """SIGKILL the run's whole process group (the CLI and any child); False if it had already ended."""
        if self.process.poll() is not None:
            return False
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.killed = True
        return True

    def is_stopped(self) -> bool:
        """Whether the process is stopped (SIGSTOP at a failpoint): its state in /proc is T."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat[stat.rindex(")") + 2 :].startswith("T")

    def wait_stopped(self, timeout: float = 300) -> bool:
        """Poll until the process stops at a failpoint (True), or ends or the timeout passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if self.is_stopped():
                return True
            time.sleep(0.02)
        return False

    def resume(self) -> None:
        """SIGCONT a run stopped at a failpoint."""
        os.killpg(self.process.pid, signal.SIGCONT)

    def wait(self, timeout: float = 300) -> int:
        try:
            self.returncode = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            self.returncode = self.process.wait()
            raise AssertionError(f"{self.label} did not finish within {timeout:.0f} s; see {self.stderr}") from None
        self.elapsed_s = time.monotonic() - self.started
        return self.returncode

    def __str__(self) -> str:
        how = f"exit {self.returncode}"
        if self.killed:
            how = "killed" + (" at a failpoint" if self.stopped else "") + (" (token in flight)" if self.in_flight else "")
        return f"{self.label}: {how} after {self.elapsed_s:.1f} s"

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def summary(self) -> dict[str, Any] | None:
        text = self.stdout.read_text(errors="replace").strip()
        try:
            return dict(json.loads(text)) if text else None
        except json.JSONDecodeError:
            return None


@dataclass
class Extracts:
    """Starts `spanner-cdc extract` runs of the campaign's stream, each in a session of its own."""

    env: dict[str, str]
    logs: Path
    runs: list[Run] = field(default_factory=list)

    def start(self, window: tuple[dt.datetime, dt.datetime], label: str, failpoints: str = "") -> Run:
        """A run of the window; `failpoints` is its SPANNER_CDC_FAILPOINT (e.g. a point where it stops)."""
        n = len(self.runs)
        out, err = self.logs / f"{n:03d}-{label}.out", self.logs / f"{n:03d}-{label}.err"
        command = [SPANNER_CDC, "extract", "--window-start", window[0].isoformat(), "--window-end", window[1].isoformat(),
                   "--json"]  # fmt: skip
        with out.open("wb") as stdout, err.open("wb") as stderr:
            # a session of its own: the kill takes the whole group, and only it (not the Connect server)
            env = {**self.env, FAILPOINT_ENV: failpoints} if failpoints else self.env
            process = subprocess.Popen(command, env=env, cwd=REPO, stdout=stdout, stderr=stderr,
                                       stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        run = Run(f"{n:03d}-{label}", process, out, err, time.monotonic())
        self.runs.append(run)
        return run


def holds_claim(store_url: str, run: Run) -> bool:
    """Whether a token is RUNNING under a lease of this run's process (its owner names the pid)."""
    from spanner_cdc.errors import NotFound
    from spanner_cdc.store import MetadataStore

    with MetadataStore.connect(store_url) as store:
        try:
            lineage = store.get_lineage(CHANGE_STREAM, "live")
        except NotFound:
            return False
        return any(
            p.state == "RUNNING" and f":{run.pid}:" in (p.lease_owner or "") for p in store.partitions(lineage.id)
        )


def fail_reads(host: str, reads: int, after_rows: int) -> None:
    """UNAVAILABLE for the next `reads` change stream reads, through the CLI a user would call."""
    done = subprocess.run([SPANNER_CDC, "local-spanner", "fail", "--host", host, "--reads", str(reads),
                           "--after-rows", str(after_rows)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


def secret_forms(password: str) -> list[str]:
    """The password as a process might print it: as is, URL-quoted (both ways) and JSON-escaped."""
    forms = {password, quote(password, safe=""), quote(password), json.dumps(password)[1:-1]}
    return sorted(forms)


def files_containing(paths: Sequence[Path], secrets: Sequence[str]) -> list[str]:
    """Every file under `paths` (files or directories) whose bytes contain one of `secrets`."""
    needles = [s.encode() for s in secrets]
    hits = []
    for root in paths:
        candidates = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in candidates:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if any(n in data for n in needles):
                hits.append(str(path))
    return hits


def store_rows_containing(store_url: str, secrets: Sequence[str]) -> list[str]:
    """Tables of the store's schema with a row whose text contains one of `secrets` (e.g. an attempt's error)."""
    import sqlalchemy as sa

    engine = sa.create_engine(store_url)
    hits = []
    try:
        with engine.connect() as conn:
            tables = [r[0] for r in conn.execute(sa.text(
                "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'"))]  # fmt: skip
            for table in tables:
                for (text,) in conn.execute(sa.text(f"SELECT row_to_json(t)::text FROM {table} t")):
                    if any(s in text for s in secrets):
                        hits.append(f"{table}: {text[:200]}")
    finally:
        engine.dispose()
    return hits


def traceback_in(run: Run) -> bool:
    return "Traceback (most recent call last)" in run.err()
