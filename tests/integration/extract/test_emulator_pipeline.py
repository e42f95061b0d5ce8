"""The pipeline on Google's Spanner emulator: consecutive windows of the seeded workload with the emulator's own splits and
merges, in both dialects and every value capture type, a killed extract re-run; and what the emulator cannot do.

What the emulator (1.5.28) cannot do, each asserted below with the emulator's own answer, and kept out of the workload
tests (the local server's tests cover those paths):

- no `partition_mode` option (MUTABLE_KEY_RANGE): "Option: partition_mode is unknown." (GoogleSQL),
  "Invalid change stream option 'partition_mode'" (PostgreSQL);
- no `allow_txn_exclusion` option: "Option: allow_txn_exclusion is unknown.";
- TIMESTAMP values in mods are truncated to whole seconds (the table keeps the microseconds);
- a non-finite FLOAT64 (NaN, ±Infinity) is written into mods as null;
- records carry no transaction tag (the empty string);
- an ARRAY value with a NULL element in a column a change stream tracks aborts the emulator's process:
  "Check failed: !metadata_.is_null() Null value" (the client retries its commit against a dead server).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from spanner_cdc.cli.main import main
from spanner_cdc.devstack import workload
from spanner_cdc.devstack.emulator import SpannerEmulator, as_recorded
from spanner_cdc.devstack.spanner_server import create_database, spanner_client
from spanner_cdc.devstack.workload_schema import TABLES_BY_NAME
from spanner_cdc.extract.failpoints import FAILPOINT_ENV
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout, published_files
from spanner_cdc.settings import Settings, env_name, subprocess_env
from spanner_cdc.store import MetadataStore
from tests.fixtures.emulator import emulator_binary_or_skip
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id
from tests.integration.extract.lake_reading import published_rows
from tests.integration.extract.test_extract_workload import lake_key, truth_key

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(110)]
REPO = Path(__file__).resolve().parents[3]
GOOGLE_STANDARD_SQL, POSTGRESQL = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
# Spanner lets at most three change streams watch a table: the windows' database has STREAM (OLD_AND_NEW_VALUES, read in
# consecutive windows) and one stream of each of the next two capture types, read in one window each; the killed
# extract's database a stream of the fourth.
CAPTURES = ("OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW")
KILLED_CAPTURE = "NEW_ROW_AND_OLD_VALUES"
STREAM = "workload"
WINDOWS = 3
TRANSACTIONS_PER_WINDOW, TX_PER_SECOND = 30, 8  # ~4 s of writes a window: the emulator splits or merges every 2-4 s


def stream_name(capture: str) -> str:
    return STREAM if capture == "OLD_AND_NEW_VALUES" else capture.lower()


def create_streams(database: Any, dialect: str) -> None:
    """The workload's tables and STREAM (FOR ALL, OLD_AND_NEW_VALUES), then a FOR ALL stream of each other capture type."""
    workload.setup_database(database, dialect, STREAM)
    options = "WITH" if dialect == POSTGRESQL else "OPTIONS"
    database.update_ddl([f"CREATE CHANGE STREAM {stream_name(c)} FOR ALL {options} (value_capture_type = '{c}')"
                         for c in CAPTURES[1:]]).result(120)  # fmt: skip


def write_windows(database: Any, tmp_path: Path) -> tuple[list[datetime], list[workload.GroundTruthRow]]:
    """WINDOWS consecutive windows of the seeded workload in real time; their bounds and the ground truth."""
    bounds = [datetime.now(UTC)]
    truth: list[workload.GroundTruthRow] = []
    for n in range(WINDOWS):
        path = tmp_path / f"truth-{n}.jsonl"
        workload.run_workload(database, transactions=TRANSACTIONS_PER_WINDOW, tx_per_second=TX_PER_SECOND, seed=11 + n, ground_truth=path)
        truth += workload.load_ground_truth(path)
        bounds.append(datetime.now(UTC))
    time.sleep(0.01)  # the last bound is in the past for the extract
    return bounds, truth


