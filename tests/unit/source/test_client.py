"""The pure parts of the Spanner client adapter: retention options, the stream's creation in the DDL history."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.spanner_admin_database_v1 import DatabaseDialect

from spanner_cdc.errors import SourceError
from spanner_cdc.source.client import (
    DIALECT_OPTION,
    detect_dialect,
    format_retention,
    parse_retention,
    stream_created_at,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("7d", timedelta(days=7)), ("36h", timedelta(hours=36)), ("90m", timedelta(minutes=90)), ("3600s", timedelta(hours=1)), (" 1D ", timedelta(days=1))],
)
def test_retention_periods_as_spanner_writes_them(text: str, value: timedelta) -> None:
    assert parse_retention(text) == value


@pytest.mark.parametrize("text", ["", "7", "1w", "one day", "-1d"])
def test_unknown_retention_format_is_a_source_error(text: str) -> None:
    with pytest.raises(SourceError, match="retention_period"):
        parse_retention(text)


@pytest.mark.parametrize(("value", "text"), [(timedelta(days=7), "7d"), (timedelta(hours=36), "36h"), (timedelta(minutes=90), "90m"), (timedelta(seconds=61), "61s")])
def test_retention_is_shown_as_spanner_writes_it(value: timedelta, text: str) -> None:
    assert format_retention(value) == text


@dataclass
class Metadata:
    statements: list[str]
    commit_timestamps: list[Any]


@dataclass
class Operation:
    metadata: Any


@dataclass
class Database:
    operations: list[Operation] = field(default_factory=list)
    name: str = "projects/p/instances/i/databases/d"
    fail: Exception | None = None

    def list_database_operations(self) -> list[Operation]:
        if self.fail:
            raise self.fail
        return self.operations


def at(hour: int) -> DatetimeWithNanoseconds:
    return DatetimeWithNanoseconds(2024, 5, 1, hour, tzinfo=UTC)


def test_created_at_is_the_latest_create_of_that_stream() -> None:
    database = Database([
        Operation(Metadata(["CREATE TABLE T (A INT64) PRIMARY KEY (A)", "CREATE CHANGE STREAM Orders FOR ALL"], [at(1), at(2)])),
        Operation(Metadata(["DROP CHANGE STREAM Orders"], [at(3)])),
        Operation(Metadata(['create change stream "Orders" for all'], [at(4)])),
        Operation(Metadata(["CREATE CHANGE STREAM OrdersArchive FOR ALL"], [at(5)])),
        Operation(object()),  # e.g. CreateDatabaseMetadata: no statements
    ])  # fmt: skip
    assert stream_created_at(database, "Orders") == datetime(2024, 5, 1, 4, tzinfo=UTC)
    assert stream_created_at(database, "OrdersArchive") == datetime(2024, 5, 1, 5, tzinfo=UTC)
    assert stream_created_at(database, "Missing") is None


def test_statements_without_commit_timestamps_tell_nothing() -> None:
    database = Database([Operation(Metadata(["CREATE CHANGE STREAM Orders FOR ALL"], []))])
    assert stream_created_at(database, "Orders") is None


def test_unavailable_ddl_history_means_unknown_creation_time() -> None:
    assert stream_created_at(Database(fail=RuntimeError("UNIMPLEMENTED")), "Orders") is None


@pytest.mark.parametrize("configured", ["GOOGLE_STANDARD_SQL", "postgresql"])
def test_a_configured_dialect_asks_nothing(configured: str) -> None:
    assert detect_dialect(object(), configured) == configured.upper()  # type: ignore[arg-type]


class DialectAsked:
    """A database whose GetDatabase answers `dialect` and whose DATABASE_OPTIONS holds `option` (None: no row)."""

    def __init__(self, dialect: int, option: str | None, name: str = "") -> None:
        self.name = name or f"projects/p/instances/i/databases/d{id(self)}"
        self.option, self.sql = option, list[str]()
        self.given, self.database_dialect = dialect, None

    def reload(self) -> None:  # the client's Database.reload: GetDatabase's answer in database_dialect
        self.database_dialect = self.given

    def snapshot(self) -> Any:
        database = self

        class Snap:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: Any) -> None:
                return None

            def execute_sql(self, sql: str, **_: Any) -> list[list[str]]:
                database.sql.append(sql)
                return [] if database.option is None else [[database.option]]

        return Snap()


@pytest.mark.parametrize(("given", "option", "expected"), [
    (DatabaseDialect.POSTGRESQL, None, "POSTGRESQL"),
    (DatabaseDialect.GOOGLE_STANDARD_SQL, None, "GOOGLE_STANDARD_SQL"),
    (DatabaseDialect.DATABASE_DIALECT_UNSPECIFIED, "POSTGRESQL", "POSTGRESQL"),
    (DatabaseDialect.DATABASE_DIALECT_UNSPECIFIED, "GOOGLE_STANDARD_SQL", "GOOGLE_STANDARD_SQL"),
    (DatabaseDialect.DATABASE_DIALECT_UNSPECIFIED, None, "GOOGLE_STANDARD_SQL"),
])  # fmt: skip
def test_an_unspecified_dialect_is_read_from_database_options(given: int, option: str | None, expected: str) -> None:
    # Google's emulator answers GetDatabase of a PostgreSQL database with DATABASE_DIALECT_UNSPECIFIED
    database = DialectAsked(given, option)
    assert detect_dialect(database, "auto") == expected  # type: ignore[arg-type]
    asked = given == DatabaseDialect.DATABASE_DIALECT_UNSPECIFIED
    assert database.sql == ([DIALECT_OPTION] if asked else [])


def test_an_unknown_dialect_option_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="database_dialect 'KLINGON'; expected GOOGLE_STANDARD_SQL or POSTGRESQL"):
        detect_dialect(DialectAsked(DatabaseDialect.DATABASE_DIALECT_UNSPECIFIED, "KLINGON"), "auto")  # type: ignore[arg-type]
