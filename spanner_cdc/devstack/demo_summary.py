"""The demo's summary: windows, partitions and lineage from the store, rows read back from the lake, vs the workload."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spanner_cdc.devstack.demo_truth import Identity, identity, stamp
from spanner_cdc.names import LIVE_NAMESPACE, hourly_dag_id


def published_files(root: Path | str) -> list[str]:
    """The change log's published files under a local or a gs:// / s3:// root: no path component under `root`
    starting with `_` or `.` (staging, markers), nor a lineage's `snapshot/` and `current/` areas (other tables
    than the change log's, read apart: docs/lake.md)."""
    from spanner_cdc.lake.layout import CURRENT_DIR, SNAPSHOT_DIR, published_locations

    base = str(root).rstrip("/") + "/"
    return [p for p in published_locations(root) if not {SNAPSHOT_DIR, CURRENT_DIR} & set(p[len(base):].split("/"))]


def _read(location: Path | str, columns: list[str]) -> Any:
    import io

    import pyarrow.parquet as pq

    from spanner_cdc.lake import storage

    if storage.scheme_of(location) is None:
        return pq.read_table(location, columns=columns)
    return pq.read_table(io.BytesIO(storage.read_bytes(location) or b""), columns=columns)


def lake_identities(files: Iterable[Path | str]) -> list[Identity]:
    """Every landed row as a change identity (table, keys, commit timestamp, type, values), read from Parquet."""
    columns = ["object", "keys", "commit_timestamp", "change_type", "new_values", "old_values"]
    rows: list[Identity] = []
    for location in files:
        for row in _read(location, columns).to_pylist():
            rows.append(identity(*(row[c] for c in columns)))
    return rows


def lake_uuids(files: Iterable[Path | str]) -> list[str]:
    return [str(u) for location in files for u in _read(location, ["uuid"]).column("uuid").to_pylist()]


@dataclass
class DemoSummary:
    stream: str
    namespace: str
    lake: str
    windows: list[dict[str, Any]]
    partitions: dict[str, int]
    splits: int
    merges: int
    lineage_text: str
    written: int
    written_outside_windows: int
    landed_outside_windows: int
    landed: int
    missing: int
    unexpected: int
    duplicate_uuids: int
    files: int
    elapsed_s: float
    runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    moves: int = 0  # key range moves between partitions (a MUTABLE_KEY_RANGE stream; no splits or merges there)
    # what to run next, as printed: each reads this demo's store (`spanner-cdc up` / `make up` last: it serves until Ctrl-C)
    commands: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            all(w["state"] == "COMPLETE" for w in self.windows)
            and all(run["state"] == "success" for run in self.runs)
            and self.landed == self.written
            and self.missing == self.unexpected == self.duplicate_uuids == 0
            and self.landed_outside_windows == self.written_outside_windows
        )

    def to_json_text(self) -> str:
        return json.dumps({**asdict(self), "ok": self.ok}, indent=2, default=str)

    def render(self) -> str:
        lines = ["", "=" * 78, f"spanner-cdc demo: change stream {self.stream}, namespace {self.namespace}", "=" * 78]
        lines.append("Windows of the history (one hourly DAG run each):")
        for w in self.windows:
            lines.append(
                f"  [{w['start']}, {w['end']})  {w['state']:<8}  {w['records']} rows in {w['files']} files, "
                f"{w['transactions']} transactions checked; closed by {w['closed_by']}"
            )
        lines.append(f"DAG runs of {hourly_dag_id('demo')}:")
        for run in self.runs:
            lines.append(f"  [{run['start']}, {run['end']})  {run['state']:<8}  {run['tasks']} tasks, {run['seconds']} s")
        states = ", ".join(f"{count} {state}" for state, count in sorted(self.partitions.items()))
        reshapes = f"{self.moves} key range moves" if self.moves else f"{self.splits} splits, {self.merges} merges"
        lines.append(f"Partitions: {sum(self.partitions.values())} ({states}); {reshapes}")
        show = next((c for c in self.commands if " lineage show " in c), f"spanner-cdc lineage show --stream {self.stream}")
        lines.append(f"Lineage ({show}):")
        lines += ["  " + line for line in self.lineage_text.rstrip("\n").splitlines()]
        verdict = "match" if self.landed == self.written and not (self.missing or self.unexpected) else "MISMATCH"
        lines.append(
            f"Changes written by the workload in the windows: {self.written}; landed in the lake: {self.landed} "
            f"({verdict}: {self.missing} missing, {self.unexpected} unexpected, {self.duplicate_uuids} duplicate uuids)"
        )
        if self.written_outside_windows or self.landed_outside_windows:
            lines.append(
                f"  (after the history: {self.written_outside_windows} written, {self.landed_outside_windows} landed)"
            )
        lines.append(f"Parquet files: {self.files} under {self.lake} (markers in {self.lake}/_windows)")
        lines += [f"Note: {note}" for note in self.notes]
        if self.commands:
            lines.append("Look around (each command reads this demo's store):")
            lines += [f"  {c}" for c in self.commands[:-1]]
            lines.append(f"  {self.commands[-1]}   (the Airflow UI on this stack: http://127.0.0.1:8080)")
        lines.append(f"Result: {'OK' if self.ok else 'NOT OK'} in {self.elapsed_s:.0f} s")
        return "\n".join(lines) + "\n"


