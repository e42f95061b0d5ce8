"""The side channel of a token job: what the executor saw besides data (children, heartbeats, the end), as a tiny file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.lake import storage
from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
    dispatch,
)
from spanner_cdc.times import iso_z

CONTROL_NAME = "control.json"



def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _ended(data: dict[str, Any] | None) -> PartitionEndRecord | None:
    if data is None:
        return None
    return PartitionEndRecord(datetime.fromisoformat(data["end_timestamp"]), data["record_sequence"], data["partition_token"])


@dataclass
class ControlSummary:
    """Counts and control records of one token's read over [read_from, read_to] (both inclusive)."""

    token: str
    read_from: datetime
    read_to: datetime
    data_records: int = 0
    rows: int = 0
    heartbeats: int = 0
    last_timestamp: datetime | None = None
    children: list[ChildPartitionsRecord] = field(default_factory=list)
    # MUTABLE_KEY_RANGE: partitions this one announced, key range moves in and out, and its end
    started: list[PartitionStartRecord] = field(default_factory=list)
    moves: list[PartitionEventRecord] = field(default_factory=list)
    ended: PartitionEndRecord | None = None
    tables: dict[str, int] = field(default_factory=dict)
    excluded_records: int = 0  # data change records of tables the stream's policy leaves out (read, not landed)
    resumes: int = 0
    elapsed_s: float = 0.0  # the executor's wall time for the read (and the landing), and its reading thread's CPU
    cpu_s: float = 0.0
    error_type: str | None = None
    error_message: str | None = None
    _rows_of_record: int = field(default=0, init=False, repr=False, compare=False)  # rows of the record being observed

    @property
    def finished(self) -> bool:
        """A child partitions record ends the partition (everything after it belongs to the children), and so
        does a partition end record (MUTABLE_KEY_RANGE: nothing of the partition comes after it)."""
        return bool(self.children) or self.ended is not None

    @property
    def watermark(self) -> datetime:
        """Landed up to the children's start or the partition's end when it ended in range, else to the range's end."""
        if self.children:
            return min(record.start_timestamp for record in self.children)
        if self.ended is not None:
            return self.ended.end_timestamp
        return self.read_to

    def observe(self, record: ChangeRecord, rows: int = 0) -> None:
        """Count the record (a data change record landed as `rows` lake rows) and move the last timestamp."""
        self._rows_of_record = rows
        dispatch(record, self)
        ts = record.timestamp
        if self.last_timestamp is None or ts > self.last_timestamp:
            self.last_timestamp = ts

    def data_change(self, record: DataChangeRecord) -> None:
        self._count_data(record, self._rows_of_record)

    def _count_data(self, record: DataChangeRecord, rows: int) -> None:
        self.data_records += 1
        self.rows += rows
        self.tables[record.table_name] = self.tables.get(record.table_name, 0) + rows

    def landed(self, record: DataChangeRecord, rows: int) -> None:
        """observe() of a data change record landed as `rows` lake rows, without the dispatch (once per record read)."""
        self._count_data(record, rows)
        last = self.last_timestamp
        if last is None or record.commit_timestamp > last:
            self.last_timestamp = record.commit_timestamp

    def excluded(self, record: DataChangeRecord) -> None:
        """A data change record read and left out by the stream's policy: no rows, but the partition is read past it."""
        self.data_records += 1
        self.excluded_records += 1
        last = self.last_timestamp
        if last is None or record.commit_timestamp > last:
            self.last_timestamp = record.commit_timestamp

    def heartbeat(self, record: HeartbeatRecord) -> None:
        self.heartbeats += 1

    def child_partitions(self, record: ChildPartitionsRecord) -> None:
        self.children.append(record)

    def partition_start(self, record: PartitionStartRecord) -> None:
        self.started.append(record)

    def partition_event(self, record: PartitionEventRecord) -> None:
        self.moves.append(record)

    def partition_end(self, record: PartitionEndRecord) -> None:
        self.ended = record

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "read_from": iso_z(self.read_from),
            "read_to": iso_z(self.read_to),
            "data_records": self.data_records,
            "rows": self.rows,
            "heartbeats": self.heartbeats,
            "last_timestamp": iso_z(self.last_timestamp),
            "children": [
                {
                    "start_timestamp": iso_z(record.start_timestamp),
                    "record_sequence": record.record_sequence,
                    "child_partitions": [
                        {"token": child.token, "parent_partition_tokens": list(child.parent_partition_tokens)}
                        for child in record.child_partitions
                    ],
                }
                for record in self.children
            ],
            "started": [
                {"start_timestamp": iso_z(r.start_timestamp), "record_sequence": r.record_sequence, "partition_tokens": list(r.partition_tokens)}
                for r in self.started
            ],
            "moves": [
                {
                    "commit_timestamp": iso_z(r.commit_timestamp),
                    "record_sequence": r.record_sequence,
                    "partition_token": r.partition_token,
                    "move_in_from": list(r.move_in_from),
                    "move_out_to": list(r.move_out_to),
                }
                for r in self.moves
            ],
            "ended": None
            if self.ended is None
            else {"end_timestamp": iso_z(self.ended.end_timestamp), "record_sequence": self.ended.record_sequence, "partition_token": self.ended.partition_token},
            "tables": dict(sorted(self.tables.items())),
            "excluded_records": self.excluded_records,
            "resumes": self.resumes,
            "elapsed_s": round(self.elapsed_s, 4),
            "cpu_s": round(self.cpu_s, 4),
            "error_type": self.error_type,
            "error_message": self.error_message,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControlSummary:
        children = [
            ChildPartitionsRecord(
                start_timestamp=datetime.fromisoformat(record["start_timestamp"]),
                record_sequence=record["record_sequence"],
                child_partitions=tuple(
                    ChildPartition(child["token"], tuple(child["parent_partition_tokens"]))
                    for child in record["child_partitions"]
                ),
            )
            for record in data.get("children", [])
        ]
        return cls(
            token=data["token"],
            read_from=datetime.fromisoformat(data["read_from"]),
            read_to=datetime.fromisoformat(data["read_to"]),
            data_records=int(data.get("data_records", 0)),
            rows=int(data.get("rows", 0)),
            heartbeats=int(data.get("heartbeats", 0)),
            last_timestamp=_dt(data.get("last_timestamp")),
            children=children,
            started=[
                PartitionStartRecord(datetime.fromisoformat(r["start_timestamp"]), r["record_sequence"], tuple(r["partition_tokens"]))
                for r in data.get("started", [])
            ],
            moves=[
                PartitionEventRecord(
                    datetime.fromisoformat(r["commit_timestamp"]), r["record_sequence"], r["partition_token"],
                    tuple(r["move_in_from"]), tuple(r["move_out_to"]),
                )  # fmt: skip
                for r in data.get("moves", [])
            ],
            ended=_ended(data.get("ended")),
            tables={str(k): int(v) for k, v in data.get("tables", {}).items()},
            excluded_records=int(data.get("excluded_records", 0)),
            resumes=int(data.get("resumes", 0)),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            cpu_s=float(data.get("cpu_s", 0.0)),
            error_type=data.get("error_type"),
            error_message=data.get("error_message"),
        )

    def fail(self, exc: BaseException) -> None:
        """The token failed with `exc`: the driver raises its type (when it knows it) with its message."""
        self.error_type = type(exc).__name__
        self.error_message = str(exc)

    def to_text(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_text(cls, text: str) -> ControlSummary:
        return cls.from_json(json.loads(text))

    def write(self, location: str | Path) -> None:
        """Whole (a retried task attempt replaces the whole file, a reader never sees half of one), in the
        lake's own storage: the executor and the driver share nothing else."""
        storage.write_bytes(location, self.to_text().encode())

    @classmethod
    def read(cls, location: str | Path) -> ControlSummary | None:
        data = storage.read_bytes(location)
        return None if data is None else cls.from_text(data.decode())
