"""DDL of both dialects: parsing, applying to a schema, printing it back, and the errors users see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.local_spanner import ddl
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.schema import Schema

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def apply_all(schema: Schema, *statements: str) -> list[object]:
    return [schema.apply(ddl.parse(s, schema.postgres), T0 + timedelta(seconds=i), lambda _: 0) for i, s in enumerate(statements)]


def test_googlesql_table_with_every_type_and_composite_key() -> None:
    statement = ddl.parse(
        """CREATE TABLE Orders (
             CustomerId INT64 NOT NULL, OrderId STRING(36) NOT NULL,
             Paid BOOL, Amount NUMERIC, Rate FLOAT64, Small FLOAT32, At TIMESTAMP OPTIONS (allow_commit_timestamp = true),
             Day DATE, Blob BYTES(MAX), Doc JSON, Tags ARRAY<STRING(MAX)>, Scores ARRAY<INT64>,
           ) PRIMARY KEY (CustomerId, OrderId DESC)""",
        postgres=False,
    )
    assert isinstance(statement, ddl.CreateTable)
    types = {c.name: c.type for c in statement.columns}
    assert types["CustomerId"] == {"code": "INT64"}
    assert types["OrderId"] == {"code": "STRING", "_max_length": 36}
    assert types["Blob"] == {"code": "BYTES"}
    assert types["Small"] == {"code": "FLOAT32"}
    assert types["Tags"] == {"code": "ARRAY", "array_element_type": {"code": "STRING"}}
    assert types["Scores"] == {"code": "ARRAY", "array_element_type": {"code": "INT64"}}
    assert statement.key == (("CustomerId", False), ("OrderId", True))
    assert [c.name for c in statement.columns if c.not_null] == ["CustomerId", "OrderId"]
    assert next(c for c in statement.columns if c.name == "At").options == {"allow_commit_timestamp": "true"}


def test_postgresql_types_inline_and_trailing_keys_and_name_folding() -> None:
    inline = ddl.parse("create table Users (ID bigint primary key, Name character varying(10), Doc jsonb, Amount numeric, "
                       "At timestamptz, Day date, B bytea, F double precision, Ok boolean, Tags text[], Ids int8[])", postgres=True)
    assert isinstance(inline, ddl.CreateTable)
    assert inline.name == "users"  # unquoted names fold to lower case
    assert inline.key == (("id", False),)
    types = {c.name: c.type for c in inline.columns}
    assert types["doc"] == {"code": "JSON", "type_annotation": "PG_JSONB"}
    assert types["amount"] == {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}
    assert types["name"] == {"code": "STRING", "_max_length": 10}
    assert types["f"] == {"code": "FLOAT64"}
    assert types["tags"] == {"code": "ARRAY", "array_element_type": {"code": "STRING"}}
    assert types["ids"] == {"code": "ARRAY", "array_element_type": {"code": "INT64"}}
    trailing = ddl.parse('CREATE TABLE "Mixed" (a bigint NOT NULL, b varchar, PRIMARY KEY (a, b))', postgres=True)
    assert isinstance(trailing, ddl.CreateTable)
    assert trailing.name == "Mixed" and trailing.key == (("a", False), ("b", False))


def test_change_stream_definitions_track_tables_columns_and_options() -> None:
    schema = Schema(postgres=False)
    effects = apply_all(
        schema,
        "CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX), Bio STRING(MAX)) PRIMARY KEY (SingerId)",
        "CREATE TABLE Albums (AlbumId INT64 NOT NULL, Title STRING(MAX)) PRIMARY KEY (AlbumId)",
        "CREATE CHANGE STREAM Everything FOR ALL",
        "CREATE CHANGE STREAM Some FOR singers(name), Albums OPTIONS (value_capture_type = 'NEW_ROW', retention_period = '36h')",
        "CREATE CHANGE STREAM Nothing",
    )
    assert effects[0] == ("tables",)
    everything, some, nothing = schema.streams["Everything"], schema.streams["Some"], schema.streams["Nothing"]
    assert everything.tables is None and everything.created_at == T0 + timedelta(seconds=2)
    assert everything.value_capture_type == "OLD_AND_NEW_VALUES" and everything.retention == timedelta(days=7)
    # GoogleSQL names resolve case-insensitively to the declared spelling
    assert some.tables == {"Singers": ("Name",), "Albums": None}
    assert some.value_capture_type == "NEW_ROW" and some.retention == timedelta(hours=36)
    assert nothing.tables == {} and not nothing.tracks("Singers")


def test_alter_and_drop_change_stream() -> None:
    schema = Schema(postgres=False)
    apply_all(schema, "CREATE TABLE T (K INT64, V STRING(MAX)) PRIMARY KEY (K)",
              "CREATE CHANGE STREAM S FOR T OPTIONS (retention_period = '2d')")
    created = schema.streams["S"].created_at
    apply_all(schema, "ALTER CHANGE STREAM S SET FOR ALL", "ALTER CHANGE STREAM S SET OPTIONS (value_capture_type = 'NEW_VALUES')")
    stream = schema.streams["S"]
    assert stream.tables is None and stream.value_capture_type == "NEW_VALUES" and stream.retention == timedelta(days=2)
    assert stream.created_at == created  # altering keeps the creation time
    apply_all(schema, "ALTER CHANGE STREAM S SET OPTIONS (retention_period = NULL)", "ALTER CHANGE STREAM S DROP FOR ALL")
    assert schema.streams["S"].retention == timedelta(days=7) and schema.streams["S"].tables == {}
    assert apply_all(schema, "DROP CHANGE STREAM S") == [("drop_stream", "S")]
    assert schema.streams == {}


def test_postgresql_change_stream_with_and_reset() -> None:
    schema = Schema(postgres=True)
    apply_all(schema, "create table t (k bigint primary key, v text)",
              "CREATE CHANGE STREAM S FOR t(v) WITH (value_capture_type = 'NEW_ROW_AND_OLD_VALUES', retention_period = '7d')",
              "ALTER CHANGE STREAM s RESET (value_capture_type)")
    stream = schema.streams["s"]
    assert stream.tables == {"t": ("v",)}
    assert stream.value_capture_type == "OLD_AND_NEW_VALUES" and stream.options == {"retention_period": "7d"}


def test_ddl_printed_back_reparses_to_the_same_schema() -> None:
    for postgres, statements in (
        (False, ["CREATE TABLE `My-Table` (K INT64 NOT NULL, V ARRAY<STRING(10)>, At TIMESTAMP OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (K DESC)",
                 "CREATE CHANGE STREAM S FOR `My-Table`(V) OPTIONS (value_capture_type = 'NEW_ROW')"]),
        (True, ['create table "T" (k bigint not null, v varchar(5)[], primary key (k))',
                "CREATE CHANGE STREAM s FOR ALL WITH (retention_period = '3d')"]),
    ):
        original = Schema(postgres)
        apply_all(original, *statements)
        again = Schema(postgres)
        apply_all(again, *original.ddl())
        assert again.ddl() == original.ddl()
        assert again.table_infos() == original.table_infos()
        assert {n: (s.tables, s.options) for n, s in again.streams.items()} == {n: (s.tables, s.options) for n, s in original.streams.items()}


def test_table_and_column_changes() -> None:
    schema = Schema(postgres=False)
    apply_all(schema, "CREATE TABLE T (K INT64, V STRING(MAX)) PRIMARY KEY (K)", "ALTER TABLE T ADD COLUMN W BOOL")
    assert [c.name for c in schema.tables["T"].columns] == ["K", "V", "W"]
    assert [c.ordinal_position for c in schema.table_infos()["T"].columns] == [1, 2, 3]
    assert apply_all(schema, "ALTER TABLE T DROP COLUMN V") == [("drop_column", "T", "V")]
    assert apply_all(schema, "DROP TABLE T") == [("drop_table", "T")]
    assert schema.tables == {}


@pytest.mark.parametrize(
    ("postgres", "statement", "code", "fragment"),
    [
        (False, "CREATE TABLE (K INT64) PRIMARY KEY (K)", "INVALID_ARGUMENT", "expecting a table name but found '('"),
        (False, "CREATE TABLE T (K INT64, V STRING) PRIMARY KEY (K)", "INVALID_ARGUMENT", "expecting '('"),
        (False, "CREATE TABLE T (K INT65) PRIMARY KEY (K)", "INVALID_ARGUMENT", "a column type"),
        (False, "CREATE TABLE T (K INT64)", "INVALID_ARGUMENT", "expecting PRIMARY KEY"),
        (False, "CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = 'ALL')", "INVALID_ARGUMENT", "NEW_ROW"),
        (False, "CREATE CHANGE STREAM S FOR ALL OPTIONS (retention_period = '2w')", "INVALID_ARGUMENT", "retention_period"),
        (False, "CREATE CHANGE STREAM S FOR ALL OPTIONS (retention_period = '1h')", "INVALID_ARGUMENT", "between 1d and 30d"),
        (False, "CREATE CHANGE STREAM S FOR ALL OPTIONS (colour = 'red')", "INVALID_ARGUMENT", "Unknown change stream option"),
        (False, "CREATE CHANGE STREAM S FOR ALL OPTIONS (partition_mode = 'SOMETIMES')", "INVALID_ARGUMENT", "expected one of IMMUTABLE_KEY_RANGE, MUTABLE_KEY_RANGE"),
        (True, "create table t (k bigint)", "INVALID_ARGUMENT", "needs a PRIMARY KEY"),
        (True, "create table t (k serial primary key)", "INVALID_ARGUMENT", "a column type"),
        (False, "GRANT SELECT ON TABLE T TO ROLE r", "INVALID_ARGUMENT", "CREATE TABLE"),
    ],
)
def test_syntax_errors_name_the_problem(postgres: bool, statement: str, code: str, fragment: str) -> None:
    with pytest.raises(QueryError) as error:
        ddl.parse(statement, postgres)
    assert error.value.code == code
    assert fragment in str(error.value)
    assert statement in str(error.value)


@pytest.mark.parametrize(
    ("statements", "code", "fragment"),
    [
        (["CREATE TABLE T (K INT64) PRIMARY KEY (K)", "CREATE TABLE t (K INT64) PRIMARY KEY (K)"], "FAILED_PRECONDITION", "Duplicate name"),
        (["CREATE TABLE T (K INT64) PRIMARY KEY (X)"], "FAILED_PRECONDITION", "nonexistent key column X"),
        (["CREATE TABLE T (K JSON) PRIMARY KEY (K)"], "FAILED_PRECONDITION", "cannot be a key"),
        (["CREATE CHANGE STREAM S FOR Missing"], "NOT_FOUND", "Table not found: Missing"),
        (["CREATE TABLE T (K INT64, V INT64) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR T(K)"], "FAILED_PRECONDITION", "key column"),
        (["CREATE TABLE T (K INT64, V INT64) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR T(W)"], "NOT_FOUND", "Column not found"),
        (["CREATE TABLE T (K INT64) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR T", "DROP TABLE T"], "FAILED_PRECONDITION", "tracked by change stream S"),
        (["ALTER CHANGE STREAM S SET FOR ALL"], "NOT_FOUND", "Change stream not found: S"),
        (["DROP TABLE T"], "NOT_FOUND", "Table not found: T"),
    ],
)
def test_schema_conflicts(statements: list[str], code: str, fragment: str) -> None:
    schema = Schema(postgres=False)
    with pytest.raises(QueryError) as error:
        apply_all(schema, *statements)
    assert error.value.code == code
    assert fragment in str(error.value)


def test_durations() -> None:
    assert ddl.parse_duration("36h") == timedelta(hours=36)
    assert ddl.parse_duration("7d") == timedelta(days=7)
    assert ddl.parse_duration("90m") == timedelta(minutes=90)
    with pytest.raises(ValueError, match="such as '36h'"):
        ddl.parse_duration("1.5h")


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_interleaved_tables_parse_print_back_and_check_their_parent(postgres: bool) -> None:
    schema = Schema(postgres)
    if postgres:
        parent = "CREATE TABLE p (a bigint PRIMARY KEY)"
        child = "CREATE TABLE c (a bigint NOT NULL, b bigint NOT NULL, PRIMARY KEY (a, b)) INTERLEAVE IN PARENT p ON DELETE CASCADE"
        default = "CREATE TABLE d (a bigint NOT NULL, b bigint NOT NULL, PRIMARY KEY (a, b)) INTERLEAVE IN PARENT p"
        wrong_type = "CREATE TABLE w (a text NOT NULL, b bigint NOT NULL, PRIMARY KEY (a, b)) INTERLEAVE IN PARENT p"
        missing = "CREATE TABLE m (a bigint PRIMARY KEY) INTERLEAVE IN PARENT nowhere"
    else:
        parent = "CREATE TABLE p (a INT64 NOT NULL) PRIMARY KEY (a)"
        child = "CREATE TABLE c (a INT64 NOT NULL, b INT64 NOT NULL) PRIMARY KEY (a, b), INTERLEAVE IN PARENT p ON DELETE CASCADE"
        default = "CREATE TABLE d (a INT64 NOT NULL, b INT64 NOT NULL) PRIMARY KEY (a, b), INTERLEAVE IN PARENT p"
        wrong_type = "CREATE TABLE w (a STRING(MAX) NOT NULL, b INT64 NOT NULL) PRIMARY KEY (a, b), INTERLEAVE IN PARENT p"
        missing = "CREATE TABLE m (a INT64 NOT NULL) PRIMARY KEY (a), INTERLEAVE IN PARENT nowhere"
    apply_all(schema, parent, child, default)
    assert (schema.tables["c"].parent, schema.tables["c"].on_delete) == ("p", "CASCADE")
    assert (schema.tables["d"].parent, schema.tables["d"].on_delete) == ("p", "NO ACTION")
    assert [t.name for t in schema.children("p")] == ["c", "d"]
    printed = Schema(postgres)
    apply_all(printed, *schema.ddl())
    assert printed.ddl() == schema.ddl()
    with pytest.raises(QueryError, match="does not match the type") as wrong:
        apply_all(schema, wrong_type)
    assert wrong.value.code == "FAILED_PRECONDITION"
    with pytest.raises(QueryError, match="does not exist") as absent:
        apply_all(schema, missing)
    assert absent.value.code == "NOT_FOUND"
