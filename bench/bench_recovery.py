"""Benchmark: time from the SIGKILL of `spanner-cdc extract` to the window's marker on the re-run, lease-only vs liveness."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from bench.extract_support import (
    INSTANCE,
    PROJECT,
    STREAM,
    bench_store,
    new_database,
    policy_args,
    window_after,
    write_orders,
)
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.failpoints import FAILPOINT_ENV
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.settings import Settings, env_name, subprocess_env

LEASE_ENV, LIVENESS_ENV = env_name("lease_s"), env_name("liveness")

COMMAND = "python -m bench.bench_recovery"
REPO = Path(__file__).resolve().parents[1]
MARKER_POLL_S = 0.05
# before: claims freed by their lease only, the default 300 s lease cut to this so the bench stays short;
# after: liveness, with the default lease (it is never waited for)
BEFORE_LEASE_S = 30
MODES: dict[str, dict[str, str]] = {
    "before (lease only, lease cut to 30 s)": {LIVENESS_ENV: "lease", LEASE_ENV: str(BEFORE_LEASE_S)},
    "after (liveness, default 300 s lease)": {LIVENESS_ENV: "lock"},
}


def _command(start: datetime, end: datetime) -> list[str]:
    return [sys.executable, "-m", "spanner_cdc", "extract", "--window-start", start.isoformat(),
            "--window-end", end.isoformat(), "--json"]  # fmt: skip


def kill_then_rerun(settings: Settings, start: datetime, end: datetime, env: dict[str, str]) -> float:
    """Seconds from the first run's SIGKILL (at a failpoint, tokens claimed) to the marker written by the re-run."""
    killed = subprocess.run(
        _command(start, end), env=subprocess_env(settings, **env, **{FAILPOINT_ENV: "after_job:1"}), cwd=REPO,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if killed.returncode != -signal.SIGKILL:
        raise SystemExit(f"the first run was not killed at its failpoint (exit {killed.returncode}):\n{killed.stderr[-3000:]}")
    died = time.perf_counter()
    marker = LakeLayout(settings.output_root, STREAM, settings.namespace).marker_path(start, end)
    rerun = subprocess.Popen(_command(start, end), env=subprocess_env(settings, **env), cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    while not marker.exists() and rerun.poll() is None:
        time.sleep(MARKER_POLL_S)  # polling the file the re-run writes last
    landed = time.perf_counter()
    _, err = rerun.communicate(timeout=600)
    if rerun.returncode != 0 or not marker.exists():
        raise SystemExit(f"the re-run did not complete the window (exit {rerun.returncode}):\n{err[-3000:]}")
    return landed - died


def measure(base: Settings, rounds: int, tmp: Path) -> dict[str, list[float]]:
    """Interleaved rounds, each on a fresh lineage namespace of the same window."""
    from spanner_cdc.source.client import stream_metadata

    with LocalSpanner(extra_args=policy_args(2), log_path=tmp / "server.log") as server:
        database = new_database(server)
        created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
        assert created is not None
        end = window_after(write_orders(database, 200, spread=2**58 // 200))
        results: dict[str, list[float]] = {mode: [] for mode in MODES}
        for round_ in range(rounds):
            for n, (mode, env) in enumerate(MODES.items()):
                settings = dataclasses.replace(
                    base, database=database.database_id, emulator_host=server.host, namespace=f"r{round_}m{n}"
                )
                seconds = kill_then_rerun(settings, created, end, env)
                results[mode].append(seconds)
                print(f"  round {round_ + 1}, {mode}: {seconds:.1f} s", flush=True)
    return results


def report(results: dict[str, list[float]], spark: str) -> None:
    print(f"SIGKILL of `spanner-cdc extract` at a failpoint (tokens claimed) -> window marker on the re-run ({spark}):")
    medians = {mode: statistics.median(values) for mode, values in results.items()}
    for mode, values in results.items():
        print(f"  {mode}: median {medians[mode]:.1f} s  (rounds: {', '.join(f'{v:.1f}' for v in values)})")
    before, after = medians.values()
    print(f"  after / before: {after / before:.2f} (before waits out what is left of its {BEFORE_LEASE_S} s lease; "
          "with the default lease that is up to 300 s)")
    print(f"  command: {COMMAND}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per mode; medians are reported (default 2)")
    args = parser.parse_args(argv)
    from spanner_cdc.devstack.spark_cluster import ConnectServer

    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as name:
        tmp = Path(name)
        with bench_store(tmp) as url:
            # one Spark Connect server for every run: a JVM start per process would swamp the difference
            with ConnectServer(master="local[2]", work_dir=tmp / "connect") as connect:
                base = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "lake",
                                heartbeat_ms=1000, home=tmp / "home", spark_master=connect.url, concurrency=2)  # fmt: skip
                results = measure(base, args.rounds, tmp)
    report(results, "Spark Connect, local[2]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
