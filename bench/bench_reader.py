"""Benchmark: typed PartitionReader records/s against the bare client draining the same partition, side by side."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import SINGLE_PARTITION_SERVER_ARGS, figures
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.source.client import stream_metadata
from spanner_cdc.source.queries import build_query
from spanner_cdc.source.reader import PartitionReader

COMMAND = "python -m bench.bench_reader"
# the typed reader / the bare client draining (and decoding) the same partition (issue 15)
TARGETS = {"GOOGLE_STANDARD_SQL": 5.0, "POSTGRESQL": 3.0}
PROJECT, INSTANCE = "bench-project", "bench-instance"
SERVER_ARGS = SINGLE_PARTITION_SERVER_ARGS
DDL = {
    "GOOGLE_STANDARD_SQL": [
        "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount FLOAT64, Status STRING(MAX),"
        " Updated TIMESTAMP) PRIMARY KEY (OrderId)",
        "CREATE TABLE Lines (OrderId INT64 NOT NULL, LineNo INT64 NOT NULL, Sku STRING(MAX), Qty INT64)"
        " PRIMARY KEY (OrderId, LineNo)",
        "CREATE CHANGE STREAM Everything FOR ALL",
    ],
    "POSTGRESQL": [
        "create table orders (orderid bigint primary key, customer varchar, amount float8, status varchar,"
        " updated timestamptz)",
        "create table lines (orderid bigint not null, lineno bigint not null, sku varchar, qty bigint,"
        " primary key (orderid, lineno))",
        "CREATE CHANGE STREAM everything FOR ALL",
    ],
}
STREAM = {"GOOGLE_STANDARD_SQL": "Everything", "POSTGRESQL": "everything"}


def _write(database: Any, dialect: str, transactions: int) -> tuple[datetime, datetime]:
    """Each transaction: one order and three lines -> two data change records (one with 3 mods)."""
    orders, lines = ("orders", "lines") if dialect == "POSTGRESQL" else ("Orders", "Lines")
    order_cols = ("orderid", "customer", "amount", "status", "updated")
    line_cols = ("orderid", "lineno", "sku", "qty")
    if dialect != "POSTGRESQL":
        order_cols = ("OrderId", "Customer", "Amount", "Status", "Updated")
        line_cols = ("OrderId", "LineNo", "Sku", "Qty")
    first: datetime | None = None
    last: datetime | None = None
    for i in range(transactions):
        with database.batch() as batch:
            batch.insert(orders, order_cols, [(i, f"customer-{i % 97}", i * 1.25, "NEW", datetime.now(UTC))])
            batch.insert(lines, line_cols, [(i, n, f"sku-{(i * 7 + n) % 1000}", n + 1) for n in range(3)])
        last = batch.committed
        first = first or last
    assert first is not None and last is not None
    return first, last


def _root_token(database: Any, stream: str, dialect: str, start: datetime, end: datetime) -> str:
    reader = PartitionReader(database, stream, dialect=dialect, heartbeat_ms=1000)
    tokens = [c.token for record in reader.read(None, start, end) for c in getattr(record, "child_partitions", ())]
    if len(tokens) != 1:
        raise SystemExit(f"expected one partition, got {tokens}: the server's policy flags changed?")
    return tokens[0]


def _bare(database: Any, stream: str, dialect: str, token: str, start: datetime, end: datetime) -> int:
    """The google-cloud-spanner client merely draining the partition query (rows decoded, nothing else)."""
    query = build_query(stream, dialect, token, start, end, 1000)
    rows = 0
    with database.snapshot() as snapshot:
        for _ in snapshot.execute_sql(query.sql, params=query.params, param_types=query.param_types, timeout=None):
            rows += 1
    return rows


def _undecoded(database: Any, stream: str, dialect: str, token: str, start: datetime, end: datetime) -> int:
    """The client draining the partition with rows left undecoded (lazy_decode): what the server and the client's
    streaming cost without any decoding, the ceiling of any reader's rate on this server."""
    query = build_query(stream, dialect, token, start, end, 1000)
    rows = 0
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            query.sql, params=query.params, param_types=query.param_types, timeout=None, lazy_decode=True
        )
        for _ in results:
            rows += 1
    return rows


