"""Hot store statements prepared once per connection (PREPARE / EXECUTE), so Postgres plans them once."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection, CursorResult

# `:name` bind parameters; string literals and `::type` casts are left alone
PLACEHOLDER = re.compile(r"'[^']*'|(?<![:\w]):([A-Za-z_]\w*)")
INFO_KEY = "spanner_cdc_prepared"
# The session no longer matches what we prepared: invalid_sql_statement_name (a pooler ran DISCARD
# ALL), or feature_not_supported "cached plan must not change result type" after a schema change.
STALE_PGCODES = frozenset({"26000", "0A000"})


@dataclass(frozen=True, slots=True)
class Prepared:
    name: str
    prepare_sql: str
    execute_sql: str
    params: tuple[str, ...]


def prepared(name: str, sql: str) -> Prepared:
    """`sql` with `:name` parameters; every parameter needs a type Postgres can infer (CAST when unsure)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    body = PLACEHOLDER.sub(number, sql)
    if "%" in body:
        raise ValueError(f"statement {name}: '%' would be taken for a driver placeholder")
    arguments = ", ".join(f"%({n})s" for n in names)
    return Prepared(name, f"PREPARE {name} AS {body}", f"EXECUTE {name} ({arguments})" if names else f"EXECUTE {name}", tuple(names))


def execute(conn: Connection, statement: Prepared, params: Mapping[str, Any]) -> CursorResult[Any]:
    """Run `statement` on this connection, preparing it first if this connection has not yet."""
    done: set[str] = conn.info.setdefault(INFO_KEY, set())
    if statement.name not in done:
        # a PREPARE outlives a rollback of its transaction, so recording it here is safe
        conn.exec_driver_sql(statement.prepare_sql)
        done.add(statement.name)
    return conn.exec_driver_sql(statement.execute_sql, {n: params[n] for n in statement.params})


def discard(conn: Connection) -> None:
    """Drop this DBAPI connection, so the retry gets a fresh session that prepares everything again."""
    conn.info.pop(INFO_KEY, None)
    conn.invalidate()
