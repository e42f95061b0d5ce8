"""Store part for lineages and their partitions: create, bootstrap roots, list, low watermark, graph."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.errors import NotFound, StoreError, setting
from spanner_cdc.lineage import rules
from spanner_cdc.model.records import ChildPartition
from spanner_cdc.store.base import (
    LINEAGE_COLUMNS,
    PARTITION_COLUMNS,
    PARTITION_SELECT,
    WINDOW_COLUMNS,
    StoreBase,
    lineage_from,
    partition_from,
    window_from,
)
from spanner_cdc.store.models import Lineage, LineageGraph, PartitionRow
from spanner_cdc.times import utc, utc_or_none

INSERT_LINEAGE = sa.text(
    "INSERT INTO cdc_lineages (stream, namespace, database) VALUES (:stream, :namespace, :database) "
    "ON CONFLICT (stream, namespace) DO NOTHING"
)
SELECT_LINEAGE = sa.text(f"SELECT {LINEAGE_COLUMNS} FROM cdc_lineages WHERE stream = :stream AND namespace = :namespace")
# counted in the server: the new tokens themselves are not needed back (10,000 of them at a big stream's bootstrap)
INSERT_ROOTS = sa.text(
    """
    WITH inserted AS (
        INSERT INTO cdc_partitions (lineage_id, token, partition_start, read_from, state, ready_at)
        SELECT :lineage_id, token, :start, :start, 'READY', clock_timestamp() FROM unnest(CAST(:tokens AS text[])) AS token
        ON CONFLICT (lineage_id, token) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) FROM inserted
    """
)
READY_TOKENS = sa.text(
    PARTITION_COLUMNS
    + """ FROM cdc_partitions p
    WHERE p.lineage_id = :lineage_id AND p.state = 'READY' AND p.read_from <= :last
    ORDER BY p.read_from, p.token
    """
)
# What a plan needs of a READY partition: its token and where its read starts (the column the claim reads too)
READY_READS = sa.text(
    "SELECT token, read_from FROM cdc_partitions WHERE lineage_id = :lineage_id AND state = 'READY' AND read_from <= :last "
    "ORDER BY read_from, token"
)
HELD_TOKENS = sa.text(
    "SELECT token FROM cdc_partitions WHERE lineage_id = :lineage_id AND state IN ('RUNNING', 'SCHEDULED') "
    "AND read_from <= :last ORDER BY token"
)
ALL_WINDOWS = f"SELECT {WINDOW_COLUMNS} FROM cdc_windows WHERE lineage_id = :lineage_id ORDER BY window_start, window_end"
# The newest :recent windows, every window not COMPLETE (the UI's open windows) and the newest verified one.
RECENT_WINDOWS = sa.text(
    f"""
    SELECT {WINDOW_COLUMNS} FROM cdc_windows w WHERE w.lineage_id = :lineage_id AND (
        w.state <> 'COMPLETE'
        OR (w.window_start, w.window_end) IN (
            SELECT window_start, window_end FROM cdc_windows WHERE lineage_id = :lineage_id
            ORDER BY window_start DESC, window_end DESC LIMIT :recent)
        OR (w.window_start, w.window_end) IN (
            SELECT window_start, window_end FROM cdc_windows WHERE lineage_id = :lineage_id AND verify IS NOT NULL
            ORDER BY window_end DESC, window_start DESC LIMIT 1))
    ORDER BY w.window_start, w.window_end
    """
)
WINDOW_SUMS = sa.text(
    "SELECT count(*) AS windows, coalesce(sum(records), 0) AS records, coalesce(sum(files), 0) AS files "
    "FROM cdc_windows WHERE lineage_id = :lineage_id"
)
LINEAGE_START = sa.text("SELECT min(partition_start) FROM cdc_partitions WHERE lineage_id = :lineage_id")
RECORD_RETENTION = sa.text(
    "UPDATE cdc_lineages SET retention_period_s = :seconds WHERE id = :id AND retention_period_s IS DISTINCT FROM :seconds"
)
LOW_WATERMARK = sa.text(
    "SELECT min(coalesce(watermark, partition_start - interval '1 microsecond')) FROM cdc_partitions "
    "WHERE lineage_id = :lineage_id AND state <> 'FINISHED'"
)


class LineageQueries(StoreBase):
    def ensure_lineage(self, stream: str, namespace: str, *, database: str = "") -> Lineage:
        """The lineage of `stream` in `namespace`, created if absent."""
        if not stream or not namespace:
            raise ValueError("a lineage needs a non-empty stream and namespace")

        def body(conn: Connection) -> Lineage:
            params = {"stream": stream, "namespace": namespace, "database": database}
            conn.execute(INSERT_LINEAGE, params)
            lineage = lineage_from(conn.execute(SELECT_LINEAGE, params).one())
            if database and lineage.database != database:
                if lineage.database:
                    raise StoreError(
                        f"lineage {lineage.name} belongs to Spanner database {lineage.database!r}, not {database!r}: "
                        f"use another {setting('namespace')} for another database"
                    )
                conn.execute(
                    sa.text("UPDATE cdc_lineages SET database = :database WHERE id = :id"),
                    {"database": database, "id": lineage.id},
                )
                lineage = Lineage(lineage.id, lineage.stream, lineage.namespace, database, lineage.created_at, lineage.retention_period_s)
            return lineage

        return self._db.transaction(body)

    def record_retention(self, lineage_id: int, retention: timedelta) -> None:
        """Keep the stream's retention_period (as a plan read it) with the lineage: the UI's headroom is measured against it."""
        seconds = int(retention.total_seconds())
        if seconds <= 0:
            raise ValueError(f"a retention period must be positive, not {retention}")
        self._db.transaction(lambda conn: conn.execute(RECORD_RETENTION, {"id": lineage_id, "seconds": seconds}))

    def get_lineage(self, stream: str, namespace: str) -> Lineage:
        def body(conn: Connection) -> Lineage | list[Lineage]:
            row = conn.execute(SELECT_LINEAGE, {"stream": stream, "namespace": namespace}).one_or_none()
            if row is not None:
                return lineage_from(row)
            rows = conn.execute(sa.text(f"SELECT {LINEAGE_COLUMNS} FROM cdc_lineages ORDER BY stream, namespace"))
            return [lineage_from(r) for r in rows]

        found = self._db.transaction(body)
        if isinstance(found, Lineage):
            return found
        known = ", ".join(lineage.name for lineage in found) or "none yet"
        raise NotFound(
            f"no lineage for stream {stream!r} in namespace {namespace!r} in the metadata store at {self.url} "
            f"(known lineages: {known}); the first extract of a stream creates its lineage"
        )

    def lineage(self, lineage_id: int) -> Lineage:
        return self._db.transaction(lambda conn: self._lineage_by_id(conn, lineage_id))

    def lineages(self) -> list[Lineage]:
        def body(conn: Connection) -> list[Lineage]:
            rows = conn.execute(sa.text(f"SELECT {LINEAGE_COLUMNS} FROM cdc_lineages ORDER BY stream, namespace"))
            return [lineage_from(r) for r in rows]

        return self._db.transaction(body)

    def bootstrap(self, lineage_id: int, start: datetime, roots: Sequence[ChildPartition]) -> int:
        """Insert the root partitions (from the NULL-token query) READY at `start`, if absent; count the new ones."""
        rules.require_utc(start, "start")
        tokens = sorted({root.token for root in roots})

        def body(conn: Connection) -> int:
            self._lineage_by_id(conn, lineage_id)
            return int(conn.execute(INSERT_ROOTS, {"lineage_id": lineage_id, "start": start, "tokens": tokens}).scalar_one())

        return self._db.transaction(body)

    def partitions(self, lineage_id: int) -> list[PartitionRow]:
        """Every partition of the lineage with its parents and children, oldest first."""

        def body(conn: Connection) -> list[PartitionRow]:
            rows = conn.execute(
                sa.text(PARTITION_SELECT + " WHERE p.lineage_id = :lineage_id ORDER BY p.partition_start, p.token"),
                {"lineage_id": lineage_id},
            )
            return [partition_from(r) for r in rows]

        return self._db.transaction(body)

    def ready_tokens(self, lineage_id: int, window_end: datetime) -> list[PartitionRow]:
        """READY partitions that still have part of window [., window_end) to read."""
        rules.require_utc(window_end, "window_end")
        params = {"lineage_id": lineage_id, "last": rules.inclusive_end(window_end)}

        def body(conn: Connection) -> list[PartitionRow]:
            rows = conn.execute(READY_TOKENS, params).all()
            parents, children = _edges(conn, lineage_id)
            return [partition_from(r, parents.get(r.token, ()), children.get(r.token, ())) for r in rows]

        return self._db.transaction(body)

    def ready_reads(self, lineage_id: int, window_end: datetime) -> list[tuple[str, datetime]]:
        """(token, read_from) of the READY partitions that still have part of window [., window_end) to read, in the
        order `ready_tokens` lists them: what a plan needs, without the rows, parents and children `ready_tokens`
        builds (a second of a 10,000-partition plan)."""
        rules.require_utc(window_end, "window_end")
        params = {"lineage_id": lineage_id, "last": rules.inclusive_end(window_end)}
        rows = self._db.transaction(lambda conn: conn.execute(READY_READS, params).fetchall())
        return [(token, utc(read_from)) for token, read_from in rows]

    def held_tokens(self, lineage_id: int, window_end: datetime) -> list[str]:
        """Tokens held by a run or a planned task (RUNNING or SCHEDULED) that still have part of the window to read."""
        rules.require_utc(window_end, "window_end")
        params = {"lineage_id": lineage_id, "last": rules.inclusive_end(window_end)}
        return self._db.transaction(lambda conn: list(conn.execute(HELD_TOKENS, params).scalars()))

    def lineage_start(self, lineage_id: int) -> datetime | None:
        """The earliest partition start of a lineage; None while it has no partitions (not bootstrapped)."""
        return self._db.transaction(
            lambda conn: utc_or_none(conn.execute(LINEAGE_START, {"lineage_id": lineage_id}).scalar_one())
        )

    def low_watermark(self, lineage_id: int) -> datetime | None:
        """The lowest watermark over unfinished partitions (just before its start for one never read)."""
        return self._db.transaction(
            lambda conn: utc_or_none(conn.execute(LOW_WATERMARK, {"lineage_id": lineage_id}).scalar_one())
        )

    def graph(self, lineage_id: int, *, recent_windows: int | None = None) -> LineageGraph:
        """Nodes, parent -> child edges, low watermark and windows of a lineage, read in one snapshot.

        With `recent_windows`, only the newest that many windows are read, with every window not COMPLETE and the
        newest verified one; the others are counted and summed in SQL (older_windows, older_records, older_files), so
        a year of hourly windows costs the UI and /metrics an aggregate, not 8,760 rows."""

        def body(conn: Connection) -> LineageGraph:
            conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            lineage = self._lineage_by_id(conn, lineage_id)
            params = {"lineage_id": lineage_id}
            parents, children = _edges(conn, lineage_id)
            nodes = [
                partition_from(r, parents.get(r.token, ()), children.get(r.token, ()))
                for r in conn.execute(
                    sa.text(PARTITION_COLUMNS + " FROM cdc_partitions p WHERE p.lineage_id = :lineage_id "
                            "ORDER BY p.partition_start, p.token"),
                    params,
                )
            ]  # fmt: skip
            low = utc_or_none(conn.execute(LOW_WATERMARK, params).scalar_one())
            if recent_windows is None:
                windows = [window_from(w) for w in conn.execute(sa.text(ALL_WINDOWS), params)]
                older = None
            else:
                windows = [window_from(w) for w in conn.execute(RECENT_WINDOWS, {**params, "recent": recent_windows})]
                older = conn.execute(WINDOW_SUMS, params).one()
            moves = conn.execute(
                sa.text(
                    "SELECT source_token, destination_token, moved_at FROM cdc_partition_moves "
                    "WHERE lineage_id = :lineage_id ORDER BY moved_at, source_token, destination_token"
                ),
                params,
            ).all()
            folded = conn.execute(
                sa.text("SELECT count(*) AS windows, coalesce(sum(partitions), 0) AS partitions FROM cdc_window_totals "
                        "WHERE lineage_id = :lineage_id"),
                params,
            ).one()  # fmt: skip
            return LineageGraph(
                lineage=lineage,
                nodes=tuple(nodes),
                edges=tuple((parent, child) for parent, kids in sorted(children.items()) for child in kids),
                low_watermark=low,
                windows=tuple(windows),
                moves=tuple((m.source_token, m.destination_token, utc(m.moved_at)) for m in moves),
                folded_windows=int(folded.windows),
                folded_partitions=int(folded.partitions),
                older_windows=0 if older is None else int(older.windows) - len(windows),
                older_records=0 if older is None else int(older.records) - sum(w.records or 0 for w in windows),
                older_files=0 if older is None else int(older.files) - sum(w.files or 0 for w in windows),
            )

        return self._db.transaction(body)


def _edges(conn: Connection, lineage_id: int) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """Parents and children of every token of a lineage, sorted, from one read of its edges (a correlated
    aggregate per partition costs seconds at 10,000 partitions)."""
    rows = conn.execute(
        sa.text(
            "SELECT parent_token, child_token FROM cdc_partition_parents WHERE lineage_id = :lineage_id "
            "ORDER BY parent_token, child_token"
        ),
        {"lineage_id": lineage_id},
    )
    parents: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    for parent, child in rows:
        children.setdefault(parent, []).append(child)
        parents.setdefault(child, []).append(parent)
    return (
        {token: tuple(sorted(ps)) for token, ps in parents.items()},
        {token: tuple(cs) for token, cs in children.items()},
    )
