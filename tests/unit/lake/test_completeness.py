"""The completeness record of a closed window and its form in an Iceberg snapshot summary."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from spanner_cdc.lake.check import empty_check
from spanner_cdc.lake.completeness import (
    FIELDS,
    RECORD_VERSION,
    SUMMARY_KEY,
    completeness_record,
    record_from_summary,
    summary_properties,
)
from spanner_cdc.policy import Policy

T0 = datetime(2026, 3, 1, 10, tzinfo=UTC)
E = T0 + timedelta(hours=1)
CHECK = {
    "ok": True, "transactions": 7, "rows": 12, "mismatched": 0, "partial_transactions": 0, "duplicate_rows": 0, "outside_window_rows": 3, "examples": [],
    "first_commit_timestamp": "2026-03-01T10:00:01.000002+00:00", "last_commit_timestamp": "2026-03-01T10:59:58.250000+00:00",
}  # fmt: skip


def test_the_record_names_the_window_the_watermark_the_commit_range_and_the_check() -> None:
    record = completeness_record(
        stream="Orders", namespace="live", window_start=T0, window_end=E, low_watermark=E - timedelta(microseconds=1), check=CHECK
    )
    assert record == {
        "record_version": RECORD_VERSION,
        "stream": "Orders",
        "namespace": "live",
        "window_start": "2026-03-01T10:00:00+00:00",
        "window_end": "2026-03-01T11:00:00+00:00",
        "low_watermark": "2026-03-01T10:59:59.999999+00:00",
        "first_commit_timestamp": "2026-03-01T10:00:01.000002+00:00",
        "last_commit_timestamp": "2026-03-01T10:59:58.250000+00:00",
        "rows": 12,
        "transactions": 7,
        "transaction_check": "passed",
        "partial_transactions": 0,
        "policy_fingerprint": Policy().fingerprint,
        "policy": str(Policy()),
    }
    assert tuple(record) == FIELDS
    json.dumps(record)  # every value is plain JSON


def test_an_empty_window_and_a_finished_lineage_have_no_timestamps() -> None:
    record = completeness_record(stream="s", namespace="b1", window_start=T0, window_end=E, low_watermark=None, check=empty_check())
    assert (record["low_watermark"], record["first_commit_timestamp"], record["last_commit_timestamp"]) == (None, None, None)
    assert (record["rows"], record["transactions"], record["transaction_check"]) == (0, 0, "passed")
    failed = completeness_record(stream="s", namespace="b1", window_start=T0, window_end=E, low_watermark=E, check={**CHECK, "ok": False})
    assert failed["transaction_check"] == "failed"


def test_a_snapshot_summary_carries_the_record_whole_and_field_by_field() -> None:
    record = completeness_record(stream="s", namespace="live", window_start=T0, window_end=E, low_watermark=None, check=CHECK)
    props = summary_properties(record)
    assert all(isinstance(v, str) for v in props.values())  # an Iceberg summary is a map of strings
    assert record_from_summary(props) == record
    assert props["spanner-cdc.low-watermark"] == "" and props["spanner-cdc.rows"] == "12"
    assert props["spanner-cdc.window-end"] == record["window_end"] and props["spanner-cdc.transaction-check"] == "passed"
    assert set(props) == {SUMMARY_KEY} | {"spanner-cdc." + name.replace("_", "-") for name in FIELDS}
    assert record_from_summary({"added-records": "3"}) is None  # a snapshot without one (maintenance, older releases)


def test_the_record_names_the_landing_policy_by_fingerprint_and_text_never_the_key() -> None:
    policy = Policy(exclude_tables=("Audit",), hash_columns=("Users.Email",), hash_key_env="CDC_HASH_KEY")
    record = completeness_record(stream="s", namespace="live", window_start=T0, window_end=E, low_watermark=None,
                                 check={**CHECK, "partial_transactions": 2}, policy=policy)  # fmt: skip
    assert record["policy_fingerprint"] == policy.fingerprint != Policy().fingerprint
    assert json.loads(record["policy"])["hash_columns"] == ["Users.Email"]
    assert record["partial_transactions"] == 2
    assert summary_properties(record)["spanner-cdc.policy-fingerprint"] == policy.fingerprint
