"""The one dispatch on record kinds routes each kind to its handler method and refuses anything else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spanner_cdc.model.records import (
    ChildPartition,
    ChildPartitionsRecord,
    HeartbeatRecord,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
    dispatch,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Names:
    def data_change(self, record: object) -> str:
        return "data_change"

    def heartbeat(self, record: object) -> str:
        return "heartbeat"

    def child_partitions(self, record: object) -> str:
        return "child_partitions"

    def partition_start(self, record: object) -> str:
        return "partition_start"

    def partition_end(self, record: object) -> str:
        return "partition_end"

    def partition_event(self, record: object) -> str:
        return "partition_event"


def test_each_kind_reaches_its_method() -> None:
    children = ChildPartitionsRecord(T0, "00000001", (ChildPartition("t1", ("t0",)),))
    assert dispatch(HeartbeatRecord(T0), Names()) == "heartbeat"
    assert dispatch(children, Names()) == "child_partitions"
    assert HeartbeatRecord(T0).kind == dispatch(HeartbeatRecord(T0), Names())
    mutable = [
        PartitionStartRecord(T0, "00000000", ("t1",)),
        PartitionEndRecord(T0, "00000001", "t0"),
        PartitionEventRecord(T0, "00000002", "t0", (), ("t1",)),
    ]
    assert [dispatch(r, Names()) for r in mutable] == ["partition_start", "partition_end", "partition_event"]
    assert [r.kind for r in mutable] == [dispatch(r, Names()) for r in mutable]


def test_anything_else_is_refused() -> None:
    with pytest.raises(TypeError, match="not a change record: dict"):
        dispatch({"kind": "heartbeat"}, Names())  # type: ignore[arg-type]
