"""`spanner-cdc read --all-partitions` against the workload's ground truth, through splits and merges, both dialects."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.devstack.workload_schema import TABLES_BY_NAME, comparable
from spanner_cdc.model.record_json import rfc3339
from spanner_cdc.times import parse_rfc3339
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id
from tests.integration.reader.lineage_checks import check_lineage, read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STREAM = "reader_stream"
# 10 server minutes per real second, and a split or merge every 5 server minutes: lineage changes many times
# while the workload runs for a few real seconds (and on demand between its thirds)
CLOCK_RATE = 600.0
POLICY = ["--policy-event-every", "5m"]


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSpanner]:
    """A server of its own with an accelerated clock and frequent partition changes."""
    log_path = tmp_path_factory.mktemp("reader-spanner") / "server.log"
    with LocalSpanner(clock_rate=CLOCK_RATE, extra_args=POLICY, log_path=log_path) as server:
        yield server


def _json(types: dict[str, Any], values: dict[str, Any]) -> str:
    return json.dumps({k: comparable(types[k], v) for k, v in values.items()}, sort_keys=True, default=str)


def truth_key(row: workload.GroundTruthRow) -> tuple[Any, ...]:
    table = TABLES_BY_NAME[row.table]
    types = {c.name: c.type for c in (*table.keys, *table.values)}
    return (rfc3339(row.commit_timestamp), row.table, row.mod_type, _json(types, row.keys), _json(types, row.new_values),
            _json(types, row.old_values), row.transaction_tag)  # fmt: skip


def output_mods(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Every mod of every data change line, in output order, in the ground truth's terms."""
    out = []
    for line in lines:
        if line["kind"] != "data_change":
            continue
        types = {c["name"]: c["type"] for c in line["column_types"]}
        for mod in line["mods"]:
            out.append((line["commit_timestamp"], line["table_name"], line["mod_type"], _json(types, mod["keys"]),
                        _json(types, mod["new_values"]), _json(types, mod["old_values"]), line["transaction_tag"]))  # fmt: skip
    return out


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"])
def test_every_workload_change_once_in_key_order_through_splits_and_merges(
    fast_server: LocalSpanner, dialect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", fast_server.host)
    database_id = unique_database_id("rw")
    database = create_database(fast_server.host, PROJECT, INSTANCE, database_id, (), dialect)
    workload.setup_database(database, dialect, STREAM, "OLD_AND_NEW_VALUES")
    start = parse_rfc3339(fast_server.control.status()["now"])  # after the stream's creation, before any write
    truth = []
    for part, change in enumerate((fast_server.control.split, fast_server.control.merge, None)):
        stats = workload.run_workload(database, transactions=400, seed=5 + part, ground_truth=tmp_path / f"{part}.jsonl")
        truth += workload.load_ground_truth(tmp_path / f"{part}.jsonl")
        if change is not None:
            change(database.name, STREAM)  # at least one split and one merge, whatever the machine's speed
    assert stats.last_commit is not None

    lines, debug_log = read_all(fast_server.host, database_id, STREAM, rfc3339(start), rfc3339(stats.last_commit), "--heartbeat-ms", "10000")

    mods = output_mods(lines)
    got, want = Counter(mods), Counter(truth_key(row) for row in truth)
    assert got == want, f"missing {list((want - got).elements())[:3]}, unexpected {list((got - want).elements())[:3]}"
    by_key: dict[tuple[str, str], list[str]] = {}
    for commit, table, _, keys, *_ in mods:
        by_key.setdefault((table, keys), []).append(commit)
    assert all(commits == sorted(commits) for commits in by_key.values())  # commit order within a key
    assert max(len(commits) for commits in by_key.values()) > 1
    parents = check_lineage(lines, debug_log)  # children after all their parents, no record twice
    assert any(len(p) == 1 for p in parents.values()), "no split happened: the test proves less than it claims"
    merges = [child for child, p in parents.items() if len(p) >= 2]
    assert merges, "no merge happened: the test proves less than it claims"
    for child in merges:  # announced by every parent, read by one query
        announcements = [line for line in lines if line["kind"] == "child_partitions"
                         and child in {c["token"] for c in line["child_partitions"]}]  # fmt: skip
        assert {line["partition_token"] for line in announcements} == parents[child]
