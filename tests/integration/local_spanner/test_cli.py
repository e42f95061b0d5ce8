"""`spanner-cdc local-spanner split|merge|move|fail|status` against a running server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from spanner_cdc.cli.main import main
from spanner_cdc.devstack.spanner_server import LocalSpanner
from tests.integration.local_spanner.reading import query_partition

pytestmark = pytest.mark.integration


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


def test_split_then_merge_on_demand(make_spanner_database: Any, local_spanner: LocalSpanner, capsys: pytest.CaptureFixture[str]) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR ALL"])
    target = ["--host", local_spanner.host, "--database", database.name, "--stream", "S"]
    code, split = run(capsys, "local-spanner", "split", *target)
    assert code == 0 and len(split["children"]) == 2
    code, merged = run(capsys, "local-spanner", "merge", *target, "--token", split["children"][0], "--token", split["children"][1])
    assert code == 0
    now = datetime.now(UTC)
    (roots,) = query_partition(database, "S", now, now, None, postgres=False)
    alive = {c["token"] for c in roots["child_partitions_record"]["child_partitions"]}
    assert merged["child"] in alive and not alive & set(split["children"])


def test_move_between_neighbours_of_a_mutable_stream(make_spanner_database: Any, local_spanner: LocalSpanner, capsys: pytest.CaptureFixture[str]) -> None:
    database = make_spanner_database([
        "CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)",
        "CREATE CHANGE STREAM S FOR ALL OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')",
        "CREATE CHANGE STREAM I FOR ALL",
    ])  # fmt: skip
    target = ["--host", local_spanner.host, "--database", database.name]
    code, split = run(capsys, "local-spanner", "split", *target, "--stream", "S")
    assert code == 0 and len(split["children"]) == 2
    left, right = split["children"]
    code, moved = run(capsys, "local-spanner", "move", *target, "--stream", "S", "--from", right, "--to", left)
    assert code == 0 and moved["partitions"] == [left, right]  # the same long-lived partitions, in key order
    code, err = run(capsys, "local-spanner", "move", *target, "--stream", "S", "--from", right)
    assert code == 2 and "--from/--to" in err and err.count("\n") == 1
    code, err = run(capsys, "local-spanner", "move", *target, "--stream", "I")
    assert code == 1 and "FAILED_PRECONDITION" in err and "MUTABLE_KEY_RANGE" in err and err.count("\n") == 1


def test_unknown_stream_is_one_clear_error_line(make_spanner_database: Any, local_spanner: LocalSpanner, capsys: pytest.CaptureFixture[str]) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"])
    code, err = run(capsys, "local-spanner", "split", "--host", local_spanner.host, "--database", database.name, "--stream", "Nope")
    assert code == 1
    assert err.startswith("spanner-cdc: error: local Spanner server at") and "NOT_FOUND" in err and "Nope" in err
    assert err.count("\n") == 1


def test_fail_arms_faults_and_status_reports_them(local_spanner: LocalSpanner, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        assert run(capsys, "local-spanner", "fail", "--host", local_spanner.host, "--reads", "2", "--after-rows", "3") == (0, {"armed": 2, "after_rows": 3})
        code, status = run(capsys, "local-spanner", "status", "--host", local_spanner.host)
        assert code == 0 and status["pending_failures"] == 2
    finally:
        local_spanner.control.fail_next_reads(reads=0)
    assert local_spanner.control.status()["pending_failures"] == 0


def test_the_served_process_keeps_its_long_lived_objects_out_of_full_collections(local_spanner: LocalSpanner) -> None:
    from spanner_cdc.local_spanner.server import FULL_COLLECTION_EVERY

    status = local_spanner.control.status()  # the `local-spanner serve` process's own GC, which stalled reads
    assert status["gc_full_every"] == FULL_COLLECTION_EVERY and status["gc_frozen"] > 0
