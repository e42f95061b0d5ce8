"""Benchmark: data change records/s one local Spanner server serves to one reader and to four concurrent readers,
its write rate and table read rate (rows/s of a strong Read of every row, and of one at a past timestamp), and the
write transactions/s it commits for concurrent writer processes through the official client (no --fsync)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench import SINGLE_PARTITION_SERVER_ARGS, figures

COMMAND = "python -m bench.bench_local_spanner"
TARGET = 20_000  # records/s served to one reader (issue 3)
PROJECT, INSTANCE = "bench-project", "bench-instance"
SERVER_ARGS = SINGLE_PARTITION_SERVER_ARGS
DDL = {
    "GOOGLE_STANDARD_SQL": [
        "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount FLOAT64, Status STRING(MAX),"
        " Updated TIMESTAMP) PRIMARY KEY (OrderId)",
        "CREATE CHANGE STREAM Everything FOR ALL",
    ],
    "POSTGRESQL": [
        "create table orders (orderid bigint primary key, customer varchar, amount float8, status varchar, updated timestamptz)",
        "CREATE CHANGE STREAM everything FOR ALL",
    ],
}
QUERY = {
    "GOOGLE_STANDARD_SQL": "SELECT ChangeRecord FROM READ_Everything(start_timestamp => @start, end_timestamp => @end, "
    "partition_token => @token, heartbeat_milliseconds => @hb)",
    "POSTGRESQL": "SELECT * FROM spanner.read_json_everything($1, $2, $3, $4, null)",
}
WRITE_TARGET = 1_000  # write transactions/s through the official client, --fsync off (issue 33)
PER_COMMIT = 200  # alternating inserts and updates: one data change record (of one mod) each


def _columns(dialect: str) -> tuple[str, list[str]]:
    names = ["OrderId", "Customer", "Amount", "Status", "Updated"]
    return ("orders", [n.lower() for n in names]) if dialect == "POSTGRESQL" else ("Orders", names)


def _write(database: Any, dialect: str, records: int) -> tuple[datetime, datetime]:
    """`records` data change records: per commit, inserts of new orders alternate with updates of old ones."""
    table, columns = _columns(dialect)
    with database.batch() as batch:
        batch.insert(table, columns, [(i, f"customer-{i}", i * 1.5, "NEW", "2024-01-01T00:00:00Z") for i in range(PER_COMMIT)])
    first = batch.committed
    next_id = PER_COMMIT
    for _ in range(records // PER_COMMIT):
        with database.batch() as batch:
            for j in range(PER_COMMIT // 2):
                batch.insert(table, columns, [(next_id, f"customer-{next_id % 97}", next_id * 1.25, "NEW", "2024-01-01T00:00:00Z")])
                batch.update(table, columns[:1] + columns[3:4], [(j, f"STATUS-{next_id}")])
                next_id += 1
    return first, batch.committed


def table_read(database: Any, dialect: str, past: datetime | None) -> tuple[int, float]:
    """(rows, seconds) of one Read of every row, strong or at `past`, undecoded (what the server serves)."""
    from google.cloud import spanner

    table, columns = _columns(dialect)
    bound = {} if past is None else {"read_timestamp": past}
    began = time.perf_counter()
    with database.snapshot(**bound) as snapshot:
        rows = sum(1 for _ in snapshot.read(table, columns, spanner.KeySet(all_=True), lazy_decode=True))
    return rows, time.perf_counter() - began


def _params(dialect: str, token: str | None, start: datetime, end: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    from google.cloud.spanner_v1 import param_types

    names = ("p1", "p2", "p3", "p4") if dialect == "POSTGRESQL" else ("start", "end", "token", "hb")
    values = (start, end, token, 1000)
    kinds = (param_types.TIMESTAMP, param_types.TIMESTAMP, param_types.STRING, param_types.INT64)
    return dict(zip(names, values, strict=True)), dict(zip(names, kinds, strict=True))


def drain(database: Any, dialect: str, token: str | None, start: datetime, end: datetime, lazy: bool) -> int:
    """The bare google-cloud-spanner client draining one partition query; returns the rows (records) seen."""
    params, types = _params(dialect, token, start, end)
    rows = 0
    with database.snapshot() as snapshot:
        for _ in snapshot.execute_sql(QUERY[dialect], params=params, param_types=types, timeout=None, lazy_decode=lazy):
            rows += 1
    return rows


def _reader_process(host: str, database_id: str, dialect: str, token: str, start: datetime, end: datetime, lazy: bool,
                    barrier: Any, results: Any) -> None:
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud import spanner

    database = spanner.Client(project=PROJECT).instance(INSTANCE).database(database_id)
    drain(database, dialect, token, start, start, lazy)  # session and channel ready before the clock starts
    barrier.wait()
    began = time.perf_counter()
    rows = drain(database, dialect, token, start, end, lazy)
    results.put((rows, began, time.perf_counter()))


def concurrent(host: str, database_id: str, dialect: str, token: str, start: datetime, end: datetime, lazy: bool, readers: int) -> tuple[int, float]:
    """`readers` processes drain the partition at once; (records, wall seconds from first start to last end)."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(readers), context.Queue()
    processes = [context.Process(target=_reader_process, args=(host, database_id, dialect, token, start, end, lazy, barrier, results))
                 for _ in range(readers)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    return sum(o[0] for o in outcomes), max(o[2] for o in outcomes) - min(o[1] for o in outcomes)


def _writer_process(host: str, database_id: str, dialect: str, writer: int, transactions: int, barrier: Any, results: Any) -> None:
    """One writer: `transactions` commits of 1-3 rows of its own keys through the official client, every fifth a
    read-write transaction (run_in_transaction), the others database.batch() (one Commit each)."""
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud import spanner

    database = spanner.Client(project=PROJECT).instance(INSTANCE).database(database_id)
    table, columns = _columns(dialect)
    base = (writer + 1) * 10_000_000

    def rows(i: int) -> list[tuple[Any, ...]]:
        return [(base + i * 3 + j, f"customer-{i % 97}", i * 0.5, "NEW", "2024-01-01T00:00:00Z") for j in range(1 + i % 3)]

    def commit(i: int) -> None:
        if i % 5 == 4:
            database.run_in_transaction(lambda transaction: transaction.insert_or_update(table, columns, rows(i)))
        else:
            with database.batch() as batch:
                batch.insert_or_update(table, columns, rows(i))

    commit(-1)  # session and channel ready before the clock starts
    barrier.wait()
    began = time.perf_counter()
    for i in range(transactions):
        commit(i)
    results.put((transactions, began, time.perf_counter()))


def concurrent_writes(server: Any, database_id: str, dialect: str, writers: int, transactions: int) -> tuple[float, float]:
    """`writers` processes commit `transactions` each at once; (transactions/s from first start to last end, server
    CPU ms per transaction over the same span, from its /proc)."""
    from bench.bench_workload import server_cpu_seconds

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(writers + 1), context.Queue()
    processes = [context.Process(target=_writer_process, args=(server.host, database_id, dialect, w, transactions, barrier, results))
                 for w in range(writers)]
    for process in processes:
        process.start()
    barrier.wait()
    cpu = server_cpu_seconds(server.pid)
    outcomes = [results.get(timeout=600) for _ in processes]
    cpu = server_cpu_seconds(server.pid) - cpu
    for process in processes:
        process.join()
    total = sum(o[0] for o in outcomes)
    return total / (max(o[2] for o in outcomes) - min(o[1] for o in outcomes)), cpu * 1000 / total


def bench_dialect(server: Any, dialect: str, records: int, rounds: int, readers: int, past_reads: bool = True,
                  writers: int = 4, writes: int = 1000) -> dict[str, Any]:
    from spanner_cdc.devstack.spanner_server import create_database

    database_id = f"b{uuid.uuid4().hex[:12]}"
    database = create_database(server.host, PROJECT, INSTANCE, database_id, DDL[dialect], dialect)
    began = time.perf_counter()
    start, end = _write(database, dialect, records)
    write_rate = records / (time.perf_counter() - began)
    start -= timedelta(microseconds=1)
    (roots,) = list(_root(database, dialect, start))
    expected = drain(database, dialect, roots, start, end, lazy=True)
    rates: dict[str, list[float]] = {"decoded": [], "lazy": [], f"{readers}x decoded": [], f"{readers}x lazy": [], "table": [], "past": [],
                                     "tx/s": [], "server ms/tx": []}
    for _ in range(rounds):  # interleaved, so background load hits every scenario alike
        rows, seconds = table_read(database, dialect, None)
        rates["table"].append(rows / seconds)
        if past_reads:  # a server without versions would answer with today's rows: only measured where it is right
            rows, seconds = table_read(database, dialect, start + (end - start) / 2)
            rates["past"].append(rows / seconds)
        for lazy in (False, True):
            began = time.perf_counter()
            count = drain(database, dialect, roots, start, end, lazy)
            rates["lazy" if lazy else "decoded"].append(count / (time.perf_counter() - began))
            assert count == expected, (count, expected)
            count, seconds = concurrent(server.host, database_id, dialect, roots, start, end, lazy, readers)
            assert count == expected * readers, (count, expected)
            rates[f"{readers}x {'lazy' if lazy else 'decoded'}"].append(count / seconds)
        if writers:  # in a database of its own, so the change stream measured above stays the same
            written = create_database(server.host, PROJECT, INSTANCE, f"w{uuid.uuid4().hex[:12]}", DDL[dialect], dialect)
            tx_rate, server_ms = concurrent_writes(server, written.database_id, dialect, writers, writes)
            rates["tx/s"].append(tx_rate)
            rates["server ms/tx"].append(server_ms)
    return {"dialect": dialect, "records": expected, "write": write_rate, **{k: statistics.median(v) if v else 0.0 for k, v in rates.items()}}


def _root(database: Any, dialect: str, start: datetime) -> list[str]:
    params, types = _params(dialect, None, start, start)
    with database.snapshot() as snapshot:
        (row,) = list(snapshot.execute_sql(QUERY[dialect], params=params, param_types=types, timeout=None))
    if dialect == "POSTGRESQL":
        children = row[0]["child_partitions_record"]["child_partitions"]
        return [c["token"] for c in children]
    ((_, _, ((_, _, children),)),) = row[0]
    return [c[0] for c in children]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--records", type=int, default=40_000, help="data change records in the partition (default 40000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported (default 3)")
    parser.add_argument("--readers", type=int, default=4, help="processes in the concurrent scenario (default 4)")
    parser.add_argument("--dialect", choices=("GOOGLE_STANDARD_SQL", "POSTGRESQL", "both"), default="both")
    parser.add_argument("--writers", type=int, default=4, help="processes in the concurrent write scenario; 0 skips it (default 4)")
    parser.add_argument("--writes", type=int, default=1000, help="transactions each writer commits per round (default 1000)")
    parser.add_argument("--no-past-reads", action="store_true", help="skip the read at a past timestamp (for a server without row versions)")
    args = parser.parse_args(argv)
    from spanner_cdc.devstack.spanner_server import LocalSpanner

    dialects = ["GOOGLE_STANDARD_SQL", "POSTGRESQL"] if args.dialect == "both" else [args.dialect]
    with tempfile.TemporaryDirectory(prefix="bench-local-spanner-") as tmp:
        with LocalSpanner(extra_args=SERVER_ARGS, log_path=Path(tmp) / "server.log") as server:
            results = [bench_dialect(server, d, args.records, args.rounds, args.readers, not args.no_past_reads, args.writers, args.writes)
                       for d in dialects]
    n = args.readers
    print(f"{COMMAND}: data change records/s served by one local server process, one partition, {os.cpu_count()} CPUs")
    print("  lazy = the bare client iterating rows without decoding them (lazy_decode=True): what the server serves;")
    print("  decoded = the bare client's default row decoding, which costs the client far more CPU than the server spends")
    print("  writes rec/s = rows written per second by database.batch() commits; table rows/s = one strong Read of every")
    print("  row (undecoded); past rows/s = the same Read at a timestamp halfway through the writes (row versions)")
    header = (f"{'dialect':<20} {'records':>8} {'1 lazy':>9} {'1 decoded':>10} {f'{n}x lazy':>9} {f'{n}x decoded':>11} {'1 lazy/target':>14} "
              f"{f'{n}x/1 lazy':>11} {'writes rec/s':>13} {'table rows/s':>13} {'past rows/s':>12}")
    print(header)
    for r in results:
        print(f"{r['dialect']:<20} {r['records']:>8} {r['lazy']:>9.0f} {r['decoded']:>10.0f} {r[f'{n}x lazy']:>9.0f} "
              f"{r[f'{n}x decoded']:>11.0f} {r['lazy'] / TARGET:>13.0%} {r[f'{n}x lazy'] / r['lazy']:>11.2f} {r['write']:>13.0f} "
              f"{r['table']:>13.0f} {r['past']:>12.0f}")
    if args.writers:
        print(f"concurrent writes: {args.writers} processes, each {args.writes} transactions of 1-3 rows through the official client")
        print("  (database.batch(), every fifth run_in_transaction), one server process without --fsync; server CPU from /proc")
        print(f"{'dialect':<20} {'tx/s':>8} {'tx/s / target':>14} {'server ms/tx':>13}")
        for r in results:
            print(f"{r['dialect']:<20} {r['tx/s']:>8.0f} {r['tx/s'] / WRITE_TARGET:>13.0%} {r['server ms/tx']:>13.3f}")
            figures.report(f"local server write tx/s, {args.writers} writers, {r['dialect']}", r["tx/s"], WRITE_TARGET, "tx/s")
    worst = min(r["lazy"] for r in results)
    print(f"medians over {args.rounds} interleaved rounds; {n}x = aggregate of {n} reader processes draining at once; "
          f"target >= {TARGET}/s to one reader: {'meets' if worst >= TARGET else 'MISSES'} (worst {worst:.0f}/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
