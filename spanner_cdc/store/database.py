"""The store's Postgres connection: engine, transactions with retry, and driver errors as project errors."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from spanner_cdc.errors import SchemaOutdated, StoreError, StoreUnreachable, setting
from spanner_cdc.masking import mask_password
from spanner_cdc.store import url as store_url

log = logging.getLogger(__name__)
T = TypeVar("T")

UPGRADE_HINT = "run `spanner-cdc db upgrade`"
POINT_ELSEWHERE = f"start it, or point to another with {setting('metadata_url')} (or SPANNER_CDC_METADATA_URL)"
# deadlock_detected, serialization_failure: the whole transaction is safe to run again
RETRYABLE_PGCODES = frozenset({"40P01", "40001"})
UNDEFINED_TABLE = "42P01"
UNDEFINED_FUNCTION = "42883"
MAX_ATTEMPTS = 5
QUOTING_HINT = "@ : / % in the user name or password written as %40 %3A %2F %25"
NO_SSL_REASON = "server does not support SSL"
NO_SSL_HINT = "set sslmode=prefer or sslmode=disable in the URL, or enable SSL on the server"
SESSION_OPTIONS = "-c timezone=UTC"
# The batch engine's sessions plan without nested loops, for the statements that join a set of picked tokens
# back to their rows (claim, schedule, the batches): without statistics for a fresh lineage, the planner
# estimates a CTE of 10,000 tokens at one row and joins it by nested loop, 10,000 x 10,000 comparisons (160 s
# to claim a 10,000-token window); a hash join takes ~1 s. A session setting, not a SET LOCAL per transaction:
# one round trip less each time, and nothing else runs on these sessions.
BATCH_SESSION_OPTIONS = f"{SESSION_OPTIONS} -c enable_nestloop=off"
# A pooler in transaction mode (PgBouncer) drops or shares session settings: psycopg2, which binds on the
# client, also sends each batch statement behind this SET LOCAL in the same message (one transaction, no
# round trip more). psycopg 3 binds on the server, where a message holds one statement: the option only.
NO_NESTED_LOOPS = "SET LOCAL enable_nestloop = off; "
# A batch session back in the pool this recently is used without a ping (one round trip less per call): one
# that died since fails its statement (StoreUnreachable), and a transaction that had not committed is re-run.
IDLE_PING_S = 1.0


def normalise_url(url: str) -> str:
    """The SQLAlchemy URL of what the user wrote (psycopg2 for the plain forms); see spanner_cdc.store.url."""
    return store_url.normalise_url(url)


def display_url(url: str) -> str:
    """The URL with its password hidden, for messages and logs (also for text that is no URL at all)."""
    return mask_password(url)


def _reason(exc: BaseException) -> str:
    """First meaningful line of a driver error, without libpq's connection preamble."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(orig).__name__
    first = re.sub(r"^(connection failed:\s*)?(connection to server at .*? failed:\s*)?", "", first)
    first = re.sub(r"^(FATAL|ERROR):\s*", "", first)
    return first[:300]


