"""Benchmark: metadata store claim+complete transitions per second on the embedded Postgres."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from spanner_cdc.source.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import Claim, ManifestFile, MetadataStore

COMMAND = "python -m bench.bench_store"
TARGET = 500.0  # claim+complete transitions per second (issue 5)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
WINDOW_END = T0 + timedelta(hours=1)
LAST = WINDOW_END - timedelta(microseconds=1)
SPLIT_AT = T0 + timedelta(minutes=30)
LEASE = timedelta(minutes=5)


def _file(claim: Claim) -> list[ManifestFile]:
    path = f"lake/bench/{claim.token}/{claim.read_from:%Y%m%dT%H%M%S%f}.parquet"
    return [ManifestFile(path, claim.token, claim.read_from, LAST, T0, WINDOW_END, 100, 10_000, "Orders")]


def _new_lineage(store: MetadataStore, tokens: int) -> int:
    lineage = store.ensure_lineage("bench_" + uuid.uuid4().hex[:8], "live")
    store.bootstrap(lineage.id, T0, [ChildPartition(f"t{i:06d}", ()) for i in range(tokens)])
    return lineage.id


def _drain(store: MetadataStore, lineage_id: int, owner: str, batch: int, split: bool) -> int:
    """Claim and complete until nothing is left in the window; returns how many claim+complete pairs ran."""
    done = 0
    while claims := store.claim(lineage_id, window_end=WINDOW_END, owner=owner, lease=LEASE, limit=batch):
        for claim in claims:
            if split and claim.partition_start == T0:
                kids = tuple(ChildPartition(f"{claim.token}.{k}", (claim.token,)) for k in range(2))
                store.complete(
                    claim,
                    watermark=SPLIT_AT - timedelta(microseconds=1),
                    finished=True,
                    children=[ChildPartitionsRecord(SPLIT_AT, "1", kids)],
                    files=_file(claim),
                )
            else:
                store.complete(claim, watermark=LAST, finished=False, files=_file(claim), records=100)
            done += 1
    return done


def _rate(run: Callable[[], int]) -> float:
    started = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - started)


def _worker(url: str, name: str, inbox: Any, results: Any) -> None:
    store = MetadataStore.connect(url)
    results.put("ready")
    while (lineage_id := inbox.get()) is not None:
        started = time.perf_counter()
        count = _drain(store, lineage_id, name, 1, False)
        results.put((started, time.perf_counter(), count))
    store.close()


class WorkerPool:
    """Processes spawned once and reused every round, so start-up never counts."""

    def __init__(self, url: str, workers: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.results = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(workers)]
        self.procs = [
            ctx.Process(target=_worker, args=(url, f"p{i}", inbox, self.results))
            for i, inbox in enumerate(self.inboxes)
        ]
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            assert self.results.get(timeout=120) == "ready"

    def drain(self, lineage_id: int) -> float:
        """Aggregate rate of every worker draining one lineage together."""
        for inbox in self.inboxes:
            inbox.put(lineage_id)
        spans = [self.results.get(timeout=600) for _ in self.procs]
        elapsed = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
        return sum(count for _, _, count in spans) / elapsed

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for proc in self.procs:
            proc.join(timeout=60)


def _backend_cpu(store: MetadataStore) -> float:
    """CPU seconds used so far by every Postgres backend serving the store's database (Linux /proc)."""
    with store._db.engine.connect() as conn:
        pids = conn.exec_driver_sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'"
        ).scalars().all()
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_per_transition(store: MetadataStore, tokens: int) -> tuple[float, float]:
    """Client and server CPU milliseconds per claim+complete, independent of what else runs on the machine."""
    lineage_id = _new_lineage(store, tokens)
    client, server = time.process_time(), _backend_cpu(store)
    count = _drain(store, lineage_id, "cpu", 1, False)
    client, server = time.process_time() - client, _backend_cpu(store) - server
    return 1000 * client / count, 1000 * server / count


def _bare(store: MetadataStore, count: int) -> float:
    """Empty transactions on the same engine: the floor every store call pays (pool check-out, ping, commit)."""

    def run() -> int:
        for _ in range(count):
            store._db.transaction(lambda conn: conn.exec_driver_sql("SELECT 1").scalar_one())
        return count

    return _rate(run)


