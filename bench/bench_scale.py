"""Benchmark: one window extracted end to end by the whole `spanner-cdc extract` process vs the bare drains of its
partitions: issue 33's windows by default (one partition of 2,000,000 mods; 1,000 and 10,000 partitions of a few changes
each), or the one --partitions / --bulk-mods names."""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench import figures
from bench.bench_extract import bare_drain
from bench.extract_support import (
    INSTANCE,
    PROJECT,
    STREAM,
    bench_store,
    bulk_rows,
    extract_with_memory,
    mib,
    new_database,
    policy_args,
    window_after,
    write_orders,
)
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.devstack.spark_cluster import ConnectServer
from spanner_cdc.settings import Settings

COMMAND = "python -m bench.bench_scale"
BULK_PER_COMMIT = 400
ROLES = ("driver (python)", "max one python workers", "python workers", "JVM", "tree total")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A window of issue 33 and its targets: the whole extract / the bare drains (<=), or for a bulk window the whole
    extract's speed as a multiple of the bare client's (>=) and as a share of the server's undecoded drain (>=)."""

    name: str
    partitions: int
    transactions: int = 0  # small windows: transactions of 2 records each, spread over the partitions
    bulk_mods: int = 0  # one big window: this many rows, BULK_PER_COMMIT per commit
    target: float = 1.0  # small: extract s / bare drains s <= this; bulk: bare s / extract s >= this
    undecoded_target: float = 0.0  # bulk: undecoded drain s / extract s >= this
    memory_gb: float = 0.0  # peak memory of the extract's process tree <= this (0: not a target)
    plan_claim_s: float = 0.0  # the store's plan and claim < this (0: not a target)


SCENARIOS = {
    "bulk": Scenario("bulk", 1, bulk_mods=2_000_000, target=5.0, undecoded_target=0.35),
    "1000": Scenario("1000", 1000, transactions=2000, target=2.0),
    "10000": Scenario("10000", 10_000, transactions=20_000, target=1.0, memory_gb=2.5, plan_claim_s=2.0),
}
WAVE_LINE = re.compile(r"a wave job of \d+ token\(s\) took ([\d.]+)s; its tasks ([\d.]+)s in all \(longest ([\d.]+)s, CPU ([\d.]+)s\)")
SPARK = {"local": "local[2]", "connect": "a warm Spark Connect server (local[2])"}


def _bare_drains(database: Any, start: datetime, end: datetime, *, undecoded: bool = False) -> tuple[int, int, float]:
    """Every root partition drained by the bare client, one after another: (partitions, records, seconds); `undecoded`:
    rows left as the server's protobuf values (the nearest a client gets to the server's own stream)."""
    from spanner_cdc.extract.planning import root_partitions

    _, roots = root_partitions(database, STREAM, dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000, at=start,
                               retention=timedelta(days=1), namespace="bench")  # fmt: skip
    last = end - timedelta(microseconds=1)
    began = time.perf_counter()
    records = sum(bare_drain(database, root.token, start, last, undecoded=undecoded) for root in roots)
    return len(roots), records, time.perf_counter() - began


def _server_cpu(pid: int | None) -> float:
    """The local server's CPU seconds so far (user + system, from /proc)."""
    import os

    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wave_cpu(log_text: str) -> tuple[float, float]:
    """The wave jobs' tasks: (wall s, CPU s of their reading threads), summed over the jobs the extract logged."""
    found = [(float(tasks), float(cpu)) for _, tasks, _, cpu in WAVE_LINE.findall(log_text)]
    return sum(t for t, _ in found), sum(c for _, c in found)


def _load() -> float:
    import os

    return os.getloadavg()[0]


def _floor(server: Any, database: Any, start: datetime, end: datetime, lake: Path) -> tuple[float, float]:
    """(whole process s, of which Python and its imports s) of `bench.floor_worker` on the window."""
    import json
    import subprocess
    import sys

    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench.floor_worker", server.host, database.database_id, start.isoformat(), end.isoformat(),
                           str(lake)], capture_output=True, text=True, timeout=3600, check=False)  # fmt: skip
    whole = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"floor worker failed:\n{done.stderr[-3000:]}")
    parts = json.loads(done.stdout.strip().splitlines()[-1])
    return whole, whole - parts["land_s"]