def _pgcode(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error: psycopg2 names it `pgcode`, psycopg 3 `sqlstate`."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)


class Database:
    """Owns the engine; every store operation is one transaction run through `transaction`."""

    def __init__(self, url: str) -> None:
        # Messages show the URL as the user wrote it (masked), not the driver-qualified one we connect with.
        self.display_url = display_url(url)
        self.url = normalise_url(url)
        try:
            self.engine: Engine = self._engine(SESSION_OPTIONS, pre_ping=True)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError):
            # The parser's own message may quote a piece of an unquoted password (a "port" after its ':')
            raise StoreError(
                f"metadata store URL {self.display_url} is not a usable Postgres URL: expected "
                f"postgresql://user:pass@host:5432/db with {QUOTING_HINT}"
            ) from None

    def _engine(self, options: str, *, pre_ping: bool) -> Engine:
        return sa.create_engine(
            self.url,
            pool_pre_ping=pre_ping,
            pool_size=2,
            max_overflow=8,
            connect_args={"connect_timeout": 10, "options": options, "application_name": "spanner-cdc"},
        )

    @cached_property
    def batch_engine(self) -> Engine:
        """Sessions for the set-based transitions (see BATCH_SESSION_OPTIONS), pinged only after IDLE_PING_S."""
        engine = self._engine(BATCH_SESSION_OPTIONS, pre_ping=False)
        _ping_when_idle(engine)
        if engine.dialect.driver == "psycopg2":
            event.listen(engine, "before_cursor_execute", _without_nested_loops, retval=True)
        return engine

    def ping(self) -> None:
        """Connect once, so an unreachable store fails here with a message saying what to do."""
        self.transaction(lambda conn: conn.execute(sa.text("SELECT 1")).scalar_one())

    def unreachable(self, exc: BaseException) -> StoreUnreachable:
        reason = _reason(exc)
        # "start it" would send the user after a server that runs: the URL asks for SSL it does not offer
        hint = NO_SSL_HINT if NO_SSL_REASON in reason else POINT_ELSEWHERE
        return StoreUnreachable(f"metadata store at {self.display_url} is unreachable ({reason}): {hint}")

    def transaction(self, body: Callable[[Connection], T], *, batch: bool = False) -> T:
        """Run `body` in one transaction (on the batch engine with `batch`); a deadlock or serialization
        failure re-runs all of it, and so does a connection lost before the commit (nothing was committed)."""
        engine = self.batch_engine if batch else self.engine
        for attempt in range(1, MAX_ATTEMPTS + 1):
            committing = False
            try:
                with engine.begin() as conn:
                    result = body(conn)
                    committing = True
                return result
            except sa.exc.DBAPIError as exc:
                code = _pgcode(exc)
                lost = exc.connection_invalidated and not committing
                if (code in RETRYABLE_PGCODES or lost) and attempt < MAX_ATTEMPTS:
                    log.debug("metadata store transaction retried after %s (attempt %s)", code or "a lost connection", attempt)
                    continue
                raise self.translate(exc) from exc
        raise AssertionError("unreachable: the loop returns or raises")

    def statement(self, body: Callable[[Connection], T]) -> T:
        """Run `body`, which executes exactly one statement, as its own transaction on the batch engine.

        Autocommit: the statement commits as it returns, without BEGIN and COMMIT round trips. A deadlock
        or serialization failure rolled it back and re-runs it; a lost connection does not (it may have
        committed before the connection dropped).
        """
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                with self.batch_engine.connect() as conn:
                    return _autocommit(conn, body)
            except sa.exc.DBAPIError as exc:
                code = _pgcode(exc)
                if code in RETRYABLE_PGCODES and attempt < MAX_ATTEMPTS:
                    log.debug("metadata store statement retried after %s (attempt %s)", code, attempt)
                    continue
                raise self.translate(exc) from exc
        raise AssertionError("unreachable: the loop returns or raises")

    def translate(self, exc: sa.exc.DBAPIError) -> StoreError:
        code = _pgcode(exc)
        if code == UNDEFINED_TABLE:
            return SchemaOutdated(
                f"metadata store at {self.display_url} has no spanner-cdc schema ({_reason(exc)}): {UPGRADE_HINT}"
            )
        if code == UNDEFINED_FUNCTION and "cdc_" in _reason(exc):  # store.functions of another release
            return SchemaOutdated(
                f"metadata store at {self.display_url} lacks a function of this release ({_reason(exc)}): {UPGRADE_HINT}"
            )
        if isinstance(exc, sa.exc.OperationalError) and code is None:
            return self.unreachable(exc)
        return StoreError(f"metadata store at {self.display_url} failed: {_reason(exc)}")

    def dispose(self) -> None:
        self.engine.dispose()
        if "batch_engine" in self.__dict__:
            self.batch_engine.dispose()


def _autocommit(conn: Connection, body: Callable[[Connection], T]) -> T:
    """`body` with the driver in autocommit. Set on the driver's connection, not as SQLAlchemy's isolation
    level: resetting that on check-in costs psycopg2 a round trip (SET default_transaction_isolation)."""
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None, "a checked-out connection has its driver connection"
    dbapi.autocommit = True
    try:
        return body(conn)
    finally:
        if not conn.invalidated:
            dbapi.autocommit = False


def _without_nested_loops(
    conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> tuple[str, Any]:
    return NO_NESTED_LOOPS + statement, parameters


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled session at check-out only when it sat idle for more than IDLE_PING_S."""

    @event.listens_for(engine, "checkin")
    def checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if time.monotonic() - record.info.get("checked_in", float("-inf")) <= IDLE_PING_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # the pool drops this session and checks out a new one
            raise sa.exc.DisconnectionError(f"idle session found dead: {type(exc).__name__}") from exc
