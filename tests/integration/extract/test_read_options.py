"""Reads that spare production: the snapshot's and verify's partitioned reads ask for Data Boost, and every query of the
stream (change stream queries included) for the stream's priority and directed reads, as the local server sees them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.current_state import update_current_state
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.extract.verify import run_verify
from spanner_cdc.extract.window import run_window
from spanner_cdc.local_spanner.control import ControlClient
from spanner_cdc.read_options import parse_directed_read
from spanner_cdc.store import MetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STREAM = "spared"
DDL = [
    "CREATE TABLE Orders (Id INT64 NOT NULL, Item STRING(MAX), Qty INT64) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL OPTIONS (retention_period = '1d')",
]
DIRECTED = {"includeReplicas": {"replicaSelections": [{"location": "us-east1", "type": "READ_ONLY"}], "autoFailoverDisabled": True}}


def test_snapshot_verify_and_change_stream_reads_ask_for_data_boost_priority_and_directed_reads(
    make_spanner_database: Any, extract_settings: Any, store: MetadataStore, spark: Any, local_spanner: LocalSpanner
) -> None:
    database = make_spanner_database(DDL)
    with database.batch() as b:
        b.insert("Orders", ["Id", "Item", "Qty"], [[i, f"item{i}", i] for i in range(30)])
    directed = parse_directed_read("directed_read", {"include": ["us-east1:read_only"], "auto_failover_disabled": True})
    settings = extract_settings(
        database.database_id, STREAM, iceberg_catalog="store", data_boost=True, request_priority="low", directed_read=directed
    )
    with ControlClient(local_spanner.host) as control:
        since = max([e["seq"] for e in control.requests()] or [0])
        start = run_snapshot(settings).at
        with database.batch() as b:
            b.update("Orders", ["Id", "Qty"], [[i, -i] for i in range(0, 30, 4)])
        end = datetime.now(UTC)
        time.sleep(0.01)
        assert run_window(settings, start, end).complete
        update_current_state(settings)
        assert run_verify(settings, window_end=end).ok
        seen = control.requests(database=database.database_id, since=since)

    snapshot = [e for e in seen if e["request_tag"] == "spanner-cdc-snapshot"]
    verify = [e for e in seen if e["request_tag"] == "spanner-cdc-verify" and e["partitioned"]]
    changes = [e for e in seen if f"READ_{STREAM}" in e["sql"]]
    assert snapshot and verify and changes, seen
    for entry in snapshot + verify:  # each partition of the reads at T0 and at the window's end
        assert entry["partitioned"] and "FROM `Orders`" in entry["sql"], entry
        assert entry["data_boost_enabled"] is True, entry
        assert entry["priority"] == "PRIORITY_LOW", entry
        assert entry["directed_read_options"] == DIRECTED, entry
    for entry in changes:  # the root query, every token's query, verify's re-read of the window
        assert entry["data_boost_enabled"] is False, entry  # Data Boost is for partitioned reads only
        assert entry["priority"] == "PRIORITY_LOW", entry
        assert entry["directed_read_options"] == DIRECTED, entry
    assert any(e["request_tag"] == "spanner-cdc-verify" for e in changes)  # verify's change log re-read too
    metadata = [e for e in seen if e["method"] != "PartitionQuery" and e not in snapshot + verify + changes]
    assert metadata and all(e["directed_read_options"] == DIRECTED for e in metadata), metadata  # the client's default


def test_without_the_settings_reads_ask_for_nothing(
    make_spanner_database: Any, extract_settings: Any, store: MetadataStore, spark: Any, local_spanner: LocalSpanner
) -> None:
    database = make_spanner_database(DDL)
    with database.batch() as b:
        b.insert("Orders", ["Id", "Item", "Qty"], [[1, "one", 1]])
    with ControlClient(local_spanner.host) as control:
        run_snapshot(extract_settings(database.database_id, STREAM))
        seen = control.requests(database=database.database_id)
    snapshot = [e for e in seen if e["request_tag"] == "spanner-cdc-snapshot"]
    assert snapshot, seen
    assert not any(e["data_boost_enabled"] or e["directed_read_options"] for e in seen), seen
    assert {e["priority"] for e in snapshot} == {"PRIORITY_UNSPECIFIED"}
