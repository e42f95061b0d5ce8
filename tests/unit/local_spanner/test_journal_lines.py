"""Journal lines: every entry reads back as it was written, msgspec's form or json's where msgspec refuses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.local_spanner.journal_lines import journal_line

ENTRIES = [
    {"op": "commit", "db": "projects/p/instances/i/databases/d", "ts": "2026-11-24T07:00:00.000001Z",
     "writes": [["t", ["1", "a"], {"s": 'quo"te\\ \u2028 \u00e9 \u96e8 \U0001f600', "f": -875.992, "tiny": 5e-324,
                                   "big": 1.7976931348623157e308, "n": None, "b": True, "a": [1.5, None, "NaN"]}]]},
    {"op": "commit", "ts": 1795504289990878, "streams": {"s": [3, 1, [["tok", "00000000", False, "t", 0]]]}},
    {"op": "ddl", "statements": ["CREATE TABLE t (k INT64) PRIMARY KEY (k)"], "empty": {}, "list": []},
]  # fmt: skip


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_entry_reads_back_equal_as_one_line(entry: dict[str, Any]) -> None:
    line = journal_line(entry)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == entry


@pytest.mark.parametrize(
    "entry", [{"n": 2**70}, {"n": -(2**70)}, {"keys": {1: "one"}}], ids=["big int", "negative big int", "int key"]
)
def test_what_msgspec_refuses_is_written_as_json_writes_it(entry: dict[str, Any]) -> None:
    assert json.loads(journal_line(entry)) == json.loads(json.dumps(entry))


def test_non_finite_floats_of_a_row_survive_a_restart(tmp_path: Path) -> None:
    # msgspec would write a float NaN as null: rows must hold NaN and the infinities as their wire text
    from google.cloud.spanner_v1.types import Mutation

    from spanner_cdc.local_spanner.catalog import Instance
    from spanner_cdc.local_spanner.server import LocalSpannerServer, ServerOptions

    db = "projects/p/instances/i/databases/d"
    server = LocalSpannerServer(ServerOptions(data_dir=tmp_path, fsync=False))
    server.catalog.create_instance(Instance("projects/p/instances/i"))
    server.catalog.create_database(db, 1, ["CREATE TABLE t (k INT64 NOT NULL, f FLOAT64, a ARRAY<FLOAT64>) PRIMARY KEY (k)",
                                           "CREATE CHANGE STREAM s FOR ALL"])
    values = [math.nan, math.inf, -math.inf, 0.5]
    rows = [{"values": [{"string_value": str(k)}, {"number_value": v}, {"list_value": {"values": [{"number_value": v}]}}]}
            for k, v in enumerate(values)]
    server.catalog.commit(db, [Mutation.pb()(insert={"table": "t", "columns": ["k", "f", "a"], "values": rows})])
    before = dict(server.catalog.database(db).data["t"])
    server.stop()

    again = LocalSpannerServer(ServerOptions(data_dir=tmp_path, fsync=False))
    after = again.catalog.database(db).data["t"]
    again.stop()
    assert after == before
    assert [after[(str(k),)]["f"] for k in range(4)] == ["NaN", "Infinity", "-Infinity", 0.5]
