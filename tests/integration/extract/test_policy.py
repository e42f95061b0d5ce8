"""The landing policy end to end: a table and a column left out, a key column hashed, one masked; nothing clear in the
lake's bytes, the hashes joinable across windows and tables, every other value exact, verify clean through it."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import hmac
import io
import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from google.cloud import spanner

from spanner_cdc.errors import ConfigError
from spanner_cdc.extract.current_state import update_current_state
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.extract.verify import run_verify
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.completeness import record_from_summary
from spanner_cdc.lake.iceberg import close_catalog, open_changelog
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.lake.markers import read_marker
from spanner_cdc.lake.snapshot import read_snapshot_marker
from spanner_cdc.policy import MASK_TOKEN, parse_policy
from spanner_cdc.store import MetadataStore
from tests.integration.extract.test_current_state import state_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(21)]
STREAM = "Governed"
KEY_ENV = "SPANNER_CDC_TEST_HASH_KEY"
KEY = "test-only-hmac-key-0123456789abcdef"
DDL = [
    "CREATE TABLE Customers (Id INT64 NOT NULL, Email STRING(MAX), Phone STRING(MAX), Notes STRING(MAX), Name STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE Orders (Id INT64 NOT NULL, CustomerId INT64, Total INT64) PRIMARY KEY (Id)",
    "CREATE TABLE Audit (Id INT64 NOT NULL, Detail STRING(MAX)) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL",
]
POLICY = {
    "exclude_tables": ["Audit"], "exclude_columns": ["Customers.Notes"], "hash_columns": ["Customers.Id", "Orders.CustomerId"],
    "mask_columns": ["Customers.Phone"], "hash_key_env": KEY_ENV,
}  # fmt: skip
FIRST_ID = 739_104_826_000  # customer ids: long enough that their text is found in the lake only if it landed clear


def customer(i: int) -> list[Any]:
    return [FIRST_ID + i, f"mail-{i}@clear.example", f"+1-555-01{i:02d}", f"note-clear-{i}", f"Name {i}"]


def hashed(value: Any) -> str:
    """The test's own HMAC-SHA-256 of a value's JSON text (the change stream's form: INT64 as text)."""
    return hmac.new(KEY.encode(), json.dumps(value, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def workload(database: Any) -> list[datetime]:
    """Window 1: customers updated and inserted, orders, a transaction over all three tables; window 2: more of it."""
    bounds = [datetime.now(UTC)]
    with database.batch() as b:
        b.update("Customers", ["Id", "Email", "Phone", "Notes"], [[FIRST_ID + 1, "mail-1b@clear.example", "+1-555-0199", "note-clear-1b"]])
        b.insert("Customers", ["Id", "Email", "Phone", "Notes", "Name"], [customer(i) for i in range(4, 6)])
        b.insert("Orders", ["Id", "CustomerId", "Total"], [[i, FIRST_ID + i % 6, 10 * i] for i in range(1, 5)])
        b.insert("Audit", ["Id", "Detail"], [[2, "audit-clear-2"]])  # one transaction over all three tables
    bounds.append(datetime.now(UTC))
    with database.batch() as b:
        b.update("Orders", ["Id", "CustomerId"], [[1, FIRST_ID + 5]])
        b.update("Customers", ["Id", "Phone", "Name"], [[FIRST_ID + 2, None, "Renamed"]])
        b.delete("Customers", spanner.KeySet(keys=[[FIRST_ID]]))  # no order refers to it
        b.insert("Audit", ["Id", "Detail"], [[3, "audit-clear-3"]])
    with database.batch() as b:
        b.insert("Audit", ["Id", "Detail"], [[4, "audit-clear-4"]])  # a transaction wholly left out
    bounds.append(datetime.now(UTC))
    return bounds


def expected_state(database: Any, at: datetime) -> dict[str, list[dict[str, Any]]]:
    """The source at `at` as the policy lands it, computed here from the test's own HMAC."""
    with database.snapshot(read_timestamp=at) as snap:
        customers = [
            {"Id": hashed(str(i)), "Email": e, "Phone": None if p is None else MASK_TOKEN, "Name": n}
            for i, e, p, n in snap.execute_sql("SELECT Id, Email, Phone, Name FROM Customers")
        ]
    with database.snapshot(read_timestamp=at) as snap:
        orders = [{"Id": i, "CustomerId": hashed(str(c)), "Total": t} for i, c, t in snap.execute_sql("SELECT Id, CustomerId, Total FROM Orders ORDER BY Id")]
    return {"Customers": sorted(customers, key=lambda r: r["Id"]), "Orders": orders}


def _avro_blocks(data: bytes) -> bytes:
    """An Avro container file's blocks, decompressed (Iceberg's manifests are deflated): what grep must see."""
    stream = io.BytesIO(data)

    def long() -> int:
        shift = result = 0
        while True:
            byte = stream.read(1)[0]
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)

    assert stream.read(4) == b"Obj\x01"
    meta: dict[str, bytes] = {}
    while count := long():
        if count < 0:
            long()
            count = -count
        for _ in range(count):
            name = stream.read(long()).decode()
            meta[name] = stream.read(long())
    stream.read(16)
    out = b""
    while stream.tell() < len(data):
        long()
        block = stream.read(long())
        out += zlib.decompress(block, -15) if meta.get("avro.codec") == b"deflate" else block
        stream.read(16)
    return out


def lake_text(root: Path) -> dict[str, bytes]:
    """Every file under the output root as grep should see it: its bytes, plus a Parquet file's values and an Avro or
    gzip file's content decompressed (a compressed page could hide a clear value from a byte search)."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if data[:4] == b"PAR1":
            data += json.dumps(pq.read_table(path).to_pylist(), default=str).encode()
        elif data[:4] == b"Obj\x01":
            data += _avro_blocks(data)
        elif data[:2] == b"\x1f\x8b":
            data += gzip.decompress(data)
        out[str(path)] = data
    return out


def test_a_policy_lands_nothing_left_out_nothing_clear_and_everything_else_exact(
    make_spanner_database: Any, extract_settings: Any, store: MetadataStore, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    database = make_spanner_database(DDL)
    with database.batch() as b:
        b.insert("Customers", ["Id", "Email", "Phone", "Notes", "Name"], [customer(i) for i in range(4)])
        b.insert("Audit", ["Id", "Detail"], [[1, "audit-clear-1"]])
    policy = parse_policy("policy", POLICY)
    settings = extract_settings(database.database_id, STREAM, policy=policy)
    typo = parse_policy("policy", {**POLICY, "mask_columns": ["Customers.Phon"]})
    with pytest.raises(ConfigError, match="Customers.Phon"):  # a misspelt column would land the clear value: refused
        run_snapshot(dataclasses.replace(settings, policy=typo))
    snapshot = run_snapshot(settings)  # the snapshot begun goes on, at its T0
    bounds = workload(database)
    bounds[0] = min(bounds[0], snapshot.at)
    summaries = [run_window(settings, start, end) for start, end in zip(bounds, bounds[1:], strict=False)]
    assert all(s.complete for s in summaries)
    # window 1's transaction over all three tables landed 2 of its 3 records: partial, not failed
    assert summaries[0].transaction_check["partial_transactions"] == 1 and summaries[0].transaction_check["mismatched"] == 0
    states = update_current_state(settings)
    assert [s.as_of for s in states] == bounds[1:] and sorted(states[-1].tables) == ["Customers", "Orders"]  # no Audit

    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    # the state tables (pyiceberg and Daft alike): the source through the policy, keyed on the hash, at each window end
    for end in bounds[1:]:
        want = expected_state(database, end - timedelta(microseconds=1))
        for table, rows in want.items():
            columns, got = state_rows(settings, layout, table, end)
            assert columns == list(rows[0]) and sorted(got, key=lambda r: r["Id"]) == rows, (table, end)
    # joins still work: every order's hashed customer is a customer's hashed key in the state table
    customers = {r["Id"] for r in expected_state(database, bounds[2] - timedelta(microseconds=1))["Customers"]}
    assert {r["CustomerId"] for r in state_rows(settings, layout, "Orders", bounds[2])[1]} <= customers

    # the change log (the Iceberg table, pyiceberg and Daft alike) and the snapshot's rows: the same hashes
    import daft

    opened = open_changelog(settings, layout)
    assert opened is not None
    catalog, changelog = opened
    try:
        rows = changelog.scan().to_arrow().to_pylist()
        # Daft reads the table's files (its Iceberg reader does not apply the name mapping of files added as they are)
        files = [task.file.file_path for task in changelog.scan().plan_files()]
        by_daft = daft.read_parquet(files).sort("uuid").to_arrow().select(list(rows[0])).to_pylist()
        assert by_daft == sorted(rows, key=lambda r: r["uuid"])
        summaries_by_end = {s.summary.additional_properties.get("spanner-cdc.window-end"): s.summary.additional_properties
                            for s in changelog.snapshots() if s.summary is not None}  # fmt: skip
    finally:
        close_catalog(catalog)
    snapshot_files = published_locations(layout.snapshot_location)
    snapshot_rows = sorted((r for path in snapshot_files for r in pq.read_table(path).to_pylist()), key=lambda r: r["uuid"])
    assert daft.read_parquet(snapshot_files).sort("uuid").to_arrow().select(list(snapshot_rows[0])).to_pylist() == snapshot_rows
    assert {r["object"] for r in rows} == {"Customers", "Orders"} and {r["object"] for r in snapshot_rows} == {"Customers"}
    for row in rows + snapshot_rows:
        keys, new, old = (json.loads(row[c]) for c in ("keys", "new_values", "old_values"))
        types = {c["name"]: c["type"]["code"] for c in json.loads(row["column_types"])}
        if row["object"] == "Customers":
            assert keys["Id"] in {hashed(str(FIRST_ID + i)) for i in range(6)} and types["Id"] == "STRING", row
            assert "Notes" not in new and "Notes" not in old and "Notes" not in types
            assert {new.get("Phone"), old.get("Phone")} <= {MASK_TOKEN, None}
        else:
            for values in (new, old):
                assert values.get("CustomerId") in {None, *(hashed(str(FIRST_ID + i)) for i in range(6))}
    assert {json.loads(r["new_values"])["Email"] for r in snapshot_rows} == {f"mail-{i}@clear.example" for i in range(4)}  # not hashed
    assert len([r for r in rows if r["object"] == "Orders"]) == 5  # 4 inserts, 1 update: exact

    # each window's completeness record (marker and Iceberg summary) names the policy it landed under
    for summary in summaries:
        record = summary.completeness
        assert record is not None and record["policy_fingerprint"] == policy.fingerprint and json.loads(record["policy"]) == policy.to_json()
        marker = read_marker(str(summary.marker_path))
        assert marker is not None and marker["completeness"] == record
        assert record_from_summary(summaries_by_end[record["window_end"]]) == record
    snap_marker = read_snapshot_marker(layout)
    assert snap_marker is not None and snap_marker["policy_fingerprint"] == policy.fingerprint

    # verify compares through the same policy: clean
    result = run_verify(settings)
    assert result.ok and result.change_log is not None and result.change_log.checked and result.rows_compared > 0, result.lines()

    # a policy change takes effect from the next window, and that window's record says so
    changed = parse_policy("policy", {**POLICY, "null_columns": ["Customers.Name"]})
    with database.batch() as b:
        b.update("Customers", ["Id", "Name"], [[FIRST_ID + 4, "Later"]])
    later = dataclasses.replace(settings, policy=changed)
    third = run_window(later, bounds[2], datetime.now(UTC))
    assert third.complete and third.completeness is not None and third.completeness["policy_fingerprint"] == changed.fingerprint
    assert summaries[1].completeness is not None and summaries[1].completeness["policy_fingerprint"] == policy.fingerprint
    assert run_window(later, bounds[1], bounds[2]).completeness == summaries[1].completeness  # a closed window keeps its record
    opened = open_changelog(settings, layout)
    assert opened is not None
    try:
        newest = [r for r in opened[1].scan().to_arrow().to_pylist() if r["window_start"] == bounds[2]]
    finally:
        close_catalog(opened[0])
    assert [json.loads(r["new_values"]) for r in newest] == [{"Name": None}]

    # no excluded value, no clear value of a hashed or masked column, and not the key, anywhere in the lake's bytes
    found = lake_text(Path(settings.output_root))
    assert found, "the lake should hold files"
    clear = [KEY, "audit-clear-", "note-clear-", "+1-555-0", *(str(FIRST_ID + i) for i in range(6))]
    leaks = [(needle, path) for needle in clear for path, data in found.items() if needle.encode() in data]
    assert leaks == []
    assert any(b"mail-1b@clear.example" in data for data in found.values())  # the search sees values that did land
