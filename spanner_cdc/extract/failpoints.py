"""The failpoints: every named point where a crash test can kill (or stop) the process, and the one function that does it."""

from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger(__name__)

# "<point>[:<n>][:stop]", several joined by commas: the n-th time (default the first) the process reaches <point>, it
# SIGKILLs itself, or with "stop" SIGSTOPs itself (a test then kills it, or does something and SIGCONTs it): crash tests.
FAILPOINT_ENV = "SPANNER_CDC_FAILPOINT"
ACTIONS = ("kill", "stop")
# Every point the code calls; tests/unit/extract/test_failpoints.py fails when a failpoint() call names another.
FAILPOINTS = {
    "after_claim": "a run claimed its tokens (their leases are held); no Spark job of them started",
    "after_job": "a token's (or a wave group's) Spark job ran; nothing of it is published",
    "after_publish": "its files are published under their final names; the store does not list them yet",
    "after_commit": "the store committed its files and watermark",
    "before_close": "a run's waves are over (or it found nothing to claim); the window's close (check, marker, COMPLETE) "
    "has not started",
    "snapshot_after_job": "a snapshot table's Spark job ran; its files are not recorded",
    "snapshot_after_commit": "a snapshot table's files are recorded; the snapshot marker is not written",
    "snapshot_after_marker": "the snapshot marker is written; the snapshot is not marked complete",
    "retention_before_fold": "lake maintain's store retention is about to fold one more closed window (earlier ones are folded)",
    "state_before_commit": "a window's (or the seed's) files of a current-state table are written; its snapshot is not committed yet",
    "compaction_after_replace": "lake maintain: a table's compacted files are committed to Iceberg (a replace snapshot); the window's marker and manifest still list the originals",
    "expiry_after_commit": "lake maintain: old snapshots are expired; no orphan is removed yet",
    "orphan_after_remove": "lake maintain: one file no one lists is removed; the others are not yet",
    "metadata_after_remove": "lake maintain: one Iceberg file (metadata, manifest list, manifest; a state table's data "
    "file) the table's current metadata does not need is removed; the others are not yet",
}
_hits: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str) -> list[tuple[str, int, str]]:
    """(point, n, action) of each comma-separated `<point>[:<n>][:stop]` of a FAILPOINT_ENV value."""
    parsed = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        point, *rest = part.split(":")
        nth, action = 1, "kill"
        for field in rest:
            if field.isdigit() and int(field) >= 1:
                nth = int(field)
            elif field in ACTIONS:
                action = field
            else:
                raise ValueError(
                    f"{FAILPOINT_ENV}: {field!r} in {part!r} is neither a hit count (1, 2, ...) nor an action "
                    f"({', '.join(ACTIONS)})"
                )
        parsed.append((point, nth, action))
    return parsed


def failpoint(point: str) -> None:
    """Die like a crash (no cleanup, no finally blocks), or stop until SIGCONT, at a named point when the environment
    asks for it."""
    spec = os.environ.get(FAILPOINT_ENV)
    if not spec:
        return
    asked = [(nth, action) for target, nth, action in parse(spec) if target == point]
    if not asked:
        return
    # The hit is acted on under the lock: another thread at the same point (a concurrent token's after_publish) waits
    # there instead of going on to its commit while this one logs, so nothing passes the point once it has fired.
    with _lock:
        _hits[point] = hit = _hits.get(point, 0) + 1
        for nth, action in asked:
            if hit != nth:
                continue
            if action == "stop":
                log.warning("failpoint %s reached (hit %d): stopping the process (SIGSTOP)", point, hit)
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                log.warning("failpoint %s reached (hit %d): killing the process", point, hit)
                os.kill(os.getpid(), signal.SIGKILL)