def bench_scale(base: Settings, scenario: Scenario, rounds: int, tmp: Path, caches: Sequence[str] = ("on",),
                spark: str = "local") -> list[dict[str, Any]]:  # fmt: skip
    from spanner_cdc.source.client import stream_metadata

    partitions, transactions, bulk_mods = scenario.partitions, scenario.transactions, scenario.bulk_mods
    tmp = tmp / scenario.name
    tmp.mkdir(parents=True, exist_ok=True)
    results = []
    connect: AbstractContextManager[Any] = ConnectServer(work_dir=tmp / "connect") if spark == "connect" else nullcontext()
    with LocalSpanner(extra_args=policy_args(partitions), log_path=tmp / "scale-server.log") as server, connect as launched:
        master = launched.url if launched is not None else "local[2]"
        database = new_database(server)
        created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
        assert created is not None
        if bulk_mods:  # few big data change records: BULK_PER_COMMIT rows each
            end, expected = window_after(bulk_rows(database, bulk_mods, per_transaction=BULK_PER_COMMIT)), bulk_mods
        else:  # ids spread over the key space: every partition gets a few rows
            end, expected = window_after(write_orders(database, transactions, lines=1, spread=2**62 // transactions)), 2 * transactions
        if launched is not None:  # the server's own first job (its JVM's warm-up, its Python workers) is not the run's
            warm = dataclasses.replace(base, database=database.database_id, emulator_host=server.host, spark_master=master, namespace=f"warm_{scenario.name}")
            extract_with_memory(warm, created, end)
        for round_, cache in ((r, c) for r in range(rounds) for c in caches):
            loads = [_load()]
            count, records, bare_s = _bare_drains(database, created, end)
            undecoded_s, undecoded_cpu = 0.0, 0.0
            if bulk_mods:  # the server's own stream, drained without decoding: what it serves at most
                server_before = _server_cpu(server.pid)
                _, _, undecoded_s = _bare_drains(database, created, end, undecoded=True)
                undecoded_cpu = _server_cpu(server.pid) - server_before
            settings = dataclasses.replace(
                base, database=database.database_id, emulator_host=server.host, spark_master=master,
                namespace=f"s_{scenario.name.replace('-', '_')}_{round_}{cache}",
            )  # fmt: skip
            env = {"PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"}
            log_path = tmp / f"extract-{round_}{cache}.log"
            server_before = _server_cpu(server.pid)
            began = time.perf_counter()
            summary, peaks = extract_with_memory(settings, created, end, log_path=log_path, **env)
            extract_s = time.perf_counter() - began
            server_s = _server_cpu(server.pid) - server_before
            if not summary["complete"] or summary["records"] != expected:
                raise SystemExit(f"round {round_}: the extract landed {summary['records']} rows (complete: {summary['complete']})")
            floor_s, floor_start_s = _floor(server, database, created, end, tmp / f"floor{round_}{cache}")
            loads.append(_load())
            tasks_s, tasks_cpu = _wave_cpu(log_path.read_text())
            phases = summary.get("phases", {})
            results.append({"scenario": scenario, "partitions": count, "records": records, "mods": expected, "bare_s": bare_s,
                            "undecoded_s": undecoded_s, "undecoded_server_cpu": undecoded_cpu, "extract_s": extract_s,
                            "cache": cache, "ratio": extract_s / bare_s, "tokens": summary["tokens"], "peaks": peaks,
                            "spark": spark, "floor_s": floor_s, "floor_start_s": floor_start_s, "phases": phases,
                            "plan_claim_s": phases.get("plan_store_s", phases.get("plan_s", 0.0)) + phases.get("claim_s", 0.0), "tasks_s": tasks_s,
                            "tasks_cpu": tasks_cpu, "server_s": server_s, "loads": loads})  # fmt: skip
    return results


def report(results: list[dict[str, Any]]) -> None:
    scenario: Scenario = results[0]["scenario"]
    spark = results[0]["spark"]
    loads = [load for r in results for load in r["loads"]]
    print(f"{COMMAND}: one run, one machine, side by side (1-minute load average {min(loads):.1f}-{max(loads):.1f} on "
          f"{_cores()} cores)")  # fmt: skip
    kind = "one partition of big data change records" if scenario.bulk_mods else "every partition with a few rows"
    print(f"\n[scale: {scenario.name}] one window, {kind}; `spanner-cdc extract` ({SPARK[spark]}) vs the bare drains")
    print(f"  {'partitions':>10} {'records':>9} {'mods':>9} {'start cache':>11} {'bare drains s':>14} {'extract s':>10} {'ratio':>7} "
          f"{'floor s':>8} {'its start s':>11} {'floor ratio':>11} {'plan+claim s':>12}  "
          + "  ".join(f"{r:>22}" for r in ROLES))  # fmt: skip
    for r in results:
        print(f"  {r['partitions']:>10,} {r['records']:>9,} {r['mods']:>9,} {r['cache']:>11} {r['bare_s']:>14.1f} {r['extract_s']:>10.1f} "
              f"{r['ratio']:>6.2f}x {r['floor_s']:>8.2f} {r['floor_start_s']:>11.2f} {r['floor_s'] / r['bare_s']:>10.2f}x "
              f"{r['plan_claim_s']:>12.2f}  " + "  ".join(f"{mib(r['peaks'].get(role, 0)):>22}" for role in ROLES))  # fmt: skip
        print("    phases s: " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items())
              + f"; process tree CPU {r['peaks'].get('tree cpu s', 0):.1f} s, the server's {r['server_s']:.1f} s")  # fmt: skip
    if len({r["cache"] for r in results}) > 1:  # the start caches' own effect, alternating in this run
        on, off = (statistics.median(r["extract_s"] for r in results if r["cache"] == c) for c in ("on", "off"))
        print(f"  median extract s with the start cache {on:.1f}, without {off:.1f}: {off / on:.2f}x faster with it")
    results = [r for r in results if r["cache"] == "on"]
    what = (f"{results[0]['mods']:,} mods, 1 partition" if scenario.bulk_mods else f"{results[0]['partitions']:,} partitions, "
            f"{results[0]['records']:,} records") + (", Spark Connect" if spark == "connect" else "")  # fmt: skip
    if scenario.bulk_mods:
        _report_bulk(results, scenario, what)
    else:
        median = statistics.median(r["ratio"] for r in results)
        figures.report(f"whole extract / bare drains, {what}", median, scenario.target, "x", higher_is_better=False)
        print(f"  median extract / bare drains {median:.2f}x, target <= {scenario.target:.2f}x: {_verdict(median <= scenario.target)}")
    if scenario.memory_gb:
        peak = statistics.median(r["peaks"].get("tree total", 0) for r in results) / 1e9
        figures.report(f"peak memory of the extract's process tree, {what}", peak, scenario.memory_gb, "GB", higher_is_better=False)
        print(f"  peak memory of the process tree {peak:.2f} GB, target <= {scenario.memory_gb} GB: {_verdict(peak <= scenario.memory_gb)}")
    if scenario.plan_claim_s:
        plan_claim = statistics.median(r["plan_claim_s"] for r in results)
        figures.report(f"the store's plan and claim, {what}", plan_claim, scenario.plan_claim_s, "s", higher_is_better=False)
        print(f"  plan + claim {plan_claim:.2f} s in the metadata store (the plan's store part, the bootstrap of the partitions "
              "included, the stream's queries to Spanner not: phases plan_store_s + claim_s; python -m bench.compare_plan_claim "
              "times the same path against the store alone), "
              f"target < {scenario.plan_claim_s} s: {_verdict(plan_claim < scenario.plan_claim_s)}")  # fmt: skip
    print("  extract s: the whole process (imports, JVM or Connect session, plan, waves, close); bare drains: the official client, "
          "one partition after another; phases: the extract's own (its --json summary)")
    floor = statistics.median(r["floor_s"] / r["bare_s"] for r in results)
    limit = 1 / scenario.target if scenario.bulk_mods else scenario.target
    print(f"  floor s: a fresh Python process that imports the client and reads and lands every partition itself as a wave task does "
          f"(no Spark, no store); its start s: Python and its imports. Median floor / bare drains {floor:.2f}x: no extract that "
          f"starts a process and lands with this reader and writer can be faster"
          + (f" (the target {limit:.2f}x is below it)" if floor > limit else ""))
    if spark == "connect":
        print("  memory: the extract's own process tree (the server's JVM and its Python workers are not in it)")


def _report_bulk(results: list[dict[str, Any]], scenario: Scenario, what: str) -> None:
    """Target 1: the whole process's speed vs the bare client's and the server's undecoded drain; mods/s per core."""
    speed = statistics.median(r["bare_s"] / r["extract_s"] for r in results)
    of_undecoded = statistics.median(r["undecoded_s"] / r["extract_s"] for r in results)
    figures.report(f"whole extract speed / bare client, {what}", speed, scenario.target, "x")
    figures.report(f"whole extract speed / undecoded drain, {what}", of_undecoded, scenario.undecoded_target, "x")
    for r in results:
        mods = r["mods"]
        print(f"  mods/s: bare client {mods / r['bare_s']:,.0f}, undecoded drain {mods / r['undecoded_s']:,.0f} (the server's CPU "
              f"{r['undecoded_server_cpu']:.1f} s), whole extract {mods / r['extract_s']:,.0f}; steady state: the wave's reading "
              f"{mods / max(r['tasks_s'], 1e-9):,.0f} mods/s in {r['tasks_s']:.1f} s, {mods / max(r['tasks_cpu'], 1e-9):,.0f} mods/s "
              f"per core of its reading thread ({r['tasks_cpu']:.1f} s CPU); the process tree "
              f"{mods / max(r['peaks'].get('tree cpu s', 0), 1e-9):,.0f} mods per CPU second, the server "
              f"{mods / max(r['server_s'], 1e-9):,.0f}")  # fmt: skip
    print(f"  median whole extract {speed:.2f}x as fast as the bare client, target >= {scenario.target:.2f}x: "
          f"{_verdict(speed >= scenario.target)}; {of_undecoded:.2f} of the undecoded drain's speed, target >= "
          f"{scenario.undecoded_target:.2f}: {_verdict(of_undecoded >= scenario.undecoded_target)}")  # fmt: skip


def _verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"issue 33's windows to run, comma separated ({', '.join(SCENARIOS)}): bulk is one partition of "
                        "2,000,000 mods (target 1), 1000 and 10000 partitions of a few changes each (target 2)")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=0, help="instead of --scenarios: one window of this many partitions "
                        "(fixed: no splits or merges)")  # fmt: skip
    parser.add_argument("--transactions", type=int, default=2000, help="with --partitions: transactions (2 records each) spread over them")
    parser.add_argument("--rounds", type=int, default=1, help="extracts of each window, each into its own namespace")
    parser.add_argument("--bulk-mods", type=int, default=0,
                        help=f"with --partitions: this many rows inserted {BULK_PER_COMMIT} per commit instead of --transactions "
                        "(with --partitions 1: target 1's window of another size)")  # fmt: skip
    parser.add_argument("--spark", choices=tuple(SPARK), default="local",
                        help="local: each extract starts its own local[2] driver; connect: every extract runs on one Spark Connect "
                        "server started here and warmed by an untimed extract first (the long-lived server the architecture names)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.partitions:
        bulk = args.bulk_mods > 0
        custom = Scenario(f"{args.partitions}p" + ("-bulk" if bulk else ""), args.partitions, transactions=0 if bulk else args.transactions,
                          bulk_mods=args.bulk_mods, target=SCENARIOS["bulk" if bulk else "1000"].target,
                          undecoded_target=SCENARIOS["bulk"].undecoded_target if bulk else 0.0)  # fmt: skip
        scenarios = [custom]
    else:
        unknown = [n for n in args.scenarios.split(",") if n and n not in SCENARIOS]
        if unknown:
            parser.error(f"--scenarios: unknown {', '.join(unknown)}; accepted: {', '.join(SCENARIOS)}")
        scenarios = [SCENARIOS[n] for n in args.scenarios.split(",") if n]
    caches = ("on",)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as name:
        tmp = Path(name)
        with bench_store(tmp) as url:
            base = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "lake",
                            heartbeat_ms=1000, home=tmp / "home", concurrency=4)  # fmt: skip
            for scenario in scenarios:
                report(bench_scale(base, scenario, args.rounds, tmp, caches, args.spark))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
