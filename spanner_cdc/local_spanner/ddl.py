"""DDL statements of both dialects parsed into small statement objects (tables, columns, change streams)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from spanner_cdc.local_spanner.lexer import Cursor
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.sql_types import googlesql_type, pg_type
from spanner_cdc.names import PARTITION_MODES

VALUE_CAPTURE_TYPES = ("OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES")
STREAM_OPTIONS = (
    "retention_period",
    "value_capture_type",
    "exclude_insert",
    "exclude_update",
    "exclude_delete",
    "exclude_ttl_deletes",
    "allow_txn_exclusion",
    "partition_mode",
)
MIN_RETENTION, MAX_RETENTION = timedelta(days=1), timedelta(days=30)
MIN_VERSION_RETENTION, MAX_VERSION_RETENTION = timedelta(hours=1), timedelta(days=7)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CASCADE, NO_ACTION = "CASCADE", "NO ACTION"  # ON DELETE of an interleaved table; NO ACTION is Spanner's default

@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: dict[str, Any]  # Spanner JSON type; "_max_length" is a private hint for STRING / BYTES
    not_null: bool = False
    sql_type: str = ""  # as declared, for GetDatabaseDdl
    options: dict[str, str] = field(default_factory=dict)
    generated: str = ""  # a STORED generated column's expression, as written (without the outer parentheses)


@dataclass(frozen=True)
class CreateTable:
    name: str
    columns: tuple[ColumnDef, ...]
    key: tuple[tuple[str, bool], ...]  # (column, descending)
    if_not_exists: bool = False
    parent: str | None = None  # INTERLEAVE IN PARENT
    on_delete: str = NO_ACTION
    ttl: Ttl | None = None  # ROW DELETION POLICY / TTL INTERVAL


@dataclass(frozen=True)
class Ttl:
    """A row deletion policy: a row expires `days` days after the TIMESTAMP in `column` (never while it is NULL)."""

    column: str
    days: int


@dataclass(frozen=True)
class SetTtl:
    """ALTER TABLE: ADD / REPLACE / DROP ROW DELETION POLICY, PostgreSQL's ADD / ALTER / DROP TTL."""

    table: str
    ttl: Ttl | None  # None: drop it
    action: str  # "add", "replace" or "drop"


@dataclass(frozen=True)
class DropTable:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class AddColumn:
    table: str
    column: ColumnDef
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropColumn:
    table: str
    column: str


@dataclass(frozen=True)
class CreateIndex:
    name: str
    text: str
    table: str = ""
    key: tuple[tuple[str, bool], ...] = ()  # (column, descending)
    storing: tuple[str, ...] = ()
    unique: bool = False
    null_filtered: bool = False


@dataclass(frozen=True)
class DropIndex:
    name: str


# tables: None = FOR ALL; table -> None (all columns) or the listed non-key columns
StreamTables = dict[str, tuple[str, ...] | None] | None


@dataclass(frozen=True)
class CreateChangeStream:
    name: str
    tables: StreamTables
    options: dict[str, str]
    tracks_nothing: bool = False  # declared without a FOR clause


@dataclass(frozen=True)
class AlterChangeStream:
    name: str
    set_tables: bool = False
    tables: StreamTables = None
    drop_for_all: bool = False
    options: dict[str, str | None] = field(default_factory=dict)  # None = reset to default


@dataclass(frozen=True)
class DropChangeStream:
    name: str


@dataclass(frozen=True)
class AlterDatabase:
    """ALTER DATABASE ... SET OPTIONS (version_retention_period = ...); None = back to the default."""

    version_retention: timedelta | None


Statement = (
    CreateTable | DropTable | AddColumn | DropColumn | CreateIndex | DropIndex | CreateChangeStream | AlterChangeStream
    | DropChangeStream | AlterDatabase | SetTtl
)


