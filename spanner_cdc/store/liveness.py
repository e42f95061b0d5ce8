"""Liveness of the runs that claim through a store: one session advisory lock per owner, on a connection of its own."""

from __future__ import annotations

import logging
import threading
import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.store.database import Database

log = logging.getLogger(__name__)

# The first half of the two-int advisory lock key; the second half is the owner's key from the
# cdc_liveness_keys sequence. Any fixed int4 works; it only has to be the same in every process.
LIVENESS_LOCK_CLASS = 0x5C0C_0A11

NEXT_KEY = sa.text("SELECT nextval('cdc_liveness_keys')")
TRY_LOCK = sa.text(f"SELECT pg_try_advisory_lock({LIVENESS_LOCK_CLASS}, CAST(:key AS integer))")
UNLOCK = sa.text(f"SELECT pg_advisory_unlock({LIVENESS_LOCK_CLASS}, CAST(:key AS integer))")
UNLOCK_ALL = sa.text("SELECT pg_advisory_unlock_all()")
PING = sa.text("SELECT 1")
# A claim trusts a connection checked this recently instead of a round trip per claim: if it died
# since, the claim's tokens look dead until keep_alive re-takes the lock, and a takeover meanwhile
# ends in LeaseLost for this run, never in a second commit.
RECHECK_S = 1.0
# A claimer's probe: true when nobody holds the key's session lock, i.e. the run that holds the claim
# is gone (its backend ended with its connection). The probe's own lock ends with the claimer's
# transaction. `{{not_own}}` spares a claimer probing its own key (held, so alive: a wasted probe).
DEAD_KEYS = f"""
    SELECT k.liveness_key FROM (
        SELECT DISTINCT liveness_key FROM cdc_partitions
        WHERE lineage_id = :lineage_id AND state = 'RUNNING' AND liveness_key IS NOT NULL {{not_own}}
    ) k
    WHERE pg_try_advisory_xact_lock({LIVENESS_LOCK_CLASS}, k.liveness_key)
"""


class Liveness:
    """Holds the advisory lock of every owner that claimed through this store, until the store closes.

    The lock lives on a dedicated connection, never on one a claim runs on: a probe from the session
    that holds the lock would succeed and make the owner's own tokens look dead.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._conn: Connection | None = None
        self._keys: dict[str, int] = {}
        self._mutex = threading.Lock()
        self._checked_at = float("-inf")

    def key(self, owner: str) -> int:
        """`owner`'s key, its lock held on a live connection (taken at the owner's first claim)."""
        with self._mutex:
            conn = self._connection(recheck=time.monotonic() - self._checked_at > RECHECK_S)
            if owner not in self._keys:
                self._keys[owner] = self._new_key(conn)
            return self._keys[owner]

    def keep_alive(self) -> None:
        """Probe the connection; when it died (a Postgres restart), reconnect and take every lock again.

        Until then another run may take this run's tokens over; the compare-and-set on owner and
        attempt then stops this run from committing them (LeaseLost).
        """
        with self._mutex:
            if self._keys:
                self._connection()

    def release(self, owner: str) -> None:
        with self._mutex:
            key = self._keys.pop(owner, None)
            if key is not None and self._conn is not None:
                try:
                    self._conn.execute(UNLOCK, {"key": key})
                except sa.exc.DBAPIError:
                    self._drop()  # a lost connection released the lock already

    def close(self) -> None:
        """Unlock before closing: a closed socket frees the locks only when its backend has exited, later."""
        with self._mutex:
            self._keys.clear()
            if self._conn is not None:
                try:
                    self._conn.execute(UNLOCK_ALL)
                except sa.exc.DBAPIError:
                    pass  # a lost connection released the locks already
            self._drop()

    def _connection(self, *, recheck: bool = True) -> Connection:
        if self._conn is not None and not recheck:
            return self._conn
        if self._conn is not None:
            try:
                self._conn.execute(PING)
                self._checked_at = time.monotonic()
                return self._conn
            except sa.exc.DBAPIError as exc:
                log.warning("liveness connection to the metadata store lost (%s): taking its locks again", type(exc.orig).__name__)
                self._drop()
        try:
            self._conn = self._db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            for owner, key in self._keys.items():
                if not self._conn.execute(TRY_LOCK, {"key": key}).scalar_one():
                    # only a wrapped-around key can be held elsewhere; this owner's claims then rely on the lease
                    log.error("liveness lock %s of %s is held by another session", key, owner)
        except sa.exc.DBAPIError as exc:
            self._drop()
            raise self._db.translate(exc) from exc
        self._checked_at = time.monotonic()
        return self._conn

    def _new_key(self, conn: Connection) -> int:
        try:
            while True:
                key = int(conn.execute(NEXT_KEY).scalar_one())
                if conn.execute(TRY_LOCK, {"key": key}).scalar_one():
                    return key
        except sa.exc.DBAPIError as exc:
            raise self._db.translate(exc) from exc

    def _drop(self) -> None:
        """Close the session for good (never back to the pool: a pooled session would keep its locks)."""
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        try:
            conn.invalidate()
            conn.close()
        except sa.exc.DBAPIError:
            pass  # already gone
