"""Group commit of the local server's journals: inside one group, appended entries reach the disk by one flush per journal."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class Syncable(Protocol):
    fsync: bool  # whether to_disk() waits for the disk (--fsync)

    def flush(self) -> None:
        """Hand the written entries to the OS: a killed server keeps them."""

    def to_disk(self) -> None:
        """fsync what was flushed, if so configured: a lost machine keeps it too."""


_group: ContextVar[list[Syncable] | None] = ContextVar("group_commit", default=None)
_fsyncer: ThreadPoolExecutor | None = None
_fsyncer_lock = threading.Lock()


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
        sync_all(pending)


def sync_all(journals: Sequence[Syncable]) -> None:
    """Flush the journals in order (the catalog's before the change records it explains: a killed server keeps a
    prefix), then fsync them at once: each fsync waits for the disk with the GIL released."""
    for journal in journals:
        journal.flush()
    durable = [journal for journal in journals if journal.fsync]
    if len(durable) < 2:
        for journal in durable:
            journal.to_disk()
        return
    others = [_fsync_pool().submit(journal.to_disk) for journal in durable[1:]]
    try:
        durable[0].to_disk()
    finally:
        for other in others:
            other.result()


class CommitQueue:
    """Commits from concurrent callers share a group: those that arrive while a group holds the commit lock (its
    commits, flushes and fsyncs) queue up, and the first of them to get the lock commits them all in one group.

    Each caller returns only after the group holding its commit has synced: as durable as a group of its own,
    in arrival order under the one lock (so commit timestamps still follow the journals' order)."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock  # the catalog's commit lock
        self._guard = threading.Lock()
        self._queued: list[_Queued[Any]] = []

    def run(self, work: Callable[[], T]) -> T:
        """work() under the commit lock, in a group commit; its result, or what it raised."""
        if _group.get() is not None:  # inside an open group (nested): that group syncs, its caller answers after
            with self._lock:
                return work()
        mine = _Queued(work)
        with self._guard:
            self._queued.append(mine)
        with self._lock:
            if not mine.done:  # no earlier group took it: this caller leads the next one
                with self._guard:
                    batch, self._queued = self._queued, []
                _run_group(batch)
        return mine.outcome()


class _Queued(Generic[T]):
    def __init__(self, work: Callable[[], T]) -> None:
        self.work = work
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def _run_group(batch: list[_Queued[Any]]) -> None:
    try:
        with group_commit():
            for item in batch:
                try:
                    item.result = item.work()
                except BaseException as exc:  # the caller's own error (a refused commit): raised to it alone
                    item.error = exc
    except BaseException as exc:  # the group's flush or fsync failed: none of its commits is durable
        for item in batch:
            item.error = item.error or exc
    finally:
        for item in batch:
            item.done = True


def _fsync_pool() -> ThreadPoolExecutor:
    global _fsyncer
    with _fsyncer_lock:
        if _fsyncer is None:
            _fsyncer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="journal-fsync")
        return _fsyncer


def deferred(journal: Syncable) -> bool:
    """True if a group is open (the journal is synced when it ends); False: the caller syncs now."""
    pending = _group.get()
    if pending is None:
        return False
    if not any(j is journal for j in pending):
        pending.append(journal)
    return True