def parse_duration(text: str) -> timedelta:
    """'36h', '7d', '90m', '3600s' as a timedelta."""
    value = text.strip().lower()
    if len(value) < 2 or value[-1] not in _DURATION_UNITS or not value[:-1].isdigit():
        raise ValueError(f"invalid duration {text!r}: expected a number followed by s, m, h or d, such as '36h'")
    return timedelta(seconds=int(value[:-1]) * _DURATION_UNITS[value[-1]])


def check_stream_option(name: str, value: str | None) -> None:
    if name not in STREAM_OPTIONS:
        raise QueryError("INVALID_ARGUMENT", f"Unknown change stream option {name!r}: expected one of {', '.join(STREAM_OPTIONS)}")
    if value is None:
        return
    if name == "value_capture_type" and value not in VALUE_CAPTURE_TYPES:
        raise QueryError("INVALID_ARGUMENT", f"Invalid value_capture_type {value!r}: expected one of {', '.join(VALUE_CAPTURE_TYPES)}")
    if name == "retention_period":
        try:
            retention = parse_duration(value)
        except ValueError as exc:
            raise QueryError("INVALID_ARGUMENT", f"Invalid retention_period: {exc}") from None
        if not MIN_RETENTION <= retention <= MAX_RETENTION:
            raise QueryError("INVALID_ARGUMENT", f"Invalid retention_period {value!r}: expected between 1d and 30d")
    if name == "partition_mode" and value not in PARTITION_MODES:
        raise QueryError("INVALID_ARGUMENT", f"Invalid partition_mode {value!r}: expected one of {', '.join(PARTITION_MODES)}")
    if name.startswith(("exclude_", "allow_")) and value not in ("true", "false"):
        raise QueryError("INVALID_ARGUMENT", f"Invalid value for {name}: {value!r}: expected true or false")


def parse(text: str, postgres: bool) -> Statement:
    """One DDL statement; raises QueryError(INVALID_ARGUMENT) naming the position of a syntax error."""
    cur = Cursor(text, postgres)
    try:
        statement = _statement(cur)
        cur.expect_end()
    except QueryError as exc:
        raise QueryError(exc.code, f"Error parsing Spanner DDL statement: {text.strip()} : {exc}") from None
    return statement


def _statement(cur: Cursor) -> Statement:
    if cur.accept("CREATE", "TABLE"):
        return _create_table(cur)
    if cur.accept("DROP", "TABLE"):
        if_exists = cur.accept("IF", "EXISTS")
        return DropTable(cur.identifier("a table name"), if_exists)
    if cur.accept("ALTER", "TABLE"):
        return _alter_table(cur)
    if cur.accept("CREATE", "CHANGE", "STREAM"):
        name = cur.identifier("a change stream name")
        tracks_nothing = not cur.peek.is_word("FOR")
        tables = _for_clause(cur) if cur.accept("FOR") else {}
        options = _options(cur) if cur.peek.is_word("OPTIONS", "WITH") else {}
        return CreateChangeStream(name, tables, {k: v for k, v in options.items() if v is not None}, tracks_nothing)
    if cur.accept("ALTER", "CHANGE", "STREAM"):
        return _alter_stream(cur)
    if cur.accept("DROP", "CHANGE", "STREAM"):
        return DropChangeStream(cur.identifier("a change stream name"))
    if cur.accept("ALTER", "DATABASE"):
        return _alter_database(cur)
    if cur.peek.is_word("CREATE"):
        start = cur.index
        cur.next()
        flags = set()
        while cur.peek.is_word("UNIQUE", "NULL_FILTERED"):
            flags.add(cur.next().text.upper())
        if cur.accept("INDEX"):
            return _create_index(cur, "UNIQUE" in flags, "NULL_FILTERED" in flags)
        cur.index = start
    if cur.accept("DROP", "INDEX"):
        cur.accept("IF", "EXISTS")
        return DropIndex(cur.identifier("an index name"))
    raise cur.error("CREATE TABLE, DROP TABLE, ALTER TABLE, CREATE/DROP INDEX, CREATE/ALTER/DROP CHANGE STREAM or ALTER DATABASE")