def _typed(database: Any, stream: str, dialect: str, token: str, start: datetime, end: datetime) -> int:
    return sum(1 for _ in PartitionReader(database, stream, dialect=dialect, heartbeat_ms=1000).read(token, start, end))


def _timed(run: Callable[[], int]) -> tuple[int, float, float]:
    """Records, wall seconds, and this process's CPU seconds (the client side's own cost, whatever the load)."""
    began, cpu = time.perf_counter(), time.process_time()
    count = run()
    return count, time.perf_counter() - began, time.process_time() - cpu


def bench_dialect(server: LocalSpanner, dialect: str, transactions: int, rounds: int) -> dict[str, Any]:
    database = create_database(server.host, PROJECT, INSTANCE, f"b{uuid.uuid4().hex[:12]}", DDL[dialect], dialect)
    stream = STREAM[dialect]
    created = stream_metadata(database, stream, dialect).created_at
    start = created or datetime.now(UTC)
    began = time.perf_counter()
    _, last = _write(database, dialect, transactions)
    write_seconds = time.perf_counter() - began
    end = last + timedelta(microseconds=1)
    token = _root_token(database, stream, dialect, start, end)
    args = (database, stream, dialect, token, start, end)
    readers = {"bare": _bare, "typed": _typed, "undecoded": _undecoded}
    # the partition's first read, undecoded: the server encodes each row once and keeps it for the later reads
    first_count, first_seconds, _ = _timed(lambda: _undecoded(*args))
    for fn in readers.values():  # warm every path (session, channel, caches) before measuring
        fn(*args)
    rates: dict[str, list[float]] = {name: [] for name in readers}
    cpu_us: dict[str, list[float]] = {name: [] for name in readers}
    counts: dict[str, set[int]] = {name: set() for name in readers}
    for _ in range(rounds):  # interleaved and paired, so background load hits all alike
        for name, fn in readers.items():
            count, seconds, cpu = _timed(lambda fn=fn: fn(*args))  # type: ignore[misc]
            counts[name].add(count)
            rates[name].append(count / seconds)
            cpu_us[name].append(cpu / count * 1e6)
    if not counts["bare"] == counts["typed"] == counts["undecoded"] or len(counts["bare"]) != 1:
        raise SystemExit(f"{dialect}: the readers saw different record counts: {counts}")
    ratios = [t / b for t, b in zip(rates["typed"], rates["bare"], strict=True)]
    return {
        "dialect": dialect,
        "records": counts["bare"].pop(),
        "write_tps": transactions / write_seconds,
        "bare": statistics.median(rates["bare"]),
        "typed": statistics.median(rates["typed"]),
        "undecoded": statistics.median(rates["undecoded"]),
        "first_read": first_count / first_seconds,
        "of_undecoded": statistics.median([t / u for t, u in zip(rates["typed"], rates["undecoded"], strict=True)]),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "bare_cpu": statistics.median(cpu_us["bare"]),
        "typed_cpu": statistics.median(cpu_us["typed"]),
        "undecoded_cpu": statistics.median(cpu_us["undecoded"]),
    }


