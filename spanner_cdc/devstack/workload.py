"""Seeded write workload through google-cloud-spanner, with a ground-truth log of every committed row change."""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import msgspec

from spanner_cdc.devstack.workload_schema import (
    TABLES,
    TABLES_BY_NAME,
    Table,
    ddl_statements,
    encode,
    random_value,
)
from spanner_cdc.devstack.workload_wire import BatchWriter, fill_mutation
from spanner_cdc.errors import ConfigError, SpannerCdcError
from spanner_cdc.names import IMMUTABLE_KEY_RANGE
from spanner_cdc.times import parse_rfc3339

log = logging.getLogger(__name__)

__all__ = [
    "TABLES_BY_NAME",
    "GroundTruthRow",
    "WorkloadStats",
    "ddl_statements",
    "ground_truth_by_transaction",
    "load_ground_truth",
    "run_workload",
    "setup_database",
]

RowKey = tuple[str, tuple[Any, ...]]


@dataclass(frozen=True)
class GroundTruthRow:
    """One committed row change. Values are in change stream encoding (workload_schema.encode);
    `new_values` are the written non-key columns (every column on INSERT, none on DELETE);
    `old_values` the same columns before an UPDATE, the whole row before a DELETE."""

    commit_timestamp: datetime
    table: str
    mod_type: str
    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]
    transaction_tag: str
    transaction: int  # index of the transaction in the workload


@dataclass
class WorkloadStats:
    transactions: int = 0
    rows: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    first_commit: datetime | None = None
    last_commit: datetime | None = None
    elapsed_seconds: float = 0.0

    def count(self, mod_type: str) -> None:
        self.rows += 1
        if mod_type == "INSERT":
            self.inserts += 1
        elif mod_type == "UPDATE":
            self.updates += 1
        else:
            self.deletes += 1

    @property
    def tx_per_second(self) -> float:
        return self.transactions / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0


@dataclass
class _Write:
    table: Table
    key: tuple[Any, ...]
    operation: str  # insert | update | insert_or_update | delete
    mod_type: str
    columns: list[str] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    encoded_key: tuple[Any, ...] = ()  # the key and values in change stream encoding, which is also their wire text
    encoded: list[Any] = field(default_factory=list)


def setup_database(
    database: Any, dialect: str, stream: str, value_capture_type: str = "OLD_AND_NEW_VALUES",
    partition_mode: str = IMMUTABLE_KEY_RANGE,
) -> None:  # fmt: skip
    """Create `database` if missing (a client Database made with the matching dialect), then its tables and
    the change stream `stream` FOR ALL in `partition_mode`."""
    statements = ddl_statements(dialect, stream, value_capture_type, partition_mode)
    if not database.exists():
        database.create().result(120)
    database.update_ddl(statements).result(120)
    log.info("%s: workload tables and change stream created in %s (%s)", stream, database.name, dialect)


def run_workload(
    database: Any,
    *,
    transactions: int,
    tx_per_second: float | None = None,
    seed: int = 0,
    ground_truth: Path,
    batch: int = 1,
) -> WorkloadStats:
    """Commit `transactions` seeded transactions (1-5 row changes over several tables each) at
    `tx_per_second` (None: as fast as possible) and write one ground-truth JSON line per changed row.

    batch=1 commits each transaction on its own (every fifth as a read-write transaction); batch=N > 1 sends up
    to N transactions over disjoint rows per BatchWrite request (one mutation group, so one transaction and one
    commit timestamp each), tagged per request; each row's changes commit in plan order, transactions over
    disjoint rows possibly not."""
    if transactions < 0:
        raise ConfigError("transactions", transactions, "a number >= 0")
    if tx_per_second is not None and tx_per_second <= 0:
        raise ConfigError("rate", tx_per_second, "transactions per second > 0, or none for as fast as possible")
    if batch < 1:
        raise ConfigError("batch", batch, "a number of transactions per request >= 1")
    rng = random.Random(seed)
    rows = _existing_rows(database)
    stats = WorkloadStats()
    started = time.monotonic()
    ground_truth.parent.mkdir(parents=True, exist_ok=True)
    with open(ground_truth, "w", encoding="utf-8") as out:
        run = _run_batched if batch > 1 else _run_one_by_one
        run(database, rng, rows, out, stats, _Pace(started, tx_per_second), seed, transactions, batch)
    stats.elapsed_seconds = time.monotonic() - started
    log.info(
        "workload: %s transactions, %s rows in %.1f s (%.0f tx/s) up to %s",
        stats.transactions,
        stats.rows,
        stats.elapsed_seconds,
        stats.tx_per_second,
        stats.last_commit,
    )
    return stats


