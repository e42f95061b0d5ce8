"""The google-cloud-spanner adapter: open a database, detect its dialect, read a stream's metadata."""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from spanner_cdc.errors import NotFound, SourceError
from spanner_cdc.names import GOOGLE_STANDARD_SQL, POSTGRESQL
from spanner_cdc.source.queries import validate_dialect, validate_stream_name
from spanner_cdc.times import utc

if TYPE_CHECKING:
    from google.cloud.spanner_v1.database import Database

    from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)

EMULATOR_ENV = "SPANNER_EMULATOR_HOST"
ADMIN_TIMEOUT_S = 30.0  # admin calls are short; a dead server must not hang the CLI for the client's default hour
DEFAULT_RETENTION = timedelta(days=7)  # Spanner's documented default, when CHANGE_STREAM_OPTIONS lists no retention_period
DEFAULT_VALUE_CAPTURE_TYPE = "OLD_AND_NEW_VALUES"
_RETENTION = re.compile(r"^\s*(\d+)\s*([dhms])\s*$", re.IGNORECASE)
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}

GOOGLESQL_STREAM = "SELECT CHANGE_STREAM_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAMS WHERE CHANGE_STREAM_NAME = @name"
GOOGLESQL_OPTIONS = (
    "SELECT OPTION_NAME, OPTION_VALUE FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS WHERE CHANGE_STREAM_NAME = @name"
)
POSTGRESQL_STREAM = "select change_stream_name from information_schema.change_streams where change_stream_name = $1"
POSTGRESQL_OPTIONS = (
    "select option_name, option_value from information_schema.change_stream_options where change_stream_name = $1"
)

# unquoted names: GoogleSQL ignores their case, PostgreSQL folds them to the lower case its views use
DIALECT_OPTION = "SELECT OPTION_VALUE FROM INFORMATION_SCHEMA.DATABASE_OPTIONS WHERE OPTION_NAME = 'database_dialect'"

_dialects: dict[str, str] = {}
_clients: dict[str, Any] = {}  # database name -> the client open_database made for it (for its admin API)
_dialects_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    name: str
    retention: timedelta
    value_capture_type: str
    created_at: datetime | None


def open_database(settings: Settings) -> Database:
    """A Database handle for settings.project/instance/database (constructing it makes no call)."""
    from google.cloud import spanner

    if settings.emulator_host:
        # the client reads the variable itself: it switches to an insecure channel and anonymous credentials
        os.environ[EMULATOR_ENV] = settings.emulator_host
    from google.auth.exceptions import DefaultCredentialsError

    try:
        # the stream's directed reads, as the client's default for every read-only query (metadata ones too)
        directed = None if settings.directed_read is None else settings.directed_read.client_options()
        client = spanner.Client(
            project=settings.project, disable_builtin_metrics=bool(settings.emulator_host), directed_read_options=directed
        )
    except DefaultCredentialsError:
        raise SourceError(
            f"no Google Cloud credentials for Cloud Spanner (project {settings.project}): set "
            "GOOGLE_APPLICATION_CREDENTIALS to a key file or run `gcloud auth application-default login`; "
            f"or set {EMULATOR_ENV}=host:port for an emulator or the local server"
        ) from None
    database = client.instance(settings.instance).database(settings.database)
    with _dialects_lock:
        _clients[database.name] = client
    return database


def _where(database: Any) -> str:
    host = os.environ.get(EMULATOR_ENV)
    return f"{database.name}" + (f" at {host}" if host else "")


def source_error(exc: Exception, what: str, database: Any) -> Exception:
    """A google.api_core error of an admin or metadata call as the project's error (one line)."""
    message = str(getattr(exc, "message", None) or exc)
    if isinstance(exc, gexc.RetryError) and exc.cause is not None:
        message += f"; last error: {getattr(exc.cause, 'message', None) or exc.cause}"
    message = " ".join(message.split())
    if isinstance(exc, gexc.NotFound):
        return NotFound(f"{what}: {_where(database)} does not exist ({message})")
    if isinstance(exc, (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError)):
        return SourceError(
            f"{what}: cannot reach Spanner for {_where(database)} ({message}); check the host "
            f"({EMULATOR_ENV} or the project's credentials) and that the server is running"
        )
    return SourceError(f"{what}: Spanner refused the request for {_where(database)}: {message}")


