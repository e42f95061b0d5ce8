"""Benchmark: extract landing rate vs the bare client's drain, per-token overhead per Spark run mode, memory vs size."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import figures
from bench.extract_support import (
    INSTANCE,
    PROFILE_ENV,
    PROJECT,
    STREAM,
    bench_store,
    bulk_rows,
    extract_with_memory,
    mib,
    new_database,
    policy_args,
    run_windows_worker,
    spawn_windows_worker,
    window_after,
    write_orders,
)
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.settings import Settings, env_name

COMMAND = "python -m bench.bench_extract"
CONCURRENCY_ENV, GROUP_TOKENS_ENV = env_name("concurrency"), env_name("wave_group_tokens")
DRIVER_ROWS_ENV, TASK_TOKENS_ENV = env_name("check_driver_rows"), env_name("task_tokens")
RATE_TARGET = 3.0  # one token's landing rate >= 3x the bare client's drain rate (issue 15, the architecture's budget)
UNDECODED_TARGET = 0.25  # ... and >= 25% of the server's stream drained by the client leaving rows undecoded
OVERHEAD_TARGET_S = 0.1  # per-token overhead on Spark Connect, 32 tokens amortized (issue 15; issue 6 asked 1.5)
MEMORY_GROWTH_LIMIT = 1.25  # "flat": 10x the records may cost at most 25% more peak memory
MODES = ("local", "standalone", "connect")


def bare_drain(database: Any, token: str, start: datetime, end: datetime, *, undecoded: bool = False) -> int:
    """The google-cloud-spanner client merely draining the partition query (rows decoded, nothing else); `undecoded`:
    rows left as the server's protobuf values (lazy_decode), the nearest a client gets to the server's own stream."""
    from spanner_cdc.source.queries import build_query

    query = build_query(STREAM, "GOOGLE_STANDARD_SQL", token, start, end, 1000)
    rows = 0
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            query.sql, params=query.params, param_types=query.param_types, timeout=None, lazy_decode=undecoded
        )
        for _ in results:
            rows += 1
    return rows


def _timed(run: Callable[[], int]) -> tuple[int, float]:
    began = time.perf_counter()
    count = run()
    return count, time.perf_counter() - began


def bench_rate(base: Settings, transactions: int, rounds: int, tmp: Path) -> dict[str, Any]:
    """One partition: the bare client's drain vs the extract of the same token over the same range, interleaved."""
    from spanner_cdc.extract.planning import root_partitions
    from spanner_cdc.extract.window import extract_tokens, plan_window
    from spanner_cdc.source.client import stream_metadata
    from spanner_cdc.spark.session import spark_session

    with LocalSpanner(extra_args=policy_args(1), log_path=tmp / "rate-server.log") as server:
        database = new_database(server)
        created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
        assert created is not None
        end = window_after(write_orders(database, transactions))
        settings = dataclasses.replace(base, database=database.database_id, emulator_host=server.host, concurrency=1)
        spark_session(settings)

        def extract(round_: int) -> int:
            run = dataclasses.replace(settings, namespace=f"rate{round_}")
            plan = plan_window(run, created, end)  # bootstrap outside the timing: the landing is measured
            (token,) = [t.token for t in plan.ready]
            began = time.perf_counter()
            (result,) = extract_tokens(run, created, end, [token])
            timings.append(time.perf_counter() - began)
            return result.data_change_records

        timings: list[float] = []
        _, roots = root_partitions(database, STREAM, dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000, at=created,
                                   retention=timedelta(days=1), namespace="bench")  # fmt: skip
        token = roots[0].token
        extract(0)  # warm the JVM, the Python workers and the client before measuring
        bare_drain(database, token, created, end - timedelta(microseconds=1))
        bare_rates, undecoded_rates, landing_rates, counts = [], [], [], set()
        last = end - timedelta(microseconds=1)
        for round_ in range(1, rounds + 1):
            count, seconds = _timed(lambda: bare_drain(database, token, created, last))
            bare_rates.append(count / seconds)
            undecoded, seconds = _timed(lambda: bare_drain(database, token, created, last, undecoded=True))
            undecoded_rates.append(undecoded / seconds)
            landed = extract(round_)
            landing_rates.append(landed / timings[-1])
            counts.add((count, undecoded, landed))
    if len(counts) != 1 or len({c for seen in counts for c in seen}) != 1:
        raise SystemExit(f"the bare drains and the extract saw different record counts: {counts}")
    ratios = [landing / bare for landing, bare in zip(landing_rates, bare_rates, strict=True)]
    of_undecoded = [landing / u for landing, u in zip(landing_rates, undecoded_rates, strict=True)]
    return {
        "records": counts.pop()[0],
        "bare": statistics.median(bare_rates),
        "undecoded": statistics.median(undecoded_rates),
        "landing": statistics.median(landing_rates),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "of_undecoded": statistics.median(of_undecoded),
    }