@dataclass(frozen=True)
class _Pace:
    started: float
    tx_per_second: float | None

    def wait_for(self, index: int) -> None:
        if self.tx_per_second is not None:
            delay = self.started + index / self.tx_per_second - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the client, not synchronisation


def _run_one_by_one(
    database: Any, rng: random.Random, rows: dict[RowKey, dict[str, Any]], out: TextIO, stats: WorkloadStats,
    pace: _Pace, seed: int, transactions: int, batch: int,
) -> None:
    for index in range(transactions):
        pace.wait_for(index)
        writes = _plan(rng, rows)
        tag = "" if index % 7 == 3 else f"app=workload,seed={seed},tx={index}"
        commit_ts = _commit(database, writes, tag, use_transaction=index % 5 == 4)
        befores = [_apply_to_view(rows, write) for write in writes]
        _log_transaction(out, stats, commit_ts, writes, befores, tag, index)


_Planned = tuple[int, list[_Write], list[dict[str, Any] | None]]  # index, writes, rows before them


_OPEN_REQUESTS = 4  # requests being filled at once; the first is sent when full, or when one more would open


def _run_batched(
    database: Any, rng: random.Random, rows: dict[RowKey, dict[str, Any]], out: TextIO, stats: WorkloadStats,
    pace: _Pace, seed: int, transactions: int, batch: int,
) -> None:
    """Transactions are planned in order against the view, each placed in the first open request after every open
    request holding one of its rows: the groups of one request touch disjoint rows, so they commute (Spanner may apply
    them in any order), and every row's changes commit in plan order (transactions over disjoint rows may commit out
    of plan order). Requests are sent in order, each once the previous one answered; the next ones fill meanwhile, and
    a request's ground truth is written while the server commits the next one."""
    opened: list[tuple[list[_Planned], set[RowKey]]] = []
    requests = 0
    writer = BatchWriter(database)
    in_flight: tuple[Future[list[datetime]], list[_Planned], str] | None = None

    def send_first() -> None:
        nonlocal in_flight, requests
        pending, _ = opened.pop(0)
        tag = "" if requests % 7 == 3 else f"app=workload,seed={seed},batch={requests}"
        request = _request(writer, pending, tag)
        answered = _answered(in_flight)
        pace.wait_for(max(index for index, _, _ in pending))
        in_flight = (sender.submit(_send_batch, writer, request, len(pending)), pending, tag)
        requests += 1
        _log_request(out, stats, answered)

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="workload-batch") as sender:
            for index in range(transactions):
                writes = _plan(rng, rows)
                keys = {(w.table.name, w.key) for w in writes}
                level = next((i + 1 for i in range(len(opened) - 1, -1, -1) if opened[i][1] & keys), 0)
                while level < len(opened) and len(opened[level][0]) >= batch:
                    level += 1
                if level == len(opened):
                    opened.append(([], set()))
                opened[level][0].append((index, writes, [_apply_to_view(rows, write) for write in writes]))
                opened[level][1].update(keys)
                while opened and (len(opened[0][0]) >= batch or len(opened) > _OPEN_REQUESTS):
                    send_first()
            while opened:
                send_first()
            _log_request(out, stats, _answered(in_flight))
    finally:
        writer.close()


_Answered = tuple[list[datetime], list[_Planned], str]  # a request's commit timestamps, its transactions, its tag


def _answered(in_flight: tuple[Future[list[datetime]], list[_Planned], str] | None) -> _Answered | None:
    """Wait for the request in flight (None: there is none): its commit timestamps with what it committed."""
    if in_flight is None:
        return None
    future, pending, tag = in_flight
    return future.result(), pending, tag


