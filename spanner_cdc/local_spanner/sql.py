"""The SQL the local server understands: change stream read functions, INFORMATION_SCHEMA lookups, simple SELECTs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spanner_cdc.local_spanner.lexer import Cursor
from spanner_cdc.local_spanner.model import QueryError

STREAM_ARGS = ("start_timestamp", "end_timestamp", "partition_token", "heartbeat_milliseconds", "read_options")


@dataclass(frozen=True)
class Arg:
    """A query argument: a parameter reference (`param` set) or a literal value."""

    param: str | None = None
    literal: Any = None


@dataclass(frozen=True)
class ChangeStreamQuery:
    stream: str
    args: dict[str, Arg]


@dataclass(frozen=True)
class LiteralSelect:
    values: tuple[Any, ...]


@dataclass(frozen=True)
class TableQuery:
    """SELECT * | columns | COUNT(*) FROM table-or-INFORMATION_SCHEMA.view [WHERE col = arg AND ...]."""

    source: str
    info_schema: bool
    columns: tuple[str, ...] | None  # None = *
    count: bool
    where: tuple[tuple[str, Arg], ...]


Plan = ChangeStreamQuery | LiteralSelect | TableQuery


def parse(text: str, postgres: bool) -> Plan:
    """Recognise one query; anything else is INVALID_ARGUMENT with a message listing what is supported."""
    cur = Cursor(text, postgres)
    cur.expect("SELECT")
    if cur.peek.kind in ("number", "string") or cur.peek.is_word("TRUE", "FALSE", "NULL"):
        values = [_literal(cur)]
        while cur.accept_punct(","):
            values.append(_literal(cur))
        cur.expect_end()
        return LiteralSelect(tuple(values))
    columns: list[str] | None = None
    count = False
    if cur.accept_punct("*"):
        columns = None
    elif cur.peek.is_word("COUNT"):
        cur.next()
        cur.expect_punct("(")
        cur.expect_punct("*")
        cur.expect_punct(")")
        count = True
    else:
        columns = [cur.identifier("a column name")]
        while cur.accept_punct(","):
            columns.append(cur.identifier("a column name"))
    cur.expect("FROM")
    first = cur.identifier("a table or function name")
    if cur.accept_punct("."):
        second = cur.identifier("a table or function name")
        if first.lower() == "spanner" and second.lower().startswith("read_json_") and postgres:
            return _stream_call(cur, second[len("read_json_") :])
        if first.lower() != "information_schema":
            raise QueryError("INVALID_ARGUMENT", f"Unsupported name {first}.{second}: expected INFORMATION_SCHEMA.<view> or spanner.read_json_<stream>")
        source, info_schema = second, True
    elif not postgres and first.upper().startswith("READ_") and cur.peek.kind == "punct" and cur.peek.text == "(":
        if columns is not None and [c.lower() for c in columns] != ["changerecord"]:
            raise QueryError("INVALID_ARGUMENT", "Change stream read functions return one column: SELECT ChangeRecord FROM READ_<stream>(...)")
        return _stream_call(cur, first[len("READ_") :])
    else:
        source, info_schema = first, False
    if cur.accept("AS"):
        cur.identifier("an alias")
    where: list[tuple[str, Arg]] = []
    if cur.accept("WHERE"):
        while True:
            column = cur.identifier("a column name")
            cur.expect_punct("=")
            where.append((column, _argument(cur)))
            if not cur.accept("AND"):
                break
    cur.expect_end()
    return TableQuery(source, info_schema, None if columns is None else tuple(columns), count, tuple(where))


def _stream_call(cur: Cursor, stream: str) -> ChangeStreamQuery:
    cur.expect_punct("(")
    args: dict[str, Arg] = {}
    position = 0
    while not cur.accept_punct(")"):
        token = cur.peek
        following = cur.tokens[cur.index + 1]
        if token.kind == "ident" and following.kind == "punct" and following.text == "=>":
            name = token.text.lower()
            if name not in STREAM_ARGS:
                raise QueryError("INVALID_ARGUMENT", f"Unknown argument {token.text} of READ_{stream}: expected {', '.join(STREAM_ARGS)}")
            cur.index += 2
        else:
            if position >= len(STREAM_ARGS):
                raise QueryError("INVALID_ARGUMENT", f"Too many arguments to the read function of change stream {stream}")
            name = STREAM_ARGS[position]
        if name in args:
            raise QueryError("INVALID_ARGUMENT", f"Argument {name} given twice")
        args[name] = _argument(cur)
        position += 1
        if not cur.accept_punct(","):
            cur.expect_punct(")")
            break
    cur.expect_end()
    return ChangeStreamQuery(stream, args)


def _argument(cur: Cursor) -> Arg:
    token = cur.peek
    if token.kind == "param":
        cur.next()
        name = token.text[1:]
        arg = Arg(param=f"p{name}" if token.text.startswith("$") else name)
    elif token.is_word("TIMESTAMP"):
        cur.next()
        arg = Arg(literal=cur.string("a timestamp string"))
    else:
        arg = Arg(literal=_literal(cur))
    if cur.accept_punct("::"):  # PostgreSQL cast: the read function knows its parameter types
        cur.identifier("a type name")
        while cur.peek.kind == "ident" and cur.peek.text.lower() in ("with", "time", "zone"):
            cur.next()
    return arg


def _literal(cur: Cursor) -> Any:
    token = cur.next()
    if token.kind == "string":
        return token.text
    if token.kind == "number":
        return int(token.text) if token.text.isdigit() else float(token.text)
    if token.is_word("NULL"):
        return None
    if token.is_word("TRUE", "FALSE"):
        return token.text.upper() == "TRUE"
    if token.kind == "punct" and token.text == "-" and cur.peek.kind == "number":
        return -_literal(cur)
    cur.index -= 1
    raise cur.error("a parameter or a literal")
