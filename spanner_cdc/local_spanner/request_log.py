"""The read options the last queries and reads asked for (Data Boost, priority, directed reads), kept for the control API."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from google.protobuf.json_format import MessageToDict

from spanner_cdc.local_spanner.model import QueryError

KEPT = 2000  # entries kept, oldest dropped first: enough for a test's snapshot and verify on a few tables
_DIRECTED_READ_WRITE = "Directed reads can only be performed in a read-only transaction"


def _has(request: Any, name: str) -> bool:
    return name in request.DESCRIPTOR.fields_by_name


class RequestLog:
    """What each ExecuteSql / ExecuteStreamingSql / PartitionQuery / Read asked for, in arrival order. The server does not
    act on these options (it has one replica and no separate compute); it accepts them as Spanner does and records them,
    so a test can see that a read asked for them."""

    def __init__(self, size: int = KEPT) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._seq = 0

    def record(self, method: str, request: Any, database: str, read_write: bool = False) -> None:
        """Note the request's options; refuse directed reads in a read-write transaction, as Spanner does."""
        directed = _has(request, "directed_read_options") and request.HasField("directed_read_options")
        if directed and read_write:
            raise QueryError("INVALID_ARGUMENT", _DIRECTED_READ_WRITE)
        options = request.request_options if _has(request, "request_options") else None
        entry = {
            "method": method,
            "database": database,
            "sql": getattr(request, "sql", "") or "",
            "table": getattr(request, "table", "") or "",
            "partitioned": bool(getattr(request, "partition_token", b"")),
            "data_boost_enabled": bool(getattr(request, "data_boost_enabled", False)),
            "priority": type(options).Priority.Name(options.priority) if options is not None else "",
            "request_tag": options.request_tag if options is not None else "",
            "directed_read_options": MessageToDict(request.directed_read_options) if directed else None,
        }
        with self._lock:
            self._seq += 1
            entry["seq"] = self._seq
            self._entries.append(entry)

    def entries(self, since: int = 0, database: str | None = None) -> list[dict[str, Any]]:
        """Entries after sequence number `since`, of `database` (a full name, or its last part) if given."""
        with self._lock:
            found = [dict(e) for e in self._entries if e["seq"] > since]
        if database:
            found = [e for e in found if e["database"] == database or e["database"].rsplit("/", 1)[-1] == database]
        return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
