"""Which Python data sources each Spark session has registered: each source once per session."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_lock = threading.Lock()
_registered: set[tuple[int, str]] = set()  # (id of the session, the source's name)


def register(session: SparkSession, *sources: Any) -> None:
    """Register each of `sources` (DataSource classes) with `session` unless it already is."""
    with _lock:
        for source in sources:
            key = (id(session), source.name())
            if key not in _registered:
                session.dataSource.register(source)
                _registered.add(key)


def forget(keep: Any = ()) -> None:
    """The sessions but those in `keep` are stopped: a new session (which may reuse an id) registers its sources again."""
    kept = {id(session) for session in keep}
    with _lock:
        _registered.difference_update({key for key in _registered if key[0] not in kept})
