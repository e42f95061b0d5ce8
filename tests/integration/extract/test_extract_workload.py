"""Three consecutive windows of the seeded workload, with the server's own splits and merges, against its ground truth."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from spanner_cdc.cli.main import main
from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.devstack.workload_schema import TABLES_BY_NAME, comparable
from spanner_cdc.extract.window import RunSource, catch_up, run_window
from spanner_cdc.lake.layout import LakeLayout, published_files
from spanner_cdc.source import client
from spanner_cdc.store import MetadataStore
from spanner_cdc.times import parse_rfc3339
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id
from tests.integration.extract.lake_reading import plain_utc, published_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STREAM = "workload_stream"
# 10 server minutes per real second while writing: the default partition policy splits or merges every
# 20 server minutes, so three 30-minute windows see several lineage changes in ~9 real seconds of writes.
# Then the clock runs at real time: however long the extract stalls on a loaded machine, the writes stay
# inside the stream's 1-day retention (at 600x, ~2.4 real minutes would be a day).
CLOCK_RATE = 600.0
READ_CLOCK_RATE = 1.0
TX_PER_SECOND, CHUNK = 150, 150
WINDOW = timedelta(minutes=30)


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSpanner]:
    with LocalSpanner(clock_rate=CLOCK_RATE, log_path=tmp_path_factory.mktemp("fast-spanner") / "server.log") as server:
        yield server


def _json(types: dict[str, Any], values: dict[str, Any]) -> str:
    return json.dumps({k: comparable(types[k], v) for k, v in values.items()}, sort_keys=True, default=str)


def truth_key(row: workload.GroundTruthRow) -> tuple[Any, ...]:
    table = TABLES_BY_NAME[row.table]
    types = {c.name: c.type for c in (*table.keys, *table.values)}
    return (plain_utc(row.commit_timestamp), row.table, row.mod_type, _json(types, row.keys),
            _json(types, row.new_values), _json(types, row.old_values), row.transaction_tag)  # fmt: skip


def lake_key(row: dict[str, Any]) -> tuple[Any, ...]:
    types = {c["name"]: c["type"] for c in json.loads(row["column_types"])}
    return (plain_utc(row["commit_timestamp"]), row["object"], row["change_type"],
            *(_json(types, json.loads(row[part])) for part in ("keys", "new_values", "old_values")),
            row["transaction_tag"])  # fmt: skip


def floor_to(value: datetime, step: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((value - epoch) // step) * step


def write_three_windows(
    fast_server: LocalSpanner, extract_settings: Any, tmp_path: Path
) -> tuple[Any, list[datetime], list[workload.GroundTruthRow]]:
    """A new database whose workload fills three consecutive windows; its settings, bounds and ground truth."""
    fast_server.control.set_clock_rate(CLOCK_RATE)
    now = parse_rfc3339(fast_server.control.status()["now"])
    left = floor_to(now, WINDOW) + WINDOW - now
    if left < timedelta(minutes=10):  # made at a window's very end, the database's first window could hold no commit
        time.sleep(left.total_seconds() / CLOCK_RATE + 0.05)
    database = create_database(fast_server.host, PROJECT, INSTANCE, unique_database_id("x"), (), "GOOGLE_STANDARD_SQL")
    workload.setup_database(database, "GOOGLE_STANDARD_SQL", STREAM)
    created = parse_rfc3339(fast_server.control.status()["now"])
    first = floor_to(created, WINDOW)  # begins before the stream existed: the extract starts at its creation
    bounds = [first + n * WINDOW for n in range(4)]
    written = write_until(fast_server, database, bounds[-1], tmp_path)
    truth = [row for row in written if row.commit_timestamp < bounds[-1]]
    assert len(truth) > 1000
    slow_down_after(fast_server, bounds[-1])
    settings = extract_settings(database.database_id, STREAM, emulator_host=fast_server.host, concurrency=2)
    return settings, bounds, truth


def write_until(server: LocalSpanner, database: Any, end: datetime, tmp_path: Path) -> list[workload.GroundTruthRow]:
    """The seeded workload in chunks of CHUNK transactions until server time passes `end` (90 server minutes
    = ~9 real seconds at 150 tx/s). The clock follows the writes: when a chunk commits slower than 150 tx/s
    (a loaded machine), the next runs the clock slower in proportion, so each server minute gets as many
    commits however fast the machine is."""
    truth: list[workload.GroundTruthRow] = []
    rate, chunk = CLOCK_RATE, 0
    while parse_rfc3339(server.control.set_clock_rate(rate)["now"]) < end:
        path = tmp_path / f"truth-{chunk}.jsonl"
        began = time.monotonic()
        workload.run_workload(database, transactions=CHUNK, tx_per_second=TX_PER_SECOND, seed=7 + chunk, ground_truth=path)
        achieved = CHUNK / (time.monotonic() - began)
        rate = CLOCK_RATE * min(1.0, achieved / TX_PER_SECOND)
        truth += workload.load_ground_truth(path)
        chunk += 1
    return truth


def slow_down_after(server: LocalSpanner, when: datetime) -> None:
    """Let server time pass `when` at the fast rate (the windows' ends must be in the past), then run at real time."""
    while (now := parse_rfc3339(server.control.status()["now"])) <= when:
        time.sleep(min(1.0, (when - now).total_seconds() / CLOCK_RATE + 0.01))  # waiting for the server's clock
    assert parse_rfc3339(server.control.set_clock_rate(READ_CLOCK_RATE)["now"]) > when


def test_three_windows_land_every_committed_change_exactly_once(
    fast_server: LocalSpanner, extract_settings: Any, store: MetadataStore, pg_url: str, spark: Any,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", fast_server.host)
    settings, bounds, truth = write_three_windows(fast_server, extract_settings, tmp_path)
    settings = dataclasses.replace(settings, iceberg_catalog="store")  # each close also commits the window to Iceberg

    summaries = [run_window(settings, start, end) for start, end in zip(bounds, bounds[1:], strict=False)]

    assert max(s.waves for s in summaries) >= 2  # children born in a window were read in the same run
    assert_landed_exactly(settings, bounds, truth, summaries, store, pg_url)
    shown = assert_iceberg_equals_truth(settings, bounds, truth, capsys)
    assert_one_completeness_record_everywhere(settings, bounds, truth, summaries, shown)


def assert_one_completeness_record_everywhere(
    settings: Any, bounds: list[datetime], truth: list[workload.GroundTruthRow], summaries: list[Any], shown: list[dict[str, Any]],
) -> None:  # fmt: skip
    """Each window's completeness record is the same in its marker, its Iceberg snapshot's summary (whole and field by
    field), `lake show --json`, the asset event's extra the DAG's close builds, and the extract's summary; and it is true."""
    from spanner_cdc.lake import iceberg
    from spanner_cdc.lake.completeness import FIELDS, record_from_summary
    from spanner_cdc.orchestration.hourly import asset_extra, summary_dict

    props = iceberg.catalog_properties("store", metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    table = iceberg.changelog_table(iceberg.open_catalog(props), LakeLayout(settings.output_root, STREAM, settings.namespace))
    summaries_by_id = {snap.snapshot_id: snap.summary.additional_properties for snap in table.snapshots() if snap.summary}
    for summary, snapshot, (start, end) in zip(summaries, shown, zip(bounds, bounds[1:], strict=False), strict=True):
        record = summary.completeness
        assert record is not None and tuple(record) == FIELDS
        assert json.loads(Path(summary.marker_path).read_text())["completeness"] == record
        properties = summaries_by_id[snapshot["snapshot_id"]]
        assert record_from_summary(properties) == record and snapshot["completeness"] == record
        assert properties["spanner-cdc.rows"] == str(record["rows"]) and properties["spanner-cdc.window-end"] == record["window_end"]
        assert asset_extra(summary_dict(summary))["completeness"] == record
        # and what it says is so: the window's changes, its transactions (one commit timestamp each) and commit range,
        # a watermark past its end
        in_window = [r for r in truth if start <= r.commit_timestamp < end]
        assert (record["window_start"], record["window_end"], record["namespace"]) == (start.isoformat(), end.isoformat(), settings.namespace)
        assert (record["rows"], record["transactions"]) == (len(in_window), len({r.commit_timestamp for r in in_window}))
        assert datetime.fromisoformat(record["first_commit_timestamp"]) == min(r.commit_timestamp for r in in_window)
        assert datetime.fromisoformat(record["last_commit_timestamp"]) == max(r.commit_timestamp for r in in_window)
        assert datetime.fromisoformat(record["low_watermark"]) >= end - timedelta(microseconds=1)
        assert record["transaction_check"] == "passed"


def assert_iceberg_equals_truth(
    settings: Any, bounds: list[datetime], truth: list[workload.GroundTruthRow], capsys: Any
) -> list[dict[str, Any]]:
    """The change log through pyiceberg (whole, and as of each window's snapshot) and through pyarrow's hive
    discovery of the plain files: each equals the workload's ground truth; `lake show` lists one snapshot per window."""
    import pyarrow.dataset as ds

    from spanner_cdc.lake import iceberg

    props = iceberg.catalog_properties("store", metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    table = iceberg.changelog_table(iceberg.open_catalog(props), layout)
    assert Counter(map(lake_key, table.scan().to_arrow().to_pylist())) == Counter(map(truth_key, truth))
    discovered = ds.dataset(layout.root, format="parquet", partitioning="hive").to_table().to_pylist()
    assert Counter(map(lake_key, discovered)) == Counter(map(truth_key, truth))
    assert main(["lake", "show", "--stream", STREAM, "--namespace", settings.namespace, "--metadata-url", settings.metadata_url,
                 "--output-root", str(settings.output_root), "--json"]) == 0  # fmt: skip
    shown = json.loads(capsys.readouterr().out)["snapshots"]
    assert [s["window_start"] for s in shown] == [b.isoformat() for b in bounds[:-1]]
    for snapshot, end in zip(shown, bounds[1:], strict=True):  # as of a window's snapshot: every window up to its end
        rows = table.scan(snapshot_id=snapshot["snapshot_id"]).to_arrow().to_pylist()
        assert Counter(map(lake_key, rows)) == Counter(truth_key(r) for r in truth if r.commit_timestamp < end)
        assert snapshot["total_rows"] == len(rows)
    return list(shown)


def test_windows_left_open_are_finished_before_later_ones(
    fast_server: LocalSpanner, extract_settings: Any, store: MetadataStore, pg_url: str, spark: Any,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """One wave per run leaves windows open; catching up before each later window keeps every row in its own."""
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", fast_server.host)
    settings, bounds, truth = write_three_windows(fast_server, extract_settings, tmp_path)

    opened: list[Any] = []
    monkeypatch.setattr(client, "open_database", lambda s, real=client.open_database: opened.append(s) or real(s))
    by_start = {}
    left_open = 0
    for start, end in zip(bounds, bounds[1:], strict=False):
        source = RunSource(settings)  # as the CLI does: one client for the catch-up and the window
        for caught in catch_up(settings, start, source=source):
            by_start[caught.window_start] = caught
        summary = run_window(settings, start, end, max_waves=1, source=source)
        left_open += not summary.complete
        by_start[start] = summary
    caught_up = catch_up(settings, bounds[-1])
    for caught in caught_up:
        by_start[caught.window_start] = caught

    assert left_open >= 1  # the catch-up path was taken
    assert len(opened) == 3 + bool(caught_up)  # a client per run, opened only by a run that reads
    assert_landed_exactly(settings, bounds, truth, [by_start[start] for start in bounds[:-1]], store, pg_url)


def assert_landed_exactly(
    settings: Any, bounds: list[datetime], truth: list[workload.GroundTruthRow], summaries: list[Any],
    store: MetadataStore, pg_url: str,
) -> None:  # fmt: skip
    for summary in summaries:
        assert summary.complete, summary
        check = summary.transaction_check
        assert check["ok"] and check["mismatched"] == 0 and check["duplicate_rows"] == 0 and check["transactions"] > 0
        assert Path(summary.marker_path).exists()
    rows = published_rows(settings.output_root)
    # every committed mod landed exactly once, with its values and change type
    assert Counter(lake_key(r) for r in rows) == Counter(truth_key(row) for row in truth)
    assert len({r["uuid"] for r in rows}) == len(rows)
    assert sum(s.records for s in summaries) == len(truth)
    for summary, (start, end) in zip(summaries, zip(bounds, bounds[1:], strict=False), strict=True):
        in_window = [r for r in rows if start <= r["commit_timestamp"] < end]
        assert len(in_window) == summary.records and all(r["window_start"] == start for r in in_window)
    root = LakeLayout(settings.output_root, STREAM, settings.namespace).root
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert {str(p) for p in published_files(root)} == {f.path for f in store.manifest(lineage.id)}
    assert [w.state for w in store.windows(lineage.id)] == ["COMPLETE"] * 3
    # the lineage changed, and every child was read only after all of its parents had finished
    graph = store.graph(lineage.id)
    assert any(len(node.parents) == 1 for node in graph.nodes) and any(len(node.parents) >= 2 for node in graph.nodes)
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        first_read = dict(
            conn.execute(
                sa.text("SELECT token, min(started_at) FROM cdc_attempts WHERE lineage_id = :id GROUP BY token"),
                {"id": lineage.id},
            ).all()
        )
    engine.dispose()
    finished = {node.token: node.finished_at for node in graph.nodes}
    for node in graph.nodes:
        for parent in node.parents:
            assert finished[parent] is not None and first_read[node.token] >= finished[parent], (node.token, parent)
