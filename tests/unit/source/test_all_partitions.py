"""The in-process query workflow: roots, splits, a merge child read once and only after all its parents."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import ChangeRecord, ChildPartition, ChildPartitionsRecord, HeartbeatRecord
from spanner_cdc.source.all_partitions import AllPartitions

T0 = datetime(2024, 1, 1, tzinfo=UTC)
END = T0 + timedelta(hours=1)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def children(minutes: int, *kids: tuple[str, tuple[str, ...]]) -> ChildPartitionsRecord:
    return ChildPartitionsRecord(at(minutes), "1", tuple(ChildPartition(t, p) for t, p in kids))


class ScriptedReader:
    """Each token's records; `gates` make a token wait (inside its query) until another token's query ended."""

    stream = "s"

    def __init__(self, script: dict[str | None, list[ChangeRecord]], gates: dict[str, str] | None = None) -> None:
        self.script = script
        self.gates = gates or {}
        self.ended = {token: threading.Event() for token in script}
        self.calls: list[tuple[str | None, datetime, datetime | None]] = []
        self.lock = threading.Lock()
        self.order: list[tuple[str, str | None]] = []

    def read(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
        with self.lock:
            self.calls.append((token, start, end))
            self.order.append(("start", token))
        for index, record in enumerate(self.script[token]):
            if index == len(self.script[token]) - 1 and token in self.gates:
                assert self.ended[self.gates[token]].wait(10), "gate never opened"
            yield record
        with self.lock:
            self.order.append(("end", token))
        self.ended[token].set()


# roots A, B, C; A splits into A1 + A2; B and C merge into M (C ends first, B only after C ended)
SCRIPT: dict[str | None, list[ChangeRecord]] = {
    None: [children(0, ("A", ()), ("B", ())), children(0, ("C", ()))],
    "A": [HeartbeatRecord(at(5)), children(10, ("A1", ("A",)), ("A2", ("A",)))],
    "B": [HeartbeatRecord(at(5)), HeartbeatRecord(at(15)), children(20, ("M", ("B", "C")))],
    "C": [HeartbeatRecord(at(5)), children(20, ("M", ("B", "C")))],
    "A1": [HeartbeatRecord(at(60))],
    "A2": [HeartbeatRecord(at(60))],
    "M": [HeartbeatRecord(at(30)), HeartbeatRecord(at(60))],
}


def run(reader: ScriptedReader, end: datetime | None = END, concurrency: int = 4) -> tuple[AllPartitions, list[tuple[str | None, ChangeRecord]]]:
    workflow = AllPartitions(reader, T0, end, concurrency=concurrency)
    return workflow, list(workflow)


@pytest.mark.parametrize("concurrency", [1, 2, 4])
def test_every_partition_once_and_children_after_all_parents(concurrency: int) -> None:
    reader = ScriptedReader(SCRIPT, gates={"B": "C"} if concurrency > 1 else None)
    workflow, out = run(reader, concurrency=concurrency)
    assert sorted(str(t) for t, _, _ in reader.calls) == sorted(str(t) for t in SCRIPT)  # each token queried once
    starts = {t: s for t, s, _ in reader.calls}
    assert starts == {None: T0, "A": T0, "B": T0, "C": T0, "A1": at(10), "A2": at(10), "M": at(20)}
    assert all(e == END for _, _, e in reader.calls)
    order = reader.order
    assert order.index(("start", "M")) > max(order.index(("end", "B")), order.index(("end", "C")))
    assert order.index(("start", "A1")) > order.index(("end", "A"))
    # the output: every record once, tagged with its partition; a child's records after all its parents'
    assert sorted((str(t), repr(r)) for t, r in out) == sorted((str(t), repr(r)) for t, rs in SCRIPT.items() for r in rs)
    positions = {t: [i for i, (tok, _) in enumerate(out) if tok == t] for t in SCRIPT}
    assert min(positions["M"]) > max(positions["B"] + positions["C"])
    assert min(positions["A1"] + positions["A2"]) > max(positions["A"])
    assert workflow.log.events.count(("start", "M")) == 1


def test_children_beginning_after_the_end_are_not_read() -> None:
    reader = ScriptedReader(SCRIPT)
    workflow, out = run(reader, end=at(15))
    assert {t for t, _, _ in reader.calls} == {None, "A", "B", "C", "A1", "A2"}
    assert workflow.log.skipped == ["M"]


def test_a_failing_partition_stops_the_workflow_with_its_error() -> None:
    class Failing(ScriptedReader):
        def read(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
            if token == "A1":
                raise SourceError("s A1: broken")
            return super().read(token, start, end)

    with pytest.raises(SourceError, match="s A1: broken"):
        run(Failing(SCRIPT))


def test_a_child_whose_parent_is_never_read_is_reported() -> None:
    script = dict(SCRIPT)
    script["C"] = [children(20, ("M", ("B", "C", "Z")))]
    with pytest.raises(SourceError, match="child partitions M never became ready"):
        run(ScriptedReader(script))


def test_stopping_early_leaves_no_consumer_blocked() -> None:
    reader = ScriptedReader(SCRIPT)
    all_partitions = AllPartitions(reader, T0, END)
    records = iter(all_partitions)
    token, first = next(records)
    assert token is None and isinstance(first, ChildPartitionsRecord)
    records.close()  # type: ignore[attr-defined]
    assert all_partitions._stop.is_set()  # producers see it and give up instead of waiting on a full queue
