"""SELECT / INSERT / UPDATE / DELETE text of both dialects parsed with sqlglot and checked against the supported subset."""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.sql_eval import unsupported

_GOOGLESQL_HINT = re.compile(r"@\{([^}]*)\}")
_PG_HINT = re.compile(r"/\*@(.*?)\*/", re.DOTALL)
_FORCE_INDEX = re.compile(r"\bFORCE_INDEX\s*=\s*([A-Za-z_][A-Za-z_0-9]*)", re.IGNORECASE)
_THEN_RETURN = re.compile(r"\bTHEN\s+RETURN\b", re.IGNORECASE)
# a PostgreSQL $n parameter outside quotes; sqlglot reads "$1,$2" as a dollar-quoted string, "$1 ,$2 " as two parameters
_PG_PARAM = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$(\d+)")
_SELECT_CLAUSES = ("joins", "group", "having", "distinct", "with", "windows", "qualify", "laterals", "pivots", "sample", "prewhere",
                   "connect", "match", "locks", "cluster", "distribute", "sort")


@dataclass(frozen=True)
class Select:
    tree: exp.Select
    source: str | None  # the table or INFORMATION_SCHEMA view; None: SELECT without FROM
    info_schema: bool
    alias: str | None
    index: str | None  # FORCE_INDEX hint


@dataclass(frozen=True)
class Dml:
    kind: str  # INSERT | UPDATE | DELETE
    tree: exp.Expression
    table: str
    alias: str | None
    returning: tuple[exp.Expression, ...] | None  # THEN RETURN / RETURNING list


Statement = Select | Dml


def parse(text: str, postgres: bool) -> Statement:
    """One statement; INVALID_ARGUMENT for a syntax error, UNIMPLEMENTED for SQL outside the subset, naming what."""
    index = _index_hint(text, postgres)
    body = _PG_HINT.sub(" ", text) if postgres else _GOOGLESQL_HINT.sub(" ", text)
    returning_text = None
    if not postgres:
        parts = _THEN_RETURN.split(body)
        if len(parts) == 2:
            body, returning_text = parts
    if postgres:
        body = _PG_PARAM.sub(lambda m: m.group(0) if m.group(1) is None else f"${m.group(1)} ", body)
    tree = _parse_one(body, postgres)
    if isinstance(tree, exp.Select):
        return _select(tree, index)
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete)):
        returning = None
        if returning_text is not None:
            returning = tuple(_parse_one(f"SELECT {returning_text}", postgres).expressions)
        elif tree.args.get("returning") is not None:
            returning = tuple(tree.args["returning"].expressions)
        return _dml(tree, returning)
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        raise unsupported("UNION / INTERSECT / EXCEPT")
    raise QueryError("INVALID_ARGUMENT", f"Statement not supported by ExecuteSql: {text.strip()[:80]!r}: expected SELECT, INSERT, UPDATE or DELETE")


def _index_hint(text: str, postgres: bool) -> str | None:
    for hint in (_PG_HINT if postgres else _GOOGLESQL_HINT).findall(text):
        found = _FORCE_INDEX.search(hint)
        if found:
            return found.group(1)
    return None


def _parse_one(text: str, postgres: bool) -> exp.Expression:
    try:
        trees = [t for t in sqlglot.parse(text, read="postgres" if postgres else "bigquery") if t is not None]
    except SqlglotError as exc:
        raise QueryError("INVALID_ARGUMENT", f"Syntax error: {str(exc).splitlines()[0]}") from None
    if len(trees) != 1:
        raise QueryError("INVALID_ARGUMENT", f"Expected exactly one statement, got {len(trees)}")
    tree = trees[0]
    assert isinstance(tree, exp.Expression)
    return tree


def _table(node: exp.Expression, what: str) -> tuple[str, str, str | None]:
    """(schema, name, alias) of a plain table reference."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier) or node.catalog:
        raise unsupported(f"{what} other than one table")
    return node.db or "", node.name, node.alias or None


def _select(tree: exp.Select, index: str | None) -> Select:
    for clause in _SELECT_CLAUSES:
        if tree.args.get(clause):
            raise unsupported(f"{clause.upper()} in a query")
    for node in tree.find_all(exp.Subquery, exp.Select):
        if node is not tree:
            raise unsupported("A subquery")
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None:
        return Select(tree, None, False, None, index)
    schema, name, alias = _table(source.this, "FROM")
    if not schema and "." in name:  # BigQuery's reading of INFORMATION_SCHEMA.VIEW is one name
        schema, name = name.split(".", 1)
    if schema and schema.lower() != "information_schema":
        raise QueryError("INVALID_ARGUMENT", f"Unsupported name {schema}.{name}: expected a table or INFORMATION_SCHEMA.<view>")
    return Select(tree, name, bool(schema), alias, index)


def _dml(tree: exp.Expression, returning: tuple[exp.Expression, ...] | None) -> Dml:
    kind = type(tree).__name__.upper()
    if isinstance(tree, exp.Insert):
        if tree.args.get("conflict") is not None:
            raise unsupported("INSERT ... ON CONFLICT")
        target = tree.this
        if not isinstance(target, exp.Schema):
            raise QueryError("INVALID_ARGUMENT", "INSERT needs a column list: INSERT INTO t (c1, c2) VALUES (...)")
        if not isinstance(tree.expression, exp.Values):
            raise unsupported("INSERT ... SELECT")
        _, name, alias = _table(target.this, "INSERT into")
        return Dml(kind, tree, name, alias, returning)
    if isinstance(tree, exp.Delete) and tree.this is None and tree.args.get("tables"):
        table = tree.args["tables"][0]  # GoogleSQL's DELETE t WHERE ... (FROM is optional)
    else:
        table = tree.this
    if tree.args.get("from") or tree.args.get("from_") or tree.args.get("using") or tree.args.get("joins"):
        raise unsupported(f"{kind} with FROM / USING / JOIN")
    _, name, alias = _table(table, kind)
    return Dml(kind, tree, name, alias, returning)
