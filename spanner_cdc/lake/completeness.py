"""The completeness record of a closed window: one dict, published alike in the marker, the Iceberg snapshot, the asset event and `lake show`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from spanner_cdc.policy import Policy

# A consumer checks this before reading the fields: a later release adds fields under a new version only
# when it changes the meaning of one already here.
RECORD_VERSION = 1
# The whole record as compact JSON in an Iceberg snapshot summary (a map of strings) ...
SUMMARY_KEY = "spanner-cdc.completeness"
# ... and each field on its own, for engines that read a summary with SQL (`summary['spanner-cdc.low-watermark']`)
SUMMARY_PREFIX = "spanner-cdc."
FIELDS = (
    "record_version",
    "stream",
    "namespace",
    "window_start",
    "window_end",
    "low_watermark",
    "first_commit_timestamp",
    "last_commit_timestamp",
    "rows",
    "transactions",
    "transaction_check",
    "partial_transactions",
    "policy_fingerprint",
    "policy",
)


def completeness_record(
    *,
    stream: str,
    namespace: str,
    window_start: datetime,
    window_end: datetime,
    low_watermark: datetime | None,
    check: Mapping[str, Any],
    policy: Policy | None = None,
) -> dict[str, Any]:
    """The record of a window that passed its transaction check: every change committed in
    [window_start, window_end) is in the lake, and so is every change of the lineage committed at or before
    `low_watermark` (None once every partition of the stream has finished).

    `rows` and `transactions` count what was committed inside the window (the check's counts, whatever
    window's files hold them); the first and last commit timestamps are those rows' (None for an empty window).
    `policy` is what landed (`policy.py`): its fingerprint and its canonical text (rules and the key's source, never
    the key). With tables left out, `partial_transactions` counts the transactions that landed only some of their
    records (the others' tables are not in the lake); the check then proves no duplicate and no surplus record.
    """
    policy = policy or Policy()
    return {
        "record_version": RECORD_VERSION,
        "stream": stream,
        "namespace": namespace,
        "window_start": window_start.isoformat(),
        "window_end": window_end.isoformat(),
        "low_watermark": low_watermark.isoformat() if low_watermark is not None else None,
        "first_commit_timestamp": check.get("first_commit_timestamp"),
        "last_commit_timestamp": check.get("last_commit_timestamp"),
        "rows": int(check.get("rows", 0)),
        "transactions": int(check.get("transactions", 0)),
        "transaction_check": "passed" if check.get("ok") else "failed",
        "partial_transactions": int(check.get("partial_transactions", 0)),
        "policy_fingerprint": policy.fingerprint,
        "policy": str(policy),
    }


def summary_properties(record: Mapping[str, Any]) -> dict[str, str]:
    """The record as Iceberg snapshot summary properties: whole under SUMMARY_KEY, and one property per field
    (`spanner-cdc.low-watermark`, ...; an absent value is an empty string)."""
    properties = {SUMMARY_KEY: json.dumps(dict(record), sort_keys=True, separators=(",", ":"))}
    for name in FIELDS:
        value = record.get(name)
        properties[SUMMARY_PREFIX + name.replace("_", "-")] = "" if value is None else str(value)
    return properties


def record_from_summary(summary: Mapping[str, str]) -> dict[str, Any] | None:
    """The record a snapshot summary carries (None for a snapshot without one: maintenance, older releases)."""
    text = summary.get(SUMMARY_KEY)
    return dict(json.loads(text)) if text else None
