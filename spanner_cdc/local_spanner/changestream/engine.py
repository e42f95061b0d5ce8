"""The change stream engine of the local server: streams, the change log, partitions and queries."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.local_spanner.changestream import codec
from spanner_cdc.local_spanner.changestream.commit_records import ColumnTypesCache, build_transaction
from spanner_cdc.local_spanner.changestream.journal import Journal
from spanner_cdc.local_spanner.changestream.mutable_query import read_mutable_partition, read_mutable_roots, view
from spanner_cdc.local_spanner.changestream.partitions import Partition, from_us, to_us
from spanner_cdc.local_spanner.changestream.policy import PartitionPolicy
from spanner_cdc.local_spanner.changestream.query import read_partition, read_roots
from spanner_cdc.local_spanner.changestream.reshape import Reshaper
from spanner_cdc.local_spanner.changestream.streams import StreamState, same_definition, validate
from spanner_cdc.local_spanner.clock import ServerClock
from spanner_cdc.local_spanner.model import QueryError, RowChange, StreamDef, TableInfo

log = logging.getLogger(__name__)

# A timestamp handed out by the clock that has not reached commit() after this long (real seconds)
# belongs to a commit that will never arrive (failed, or had nothing for the engine); stop waiting.
STALE_TIMESTAMP_SECONDS = 2.0
MUTABLE_MAX_RANGE_US = 30 * 60 * 1_000_000  # a MUTABLE_KEY_RANGE query reads at most 30 minutes



def bad_token(token: str, stream: str) -> str:
    """A query's unknown partition token: INVALID_ARGUMENT, in the words of Google's emulator (and the name here)."""
    return (
        "Specified partition_token is invalid, as it does not belong to the Change Stream associated with the TVF. "
        f"Received partition_token: {token} (change stream {stream} has no partition {token!r})."
    )

class ChangeStreamEngine:
    """Thread-safe. commit() must be called in commit timestamp order (the server's commit lock)
    for every commit, also those without tracked changes, so readers learn that time has passed."""

    def __init__(
        self, clock: ServerClock, data_dir: Path | None = None, policy: PartitionPolicy | None = None, *, fsync: bool = False
    ) -> None:
        self.clock = clock
        self.policy = policy or PartitionPolicy()
        self.cond = threading.Condition(threading.RLock())
        self._dbs: dict[str, dict[str, TableInfo]] = {}
        self._streams: dict[str, dict[str, StreamState]] = {}
        self._appended = 0  # newest commit timestamp handed to commit(), µs
        self._frontier = 0  # every commit <= this is in the log, and none will come; µs
        self._pending: tuple[int, float] | None = None  # (issued timestamp, real time first seen)
        self._version = 0
        self._journal: Journal | None = None
        self._column_types = ColumnTypesCache()
        self._commit_codec = codec.CommitCodec()
        self._reshaper = Reshaper(
            self.policy, clock, self.frontier_locked, lambda: self._appended, self._write, self._changed_locked
        )
        if data_dir is not None:
            # --fsync: the change records of a commit reach the disk before it is answered, as its rows do
            self._journal = Journal(Path(data_dir) / "changestreams", fsync=fsync)
            self._recover(self._journal)

    # ----------------------------------------------------------------- streams and schema

    def create_stream(self, db: str, stream: StreamDef, tables: Mapping[str, TableInfo]) -> None:
        with self.cond:
            existing = self._streams.get(db, {}).get(stream.name)
            if existing is not None:
                if same_definition(existing.definition, stream):
                    return  # replayed DDL after a restart
                raise QueryError("ALREADY_EXISTS", f"change stream {stream.name} already exists in {db}")
            self._set_tables(db, tables)
            validate(stream, self._dbs[db])
            created = max(
                to_us(stream.created_at) if stream.created_at else to_us(self.clock.now()), self._appended + 1
            )
            definition = replace(stream, created_at=from_us(created))
            state = StreamState(db=db, definition=definition, created=created)
            self._streams.setdefault(db, {})[stream.name] = state
            self._write({"op": "stream", "db": db, "stream": codec.stream_to_json(definition)})
            roots = self._reshaper.roots(state)
            log.info("%s: created at %s with %s partitions", stream.name, definition.created_at, len(roots))

    def alter_stream(self, db: str, stream: StreamDef, tables: Mapping[str, TableInfo]) -> None:
        with self.cond:
            state = self._stream(db, stream.name)
            self._set_tables(db, tables)
            validate(stream, self._dbs[db])
            state.definition = replace(stream, created_at=from_us(state.created))
            self._write({"op": "stream", "db": db, "stream": codec.stream_to_json(state.definition)})

    def drop_stream(self, db: str, name: str) -> None:
        with self.cond:
            state = self._stream(db, name)
            state.dropped = True
            del self._streams[db][name]
            self._write({"op": "drop", "db": db, "name": name})
            self._changed_locked()

    def update_tables(self, db: str, tables: Mapping[str, TableInfo]) -> None:
        with self.cond:
            self._set_tables(db, tables)

    def streams(self, db: str) -> list[StreamDef]:
        with self.cond:
            return [state.definition for state in self._streams.get(db, {}).values()]

    # ----------------------------------------------------------------- commits

    def commit(
        self, db: str, commit_ts: datetime, transaction_id: str, tag: str, changes: Sequence[RowChange], *,
        system: bool = False, excluded: bool = False,
    ) -> None:
        """`system`: a transaction the server ran itself (a row deletion policy); `excluded`: the transaction asked
        to be left out of change streams (exclude_txn_from_change_streams), which streams with allow_txn_exclusion do."""
        ts = to_us(commit_ts)
        with self.cond:
            if ts <= self._appended:
                raise ValueError(
                    f"commit timestamp {commit_ts} is not after the previous one {from_us(self._appended)}"
                )
            if ts <= self._frontier:
                log.error("commit at %s arrived after readers passed %s", commit_ts, from_us(self._frontier))
            self._appended = ts
            streams = list(self._streams.get(db, {}).values())
            if changes and streams:
                if excluded:
                    streams_logging = [s for s in streams if s.definition.options.get("allow_txn_exclusion") != "true"]
                else:
                    streams_logging = streams
                self._log_commit(db, streams_logging, ts, transaction_id or f"{ts:016x}", tag or "", changes, system)
            for state in streams:
                self._reshaper.tick(state)
            self._changed_locked()

    def _log_commit(
        self, db: str, streams: list[StreamState], ts: int, transaction_id: str, tag: str, changes: Sequence[RowChange],
        system: bool,
    ) -> None:
        commit_timestamp = from_us(ts)
        period = self.policy.split_period_us
        logged: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        touched: list[tuple[StreamState, dict[str, Partition]]] = []
        for state in streams:
            if ts < state.created:
                continue
            built = build_transaction(
                state.definition,
                self._dbs.get(db, {}),
                changes,
                lambda h, state=state: state.partitions.route(h, ts),  # type: ignore[misc]
                commit_timestamp=commit_timestamp,
                server_transaction_id=transaction_id,
                transaction_tag=tag,
                types=self._column_types,
                system_transaction=system,
            )
            if not built:
                continue
            for partition, record in built:
                partition.append(ts, record, period)
            logged[state.definition.name] = [(p.token, r) for p, r in built]
            touched.append((state, {p.token: p for p, _ in built}))
        if logged and self._journal is not None:
            for entry in self._commit_codec.encode(db, ts, logged):
                self._journal.write(entry)
        for state, partitions in touched:
            self._reshaper.split_hot(state, partitions.values())

    # ----------------------------------------------------------------- queries

    def query(
        self,
        db: str,
        stream: str,
        token: str | None,
        start: datetime,
        end: datetime | None,
        heartbeat_ms: int,
        stop: threading.Event,
    ) -> Iterator[dict[str, Any]]:
        """Validates at once (raising QueryError) and returns the iterator of spec-shaped records."""
        with self.cond:
            state = self._stream(db, stream)
            if not 1000 <= heartbeat_ms <= 300_000:
                raise QueryError(  # OUT_OF_RANGE, as Google's emulator answers
                    "OUT_OF_RANGE",
                    f"heartbeat_milliseconds={heartbeat_ms} is out of range: it must be between 1000 and 300000",
                )
            start_us = to_us(start)
            end_us = None if end is None else to_us(end)
            if end_us is not None and end_us < start_us:
                raise QueryError(
                    "INVALID_ARGUMENT",
                    f"end_timestamp {from_us(end_us).isoformat()} is before start_timestamp {from_us(start_us).isoformat()}",
                )
            if start_us < state.created:
                raise QueryError(
                    "OUT_OF_RANGE",
                    f"start_timestamp {from_us(start_us).isoformat()} is before change stream {stream} was created; "
                    f"the earliest allowed is {from_us(state.created).isoformat()}",
                )
            earliest = self.clock.now() - state.definition.retention
            if start_us < to_us(earliest):
                raise QueryError(
                    "OUT_OF_RANGE",
                    f"start_timestamp {from_us(start_us).isoformat()} is outside the retention period "
                    f"({state.definition.retention}) of change stream {stream}; the earliest allowed is {earliest.isoformat()}",
                )
            if state.definition.mutable_key_range:
                return self._mutable_query(state, token, start_us, end_us, heartbeat_ms, stop)
            if token is None:
                return read_roots(self, state, start_us, stop)
            partition = state.partitions.get(token)
            if partition is None:
                raise QueryError("INVALID_ARGUMENT", bad_token(token, stream))
        return read_partition(self, state, partition, start_us, end_us, heartbeat_ms * 1000, stop)

    def _mutable_query(
        self, state: StreamState, token: str | None, start: int, end: int | None, heartbeat_ms: int, stop: threading.Event
    ) -> Iterator[dict[str, Any]]:
        """The rules of MUTABLE_KEY_RANGE queries: an end timestamp at most 30 minutes after the start."""
        name = state.definition.name
        if end is None:
            raise QueryError(
                "INVALID_ARGUMENT",
                f"end_timestamp is required for change stream {name} (partition_mode MUTABLE_KEY_RANGE)",
            )
        if end - start > MUTABLE_MAX_RANGE_US:
            raise QueryError(
                "INVALID_ARGUMENT",
                f"end_timestamp {from_us(end).isoformat()} is more than 30 minutes after start_timestamp "
                f"{from_us(start).isoformat()} (change stream {name} is in partition_mode MUTABLE_KEY_RANGE)",
            )
        if token is None:
            return read_mutable_roots(self, state, start, stop)
        owner = view(state).owners.get(token)
        if owner is None:
            raise QueryError("INVALID_ARGUMENT", bad_token(token, name))
        if start < owner.start or (owner.end is not None and start > owner.end):
            alive = f"{from_us(owner.start).isoformat()} to {'now' if owner.end is None else from_us(owner.end).isoformat()}"
            raise QueryError(
                "OUT_OF_RANGE",
                f"start_timestamp {from_us(start).isoformat()} is outside partition {token} (alive from {alive})",
            )
        return read_mutable_partition(self, state, owner, start, end, heartbeat_ms * 1000, stop)

    @property
    def version(self) -> int:
        return self._version

    def frontier_locked(self) -> int:
        """The newest timestamp up to which the log is final: every commit <= it has been handed to
        commit(), and every later commit will get a greater timestamp."""
        now = to_us(self.clock.now())
        last = self.clock.last_commit_timestamp
        issued = None if last is None else to_us(last)
        if issued is None or issued <= self._appended:
            self._pending = None
            candidate = max(now - 1, self._appended)
        else:
            # a commit holds a timestamp but has not reached commit() yet
            real = time.monotonic()
            if self._pending is None or self._pending[0] != issued:
                self._pending = (issued, real)
            stale = real - self._pending[1] > STALE_TIMESTAMP_SECONDS
            candidate = max(now - 1, issued) if stale else self._appended
        self._frontier = max(self._frontier, candidate)
        return self._frontier

    @property
    def last_commit_timestamp(self) -> datetime | None:
        with self.cond:
            return from_us(self._appended) if self._appended else None

    def close(self) -> None:
        with self.cond:
            if self._journal is not None:
                self._journal.close()

    # ----------------------------------------------------------------- splits and merges

    def split(self, db: str, stream: str, token: str | None = None) -> list[str]:
        with self.cond:
            state = self._stream(db, stream)
            alive = state.partitions.alive
            if token is None:
                parent = max(alive, key=lambda p: (p.hi - p.lo, -p.lo))
            else:
                parent = self._alive_partition(state, self._segment_of(state, token))
            if parent.hi - parent.lo < 2:
                raise QueryError(
                    "FAILED_PRECONDITION", f"partition {parent.token} covers a single key and cannot split"
                )
            children = self._reshaper.split(state, parent, self.policy.split_ways)
            return self._public_tokens(state, children)

    def merge(self, db: str, stream: str, tokens: Sequence[str] | None = None) -> str:
        with self.cond:
            state = self._stream(db, stream)
            if tokens is None:
                runs = state.partitions.adjacent_runs(2)
                if not runs:
                    raise QueryError(
                        "FAILED_PRECONDITION", f"change stream {stream} has a single partition: nothing to merge"
                    )
                parents = self.policy.rng(db, stream, -1 - state.minted).choice(runs)
            else:
                parents = [self._alive_partition(state, self._segment_of(state, t)) for t in dict.fromkeys(tokens)]
                if len(parents) < 2 or not state.partitions.contiguous(parents):
                    raise QueryError(
                        "INVALID_ARGUMENT",
                        f"partitions {list(tokens)} cannot merge: give two or more alive partitions with adjacent key ranges",
                    )
            return self._public_tokens(state, [self._reshaper.merge(state, parents)])[0]

    def move(self, db: str, stream: str, tokens: Sequence[str] | None = None) -> list[str]:
        """MUTABLE_KEY_RANGE: half of the first partition's key range moves to its neighbour, the second."""
        with self.cond:
            state = self._stream(db, stream)
            if not state.definition.mutable_key_range:
                raise QueryError("FAILED_PRECONDITION", f"change stream {stream} is not in partition_mode MUTABLE_KEY_RANGE: key ranges do not move")
            if tokens is None:
                runs = state.partitions.adjacent_runs(2)
                if not runs:
                    raise QueryError("FAILED_PRECONDITION", f"change stream {stream} has a single partition: nowhere to move keys")
                source, destination = self.policy.rng(db, stream, -1 - state.minted).choice(runs)
            elif len(tokens) == 2:
                source, destination = (self._alive_partition(state, self._segment_of(state, t)) for t in tokens)
            else:
                raise QueryError("INVALID_ARGUMENT", f"move takes two partition tokens (source, destination), got {list(tokens)}")
            pair = sorted((source, destination), key=lambda p: p.lo)
            if pair[0].hi != pair[1].lo or source.hi - source.lo < 2:
                raise QueryError("INVALID_ARGUMENT", f"cannot move keys from {tokens} : give two alive neighbour partitions, the source holding more than one key")
            return self._public_tokens(state, self._reshaper.move(state, pair[0], pair[1], rightward=source is pair[0]))

    # ----------------------------------------------------------------- for queries

    def tick_locked(self, stream: StreamState) -> None:
        self._reshaper.tick(stream)

    def next_event_due(self, stream: StreamState) -> int | None:
        return self._reshaper.next_event_due(stream)

    # ----------------------------------------------------------------- helpers

    def _changed_locked(self) -> None:
        self._version += 1
        self.cond.notify_all()

    def _stream(self, db: str, name: str) -> StreamState:
        state = self._streams.get(db, {}).get(name)
        if state is None:
            raise QueryError("NOT_FOUND", f"change stream {name} does not exist in database {db}")
        return state

    def _segment_of(self, state: StreamState, token: str) -> str:
        """The alive segment of a MUTABLE_KEY_RANGE partition token (other tokens unchanged)."""
        if not state.definition.mutable_key_range:
            return token
        owner = view(state).owners.get(token)
        return token if owner is None or owner.end is not None else owner.segments[-1].token

    def _public_tokens(self, state: StreamState, segments: Sequence[Partition]) -> list[str]:
        if not state.definition.mutable_key_range:
            return [s.token for s in segments]
        owner_of = view(state).owner_of
        return list(dict.fromkeys(owner_of[s.token] for s in segments))

    def _alive_partition(self, state: StreamState, token: str) -> Partition:
        partition = state.partitions.get(token)
        if partition is None:
            raise QueryError(
                "NOT_FOUND", f"partition token {token!r} does not exist in change stream {state.definition.name}"
            )
        if partition.end is not None:
            raise QueryError("FAILED_PRECONDITION", f"partition {token} already ended at {from_us(partition.end)}")
        return partition

    def _set_tables(self, db: str, tables: Mapping[str, TableInfo]) -> None:
        self._dbs[db] = dict(tables)
        self._write({"op": "tables", "db": db, "tables": [codec.table_to_json(t) for t in tables.values()]})

    def _write(self, entry: dict[str, Any]) -> None:
        if self._journal is not None:
            self._journal.write(entry)

    def _recover(self, journal: Journal) -> None:
        period = self.policy.split_period_us
        # Replay creates millions of long-lived objects: the cyclic collector would rescan them over
        # and over (quadratic); none of them form cycles worth collecting meanwhile.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for entry in journal.replay():
                codec.apply(entry, self._dbs, self._streams, self._commit_codec, period)
                if entry["op"] == "commit":
                    self._appended = max(self._appended, entry["ts"])
        finally:
            if collecting:
                gc.enable()
        self._frontier = self._appended
        last = self.clock.last_commit_timestamp
        if (
            self._appended
            and to_us(self.clock.now()) <= self._appended
            and (last is None or to_us(last) < self._appended)
        ):
            raise ValueError(
                f"the server clock ({self.clock.now()}) is behind the recovered change log "
                f"({from_us(self._appended)}): create ServerClock(not_before=last commit timestamp)"
            )
