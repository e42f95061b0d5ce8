"""`spanner-cdc verify`: a clean lake verifies clean; a state row corrupted behind the pipeline's back and a change-log
file deleted are reported (that key / those rows, which window), with a non-zero exit; bad input names the field."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from google.cloud import spanner

from spanner_cdc.cli.main import main
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.extract.current_state import state_catalog, update_current_state
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.extract.verify import run_verify
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import snapshot_at, state_identifier
from spanner_cdc.settings import subprocess_env
from spanner_cdc.store import MetadataStore
from spanner_cdc.times import parse_rfc3339
from spanner_cdc.ui.health import stuck
from spanner_cdc.ui.metrics import render_metrics
from spanner_cdc.ui.pages import render_stream
from spanner_cdc.ui.view import load_stream
from tests.fixtures.monitoring import AFTER_VERIFY, alerts_on, parse_exposition
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(53)]
STREAM = "verified"
DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64, Opened TIMESTAMP) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL OPTIONS (retention_period = '1d')",  # the shortest: a day passes in seconds
]
COLUMNS = ["Id", "Owner", "Balance", "Opened"]


def z(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cli(
    settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, command: tuple[str, ...] = ("verify",)
) -> tuple[int, str, str]:
    """`spanner-cdc verify ...` (or `command`) in this process, configured by the environment as a user's shell would."""
    for key, value in subprocess_env(settings).items():
        if key.startswith(("SPANNER_CDC_", "SPANNER_EMULATOR_HOST")):
            monkeypatch.setenv(key, value)
    capsys.readouterr()  # what was printed before is not this command's
    code = main([*command, *args])
    out, err = capsys.readouterr()
    return code, out, err


def state_file_with(settings: Any, layout: LakeLayout, end: datetime, key: int) -> str:
    """The data file of the window's state snapshot that holds the row of `key` (one never changed: its seed row)."""
    handle = state_catalog(settings).load_table(state_identifier(layout, "Accounts"))
    snapshot_id = snapshot_at(handle, end)
    for task in handle.scan(snapshot_id=snapshot_id).plan_files():
        ids = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["Id"]).column("Id").to_pylist()
        if key in ids:
            return str(task.file.file_path.removeprefix("file://"))
    raise AssertionError(f"no data file holds key {key}")


def build_lake(database: Any, extract_settings: Any, **changes: Any) -> tuple[Any, list[datetime]]:
    """A snapshot, two closed windows of updates, deletes and inserts, and the state tables of both."""
    opened = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with database.batch() as b:
        b.insert("Accounts", COLUMNS, [[i, f"o{i}", i * 10, opened + timedelta(seconds=i)] for i in range(40)])
    settings = extract_settings(database.database_id, STREAM, iceberg_catalog="store", **changes)  # the change log in Iceberg too
    bounds = [run_snapshot(settings).at]
    with database.batch() as b:
        b.update("Accounts", ["Id", "Balance"], [[i, -i] for i in range(0, 40, 3)])
        b.delete("Accounts", spanner.KeySet(keys=[[1], [2]]))
        b.insert("Accounts", ["Id", "Owner"], [[100, "new"], [101, "newer"]])
    bounds.append(datetime.now(UTC))
    time.sleep(0.01)
    with database.batch() as b:
        b.update("Accounts", ["Id", "Owner"], [[i, f"renamed{i}"] for i in range(10, 30)])
        b.delete("Accounts", spanner.KeySet(keys=[[100]]))
        b.insert("Accounts", ["Id", "Owner", "Balance"], [[200 + i, f"late{i}", i] for i in range(12)])
    bounds.append(datetime.now(UTC))
    time.sleep(0.01)
    for start, end in zip(bounds, bounds[1:], strict=False):
        assert run_window(settings, start, end).complete
    assert [s.as_of for s in update_current_state(settings)] == bounds[1:]
    return settings, bounds


@pytest.fixture
def lake(make_spanner_database: Any, extract_settings: Any, store: MetadataStore, spark: Any) -> tuple[Any, list[datetime]]:
    return build_lake(make_spanner_database(DDL), extract_settings)