def _create_index(cur: Cursor, unique: bool, null_filtered: bool) -> CreateIndex:
    cur.accept("IF", "NOT", "EXISTS")
    name = cur.identifier("an index name")
    cur.expect("ON")
    table = cur.identifier("a table name")
    key = _key_list(cur)
    storing: list[str] = []
    if cur.accept("STORING") or cur.accept("INCLUDE"):
        cur.expect_punct("(")
        storing.append(cur.identifier("a column name"))
        while cur.accept_punct(","):
            storing.append(cur.identifier("a column name"))
        cur.expect_punct(")")
    while not cur.at_end():  # INTERLEAVE IN, a PostgreSQL WHERE filter, OPTIONS: kept in the text only
        cur.next()
    return CreateIndex(name, cur.text.strip().rstrip(";").strip(), table, tuple(key), tuple(storing), unique, null_filtered)


def _alter_database(cur: Cursor) -> AlterDatabase:
    cur.identifier("a database name")
    cur.expect("SET")
    if cur.postgres:  # ALTER DATABASE db SET spanner.version_retention_period { = | TO } '1d'
        if cur.identifier("an option name").lower() != "spanner" or not cur.accept_punct("."):
            raise cur.error("spanner.version_retention_period")
        option = cur.identifier("an option name")
        if not (cur.accept_punct("=") or cur.accept("TO")):
            raise cur.error("'=' or TO")
        value = None if cur.accept("DEFAULT") or cur.accept("NULL") else cur.string("a duration such as '1d'")
    else:  # ALTER DATABASE db SET OPTIONS (version_retention_period = '1d')
        cur.expect("OPTIONS")
        cur.expect_punct("(")
        option = cur.identifier("an option name")
        cur.expect_punct("=")
        value = None if cur.accept("NULL") else cur.string("a duration such as '1d'")
        cur.expect_punct(")")
    if option.lower() != "version_retention_period":
        raise QueryError("UNIMPLEMENTED", f"Database option {option} is not supported by the local Spanner server: only version_retention_period")
    if value is None:
        return AlterDatabase(None)
    try:
        retention = parse_duration(value)
    except ValueError as exc:
        raise QueryError("INVALID_ARGUMENT", f"Invalid version_retention_period: {exc}") from None
    if not MIN_VERSION_RETENTION <= retention <= MAX_VERSION_RETENTION:
        raise QueryError("INVALID_ARGUMENT", f"Invalid version_retention_period {value!r}: expected between 1h and 7d")
    return AlterDatabase(retention)


def _create_table(cur: Cursor) -> CreateTable:
    if_not_exists = cur.accept("IF", "NOT", "EXISTS")
    name = cur.identifier("a table name")
    cur.expect_punct("(")
    columns: list[ColumnDef] = []
    key: list[tuple[str, bool]] = []
    while not cur.accept_punct(")"):
        if cur.accept("PRIMARY", "KEY"):
            key = _key_list(cur)
        elif cur.peek.is_word("CONSTRAINT", "FOREIGN", "CHECK"):
            _skip_constraint(cur)
        else:
            column, inline_key = _column(cur)
            columns.append(column)
            if inline_key:
                key = [(column.name, False)]
        if not cur.accept_punct(","):
            cur.expect_punct(")")
            break
    if not cur.postgres:
        cur.expect("PRIMARY", "KEY")
        key = _key_list(cur)
    parent, on_delete, ttl = None, NO_ACTION, None
    while cur.accept_punct(",") or cur.peek.is_word("INTERLEAVE", "ROW", "TTL"):
        if cur.accept("INTERLEAVE", "IN"):
            if not cur.accept("PARENT"):
                raise QueryError("INVALID_ARGUMENT", "INTERLEAVE IN without PARENT is not supported by the local Spanner server: "
                                                     "use INTERLEAVE IN PARENT")
            parent = cur.identifier("a parent table name")
            if cur.accept("ON", "DELETE"):
                if cur.accept("CASCADE"):
                    on_delete = CASCADE
                else:
                    cur.expect("NO", "ACTION")
        if cur.peek.is_word("ROW", "TTL"):
            ttl = _ttl(cur)
    if not key and cur.postgres:
        raise QueryError("INVALID_ARGUMENT", f"Table {name} needs a PRIMARY KEY")
    return CreateTable(name, tuple(columns), tuple(key), if_not_exists, parent, on_delete, ttl)