def bench_small(partitions: int, rounds: int, tmp: Path) -> dict[str, Any]:
    """Many small partitions, each read by one query, one after another: the client CPU a query costs the typed reader
    and the bare client's drain; interleaved rounds, one server."""
    from bench.extract_support import STREAM as SMALL_STREAM
    from bench.extract_support import new_database, policy_args, write_orders
    from spanner_cdc.extract.planning import root_partitions

    dialect = "GOOGLE_STANDARD_SQL"
    with LocalSpanner(extra_args=policy_args(partitions), log_path=tmp / "small-server.log") as server:
        database = new_database(server)
        created = stream_metadata(database, SMALL_STREAM, dialect).created_at
        assert created is not None
        end = write_orders(database, 2 * partitions, lines=1, spread=2**62 // (2 * partitions))
        _, roots = root_partitions(database, SMALL_STREAM, dialect=dialect, heartbeat_ms=1000, at=created,
                                   retention=timedelta(days=1), namespace="bench")  # fmt: skip
        tokens = [root.token for root in roots]
        readers: dict[str, Callable[[], int]] = {
            "typed": lambda: sum(_typed(database, SMALL_STREAM, dialect, token, created, end) for token in tokens),
            "bare": lambda: sum(_bare(database, SMALL_STREAM, dialect, token, created, end) for token in tokens),
        }
        cpu_ms: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(rounds):
            for name, run in readers.items():
                _, _, cpu = _timed(run)
                cpu_ms[name].append(cpu / len(tokens) * 1e3)
    return {"partitions": len(tokens), **{name: statistics.median(values) for name, values in cpu_ms.items()}, "rounds": cpu_ms}


def _print_small(result: dict[str, Any], rounds: int) -> None:
    print(f"{COMMAND} --small-partitions {result['partitions']}: client CPU ms a query, {result['partitions']:,} partitions of a "
          f"few records each read one after another, medians of {rounds} interleaved rounds")  # fmt: skip
    for name in ("typed", "bare"):
        print(f"  {name:<16} {result[name]:6.3f}   rounds: " + " ".join(f"{v:.3f}" for v in result["rounds"][name]))
    print(f"  typed / the bare client's drain: {result['typed'] / result['bare']:.2f}x the CPU")


def _print(results: list[dict[str, Any]], rounds: int) -> None:
    print(f"{COMMAND}: typed PartitionReader vs bare google-cloud-spanner drain, one partition, same server and run")
    print(
        f"{'dialect':<20} {'records':>8} {'bare rec/s':>11} {'typed rec/s':>12} {'undecoded rec/s':>16} {'first read':>11} {'typed/bare':>11} "
        f"{'typed/undecoded':>16} {'client CPU us/rec bare/typed/undecoded':>39}  typed/bare per round"
    )
    for r in results:
        per_round = " ".join(f"{x:.2f}" for x in r["ratios"])
        cpu = f"{r['bare_cpu']:.1f} / {r['typed_cpu']:.1f} / {r['undecoded_cpu']:.1f}"
        print(
            f"{r['dialect']:<20} {r['records']:>8} {r['bare']:>11.0f} {r['typed']:>12.0f} {r['undecoded']:>16.0f} {r['first_read']:>11.0f} "
            f"{r['ratio']:>10.2f}x {r['of_undecoded']:>15.2f}x {cpu:>39}  {per_round}"
        )
    verdicts = ", ".join(
        f"{r['dialect']} >= {TARGETS[r['dialect']]:.0f}x: {'meets' if r['ratio'] >= TARGETS[r['dialect']] else 'MISSES'}" for r in results
    )
    print(f"rates: medians over {rounds} interleaved rounds; typed/bare: median of the paired rounds; targets {verdicts}")
    print("undecoded: the client draining rows it leaves undecoded (no reader can beat it on this server); first read: "
          "the same, the partition's first drain (the server encodes its rows, later reads reuse them); "
          "client CPU: this process's CPU time per record")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--transactions", type=int, default=5000, help="committed transactions (2 records each)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved measurement rounds per reader")
    parser.add_argument("--dialect", choices=("GOOGLE_STANDARD_SQL", "POSTGRESQL", "both"), default="both")
    parser.add_argument("--small-partitions", type=int, default=0,
                        help="instead: the client CPU a query costs over this many small partitions (GoogleSQL)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.small_partitions:
        with tempfile.TemporaryDirectory(prefix="bench-reader-") as tmp:
            _print_small(bench_small(args.small_partitions, args.rounds, Path(tmp)), args.rounds)
        return 0
    dialects = ["GOOGLE_STANDARD_SQL", "POSTGRESQL"] if args.dialect == "both" else [args.dialect]
    with tempfile.TemporaryDirectory(prefix="bench-reader-") as tmp:
        server = LocalSpanner(extra_args=SERVER_ARGS, log_path=Path(tmp) / "server.log")
        with server:
            results = [bench_dialect(server, dialect, args.transactions, args.rounds) for dialect in dialects]
    _print(results, args.rounds)
    for r in results:
        figures.report(f"typed reader / bare client, {r['dialect']}", r["ratio"], TARGETS[r["dialect"]], "x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