def _log_request(out: TextIO, stats: WorkloadStats, answered: _Answered | None) -> None:
    if answered is not None:
        committed, pending, tag = answered
        for commit_ts, (index, writes, befores) in zip(committed, pending, strict=True):
            _log_transaction(out, stats, commit_ts, writes, befores, tag, index)


def _request(writer: BatchWriter, pending: list[_Planned], tag: str) -> Any:
    """The BatchWrite request of `pending`: a mutation group (so a transaction) per planned transaction."""
    request = writer.request(tag)
    for _, writes, _ in pending:
        mutations = request.mutation_groups.add().mutations
        for write in writes:
            key_names = [c.name for c in write.table.keys]
            fill_mutation(mutations.add(), write.operation, write.table.name, key_names, write.encoded_key, write.columns, write.encoded)
    return request


def _send_batch(writer: BatchWriter, request: Any, groups: int) -> list[datetime]:
    """Send one request; the commit timestamp of each of its `groups` mutation groups, in request order."""
    committed: dict[int, datetime] = {}
    for outcome in writer.send(request):
        if outcome.code:
            raise SpannerCdcError(f"a workload transaction was refused by BatchWrite: {outcome.message}")
        if outcome.commit_timestamp is not None:
            committed.update((i, outcome.commit_timestamp) for i in outcome.indexes)
    if any(position not in committed for position in range(groups)):
        raise SpannerCdcError("BatchWrite reported no commit timestamp for a workload transaction")
    return [committed[position] for position in range(groups)]


def _log_transaction(
    out: TextIO, stats: WorkloadStats, commit_ts: datetime, writes: list[_Write], befores: list[dict[str, Any] | None],
    tag: str, index: int,
) -> None:
    stamp = commit_ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for write, before in zip(writes, befores, strict=True):
        out.write(_truth_text(_truth_line(stamp, write, before, tag, index)))
        stats.count(write.mod_type)
    stats.transactions += 1
    stats.first_commit = min(stats.first_commit or commit_ts, commit_ts)
    stats.last_commit = max(stats.last_commit or commit_ts, commit_ts)


_encode = msgspec.json.Encoder().encode


def _truth_text(line: dict[str, Any]) -> str:
    """One ground-truth JSON line: msgspec's (a tenth of json's time) unless a value is a non-finite float, which
    msgspec would write as null where json writes NaN or Infinity."""
    if all(_finite(line[part].values()) for part in ("keys", "new_values", "old_values")):
        try:
            return _encode(line).decode("utf-8") + "\n"
        except (TypeError, OverflowError):
            pass
    return json.dumps(line, separators=(",", ":")) + "\n"


def _finite(values: Iterable[Any]) -> bool:
    for value in values:
        if type(value) is float and not math.isfinite(value):
            return False
        if type(value) is list and not _finite(value):
            return False
    return True


def load_ground_truth(path: Path) -> list[GroundTruthRow]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            data = json.loads(line)
            data["commit_timestamp"] = parse_rfc3339(data["commit_timestamp"])
            rows.append(GroundTruthRow(**data))
    return rows


# ---------------------------------------------------------------------------------- generation


def _existing_rows(database: Any) -> dict[RowKey, dict[str, Any]]:
    """The rows already in the tables, so a second run resolves INSERT / UPDATE / DELETE correctly."""
    rows: dict[RowKey, dict[str, Any]] = {}
    for table in TABLES:
        names = [c.name for c in (*table.keys, *table.values)]
        try:
            with database.snapshot() as snapshot:
                found = list(snapshot.execute_sql(f"SELECT {', '.join(names)} FROM {table.name}"))
        except Exception as exc:  # the client raises google.api_core errors of several kinds
            raise SpannerCdcError(
                f"cannot read workload table {table.name} of {database.name}: {exc}; "
                "create the workload tables first (--setup, or setup_database())"
            ) from exc
        for values in found:
            by_name = dict(zip(names, values, strict=True))
            key = tuple(by_name[c.name] for c in table.keys)
            rows[(table.name, key)] = {c.name: encode(c.type, by_name[c.name]) for c in table.values}
    return rows


