"""Benchmark: one window of a stream with >= 1,000 partitions (or of one big partition: --bulk-mods), extracted end to
end by the whole `spanner-cdc extract` process vs the bare drains of its partitions."""

from __future__ import annotations

import argparse
import dataclasses
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
from spanner_cdc.spark.fast_start import CACHE_ENV

COMMAND = "python -m bench.bench_scale"
TARGET = 3.0  # extract end to end <= 3x the sum of the bare drains of the window's partitions (issue 15)
BULK_TARGET = 1 / 3  # the whole process lands a 100,000-mod window >= 3x as fast as the bare client drains it
BULK_PER_COMMIT = 400
ROLES = ("driver (python)", "max one python workers", "python workers", "JVM", "tree total")
SPARK = {"local": "local[2]", "connect": "a warm Spark Connect server (local[2])"}


def _bare_drains(database: Any, start: datetime, end: datetime) -> tuple[int, int, float]:
    """Every root partition drained by the bare client, one after another: (partitions, records, seconds)."""
    from spanner_cdc.extract.planning import root_partitions

    _, roots = root_partitions(database, STREAM, dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000, at=start,
                               retention=timedelta(days=1), namespace="bench")  # fmt: skip
    last = end - timedelta(microseconds=1)
    began = time.perf_counter()
    records = sum(bare_drain(database, root.token, start, last) for root in roots)
    return len(roots), records, time.perf_counter() - began


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


def bench_scale(base: Settings, partitions: int, transactions: int, rounds: int, tmp: Path, bulk_mods: int = 0,
                caches: Sequence[str] = ("on",), spark: str = "local") -> list[dict[str, Any]]:  # fmt: skip
    from spanner_cdc.source.client import stream_metadata

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
            warm = dataclasses.replace(base, database=database.database_id, emulator_host=server.host, spark_master=master, namespace="warm")
            extract_with_memory(warm, created, end)
        for round_, cache in ((r, c) for r in range(rounds) for c in caches):
            count, records, bare_s = _bare_drains(database, created, end)
            settings = dataclasses.replace(
                base, database=database.database_id, emulator_host=server.host, spark_master=master, namespace=f"s{round_}{cache}",
            )  # fmt: skip
            env = {"PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell", **({CACHE_ENV: "off"} if cache == "off" else {})}
            began = time.perf_counter()
            summary, peaks = extract_with_memory(settings, created, end, **env)
            extract_s = time.perf_counter() - began
            if not summary["complete"] or summary["records"] != expected:
                raise SystemExit(f"round {round_}: the extract landed {summary['records']} rows (complete: {summary['complete']})")
            floor_s, floor_start_s = _floor(server, database, created, end, tmp / f"floor{round_}{cache}")
            results.append({"partitions": count, "records": records, "bare_s": bare_s, "extract_s": extract_s, "cache": cache,
                            "ratio": extract_s / bare_s, "tokens": summary["tokens"], "peaks": peaks, "spark": spark,
                            "floor_s": floor_s, "floor_start_s": floor_start_s})  # fmt: skip
    return results


def report(results: list[dict[str, Any]], target: float = TARGET) -> None:
    print(f"{COMMAND}: one run, one machine, side by side")
    spark = results[0]["spark"]
    print(f"\n[scale] one window, every partition with a few rows; `spanner-cdc extract` ({SPARK[spark]}) vs the bare drains")
    print(f"  {'partitions':>10} {'records':>8} {'start cache':>11} {'bare drains s':>14} {'extract s':>10} {'ratio':>7} {'floor s':>8} "
          f"{'its start s':>11} {'floor ratio':>11}  " + "  ".join(f"{r:>22}" for r in ROLES))  # fmt: skip
    for r in results:
        print(f"  {r['partitions']:>10,} {r['records']:>8,} {r['cache']:>11} {r['bare_s']:>14.1f} {r['extract_s']:>10.1f} {r['ratio']:>6.1f}x "
              f"{r['floor_s']:>8.2f} {r['floor_start_s']:>11.2f} {r['floor_s'] / r['bare_s']:>10.2f}x  "
              + "  ".join(f"{mib(r['peaks'].get(role, 0)):>22}" for role in ROLES))  # fmt: skip
    if len({r["cache"] for r in results}) > 1:  # the start caches' own effect, alternating in this run
        on, off = (statistics.median(r["extract_s"] for r in results if r["cache"] == c) for c in ("on", "off"))
        print(f"  median extract s with the start cache {on:.1f}, without {off:.1f}: {off / on:.2f}x faster with it")
    results = [r for r in results if r["cache"] == "on"]
    median = statistics.median(r["ratio"] for r in results)
    what = f"{results[0]['partitions']:,} partitions, {results[0]['records']:,} records" + (", Spark Connect" if spark == "connect" else "")
    figures.report(f"whole extract / bare drains, {what}", median, target, "x", higher_is_better=False)
    print(f"  median extract / bare drains {median:.2f}x, target <= {target:.2f}x: {'meets' if median <= target else 'MISSES'}")
    print("  extract s: the whole process (imports, JVM or Connect session, plan, waves, close); bare drains: the official client, "
          "one partition after another")
    floor = statistics.median(r["floor_s"] / r["bare_s"] for r in results)
    print(f"  floor s: a fresh Python process that imports the client and reads and lands every partition itself as a wave task does "
          f"(no Spark, no store); its start s: Python and its imports. Median floor / bare drains {floor:.2f}x: no extract that "
          f"starts a process and lands with this reader and writer can be faster"
          + (f" (the target {target:.2f}x is below it)" if floor > target else ""))
    if spark == "connect":
        print("  memory: the extract's own process tree (the server's JVM and its Python workers are not in it)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000, help="partitions of the stream (fixed: no splits or merges)")
    parser.add_argument("--transactions", type=int, default=2000, help="transactions (2 records each) spread over the partitions")
    parser.add_argument("--rounds", type=int, default=1, help="extracts of the window, each into its own namespace")
    parser.add_argument("--bulk-mods", type=int, default=0,
                        help=f"instead of --transactions: this many rows inserted {BULK_PER_COMMIT} per commit (with --partitions 1: "
                        "the issue's whole-process extract of a 100,000-mod window)")  # fmt: skip
    parser.add_argument("--start-cache", choices=("on", "both"), default="on",
                        help=f"both: every round also extracts with {CACHE_ENV}=off (driver start caches off), alternating")  # fmt: skip
    parser.add_argument("--spark", choices=tuple(SPARK), default="local",
                        help="local: each extract starts its own local[2] driver; connect: every extract runs on one Spark Connect "
                        "server started here and warmed by an untimed extract first (the long-lived server the architecture names)")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as name:
        tmp = Path(name)
        with bench_store(tmp) as url:
            base = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "lake",
                            heartbeat_ms=1000, home=tmp / "home", concurrency=4)  # fmt: skip
            caches = ("on", "off") if args.start_cache == "both" else ("on",)
            results = bench_scale(base, args.partitions, args.transactions, args.rounds, tmp, args.bulk_mods, caches, args.spark)
    report(results, BULK_TARGET if args.bulk_mods else TARGET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