def _ttl(cur: Cursor) -> Ttl:
    """GoogleSQL `ROW DELETION POLICY (OLDER_THAN(col, INTERVAL n DAY))`, PostgreSQL `TTL INTERVAL 'n days' ON col`."""
    if cur.postgres:
        cur.expect("TTL", "INTERVAL")
        text = cur.string("an interval such as '5 days'")
        cur.expect("ON")
        column = cur.identifier("a timestamptz column")
        match = re.fullmatch(r"\s*(\d+)\s*(days?)\s*", text, re.IGNORECASE)
        if match is None:
            raise QueryError("INVALID_ARGUMENT", f"Invalid TTL interval {text!r}: expected a whole number of days, such as '5 days'")
        return Ttl(column, int(match.group(1)))
    cur.expect("ROW", "DELETION", "POLICY")
    cur.expect_punct("(")
    if cur.identifier("OLDER_THAN").upper() != "OLDER_THAN":
        cur.index -= 1
        raise cur.error("OLDER_THAN")
    cur.expect_punct("(")
    column = cur.identifier("a TIMESTAMP column")
    cur.expect_punct(",")
    cur.expect("INTERVAL")
    days = cur.next()
    if days.kind != "number" or not days.text.isdigit():
        cur.index -= 1
        raise cur.error("a whole number of days")
    cur.expect("DAY")
    cur.expect_punct(")")
    cur.expect_punct(")")
    return Ttl(column, int(days.text))


def _key_list(cur: Cursor) -> list[tuple[str, bool]]:
    cur.expect_punct("(")
    key: list[tuple[str, bool]] = []
    while not cur.accept_punct(")"):
        column = cur.identifier("a key column")
        descending = cur.accept("DESC")
        if not descending:
            cur.accept("ASC")
        key.append((column, descending))
        if not cur.accept_punct(","):
            cur.expect_punct(")")
            break
    return key


def _skip_constraint(cur: Cursor) -> None:
    # foreign keys and checks do not change what a change stream records; accepted and not enforced
    while not (cur.peek.kind == "punct" and cur.peek.text in (",", ")")) and cur.peek.kind != "end":
        if cur.peek.kind == "punct" and cur.peek.text == "(":
            cur.skip_balanced()
        else:
            cur.next()


def _column(cur: Cursor) -> tuple[ColumnDef, bool]:
    name = cur.identifier("a column name")
    start = cur.peek.pos
    type_ = pg_type(cur) if cur.postgres else googlesql_type(cur)
    sql_type = cur.text[start : cur.peek.pos]
    not_null = False
    inline_key = False
    generated = ""
    options: dict[str, str] = {}
    while True:
        if cur.accept("NOT", "NULL"):
            not_null = True
        elif cur.accept("NULL"):
            pass
        elif cur.postgres and cur.accept("PRIMARY", "KEY"):
            inline_key = True
            not_null = True
        elif cur.accept("DEFAULT"):
            raise QueryError("INVALID_ARGUMENT", f"DEFAULT values (column {name}) are not supported by the local Spanner server")
        elif cur.peek.is_word("AS", "GENERATED"):
            generated = _generation(cur, name)
        elif not cur.postgres and cur.peek.is_word("OPTIONS"):
            options = {k: v for k, v in _options(cur, stream=False).items() if v is not None}
        else:
            break
    return ColumnDef(name, type_, not_null, sql_type.strip(), options, generated), inline_key


def _generation(cur: Cursor, column: str) -> str:
    """GoogleSQL `AS (expr) STORED`, PostgreSQL `GENERATED ALWAYS AS (expr) STORED`: the expression's text."""
    if cur.postgres:
        cur.expect("GENERATED", "ALWAYS", "AS")
    else:
        cur.expect("AS")
    text = cur.skip_balanced()[1:-1].strip()
    if not cur.accept("STORED"):
        raise QueryError("UNIMPLEMENTED", f"Non-stored generated columns (column {column}) are not supported by the local Spanner server: "
                                          "declare it STORED")
    return text


