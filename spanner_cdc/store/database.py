"""The store's Postgres connection: engine, transactions with retry, and driver errors as project errors."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
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
MAX_ATTEMPTS = 5
QUOTING_HINT = "@ : / % in the user name or password written as %40 %3A %2F %25"
NO_SSL_REASON = "server does not support SSL"
NO_SSL_HINT = "set sslmode=prefer or sslmode=disable in the URL, or enable SSL on the server"


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
    return getattr(getattr(exc, "orig", None), "pgcode", None)


class Database:
    """Owns the engine; every store operation is one transaction run through `transaction`."""

    def __init__(self, url: str) -> None:
        # Messages show the URL as the user wrote it (masked), not the driver-qualified one we connect with.
        self.display_url = display_url(url)
        self.url = normalise_url(url)
        try:
            self.engine: Engine = sa.create_engine(
                self.url,
                pool_pre_ping=True,
                pool_size=2,
                max_overflow=8,
                connect_args={
                    "connect_timeout": 10,
                    "options": "-c timezone=UTC",
                    "application_name": "spanner-cdc",
                },
            )
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError):
            # The parser's own message may quote a piece of an unquoted password (a "port" after its ':')
            raise StoreError(
                f"metadata store URL {self.display_url} is not a usable Postgres URL: expected "
                f"postgresql://user:pass@host:5432/db with {QUOTING_HINT}"
            ) from None

    def ping(self) -> None:
        """Connect once, so an unreachable store fails here with a message saying what to do."""
        self.transaction(lambda conn: conn.execute(sa.text("SELECT 1")).scalar_one())

    def unreachable(self, exc: BaseException) -> StoreUnreachable:
        reason = _reason(exc)
        # "start it" would send the user after a server that runs: the URL asks for SSL it does not offer
        hint = NO_SSL_HINT if NO_SSL_REASON in reason else POINT_ELSEWHERE
        return StoreUnreachable(f"metadata store at {self.display_url} is unreachable ({reason}): {hint}")

    def transaction(self, body: Callable[[Connection], T]) -> T:
        """Run `body` in one transaction; a deadlock or serialization failure re-runs all of it."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                with self.engine.begin() as conn:
                    return body(conn)
            except sa.exc.DBAPIError as exc:
                code = _pgcode(exc)
                if code in RETRYABLE_PGCODES and attempt < MAX_ATTEMPTS:
                    log.debug("metadata store transaction retried after %s (attempt %s)", code, attempt)
                    continue
                raise self.translate(exc) from exc
        raise AssertionError("unreachable: the loop returns or raises")

    def translate(self, exc: sa.exc.DBAPIError) -> StoreError:
        code = _pgcode(exc)
        if code == UNDEFINED_TABLE:
            return SchemaOutdated(
                f"metadata store at {self.display_url} has no spanner-cdc schema ({_reason(exc)}): {UPGRADE_HINT}"
            )
        if isinstance(exc, sa.exc.OperationalError) and code is None:
            return self.unreachable(exc)
        return StoreError(f"metadata store at {self.display_url} failed: {_reason(exc)}")

    def dispose(self) -> None:
        self.engine.dispose()