JOB_LINE = re.compile(r"a wave job of \d+ token\(s\) took ([\d.]+)s; its tasks ([\d.]+)s in all")


def job_times(log_text: str) -> dict[str, float]:
    """Both windows' wave jobs: their wall time, and the time their tasks spent reading and landing (wave.py logs it)."""
    found = [(float(a), float(b)) for a, b in JOB_LINE.findall(log_text)]
    return {"jobs_s": sum(a for a, _ in found), "tasks_s": sum(b for _, b in found)}


def _mode_context(mode: str, tmp: Path) -> AbstractContextManager[Any]:
    from spanner_cdc.devstack.spark_cluster import ConnectServer, StandaloneCluster

    if mode == "standalone":
        return StandaloneCluster(cores=2, memory="2g", work_dir=tmp / "standalone")
    if mode == "connect":
        return ConnectServer(master="local[2]", work_dir=tmp / "connect")
    return nullcontext()


def bench_overhead(
    base: Settings, tokens: int, transactions: int, modes: Sequence[str], tmp: Path, *, profile: int = 0, variants: str = "all"
) -> list[dict[str, Any]]:
    """A window of `tokens` small partitions, extracted in each run mode by a fresh driver process."""
    with LocalSpanner(extra_args=policy_args(tokens), log_path=tmp / "overhead-server.log") as server:
        from spanner_cdc.source.client import stream_metadata

        database = new_database(server)
        created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
        assert created is not None
        # ids spread over the key space so that every partition gets a few changes
        write_orders(database, transactions, lines=1, spread=2**58 // transactions)
        middle = datetime.now(UTC)
        end = window_after(write_orders(database, transactions, first_id=transactions, lines=1, spread=2**58 // transactions))
        windows = [(created, middle), (middle, end)]
        results = []
        # each mode as it runs (a Spark job per group of a wave's tokens, the close's check in the driver), and
        # Connect also with a job per token (as before waves were grouped) and with the check as a Spark job
        # (as before issue 15's driver check), side by side
        named = [("a job per token", {GROUP_TOKENS_ENV: "1"}), ("Spark check", {DRIVER_ROWS_ENV: "0"}),
                    ("a task per token", {TASK_TOKENS_ENV: "1"}), ("concurrency 1", {CONCURRENCY_ENV: "1"}),
                    ("concurrency 2", {CONCURRENCY_ENV: "2"})]
        runs = [(mode, mode, {PROFILE_ENV: str(profile)}) for mode in modes]
        chosen = [(n, e) for n, e in named if variants == "all" or n in variants.split(",")]
        runs += [(f"connect, {name}", "connect", env) for name, env in chosen] * ("connect" in modes)
        for label, mode, env in runs:
            group = env.get(GROUP_TOKENS_ENV, "")
            with _mode_context(mode, tmp) as launched:
                master = {"local": "local[2]", "standalone": getattr(launched, "master_url", ""), "connect": getattr(launched, "url", "")}[mode]
                settings = dataclasses.replace(
                    base, database=database.database_id, emulator_host=server.host, spark_master=master,
                    namespace=f"o_{len(results)}_{mode}_{group or 'wave'}", concurrency=int(env.get(CONCURRENCY_ENV, 4)),
                )  # fmt: skip
                began = time.perf_counter()
                log_path = tmp / f"overhead-{len(results)}.log"
                out = spawn_windows_worker(settings, windows, log_path=log_path, **env)
                if profile and env.get(PROFILE_ENV):
                    print(f"[{label}] " + log_path.read_text().partition("cProfile of the last window")[2][:12000])
                process_s = time.perf_counter() - began
            first, second = out["windows"]
            if not (first["complete"] and second["complete"]):
                raise SystemExit(f"{label}: a window did not complete: {out}")
            results.append(
                {
                    "mode": label,
                    "tokens": second["tokens"],
                    "steady_s": second["elapsed_s"],
                    "per_token_s": second["elapsed_s"] / max(1, second["tokens"]),
                    "cold_per_token_s": (out["session_s"] + first["elapsed_s"]) / max(1, first["tokens"]),
                    "process_s": process_s,
                    **job_times(log_path.read_text()),
                }
            )
    return results


def bench_memory(base: Settings, sizes: Sequence[int], tmp: Path) -> list[dict[str, Any]]:
    """Peak memory of `spanner-cdc extract` (driver, JVM, Python workers) over one partition of each size."""
    from spanner_cdc.source.client import stream_metadata

    results = []
    with LocalSpanner(extra_args=policy_args(1), log_path=tmp / "memory-server.log") as server:
        for rows in sizes:
            database = new_database(server)
            created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
            assert created is not None
            began = time.perf_counter()
            end = window_after(bulk_rows(database, rows))
            write_s = time.perf_counter() - began
            settings = dataclasses.replace(
                base, database=database.database_id, emulator_host=server.host, spark_master="local[2]", namespace=f"m{rows}", concurrency=1
            )
            summary, peaks = extract_with_memory(settings, created, end, PYSPARK_SUBMIT_ARGS="--driver-memory 1g pyspark-shell")
            if summary["records"] != rows:
                raise SystemExit(f"memory run landed {summary['records']} rows, expected {rows}")
            results.append({"rows": rows, "write_s": write_s, "elapsed_s": summary["elapsed_s"], "peaks": peaks})
    return results


def report(rate: dict[str, Any] | None, overhead: list[dict[str, Any]], memory: list[dict[str, Any]]) -> None:
    print(f"{COMMAND}: one run, one machine, side by side")
    if rate:
        verdict = "meets" if rate["ratio"] >= RATE_TARGET else "MISSES"
        per_round = " ".join(f"{x:.2f}" for x in rate["ratios"])
        print(f"\n[landing rate] one partition, {rate['records']} data change records, local[2] Spark (a warm driver)")
        print(f"  bare client drain      {rate['bare']:>10,.0f} records/s")
        print(f"  undecoded drain        {rate['undecoded']:>10,.0f} records/s   (the client leaving rows undecoded)")
        print(f"  extract landing        {rate['landing']:>10,.0f} records/s")
        print(f"  landing / drain        {rate['ratio']:>10.2f}x  per round: {per_round}   target >= {RATE_TARGET:.0f}x: {verdict}")
        verdict = "meets" if rate["of_undecoded"] >= UNDECODED_TARGET else "MISSES"
        print(f"  landing / undecoded    {rate['of_undecoded']:>10.0%}   target >= {UNDECODED_TARGET:.0%}: {verdict}")
        figures.report("extract landing rate / bare client drain, one token", rate["ratio"], RATE_TARGET, "x")
        figures.report("extract landing rate / undecoded drain, one token", rate["of_undecoded"], UNDECODED_TARGET, "x")
    if overhead:
        print("\n[per-token overhead] a window of small tokens, fresh driver process per mode, concurrency 4 unless named")
        print(f"  {'mode':<26} {'tokens':>6} {'window s':>9} {'s/token':>8} {'cold s/token':>13} {'process s':>10} "
              f"{'jobs s':>9} {'tasks s':>9}")  # fmt: skip
        print("  (jobs s: the wave jobs' wall time in both windows; tasks s: their tasks' own reading and landing)")
        for r in overhead:
            print(f"  {r['mode']:<26} {r['tokens']:>6} {r['steady_s']:>9.2f} {r['per_token_s']:>8.2f} "
                  f"{r['cold_per_token_s']:>13.2f} {r['process_s']:>10.2f} {r['jobs_s']:>9.2f} {r['tasks_s']:>9.2f}")  # fmt: skip
        connect = [r for r in overhead if r["mode"] == "connect"]
        per_token = [r for r in overhead if r["mode"] == "connect, a job per token"]
        if connect and per_token:
            print(f"  Spark Connect, grouped / a job per token: {per_token[0]['steady_s'] / connect[0]['steady_s']:.2f}x faster (warm window)")
        per_task = [r for r in overhead if r["mode"] == "connect, a task per token"]
        if connect and per_task:
            print(f"  Spark Connect, a few tokens per task / a task per token: {per_task[0]['steady_s'] / connect[0]['steady_s']:.2f}x faster (warm window)")
        spark_check = [r for r in overhead if r["mode"] == "connect, Spark check"]
        if connect and spark_check:
            print(f"  Spark Connect, the close's check in the driver / as a Spark job: {spark_check[0]['steady_s'] / connect[0]['steady_s']:.2f}x faster (warm window)")
        if connect:
            figures.report("extract per-token overhead, Spark Connect", connect[0]["per_token_s"], OVERHEAD_TARGET_S, "s/token", higher_is_better=False)
            verdict = "meets" if connect[0]["per_token_s"] <= OVERHEAD_TARGET_S else "MISSES"
            print(f"  Spark Connect amortized {connect[0]['per_token_s']:.2f} s/token, target <= {OVERHEAD_TARGET_S} s: {verdict}")
        print("  s/token: second window (warm driver) / tokens; cold: session start + first window (bootstrap) / tokens")
    if memory:
        roles = ("driver (python)", "max one python workers", "python workers", "JVM", "tree total")
        print("\n[memory] peak RSS of `spanner-cdc extract` (local[2], spark.driver.memory 1g) over one partition")
        print("  " + f"{'rows':>9} {'extract s':>10}  " + "  ".join(f"{role.replace('max one ', 'one '):>20}" for role in roles))
        for r in memory:
            print("  " + f"{r['rows']:>9,} {r['elapsed_s']:>10.1f}  " + "  ".join(f"{mib(r['peaks'].get(role, 0)):>20}" for role in roles))
        if len(memory) >= 2:
            small, large = memory[0]["peaks"], memory[-1]["peaks"]
            growth = {role: large.get(role, 0) / max(1, small.get(role, 0)) for role in ("driver (python)", "max one python workers")}
            flat = all(g <= MEMORY_GROWTH_LIMIT for g in growth.values())
            shown = ", ".join(f"{role.replace('max one ', 'one ')} x{g:.2f}" for role, g in growth.items())
            jvm = large.get("JVM", 0) / max(1, small.get("JVM", 0))
            print(f"  {memory[-1]['rows'] // max(1, memory[0]['rows'])}x the rows: {shown}; "
                  f"flat (<= x{MEMORY_GROWTH_LIMIT}): {'meets' if flat else 'MISSES'}")  # fmt: skip
            print(f"  JVM x{jvm:.2f}: its heap grows lazily up to spark.driver.memory (the window's Spark check runs there)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--transactions", type=int, default=10000, help="landing rate: transactions (2 records each)")
    parser.add_argument("--rounds", type=int, default=3, help="landing rate: interleaved rounds")
    parser.add_argument("--tokens", type=int, default=32, help="overhead: partitions in the window")
    parser.add_argument("--small-transactions", type=int, default=96, help="overhead: transactions per window")
    parser.add_argument("--modes", default=",".join(MODES), help="overhead: run modes, comma separated")
    parser.add_argument("--profile", type=int, default=0, help="overhead: print the driver's N costliest calls (cProfile) of each mode's warm window")
    parser.add_argument("--variants", default="all", help="overhead: Connect's comparison runs, comma separated names or 'all' or 'none' "
                        "(a job per token, Spark check, a task per token, concurrency 1, concurrency 2)")
    parser.add_argument("--memory-rows", default="100000,1000000", help="memory: partition sizes in rows, comma separated")
    parser.add_argument("--skip", default="", help="parts to skip: rate, overhead, memory (comma separated)")
    parser.add_argument("--windows-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.windows_worker:
        return run_windows_worker([(datetime.fromisoformat(s), datetime.fromisoformat(e)) for s, e in json.loads(args.windows_worker)])
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory(prefix="bench-extract-") as name:
        tmp = Path(name)
        with bench_store(tmp) as url:
            base = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "lake",
                            heartbeat_ms=1000, home=tmp / "home")  # fmt: skip
            try:
                rate = None if "rate" in skip else bench_rate(base, args.transactions, args.rounds, tmp)
                modes = [m for m in args.modes.split(",") if m]
                overhead = [] if "overhead" in skip else bench_overhead(
                    base, args.tokens, args.small_transactions, modes, tmp, profile=args.profile, variants=args.variants
                )
                sizes = [int(s) for s in args.memory_rows.split(",") if s]
                memory = [] if "memory" in skip else bench_memory(base, sizes, tmp)
            finally:
                from spanner_cdc.spark.session import stop_sessions

                stop_sessions()
    report(rate, overhead, memory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
