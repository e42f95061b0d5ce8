"""The SQL the local server understands: change stream read functions here, every other statement via sql_statements."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spanner_cdc.local_spanner import sql_statements
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
    function: str = "READ_"  # or PostgreSQL's read_json_ / read_proto_bytes_ (MUTABLE_KEY_RANGE streams)


Plan = ChangeStreamQuery | sql_statements.Statement
# a change stream read function call: GoogleSQL READ_<stream>( or PostgreSQL spanner.read_json_<stream>( /
# spanner.read_proto_bytes_<stream>(
_STREAM_CALL = re.compile(
    r"""\bFROM\s+(?:[`"]?READ_\w+[`"]?|"?spanner"?\s*\.\s*"?read_(?:json|proto_bytes)_\w+"?)\s*\(""", re.IGNORECASE
)
PG_FUNCTIONS = ("read_json_", "read_proto_bytes_")


def parse(text: str, postgres: bool) -> Plan:
    """A change stream query (the read functions are not standard SQL: parsed here) or a statement sqlglot parses."""
    if _STREAM_CALL.search(text) is None:
        return sql_statements.parse(text, postgres)
    cur = Cursor(text, postgres)
    cur.expect("SELECT")
    columns: list[str] | None = None
    if not cur.accept_punct("*"):
        columns = [cur.identifier("a column name")]
    cur.expect("FROM")
    first = cur.identifier("a table or function name")
    if cur.accept_punct("."):
        second = cur.identifier("a function name")
        function = next((f for f in PG_FUNCTIONS if second.lower().startswith(f)), None)
        if first.lower() == "spanner" and function is not None and postgres:
            return _stream_call(cur, second[len(function) :], function)
        raise QueryError(
            "INVALID_ARGUMENT",
            f"Unsupported function {first}.{second}: expected spanner.read_json_<stream> or spanner.read_proto_bytes_<stream> in a PostgreSQL database",
        )
    if postgres or not first.upper().startswith("READ_"):
        raise QueryError("INVALID_ARGUMENT", f"Unsupported function {first}: change streams are read with {'spanner.read_json_<stream>' if postgres else 'READ_<stream>'}")
    if columns is not None and [c.lower() for c in columns] != ["changerecord"]:
        raise QueryError("INVALID_ARGUMENT", "Change stream read functions return one column: SELECT ChangeRecord FROM READ_<stream>(...)")
    return _stream_call(cur, first[len("READ_") :])


def _stream_call(cur: Cursor, stream: str, function: str = "READ_") -> ChangeStreamQuery:
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
    return ChangeStreamQuery(stream, args, function)


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