def _short(value: str | None, time_only: bool = False) -> str:
    if not value:
        return "?"
    return dt.datetime.fromisoformat(value).strftime("%H:%M" if time_only else "%Y-%m-%d %H:%M")


def _splits_and_merges(edges: Sequence[tuple[str, str]]) -> tuple[int, int]:
    children = Counter(parent for parent, _ in edges)
    parents = Counter(child for _, child in edges)
    return sum(1 for n in children.values() if n > 1), sum(1 for n in parents.values() if n > 1)


def _run_row(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "start": _short(run.get("data_interval_start")),
        "end": _short(run.get("data_interval_end"), time_only=True),
        "state": run.get("state", "?"),
        "tasks": len(run.get("tasks", {})),
        "seconds": run.get("seconds"),
        "close": run.get("tasks", {}).get("close"),
    }


def _window_rows(
    windows: Sequence[tuple[dt.datetime, dt.datetime]], stored: dict[Any, Any], run_rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each window as the store has it, and which run closed it (its own, or the next one's catch_up)."""
    out = []
    for index, (start, end) in enumerate(windows):
        row = stored.get((start, end))
        check = (row.transaction_check or {}) if row else {}
        own_close = index < len(run_rows) and run_rows[index]["close"] == "success"
        out.append({
            "start": start.strftime("%Y-%m-%d %H:%M"),
            "end": end.strftime("%H:%M"),
            "state": row.state if row else "MISSING",
            "records": row.records if row else None,
            "files": row.files if row else None,
            "transactions": check.get("transactions"),
            "closed_by": "its own run" if own_close else ("the next run's catch_up" if row and row.state == "COMPLETE" else "-"),
        })
    return out


def summarize(
    *,
    paths: Any,
    lake_root: Path | str,
    lineage_url: str,
    stream: str,
    windows: Sequence[tuple[dt.datetime, dt.datetime]],
    runs: Sequence[dict[str, Any]],
    elapsed_s: float,
    commands: Sequence[str] = (),
) -> DemoSummary:
    """Everything from its source: the store for windows and lineage, the Parquet files for rows (under
    `lake_root`, a local path or a bucket)."""
    from spanner_cdc.devstack.demo_truth import truth_identities
    from spanner_cdc.store import MetadataStore
    from spanner_cdc.store.render import render

    with MetadataStore.connect(lineage_url) as store:
        lineage = store.get_lineage(stream, LIVE_NAMESPACE)
        graph = store.graph(lineage.id)
        stored = {(w.start, w.end): w for w in store.windows(lineage.id)}
    run_rows = [_run_row(run) for run in runs]
    window_rows = _window_rows(windows, stored, run_rows)
    from spanner_cdc.lake.storage import join

    lake = join(lake_root, stream, LIVE_NAMESPACE)
    files = published_files(lake)
    first, last = stamp(windows[0][0]), stamp(windows[-1][1])
    rows = lake_identities(files)
    landed = Counter(row for row in rows if first <= row[2] < last)
    uuids = Counter(lake_uuids(files))
    inside, outside = truth_identities(paths.ground_truth, windows[0][0], windows[-1][1])
    expected = Counter(inside)
    splits, merges = _splits_and_merges(graph.edges)
    partitions = Counter(str(node.state) for node in graph.nodes)
    notes = []
    if not graph.moves and (not splits or not merges):
        notes.append("this run of the workload produced no split or no merge; raise --transactions or --hours")
    return DemoSummary(
        stream=stream,
        namespace=LIVE_NAMESPACE,
        lake=str(lake),
        windows=window_rows,
        partitions=dict(partitions),
        splits=splits,
        merges=merges,
        lineage_text=render(graph, "text"),
        written=sum(expected.values()),
        written_outside_windows=len(outside),
        landed_outside_windows=len(rows) - sum(landed.values()),
        landed=sum(landed.values()),
        missing=sum((expected - landed).values()),
        unexpected=sum((landed - expected).values()),
        duplicate_uuids=sum(n - 1 for n in uuids.values() if n > 1),
        files=len(files),
        elapsed_s=round(elapsed_s, 1),
        runs=run_rows,
        notes=notes,
        moves=len(graph.moves),
        commands=list(commands),
    )
