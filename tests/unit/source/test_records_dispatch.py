"""The one dispatch on record kinds routes each kind to its handler method and refuses anything else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spanner_cdc.source.records import ChildPartition, ChildPartitionsRecord, HeartbeatRecord, dispatch

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Names:
    def data_change(self, record: object) -> str:
        return "data_change"

    def heartbeat(self, record: object) -> str:
        return "heartbeat"

    def child_partitions(self, record: object) -> str:
        return "child_partitions"


def test_each_kind_reaches_its_method() -> None:
    children = ChildPartitionsRecord(T0, "00000001", (ChildPartition("t1", ("t0",)),))
    assert dispatch(HeartbeatRecord(T0), Names()) == "heartbeat"
    assert dispatch(children, Names()) == "child_partitions"
    assert HeartbeatRecord(T0).kind == dispatch(HeartbeatRecord(T0), Names())


def test_anything_else_is_refused() -> None:
    with pytest.raises(TypeError, match="not a change record: dict"):
        dispatch({"kind": "heartbeat"}, Names())  # type: ignore[arg-type]