def as_the_emulator_records(row: workload.GroundTruthRow, capture: str, after: dict[str, Any] | None) -> workload.GroundTruthRow:
    """What a stream of `capture` records for one workload change (`after`: the whole row after it), with the emulator's
    listed limits (TIMESTAMPs truncated to seconds, no transaction tag)."""
    whole_row = row.mod_type != "DELETE"
    new = dict(after or {}) if capture.startswith("NEW_ROW") and whole_row else dict(row.new_values)
    old = row.old_values if capture in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES") else {}
    return as_recorded(dataclasses.replace(row, new_values=new, old_values=old))


def expected_changes(truth: list[workload.GroundTruthRow], capture: str) -> list[workload.GroundTruthRow]:
    """The ground truth as a stream of `capture` on the emulator records it (rows replayed in commit order for the whole
    row after each change)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    out = []
    for row in sorted(truth, key=lambda r: (r.commit_timestamp, r.transaction)):
        key = (row.table, json.dumps(row.keys, sort_keys=True))
        if row.mod_type == "DELETE":
            rows.pop(key, None)
            after = None
        else:
            after = rows.setdefault(key, dict.fromkeys(TABLES_BY_NAME[row.table].types))
            after.update(row.new_values)
        out.append(as_the_emulator_records(row, capture, after))
    return out


def assert_windows_exact(
    settings: Settings, bounds: list[datetime], expected: list[workload.GroundTruthRow], summaries: list[Any], store: MetadataStore
) -> None:
    """Every change landed once in its own window, the windows closed and checked, the files those the store knows."""
    for summary in summaries:
        assert summary.complete, summary
        check = summary.transaction_check
        assert check["ok"] and check["mismatched"] == 0 and check["duplicate_rows"] == 0 and check["transactions"] > 0, check
    layout = LakeLayout(settings.output_root, settings.stream, settings.namespace)
    rows = published_rows(layout.root)
    assert Counter(map(lake_key, rows)) == Counter(map(truth_key, expected))
    assert len({r["uuid"] for r in rows}) == len(rows) == sum(s.records for s in summaries)
    for summary, (start, end) in zip(summaries, zip(bounds, bounds[1:], strict=False), strict=True):
        assert summary.records == sum(1 for r in rows if start <= r["commit_timestamp"] < end and r["window_start"] == start)
    lineage = store.get_lineage(settings.stream, settings.namespace)
    assert {str(p) for p in published_files(layout.root)} == {f.path for f in store.manifest(lineage.id)}
    assert [w.state for w in store.windows(lineage.id)] == ["COMPLETE"] * len(summaries)


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_consecutive_windows_with_the_emulators_splits_and_merges_land_exactly_for_every_capture_type(
    dialect: str, make_emulator_database: Any, emulator_settings: Any, store: MetadataStore, spark: Any, tmp_path: Path
) -> None:
    database = make_emulator_database(dialect=dialect)
    create_streams(database, dialect)
    bounds, truth = write_windows(database, tmp_path)
    assert len(truth) > 100 and {r.mod_type for r in truth} == {"INSERT", "UPDATE", "DELETE"}

    settings = emulator_settings(database.database_id, STREAM, dialect=dialect)
    summaries = [run_window(settings, start, end) for start, end in zip(bounds, bounds[1:], strict=False)]
    assert_windows_exact(settings, bounds, expected_changes(truth, "OLD_AND_NEW_VALUES"), summaries, store)
    # the emulator's own lineage changes, read in the windows they happened in: splits and a merge
    graph = store.graph(store.get_lineage(STREAM, settings.namespace).id)
    assert any(len(node.parents) == 1 for node in graph.nodes) and any(len(node.parents) >= 2 for node in graph.nodes), graph
    assert sum(s.waves for s in summaries) > len(summaries)  # children born in a window were read in the same run
    # re-runs are no-ops: the same summaries' counts, no file more
    files = set(published_files(LakeLayout(settings.output_root, STREAM, settings.namespace).root))
    again = [run_window(settings, start, end) for start, end in zip(bounds, bounds[1:], strict=False)]
    assert [(s.complete, s.records) for s in again] == [(True, s.records) for s in summaries]
    assert set(published_files(LakeLayout(settings.output_root, STREAM, settings.namespace).root)) == files

    for capture in CAPTURES[1:]:  # one window over the whole history each
        other = emulator_settings(database.database_id, stream_name(capture), dialect=dialect)
        summary = run_window(other, bounds[0], bounds[-1])
        assert_windows_exact(other, [bounds[0], bounds[-1]], expected_changes(truth, capture), [summary], store)


def extract_argv(start: datetime, end: datetime) -> list[str]:
    return ["extract", "--window-start", start.isoformat(), "--window-end", end.isoformat(), "--json"]


def extract_killed_at(settings: Settings, start: datetime, end: datetime, failpoint: str) -> None:
    """`spanner-cdc extract` of one window in a subprocess that SIGKILLs itself at `failpoint`."""
    env = subprocess_env(settings, **{env_name("lease_s"): "2", FAILPOINT_ENV: failpoint})
    done = subprocess.run([sys.executable, "-m", "spanner_cdc", *extract_argv(start, end)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-4000:]


def extract_here(settings: Settings, start: datetime, end: datetime, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> dict[str, Any]:
    """`spanner-cdc extract --json` of one window in this process, configured by the environment as a user's shell
    would be (the dialect left to `auto`); its summary."""
    for key, value in subprocess_env(settings, **{env_name("lease_s"): "2"}).items():
        if key.startswith(("SPANNER_CDC_", "SPANNER_EMULATOR_HOST")):
            monkeypatch.setenv(key, value)
    capsys.readouterr()
    code = main(extract_argv(start, end))
    out, err = capsys.readouterr()
    assert code == 0, err[-4000:]
    return dict(json.loads(out))


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_an_extract_killed_mid_window_then_rerun_is_exact_and_a_further_run_is_a_no_op(
    dialect: str, make_emulator_database: Any, emulator_settings: Any, store: MetadataStore, spark: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    database = make_emulator_database(dialect=dialect)
    workload.setup_database(database, dialect, STREAM, KILLED_CAPTURE)
    start = datetime.now(UTC)
    path = tmp_path / "truth.jsonl"
    workload.run_workload(database, transactions=40, tx_per_second=10, seed=5, ground_truth=path)
    end = datetime.now(UTC)
    time.sleep(0.01)
    settings = emulator_settings(database.database_id, STREAM)  # dialect auto: asked of the emulator
    # killed after the first token's files were published, before the store knew them
    extract_killed_at(settings, start, end, "after_publish:1")
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert set(map(str, published_files(layout.root))) - {f.path for f in store.manifest(lineage.id)}, "the kill left no orphan"
    first = extract_here(settings, start, end, monkeypatch, capsys)
    assert first["complete"] and first["transaction_check"]["ok"], first
    files = {str(p) for p in published_files(layout.root)}
    assert files == {f.path for f in store.manifest(lineage.id)}  # the killed run's orphans are gone
    rows = published_rows(layout.root)
    expected = expected_changes(workload.load_ground_truth(path), KILLED_CAPTURE)
    assert Counter(map(lake_key, rows)) == Counter(map(truth_key, expected)) and len({r["uuid"] for r in rows}) == len(rows)
    again = extract_here(settings, start, end, monkeypatch, capsys)
    assert again["complete"] and again["records"] == first["records"] == len(rows) and again["extracted_tokens"] == 0, again
    assert {str(p) for p in published_files(layout.root)} == files


# ------------------------------------------------------------------------------------- what the emulator cannot do


@pytest.mark.parametrize(
    ("dialect", "option", "refusal"),
    [
        (GOOGLE_STANDARD_SQL, "partition_mode = 'MUTABLE_KEY_RANGE'", "Option: partition_mode is unknown."),
        (GOOGLE_STANDARD_SQL, "allow_txn_exclusion = true", "Option: allow_txn_exclusion is unknown."),
        (POSTGRESQL, "partition_mode = 'MUTABLE_KEY_RANGE'", "Invalid change stream option 'partition_mode'"),
    ],
    ids=["mutable-key-range", "allow-txn-exclusion", "postgresql-mutable-key-range"],
)
def test_the_stream_options_the_emulator_refuses(dialect: str, option: str, refusal: str, make_emulator_database: Any) -> None:
    if dialect == POSTGRESQL:
        database = make_emulator_database(["CREATE TABLE t (id bigint NOT NULL, PRIMARY KEY (id))"], POSTGRESQL)
        statement = f"CREATE CHANGE STREAM s FOR ALL WITH ({option})"
    else:
        database = make_emulator_database(["CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)"])
        statement = f"CREATE CHANGE STREAM S FOR ALL OPTIONS ({option})"
    with pytest.raises(gexc.InvalidArgument, match=refusal.replace(".", r"\.").replace("(", r"\(")):
        database.update_ddl([statement]).result(60)


def test_timestamps_truncated_non_finite_floats_null_and_no_transaction_tag_in_the_emulators_mods(
    make_emulator_database: Any, emulator_settings: Any, store: MetadataStore, spark: Any
) -> None:
    database = make_emulator_database([
        "CREATE TABLE T (Id INT64 NOT NULL, Ts TIMESTAMP, F FLOAT64) PRIMARY KEY (Id)", "CREATE CHANGE STREAM S FOR ALL",
    ])  # fmt: skip
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    start = datetime.now(UTC)
    with database.batch(request_options={"transaction_tag": "app=limits"}) as batch:
        batch.insert("T", ["Id", "Ts", "F"], [[1, at, float("nan")], [2, at, float("inf")], [3, at, 1.5]])
    end = datetime.now(UTC)
    time.sleep(0.01)
    with database.snapshot() as snapshot:  # the table keeps what was written
        kept = list(snapshot.execute_sql("SELECT Id, Ts, F FROM T ORDER BY Id"))
    assert [row[1] for row in kept] == [at] * 3 and str(kept[0][2]) == "nan" and kept[1][2] == float("inf")
    settings = emulator_settings(database.database_id, "S")
    assert run_window(settings, start, end).complete
    rows = published_rows(LakeLayout(settings.output_root, "S", settings.namespace).root)
    found = {json.loads(r["keys"])["Id"]: json.loads(r["new_values"]) for r in rows}
    assert found == {
        "1": {"Ts": "2026-01-02T03:04:05Z", "F": None}, "2": {"Ts": "2026-01-02T03:04:05Z", "F": None},
        "3": {"Ts": "2026-01-02T03:04:05Z", "F": 1.5},
    }  # fmt: skip
    assert {r["transaction_tag"] for r in rows} == {""}


ARRAY_WRITE = """
import os, sys
from google.cloud import spanner
from spanner_cdc.devstack.spanner_server import spanner_client
database = spanner_client(os.environ["SPANNER_EMULATOR_HOST"], sys.argv[1]).instance(sys.argv[2]).database(sys.argv[3])
with database.batch() as batch:
    batch.insert("T", ["Id", "A"], [[int(sys.argv[4]), ["x", None]]])