def detect_dialect(database: Database, configured: str = "auto") -> str:
    """GOOGLE_STANDARD_SQL or POSTGRESQL: the configured one, else asked once per database."""
    if str(configured).lower() != "auto":
        return validate_dialect(configured)
    with _dialects_lock:
        cached = _dialects.get(database.name)
    if cached is not None:
        return cached
    from google.api_core.retry import Retry, if_exception_type
    from google.cloud.spanner_admin_database_v1 import DatabaseDialect

    # the client's default retry keeps trying an unreachable server for an hour: bound it
    retry = Retry(
        initial=0.25,
        maximum=4.0,
        multiplier=2.0,
        timeout=ADMIN_TIMEOUT_S,
        predicate=if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded),
    )
    with _dialects_lock:
        client = _clients.get(database.name)
    try:
        if client is not None:
            given = client.database_admin_api.get_database(name=database.name, retry=retry, timeout=ADMIN_TIMEOUT_S).database_dialect
        else:  # a handle open_database did not make (its client is not public): the handle's own reload
            database.reload()
            given = database.database_dialect
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        raise source_error(exc, "detecting the SQL dialect", database) from None
    if given == DatabaseDialect.POSTGRESQL:
        dialect = POSTGRESQL
    elif given == DatabaseDialect.GOOGLE_STANDARD_SQL:
        dialect = GOOGLE_STANDARD_SQL
    else:  # unspecified (Google's emulator leaves it so): the database says it in SQL
        dialect = _dialect_option(database)
    with _dialects_lock:
        _dialects[database.name] = dialect
    log.debug("%s: SQL dialect %s", database.name, dialect)
    return dialect


def _dialect_option(database: Database) -> str:
    """The database_dialect option of INFORMATION_SCHEMA.DATABASE_OPTIONS, by a query valid in both dialects."""
    try:
        with database.snapshot() as snap:
            rows = [list(r) for r in snap.execute_sql(DIALECT_OPTION, timeout=ADMIN_TIMEOUT_S)]
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        raise source_error(exc, "detecting the SQL dialect (INFORMATION_SCHEMA.DATABASE_OPTIONS)", database) from None
    if not rows:  # databases from before the option existed are GoogleSQL, the only dialect then
        return GOOGLE_STANDARD_SQL
    value = str(rows[0][0]).upper()
    if value not in (GOOGLE_STANDARD_SQL, POSTGRESQL):
        raise SourceError(
            f"detecting the SQL dialect: {_where(database)} has database_dialect {rows[0][0]!r}; expected "
            f"{GOOGLE_STANDARD_SQL} or {POSTGRESQL} (or give the dialect: --dialect / SPANNER_CDC_DIALECT)"
        )
    return value


def server_now(database: Database, dialect: str | None = None) -> datetime:
    """Spanner's clock (the time function of a strong read), not this machine's: retention and the window's end are
    measured by it, and the local server's may run ahead. `dialect` None: the database's, detected once."""
    sql = "SELECT now()" if (dialect or detect_dialect(database)) == POSTGRESQL else "SELECT CURRENT_TIMESTAMP()"
    with database.snapshot() as snapshot:
        ((now,),) = list(snapshot.execute_sql(sql))
    if not isinstance(now, datetime):
        raise SourceError(f"{_where(database)}: {sql} answered {now!r}, not a timestamp")
    return utc(now, assume_utc=True)


