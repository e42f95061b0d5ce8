"""The local server's log of read options: what a query asked for, per database, and directed reads refused where
Spanner refuses them (a read-write transaction)."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as gexc

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.local_spanner.control import ControlClient
from spanner_cdc.read_options import ReadOptions, parse_directed_read

pytestmark = [pytest.mark.integration]
DIRECTED = parse_directed_read("d", {"exclude": ["us-central1:READ_WRITE"]})


def test_a_query_s_options_are_recorded_and_directed_reads_in_a_read_write_transaction_are_refused(
    make_spanner_database: Any, local_spanner: LocalSpanner
) -> None:
    database = make_spanner_database(["CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)"])
    options = ReadOptions(priority="medium", directed_read=DIRECTED)
    with database.snapshot() as snapshot:
        assert list(snapshot.execute_sql("SELECT Id FROM T", **options.query_kwargs(tag="asked"))) == []

    def write(transaction: Any) -> None:
        list(transaction.execute_sql("SELECT Id FROM T", directed_read_options=DIRECTED.client_options()))

    with pytest.raises(gexc.InvalidArgument, match="read-only transaction"):
        database.run_in_transaction(write)
    with ControlClient(local_spanner.host) as control:
        seen = [e for e in control.requests(database=database.database_id) if e["request_tag"] == "asked"]
        assert control.requests(database="nosuchdatabase") == []
    assert [(e["method"], e["sql"], e["priority"], e["data_boost_enabled"]) for e in seen] == [
        ("ExecuteStreamingSql", "SELECT Id FROM T", "PRIORITY_MEDIUM", False)
    ]
    assert seen[0]["directed_read_options"] == {"excludeReplicas": {"replicaSelections": [{"location": "us-central1", "type": "READ_WRITE"}]}}