print("committed", flush=True)
"""


@pytest.fixture
def own_emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SpannerEmulator]:
    """An emulator of the test's own, which the test may crash."""
    with SpannerEmulator(emulator_binary_or_skip(), log_path=tmp_path / "emulator.log") as emulator:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", emulator.host)
        yield emulator


def test_an_array_with_a_null_element_in_a_tracked_column_aborts_the_emulator(own_emulator: SpannerEmulator) -> None:
    database_id = unique_database_id("a")
    create_database(own_emulator.host, PROJECT, INSTANCE, database_id, ["CREATE TABLE T (Id INT64 NOT NULL, A ARRAY<STRING(MAX)>) PRIMARY KEY (Id)"])

    def write(key: int) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", ARRAY_WRITE, PROJECT, INSTANCE, database_id, str(key)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip

    untracked = write(1)  # no stream watches the column yet: the emulator commits it
    assert untracked.communicate(timeout=60)[0].strip() == "committed"
    admin = spanner_client(own_emulator.host, PROJECT).instance(INSTANCE).database(database_id)
    admin.update_ddl(["CREATE CHANGE STREAM S FOR ALL"]).result(60)
    tracked = write(2)
    try:
        deadline = time.monotonic() + 60
        while own_emulator.running and time.monotonic() < deadline:
            time.sleep(0.1)  # waiting for the emulator's process to end
        assert not own_emulator.running, "the emulator survived an ARRAY with a NULL element in a tracked column"
    finally:
        tracked.kill()  # the client retries its commit against the dead server
        tracked.communicate()
    assert "Check failed: !metadata_.is_null() Null value" in (own_emulator.log_path.read_text())