def test_a_clean_lake_verifies_clean_and_each_corruption_is_reported_with_its_key_and_window(
    lake: tuple[Any, list[datetime]], store: MetadataStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    settings, bounds = lake
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    lineage = store.get_lineage(STREAM, settings.namespace)

    # clean: every bucket of the newest window through the CLI, then window 1 by half its buckets
    code, out, err = cli(settings, monkeypatch, capsys, "--json")
    assert code == 0, err
    clean = json.loads(out)
    assert clean["ok"] and clean["mismatches"] == 0 and clean["window_end"] == z(bounds[2]), clean
    [table] = clean["tables"]
    assert table["table"] == "Accounts" and table["lake_rows"] == table["source_rows"] == 40 - 1 + 12, table
    assert clean["change_log"]["checked"] and clean["change_log"]["source_rows"] == clean["change_log"]["lake_rows"] == 20 + 1 + 12
    half = run_verify(settings, window_end=bounds[1], fraction=0.5, seed=7)
    assert half.ok and len(half.buckets) == 8 and half.buckets == run_verify(settings, window_end=bounds[1], fraction=0.5, seed=7).buckets
    assert 0 < half.tables[0].lake_rows == half.tables[0].source_rows < 40  # the rows of those buckets only
    assert half.change_log is not None and half.change_log.source_rows == half.change_log.lake_rows == 14 + 2 + 2

    # one row of the state table changed behind the pipeline's back: that key, that window, exit 1
    path = state_file_with(settings, layout, bounds[2], 35)
    original = Path(path).read_bytes()
    data = pq.read_table(path)
    owner = pc.if_else(pc.equal(data.column("Id"), 35), pa.scalar("tampered"), data.column("Owner"))
    pq.write_table(data.set_column(data.column_names.index("Owner"), data.schema.field("Owner"), owner), path)
    code, out, err = cli(settings, monkeypatch, capsys, "--window-end", z(bounds[2]))
    assert code == 1
    assert f"window [{z(bounds[1])}, {z(bounds[2])})" in out and "1 mismatch" in out, out
    assert 'state Accounts key {"Id":35}: values differ' in out, out
    assert "mismatches found (1)" in err and z(bounds[2]) in err
    kept = next(w for w in store.windows(lineage.id) if w.end == bounds[2]).verify
    assert kept is not None and kept["mismatches"] == 1 and kept["examples"][0]["key"] == '{"Id":35}'
    metrics = render_metrics([load_stream(store, STREAM, settings.namespace)], datetime.now(UTC))
    labels = f'{{stream="{STREAM}",namespace="{settings.namespace}"}}'
    assert f"spanner_cdc_verify_mismatches{labels} 1" in metrics
    [line] = [x for x in metrics.splitlines() if x.startswith(f"spanner_cdc_verify_window_end_timestamp_seconds{labels} ")]
    assert float(line.split()[-1]) == bounds[2].timestamp(), line
    assert f"spanner_cdc_verify_rows_compared{labels} {kept['rows_compared']}" in metrics
    tampered = {name: value for name, value in parse_exposition(metrics).items() if labels[1:-1] in name}
    assert {name.split("{")[0] for name in tampered} >= AFTER_VERIFY  # every verify metric the rules may query
    # the stream page's Last verify: that window, its counts and the key
    view = load_stream(store, STREAM, settings.namespace)
    page = render_stream("", view, stuck(view, datetime.now(UTC)), [settings.namespace], "store", datetime.now(UTC))
    verified_table = page[page.index("<table id=verify"):]
    assert f'data-window-end="{bounds[2].isoformat()}" data-mismatches="1"' in verified_table
    assert f"<td class=num>{kept['rows_compared']}</td>" in verified_table and "1 mismatch<" in verified_table
    assert "state Accounts key {&quot;Id&quot;:35}: values differ" in page
    # lake show --json: the result beside the window's completeness record (the record itself unchanged)
    code, out, _ = cli(settings, monkeypatch, capsys, "--json", command=("lake", "show"))
    shown = json.loads(out)
    [state] = [t for t in shown["tables"] if t["kind"] == "current_state"]
    for snapshots in (shown["snapshots"], state["snapshots"]):
        verified = {datetime.fromisoformat(s["window_end"]): s["verify"] for s in snapshots if s.get("verify")}
        assert verified.keys() == set(bounds[1:]) and verified[bounds[2]]["mismatches"] == 1 and verified[bounds[1]]["ok"]
    [logged] = [s for s in shown["snapshots"] if s.get("verify") and s["verify"]["window_end"] == z(bounds[2])]
    assert logged["completeness"]["window_end"] == bounds[2].isoformat() and "verify" not in logged["completeness"]
    Path(path).write_bytes(original)
    assert run_verify(settings, window_end=bounds[2]).ok
    metrics = render_metrics([load_stream(store, STREAM, settings.namespace)], datetime.now(UTC))
    repaired = {name: value for name, value in parse_exposition(metrics).items() if labels[1:-1] in name}
    assert repaired[f"spanner_cdc_verify_mismatches{labels}"] == 0

    # one change-log file of window 2 deleted: exactly its rows missing, the file named, exit 1
    files = [f for f in store.manifest(lineage.id, window_start=bounds[1], window_end=bounds[2]) if f.rows]
    gone = max(files, key=lambda f: f.rows)
    lost = pq.read_table(gone.path, columns=["uuid", "keys"]).to_pylist()
    Path(gone.path).unlink()
    code, out, err = cli(settings, monkeypatch, capsys, "--json")
    assert code == 1
    result = json.loads(out)
    log = result["change_log"]
    assert result["window_end"] == z(bounds[2]) and log["missing_files"] == [gone.path] and log["extra"] == 0
    assert log["missing"] == len(lost) == result["mismatches"] and log["lake_rows"] == log["source_rows"] - len(lost)
    shown = {(m["uuid"], m["key"]) for m in result["examples"]}
    assert shown <= {(r["uuid"], r["keys"]) for r in lost} and len(shown) == min(len(lost), 20)
    assert all(m["problem"] == "missing in the lake" for m in result["examples"])

    # the daily DAG's task body: the same finding fails the task (no retries), the window in its message (last:
    # importing Airflow here sets up its logging in this process)
    from airflow.sdk.exceptions import AirflowFailException

    from spanner_cdc.orchestration.verify_task import verify_newest

    with pytest.raises(AirflowFailException) as failed:
        verify_newest(settings, 1.0)
    assert f"window [{z(bounds[1])}, {z(bounds[2])})" in str(failed.value) and "missing in the lake" in str(failed.value)

    # the shipped alert rule on the scraped values (last: promtool is Debian's prometheus package): the tampered
    # row's verify fires it, the clean verify after the repair clears it, and expecting silence on the first fails
    firing = [{"stream": STREAM, "namespace": settings.namespace, "severity": "critical"}]
    fired = alerts_on(tampered, "SpannerCdcVerifyMismatches", firing, tmp_path)
    assert fired.returncode == 0, fired.stdout + fired.stderr
    assert alerts_on(tampered, "SpannerCdcVerifyMismatches", [], tmp_path).returncode != 0
    cleared = alerts_on(repaired, "SpannerCdcVerifyMismatches", [], tmp_path)
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr


def test_bad_input_names_the_field(
    lake: tuple[Any, list[datetime]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, bounds = lake
    for fraction in ("0", "1.5", "abc", "-0.1"):
        code, _, err = cli(settings, monkeypatch, capsys, "--fraction", fraction)
        assert code == 2 and "--fraction" in err and "(0, 1]" in err, (fraction, err)
    code, _, err = cli(settings, monkeypatch, capsys, "--stream", "nosuch")
    assert code != 0 and "--stream nosuch" in err and "no lineage" in err, err
    not_closed = bounds[2] + timedelta(minutes=5)
    code, _, err = cli(settings, monkeypatch, capsys, "--window-end", z(not_closed))
    assert code != 0 and f"--window-end {z(not_closed)}" in err and "only a closed window" in err and z(bounds[2]) in err, err
    code, _, err = cli(settings, monkeypatch, capsys, "--window-end", "yesterday")
    assert code == 2 and "--window-end" in err, err


def test_a_window_past_the_retentions_is_not_compared_and_the_result_says_why(
    extract_settings: Any, store: MetadataStore, spark: Any, tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # a server of its own, whose clock is moved a day ahead: past the stream's retention_period (1 day) and the
    # database's version_retention_period (1 hour)
    log = tmp_path_factory.mktemp("verify-spanner") / "server.log"
    with LocalSpanner(extra_args=["--policy-event-every", "none", "--policy-merge-idle", "none"], log_path=log) as server:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.host)
        database = create_database(server.host, PROJECT, INSTANCE, unique_database_id("v"), DDL, "GOOGLE_STANDARD_SQL")
        settings, bounds = build_lake(database, extract_settings, emulator_host=server.host)
        fresh = run_verify(settings)
        assert fresh.ok and fresh.change_log is not None and fresh.change_log.checked and fresh.tables[0].source_rows == 51
        server.control.set_clock_rate(43200.0)  # half a server day per real second: a day passes in ~2 s
        while parse_rfc3339(server.control.status()["now"]) < bounds[2] + timedelta(days=1, minutes=5):
            time.sleep(0.2)
        server.control.set_clock_rate(1.0)
        code, out, err = cli(settings, monkeypatch, capsys, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["window_end"] == z(bounds[2]) and result["ok"] and result["rows_compared"] == 0, result
    log_part, [table] = result["change_log"], result["tables"]
    assert not log_part["checked"] and "retention_period (1d)" in log_part["reason"] and "no longer holds it" in log_part["reason"]
    assert table["skipped"] and "version_retention_period" in table["skipped"] and table["lake_rows"] == 0, table


def test_verify_runs_on_spark_connect(lake: tuple[Any, list[datetime]], spark_connect_server: Any) -> None:
    """The `spanner_verify` data source's tasks run in a Spark Connect server's Python workers alike."""
    import dataclasses

    from spanner_cdc.spark.session import stop_sessions

    settings, bounds = lake
    local = run_verify(settings, window_end=bounds[2], fraction=0.5, seed=11)
    try:
        remote = run_verify(dataclasses.replace(settings, spark_master=spark_connect_server.url), window_end=bounds[2], fraction=0.5, seed=11)
    finally:
        stop_sessions()  # while the Connect server lives (it stops before the run's own teardown would release it)
    assert remote.ok and local.ok and remote.buckets == local.buckets
    assert [(t.table, t.lake_rows, t.source_rows) for t in remote.tables] == [(t.table, t.lake_rows, t.source_rows) for t in local.tables]
    assert 0 < remote.tables[0].source_rows < 51


def test_a_postgresql_database_verifies_clean_and_a_tampered_row_is_found(
    make_spanner_database: Any, extract_settings: Any, store: MetadataStore, spark: Any
) -> None:
    ddl = [
        'CREATE TABLE "Accounts" ("Id" bigint NOT NULL, "Owner" varchar, "Balance" bigint, "Opened" timestamptz, PRIMARY KEY ("Id"))',
        f"CREATE CHANGE STREAM {STREAM} FOR ALL",
    ]
    settings, bounds = build_lake(make_spanner_database(ddl, "POSTGRESQL"), extract_settings)
    clean = run_verify(settings)
    assert clean.ok and clean.tables[0].source_rows == 51 and clean.change_log is not None and clean.change_log.source_rows == 33
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    path = state_file_with(settings, layout, bounds[2], 7)
    data = pq.read_table(path)
    opened = pc.if_else(pc.equal(data.column("Id"), 7), pa.scalar(None, data.schema.field("Opened").type), data.column("Opened"))
    pq.write_table(data.set_column(data.column_names.index("Opened"), data.schema.field("Opened"), opened), path)
    found = run_verify(settings)
    assert found.mismatches == 1 and [(m.table, m.key, m.problem) for m in found.examples] == [("Accounts", '{"Id":7}', "values differ")]