def _alter_table(cur: Cursor) -> Statement:
    table = cur.identifier("a table name")
    if cur.peek.is_word("ADD", "REPLACE", "ALTER") and cur.tokens[cur.index + 1].is_word("ROW", "TTL"):
        action = "add" if cur.next().is_word("ADD") else "replace"
        return SetTtl(table, _ttl(cur), action)
    if cur.accept("DROP", "ROW", "DELETION", "POLICY") or (cur.postgres and cur.accept("DROP", "TTL")):
        return SetTtl(table, None, "drop")
    if cur.accept("ADD"):
        cur.accept("COLUMN")
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        column, inline_key = _column(cur)
        if inline_key:
            raise QueryError("INVALID_ARGUMENT", "ALTER TABLE cannot add a primary key column")
        return AddColumn(table, column, if_not_exists)
    if cur.accept("DROP"):
        cur.accept("COLUMN")
        return DropColumn(table, cur.identifier("a column name"))
    raise cur.error("ADD COLUMN, DROP COLUMN or a row deletion policy change")


def _for_clause(cur: Cursor) -> StreamTables:
    if cur.accept("ALL"):
        return None
    tables: dict[str, tuple[str, ...] | None] = {}
    while True:
        table = cur.identifier("a table name or ALL")
        columns: tuple[str, ...] | None = None
        if cur.accept_punct("("):
            names: list[str] = []
            while not cur.accept_punct(")"):
                names.append(cur.identifier("a column name"))
                if not cur.accept_punct(","):
                    cur.expect_punct(")")
                    break
            columns = tuple(names)
        tables[table] = columns
        if not cur.accept_punct(","):
            return tables


def _options(cur: Cursor, stream: bool = True) -> dict[str, str | None]:
    cur.next()  # OPTIONS / WITH / SET
    cur.expect_punct("(")
    options: dict[str, str | None] = {}
    while not cur.accept_punct(")"):
        name = cur.identifier("an option name").lower()
        cur.expect_punct("=")
        token = cur.next()
        if token.kind == "string":
            value: str | None = token.text
        elif token.is_word("TRUE", "FALSE"):
            value = token.text.lower()
        elif token.is_word("NULL"):
            value = None
        else:
            cur.index -= 1
            raise cur.error("a string, true, false or NULL")
        if stream:
            check_stream_option(name, value)
        elif name != "allow_commit_timestamp":
            raise QueryError("INVALID_ARGUMENT", f"Unknown column option {name!r}: expected allow_commit_timestamp")
        options[name] = value
        if not cur.accept_punct(","):
            cur.expect_punct(")")
            break
    return options


def _alter_stream(cur: Cursor) -> AlterChangeStream:
    name = cur.identifier("a change stream name")
    if cur.accept("SET", "FOR"):
        return AlterChangeStream(name, set_tables=True, tables=_for_clause(cur))
    if cur.accept("DROP", "FOR", "ALL"):
        return AlterChangeStream(name, drop_for_all=True)
    if cur.peek.is_word("SET"):
        if not cur.postgres:
            cur.next()
            if not cur.peek.is_word("OPTIONS"):
                raise cur.error("FOR or OPTIONS")
        return AlterChangeStream(name, options=_options(cur))
    if cur.postgres and cur.peek.is_word("RESET"):
        cur.next()
        cur.expect_punct("(")
        reset: dict[str, str | None] = {}
        while not cur.accept_punct(")"):
            option = cur.identifier("an option name").lower()
            check_stream_option(option, None)
            reset[option] = None
            if not cur.accept_punct(","):
                cur.expect_punct(")")
                break
        return AlterChangeStream(name, options=reset)
    raise cur.error("SET FOR, SET OPTIONS or DROP FOR ALL" if not cur.postgres else "SET FOR, SET (...), RESET (...) or DROP FOR ALL")