def _plan(rng: random.Random, rows: dict[RowKey, dict[str, Any]]) -> list[_Write]:
    writes: list[_Write] = []
    used: set[RowKey] = set()
    for _ in range(rng.choice((1, 1, 2, 2, 3, 3, 4, 5))):
        table = rng.choices(TABLES, weights=[t.weight for t in TABLES])[0]
        key = table.random_key(rng)
        if (table.name, key) in used:
            continue
        used.add((table.name, key))
        if (table.name, key) not in rows:
            operation = "insert_or_update" if rng.random() < 0.2 else "insert"
            write = _Write(table, key, operation, "INSERT", [c.name for c in table.values], [random_value(c, rng) for c in table.values])
        elif rng.random() < 0.25:
            write = _Write(table, key, "delete", "DELETE")
        else:
            chosen = rng.sample(table.values, rng.randint(1, len(table.values)))
            operation = "insert_or_update" if rng.random() < 0.2 else "update"
            write = _Write(table, key, operation, "UPDATE", [c.name for c in chosen], [random_value(c, rng) for c in chosen])
        types = table.types
        write.encoded_key = tuple(encode(c.type, v) for c, v in zip(table.keys, key, strict=True))
        write.encoded = [encode(types[name], value) for name, value in zip(write.columns, write.values, strict=True)]
        writes.append(write)
    return writes


def _commit(database: Any, writes: list[_Write], tag: str, use_transaction: bool) -> datetime:
    """Commit the writes in one transaction; the commit timestamp comes from the client's commit response."""
    if use_transaction:
        attempts: list[Any] = []

        def work(transaction: Any) -> None:
            attempts.append(transaction)
            _mutate(transaction, writes)

        database.run_in_transaction(work, **({"transaction_tag": tag} if tag else {}))
        committed = attempts[-1].committed
    else:
        with database.batch(request_options={"transaction_tag": tag} if tag else None) as batch:
            _mutate(batch, writes)
        committed = batch.committed
    if committed is None:
        raise SpannerCdcError("the Spanner client reported no commit timestamp for a workload transaction")
    return committed


def _mutate(target: Any, writes: list[_Write]) -> None:
    from google.cloud.spanner_v1 import KeySet

    for write in writes:
        key_names = [c.name for c in write.table.keys]
        if write.operation == "delete":
            target.delete(write.table.name, KeySet(keys=[list(write.key)]))
        else:
            getattr(target, write.operation)(write.table.name, key_names + write.columns, [[*write.key, *write.values]])


def _apply_to_view(rows: dict[RowKey, dict[str, Any]], write: _Write) -> dict[str, Any] | None:
    """Update the workload's view of the rows; returns the row before the write."""
    row_key = (write.table.name, write.key)
    before = rows.get(row_key)
    if write.mod_type == "DELETE":
        rows.pop(row_key)
        return before
    after = dict(before) if before is not None else dict.fromkeys(write.table.types)
    after.update(zip(write.columns, write.encoded, strict=True))
    rows[row_key] = after
    return before


def _truth_line(
    commit_timestamp: str, write: _Write, before: dict[str, Any] | None, tag: str, index: int
) -> dict[str, Any]:
    keys = {c.name: v for c, v in zip(write.table.keys, write.encoded_key, strict=True)}
    new_values = dict(zip(write.columns, write.encoded, strict=True))
    if write.mod_type == "DELETE":
        old_values = dict(before or {})
    elif write.mod_type == "UPDATE":
        old_values = {name: (before or {}).get(name) for name in write.columns}
    else:
        old_values = {}
    return {
        "commit_timestamp": commit_timestamp,
        "table": write.table.name,
        "mod_type": write.mod_type,
        "keys": keys,
        "new_values": new_values,
        "old_values": old_values,
        "transaction_tag": tag,
        "transaction": index,
    }


def ground_truth_by_transaction(rows: list[GroundTruthRow]) -> Iterator[list[GroundTruthRow]]:
    """The rows grouped per transaction, in commit order."""
    current: list[GroundTruthRow] = []
    for row in rows:
        if current and row.transaction != current[0].transaction:
            yield current
            current = []
        current.append(row)
    if current:
        yield current