def parse_retention(value: str) -> timedelta:
    """Spanner's retention_period option: a number with d, h, m or s (e.g. 7d, 36h)."""
    match = _RETENTION.match(value or "")
    if not match:
        raise SourceError(f"unexpected retention_period option {value!r}: expected a number with d, h, m or s")
    return timedelta(**{_UNITS[match.group(2).lower()]: int(match.group(1))})


def format_retention(retention: timedelta) -> str:
    """A retention as Spanner writes it: 7d, 36h, 90m or 3600s."""
    seconds = int(retention.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _query(database: Database, sql: str, name: str, dialect: str) -> list[list[Any]]:
    from google.cloud.spanner_v1 import param_types

    key = "p1" if dialect == POSTGRESQL else "name"
    with database.snapshot() as snap:
        results = snap.execute_sql(
            sql, params={key: name}, param_types={key: param_types.STRING}, timeout=ADMIN_TIMEOUT_S
        )
        return [list(row) for row in results]


def stream_metadata(database: Database, stream: str, dialect: str) -> StreamMetadata:
    """The stream's retention, value capture type and (if the DDL history tells) creation time."""
    stream = validate_stream_name(stream)
    dialect = validate_dialect(dialect)
    stream_sql, options_sql = (
        (POSTGRESQL_STREAM, POSTGRESQL_OPTIONS) if dialect == POSTGRESQL else (GOOGLESQL_STREAM, GOOGLESQL_OPTIONS)
    )
    try:
        found = _query(database, stream_sql, stream, dialect)
        options = dict((str(k).lower(), v) for k, v in _query(database, options_sql, stream, dialect))
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        raise source_error(exc, f"reading the metadata of change stream {stream}", database) from None
    if not found:
        hint = ""
        if dialect == POSTGRESQL and stream != stream.lower() and _exists(database, stream.lower(), dialect):
            hint = f" (PostgreSQL folds unquoted names to lower case: did you mean {stream.lower()}?)"
        raise NotFound(f"change stream {stream} does not exist in database {database.name}{hint}")
    retention = options.get("retention_period")
    return StreamMetadata(
        name=stream,
        retention=parse_retention(retention) if retention else DEFAULT_RETENTION,
        value_capture_type=str(options.get("value_capture_type") or DEFAULT_VALUE_CAPTURE_TYPE).upper(),
        created_at=stream_created_at(database, stream),
    )


def _exists(database: Database, stream: str, dialect: str) -> bool:
    try:
        return bool(_query(database, POSTGRESQL_STREAM if dialect == POSTGRESQL else GOOGLESQL_STREAM, stream, dialect))
    except (gexc.GoogleAPICallError, gexc.RetryError):
        return False


def _created_statement(stream: str) -> re.Pattern[str]:
    return re.compile(rf'^\s*CREATE\s+CHANGE\s+STREAM\s+"?{re.escape(stream)}"?(\s|$)', re.IGNORECASE)


def stream_created_at(database: Database, stream: str) -> datetime | None:
    """Commit time of the latest `CREATE CHANGE STREAM <stream>` in the database's DDL operations."""
    pattern = _created_statement(stream)
    latest: datetime | None = None
    try:
        for operation in database.list_database_operations():
            metadata = operation.metadata
            statements = list(getattr(metadata, "statements", None) or ())
            stamps = list(getattr(metadata, "commit_timestamps", None) or ())
            for statement, stamp in zip(statements, stamps, strict=False):
                if pattern.match(statement) and stamp is not None:
                    when = _as_datetime(stamp)
                    if latest is None or when > latest:
                        latest = when
    except Exception as exc:  # the creation time is only a hint for messages; the DDL history may be unavailable
        log.debug("%s: the DDL operations of %s are unavailable: %s", stream, database.name, exc)
        return None
    return latest


def _as_datetime(stamp: Any) -> datetime:
    if isinstance(stamp, datetime):
        return utc(stamp, assume_utc=True)
    return stamp.ToDatetime(tzinfo=UTC)  # a protobuf Timestamp
