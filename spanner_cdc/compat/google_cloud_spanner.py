"""google-cloud-spanner internals without a public equivalent: a snapshot's transaction read timestamp."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from spanner_cdc.compat import expect

DISTRIBUTION = "google-cloud-spanner"


def strong_read_timestamp(database: Any) -> datetime:
    """The read timestamp of a strong multi-use snapshot begun now: the server's "now". For servers without SQL
    time functions (the local server); `SELECT CURRENT_TIMESTAMP()` is the public way where the server has it.
    The client keeps the timestamp BeginTransaction returns only on the snapshot's private attribute."""
    with database.snapshot(multi_use=True) as snapshot:
        snapshot.begin()
        stamp = getattr(snapshot, "_transaction_read_timestamp", None)
    expect(DISTRIBUTION, isinstance(stamp, datetime), "Snapshot._transaction_read_timestamp after begin()")
    return stamp  # type: ignore[return-value]


def check() -> None:
    """The contract: a multi-use Snapshot keeps BeginTransaction's read timestamp in `_transaction_read_timestamp`."""
    import inspect

    from google.cloud.spanner_v1.snapshot import Snapshot

    source = inspect.getsource(Snapshot)
    expect(DISTRIBUTION, "self._transaction_read_timestamp = transaction_pb.read_timestamp" in source,
           "Snapshot._transaction_read_timestamp (set from BeginTransaction's read_timestamp)")  # fmt: skip
