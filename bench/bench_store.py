"""Benchmark: metadata store claim+complete transitions per second (one by one and batched), and a 10,000-token plan."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.figures import report
from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import Claim, Completion, ManifestFile, MetadataStore

COMMAND = "python -m bench.bench_store"
TARGET = 500.0  # claim+complete transitions per second, one token per round trip (issue 5)
BATCHED_TARGET = 5000.0  # claim+complete transitions per second, batched (issue 15)
PLAN_TARGET_S = 2.0  # a window of PLAN_TOKENS ready partitions planned and claimed (issue 15)
PLAN_TOKENS = 10_000
BATCH = 100
# the batch the extract itself commits at scale: a wave's group (at most SPANNER_CDC_WAVE_GROUP_TOKENS, 256), e.g.
# a 1,000-token wave in its default 4 groups
WAVE_GROUP = 250
T0 = datetime(2025, 1, 1, tzinfo=UTC)
WINDOW_END = T0 + timedelta(hours=1)
LAST = WINDOW_END - timedelta(microseconds=1)
SPLIT_AT = T0 + timedelta(minutes=30)
LEASE = timedelta(minutes=5)


def _file(claim: Claim) -> list[ManifestFile]:
    path = f"lake/bench/{claim.token}/{claim.attempt}.parquet"
    return [ManifestFile(path, claim.token, claim.read_from, LAST, T0, WINDOW_END, 100, 10_000, "Orders")]


def _new_lineage(store: MetadataStore, tokens: int) -> int:
    lineage = store.ensure_lineage("bench_" + uuid.uuid4().hex[:8], "live")
    store.bootstrap(lineage.id, T0, [ChildPartition(f"t{i:06d}", ()) for i in range(tokens)])
    return lineage.id


def _completion(claim: Claim, split: bool) -> Completion:
    if split and claim.partition_start == T0:
        kids = tuple(ChildPartition(f"{claim.token}.{k}", (claim.token,)) for k in range(2))
        return Completion(
            claim, SPLIT_AT - timedelta(microseconds=1), True, (ChildPartitionsRecord(SPLIT_AT, "1", kids),),
            tuple(_file(claim)),
        )
    return Completion(claim, LAST, False, files=tuple(_file(claim)), records=100)


def _drain(store: MetadataStore, lineage_id: int, owner: str, batch: int, split: bool, batched: bool = False) -> int:
    """Claim and complete until nothing is left in the window; returns how many claim+complete pairs ran.

    `batched` completes each claimed batch with one complete_many; otherwise one complete per token.
    """
    done = 0
    while claims := store.claim(lineage_id, window_end=WINDOW_END, owner=owner, lease=LEASE, limit=batch):
        items = [_completion(claim, split) for claim in claims]
        if batched:
            result = store.complete_many(items)
            assert not result.lost, result.lost
        else:
            for item in items:
                store.complete(
                    item.claim, watermark=item.watermark, finished=item.finished, children=item.children,
                    files=item.files, records=item.records,
                )
        done += len(claims)
    return done


def plan_and_claim(store: MetadataStore, tokens: int) -> float:
    """Seconds to plan a window of `tokens` ready partitions and claim them all by name, as a run does
    (extract.window plans with ready_tokens; the extract tasks claim the tokens they were handed)."""
    lineage_id = _new_lineage(store, tokens)
    started = time.perf_counter()
    planned = [row.token for row in store.ready_tokens(lineage_id, WINDOW_END)]
    claims = store.claim(lineage_id, window_end=WINDOW_END, owner="run", lease=LEASE, tokens=planned)
    elapsed = time.perf_counter() - started
    assert len(claims) == tokens, (len(claims), tokens)
    return elapsed


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
    """CPU seconds used so far by every Postgres backend serving the store's database (Linux /proc): nanoseconds
    from schedstat where the kernel keeps it, else clock ticks (10 ms, too coarse for a few hundred tokens)."""
    with store._db.engine.connect() as conn:
        pids = conn.exec_driver_sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'"
        ).scalars().all()
    seconds = 0.0
    for pid in pids:
        try:
            seconds += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return seconds


def cpu_per_transition(store: MetadataStore, tokens: int, batched: bool = False) -> tuple[float, float]:
    """Client and server CPU milliseconds per claim+complete, independent of what else runs on the machine."""
    lineage_id = _new_lineage(store, tokens)
    client, server = time.process_time(), _backend_cpu(store)
    count = _drain(store, lineage_id, "cpu", BATCH if batched else 1, False, batched)
    client, server = time.process_time() - client, _backend_cpu(store) - server
    return 1000 * client / count, 1000 * server / count


def _bare(store: MetadataStore, count: int) -> float:
    """Empty transactions on the same engine: the floor every store call pays (pool check-out, ping, commit)."""

    def run() -> int:
        for _ in range(count):
            store._db.transaction(lambda conn: conn.exec_driver_sql("SELECT 1").scalar_one())
        return count

    return _rate(run)


@dataclass
class Measured:
    rates: dict[str, list[float]]
    targets: dict[str, float]
    cpu: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    plan_seconds: list[float] = field(default_factory=list)


def measure(url: str, tokens: int, workers: int, rounds: int, plan_tokens: int, cpu_tokens: int) -> Measured:
    """Every scenario once per round, interleaved, so a busy machine slows them all alike."""
    store = MetadataStore.connect(url)
    store.upgrade()
    pool = WorkerPool(url, workers)
    scenarios: dict[str, Callable[[], float]] = {}

    def single(batch: int, split: bool, batched: bool = False) -> Callable[[], float]:
        def run() -> float:
            lineage_id = _new_lineage(store, tokens // 2 if split else tokens)
            return _rate(lambda: _drain(store, lineage_id, "w", batch, split, batched))

        return run

    scenarios["one token per claim"] = single(1, False)
    scenarios["50 tokens per claim"] = single(50, False)
    scenarios["one per claim, each root splits in 2"] = single(1, True)
    scenarios[f"{workers} processes, one per claim"] = lambda: pool.drain(_new_lineage(store, tokens))
    scenarios[f"batched: {BATCH} per claim + complete_many"] = single(BATCH, False, True)
    scenarios["batched, each root splits in 2"] = single(BATCH, True, True)
    scenarios[f"batched: {WAVE_GROUP} (a 1,000-token wave's group)"] = single(WAVE_GROUP, False, True)
    scenarios["bare SELECT 1 transaction (floor)"] = lambda: _bare(store, tokens)
    targets = {name: BATCHED_TARGET if name.startswith("batched") else TARGET for name in scenarios}
    result = Measured({name: [] for name in scenarios}, targets, {"one by one": [], "batched": []})
    try:
        for _ in range(rounds):
            for name, scenario in scenarios.items():
                result.rates[name].append(scenario())
            result.plan_seconds.append(plan_and_claim(store, plan_tokens))
            if Path("/proc/self/stat").exists():
                result.cpu["one by one"].append(cpu_per_transition(store, tokens))
                result.cpu["batched"].append(cpu_per_transition(store, cpu_tokens, batched=True))
    finally:
        pool.close()
        store.close()
    return result


def _print_report(result: Measured, args: argparse.Namespace, where: str) -> None:
    medians = {name: statistics.median(values) for name, values in result.rates.items()}
    print(
        f"bench_store: claim+complete transitions per second on {where} through {args.driver}; "
        f"median of {args.rounds} interleaved rounds of {args.tokens} tokens"
    )
    print(f"  {'scenario':<42}{'per second':>11}{'min..max':>15}{'vs target':>18}")
    for name, values in result.rates.items():
        spread = f"{min(values):.0f}..{max(values):.0f}"
        target = result.targets[name]
        print(f"  {name:<42}{medians[name]:>11.0f}{spread:>15}{medians[name] / target:>10.2f}x {target:>5.0f}/s")
    names = list(result.rates)
    single, bare = medians[names[0]], medians[names[-1]]
    batched = medians[f"batched: {BATCH} per claim + complete_many"]
    print(f"one claim+complete costs {bare / single:.1f} bare transactions; batched is {batched / single:.1f}x one by one (same run)")
    plan = statistics.median(result.plan_seconds)
    spread = f"{min(result.plan_seconds):.2f}..{max(result.plan_seconds):.2f}"
    print(f"{args.plan_tokens} ready tokens planned (ready_tokens) and claimed by name: {plan:.2f} s (min..max {spread}), target < {PLAN_TARGET_S:.0f} s")
    report("store: one claim+complete per round trip", single, TARGET, "/s")
    report(f"store: batched claim+complete ({BATCH} per batch)", batched, BATCHED_TARGET, "/s")
    group = medians[f"batched: {WAVE_GROUP} (a 1,000-token wave's group)"]
    report(f"store: batched claim+complete ({WAVE_GROUP} per batch, a wave's group)", group, BATCHED_TARGET, "/s")
    # the landings that finish partitions and make their children READY (more statements per batch)
    splits = medians["batched, each root splits in 2"]
    report(f"store: batched claim+complete ({BATCH} per batch, each root splits in 2)", splits, BATCHED_TARGET, "/s")
    report(f"store: {args.plan_tokens:,}-token window planned + claimed", plan, PLAN_TARGET_S, "s", higher_is_better=False)
    for kind, samples in result.cpu.items():
        if samples:
            client = statistics.median(c for c, _ in samples)
            server = statistics.median(s for _, s in samples)
            capacity = 1000 / (client + server)
            if kind == "batched":  # the rate one worker's CPU allows, whatever else shares the machine
                report(f"store: batched claim+complete ({BATCH} per batch), CPU capacity of one worker", capacity, BATCHED_TARGET, "/s")
            print(
                f"CPU per claim+complete, {kind}: client {client:.3f} ms + Postgres {server:.3f} ms, so one worker can do "
                f"{capacity:.0f}/s when it has the CPU (wall-clock figures above fall when other work shares the "
                f"machine; load average now {os.getloadavg()[0]:.1f})"
            )


def compare_planning(url: str, rounds: int, tokens: int) -> None:
    """CPU per claim+complete with the claim and the landing sent as SQL text (planned at every call, as before
    store/functions.py) and through their functions (planned once per session), alternating on one store, batched
    and one by one."""
    from spanner_cdc.store import functions
    from spanner_cdc.store.batch_sql import LAND_MANY
    from spanner_cdc.store.transition_sql import CLAIM_ANY, CLAIM_NAMED

    texts = {"cdc_claim_any": CLAIM_ANY, "cdc_claim_named": CLAIM_NAMED, "cdc_land_many": LAND_MANY}
    calls = {f.stem: f.call for f in functions.FUNCTIONS}
    store = MetadataStore.connect(url)
    store.upgrade()
    cpu: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for round_ in range(rounds + 1):  # the first round warms both ways and is not counted
            for kind, count, batched in (("batched", tokens, True), ("one by one", max(50, tokens // 10), False)):
                for way in ("text", "functions"):
                    for function in functions.FUNCTIONS:  # what the store's call executes (a cached property)
                        function.__dict__["call"] = texts[function.stem] if way == "text" else calls[function.stem]
                    measured = cpu_per_transition(store, count, batched=batched)
                    if round_:
                        cpu.setdefault((kind, way), []).append(measured)
    finally:
        for function in functions.FUNCTIONS:
            function.__dict__["call"] = calls[function.stem]
        store.close()
    print(f"claim + landing as SQL text vs as functions, alternating on one store, medians of {rounds} rounds "
          f"(batched: {tokens} tokens, {BATCH} per claim; one by one: {max(50, tokens // 10)} tokens)")  # fmt: skip
    for kind in ("batched", "one by one"):
        text, function = cpu[(kind, "text")], cpu[(kind, "functions")]
        t_client, t_server = statistics.median(c for c, _ in text), statistics.median(s for _, s in text)
        f_client, f_server = statistics.median(c for c, _ in function), statistics.median(s for _, s in function)
        print(
            f"  {kind:<10}  Postgres {t_server:.4f} -> {f_server:.4f} ms per claim+complete ({t_server / f_server:.2f}x), "
            f"client {t_client:.4f} -> {f_client:.4f} ms; capacity {1000 / (t_client + t_server):.0f} -> "
            f"{1000 / (f_client + f_server):.0f}/s"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--tokens", type=int, default=500, help="tokens per scenario and round (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported (default 5)")
    parser.add_argument("--workers", type=int, default=4, help="processes in the concurrent scenario (default 4)")
    parser.add_argument(
        "--plan-tokens", type=int, default=PLAN_TOKENS, help=f"ready tokens in the plan+claim figure (default {PLAN_TOKENS})"
    )
    parser.add_argument(
        "--cpu-tokens", type=int, default=3000, help="tokens in the batched CPU-per-transition figure (default 3000)"
    )
    parser.add_argument("--metadata-url", help="measure this Postgres instead of a fresh embedded one")
    parser.add_argument(
        "--driver", choices=("psycopg2", "psycopg"), default="psycopg2", help="the URL's Postgres driver (default psycopg2)"
    )
    parser.add_argument(
        "--compare-planning", action="store_true",
        help="instead: CPU per claim+complete with the claim and the landing as SQL text vs as functions, alternating",
    )  # fmt: skip
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
            if args.compare_planning:
                compare_planning(url, args.rounds, args.cpu_tokens)
                print(f"command: {COMMAND} --compare-planning --rounds {args.rounds} --cpu-tokens {args.cpu_tokens} --driver {args.driver}")
                return 0
            result = measure(url, args.tokens, args.workers, args.rounds, args.plan_tokens, args.cpu_tokens)
        finally:
            if server is not None:
                server.stop()
    _print_report(result, args, where)
    print(
        f"command: {COMMAND} --tokens {args.tokens} --rounds {args.rounds} --workers {args.workers} "
        f"--plan-tokens {args.plan_tokens} --cpu-tokens {args.cpu_tokens} --driver {args.driver}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
