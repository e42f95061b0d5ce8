"""Column types as DDL spells them in GoogleSQL and PostgreSQL, parsed into Spanner JSON types."""

from __future__ import annotations

from typing import Any

from spanner_cdc.local_spanner.lexer import Cursor

_GSQL_SCALARS = {"INT64", "BOOL", "FLOAT64", "FLOAT32", "NUMERIC", "TIMESTAMP", "DATE", "JSON"}
_PG_SCALARS: dict[tuple[str, ...], dict[str, Any]] = {
    ("bigint",): {"code": "INT64"},
    ("int8",): {"code": "INT64"},
    ("integer",): {"code": "INT64"},
    ("int",): {"code": "INT64"},
    ("int4",): {"code": "INT64"},
    ("boolean",): {"code": "BOOL"},
    ("bool",): {"code": "BOOL"},
    ("double", "precision"): {"code": "FLOAT64"},
    ("float8",): {"code": "FLOAT64"},
    ("real",): {"code": "FLOAT32"},
    ("float4",): {"code": "FLOAT32"},
    ("text",): {"code": "STRING"},
    ("timestamptz",): {"code": "TIMESTAMP"},
    ("timestamp", "with", "time", "zone"): {"code": "TIMESTAMP"},
    ("date",): {"code": "DATE"},
    ("bytea",): {"code": "BYTES"},
    ("jsonb",): {"code": "JSON", "type_annotation": "PG_JSONB"},
    ("numeric",): {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"},
    ("decimal",): {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"},
}


def _length(cur: Cursor, allow_max: bool) -> int | None:
    cur.expect_punct("(")
    if allow_max and cur.accept("MAX"):
        length = None
    else:
        token = cur.next()
        if token.kind != "number" or not token.text.isdigit():
            raise cur.error("a length" + (" or MAX" if allow_max else ""))
        length = int(token.text)
    if cur.accept_punct(","):  # numeric(precision, scale)
        cur.next()
    cur.expect_punct(")")
    return length


def googlesql_type(cur: Cursor) -> dict[str, Any]:
    token = cur.peek
    word = token.text.upper() if token.kind == "ident" else ""
    if word == "ARRAY":
        cur.next()
        cur.expect_punct("<")
        element = googlesql_type(cur)
        cur.expect_punct(">")
        return {"code": "ARRAY", "array_element_type": element}
    if word in ("STRING", "BYTES"):
        cur.next()
        length = _length(cur, allow_max=True)
        return {"code": word} if length is None else {"code": word, "_max_length": length}
    if word in _GSQL_SCALARS:
        cur.next()
        return {"code": word}
    raise cur.error("a column type (INT64, STRING(n), BOOL, FLOAT64, NUMERIC, TIMESTAMP, DATE, BYTES(n), JSON, ARRAY<...>)")


def pg_type(cur: Cursor) -> dict[str, Any]:
    type_: dict[str, Any] | None = None
    if cur.accept("CHARACTER", "VARYING") or cur.accept("VARCHAR"):
        type_ = {"code": "STRING"}
        if cur.peek.kind == "punct" and cur.peek.text == "(":
            length = _length(cur, allow_max=False)
            type_["_max_length"] = length
    else:
        for words, scalar in _PG_SCALARS.items():
            if cur.accept(*(w.upper() for w in words)):
                type_ = dict(scalar)
                if words[0] in ("numeric", "decimal") and cur.peek.kind == "punct" and cur.peek.text == "(":
                    _length(cur, allow_max=False)
                break
    if type_ is None:
        raise cur.error("a column type (bigint, varchar, text, boolean, double precision, numeric, timestamptz, date, bytea, jsonb, or an array type[])")
    while cur.accept_punct("["):
        cur.expect_punct("]")
        type_ = {"code": "ARRAY", "array_element_type": type_}
    return type_