def measure(url: str, tokens: int, workers: int, rounds: int) -> tuple[dict[str, list[float]], list[tuple[float, float]]]:
    """Every scenario once per round, interleaved, so a busy machine slows them all alike."""
    store = MetadataStore.connect(url)
    store.upgrade()
    pool = WorkerPool(url, workers)
    scenarios: dict[str, Callable[[], float]] = {}

    def single(batch: int, split: bool) -> Callable[[], float]:
        def run() -> float:
            lineage_id = _new_lineage(store, tokens // 2 if split else tokens)
            return _rate(lambda: _drain(store, lineage_id, "w", batch, split))

        return run

    scenarios["one token per claim"] = single(1, False)
    scenarios["50 tokens per claim"] = single(50, False)
    scenarios["one per claim, each root splits in 2"] = single(1, True)
    scenarios[f"{workers} processes, one per claim"] = lambda: pool.drain(_new_lineage(store, tokens))
    scenarios["bare SELECT 1 transaction (floor)"] = lambda: _bare(store, tokens)
    rates: dict[str, list[float]] = {name: [] for name in scenarios}
    cpu: list[tuple[float, float]] = []
    try:
        for _ in range(rounds):
            for name, scenario in scenarios.items():
                rates[name].append(scenario())
            if Path("/proc/self/stat").exists():
                cpu.append(cpu_per_transition(store, tokens))
    finally:
        pool.close()
        store.close()
    return rates, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--tokens", type=int, default=500, help="tokens per scenario and round (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported (default 5)")
    parser.add_argument("--workers", type=int, default=4, help="processes in the concurrent scenario (default 4)")
    parser.add_argument("--metadata-url", help="measure this Postgres instead of a fresh embedded one")
    parser.add_argument(
        "--driver", choices=("psycopg2", "psycopg"), default="psycopg2", help="the URL's Postgres driver (default psycopg2)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        server = None
        if args.metadata_url:
            url, where = args.metadata_url, "the given Postgres"
        else:
            from spanner_cdc.devstack.embedded_pg import ensure_running

            server = ensure_running(Path(tmp) / "postgres")
            url, where = server.create_database("bench_store"), "the embedded Postgres (fsync=off)"
        url = sa.make_url(url).set(drivername=f"postgresql+{args.driver}").render_as_string(hide_password=False)
        try:
            rates, cpu = measure(url, args.tokens, args.workers, args.rounds)
        finally:
            if server is not None:
                server.stop()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"bench_store: claim+complete transitions per second on {where} through {args.driver}; "
        f"median of {args.rounds} interleaved rounds of {args.tokens} tokens"
    )
    print(f"  {'scenario':<38}{'per second':>11}{'min..max':>15}{'vs target':>11}")
    for name, values in rates.items():
        spread = f"{min(values):.0f}..{max(values):.0f}"
        print(f"  {name:<38}{medians[name]:>11.0f}{spread:>15}{medians[name] / TARGET:>10.2f}x")
    names = list(rates)
    single, bare = medians[names[0]], medians[names[-1]]
    print(f"one claim+complete costs {bare / single:.1f} bare transactions (same run)")
    verdict = "meets" if single >= TARGET else "MISSES"
    print(f"single-worker claim+complete: {single:.0f}/s {verdict} the target of {TARGET:.0f}/s")
    if cpu:
        client = statistics.median(c for c, _ in cpu)
        server = statistics.median(s for _, s in cpu)
        capacity = 1000 / (client + server)
        print(
            f"CPU per claim+complete: client {client:.2f} ms + Postgres {server:.2f} ms, so one worker can do "
            f"{capacity:.0f}/s ({capacity / TARGET:.2f}x target) when it has the CPU (wall-clock figures above "
            f"fall when other work shares the machine; load average now {os.getloadavg()[0]:.1f})"
        )
    print(f"command: {COMMAND} --tokens {args.tokens} --rounds {args.rounds} --workers {args.workers} --driver {args.driver}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
