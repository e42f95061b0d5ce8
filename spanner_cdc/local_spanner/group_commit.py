"""Group commit of the local server's journals: inside one group, appended entries reach the disk by one flush per journal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Syncable(Protocol):
    def sync(self) -> None: ...


_group: ContextVar[list[Syncable] | None] = ContextVar("group_commit", default=None)


@contextmanager
def group_commit() -> Iterator[None]:
    """Journals written in this block are flushed (and fsynced, if so configured) once, when it ends.

    The caller answers its clients only after the block: every commit of the group is then as durable as
    a commit flushed on its own, for one write and one fsync per journal instead of one per commit."""
    if _group.get() is not None:  # nested: the outer group flushes
        yield
        return
    pending: list[Syncable] = []
    token = _group.set(pending)
    try:
        yield
    finally:
        _group.reset(token)
        for journal in pending:
            journal.sync()


def deferred(journal: Syncable) -> bool:
    """True if a group is open (the journal is synced when it ends); False: the caller syncs now."""
    pending = _group.get()
    if pending is None:
        return False
    if not any(j is journal for j in pending):
        pending.append(journal)
    return True
