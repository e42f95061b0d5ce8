"""SQL expressions over a row: typed comparisons, three-valued logic, coercion of literals, refusals that say what."""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot

from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.sql_eval import Scope, evaluate, truth

COLUMNS = [("k", {"code": "INT64"}), ("name", {"code": "STRING"}), ("at", {"code": "TIMESTAMP"}), ("price", {"code": "NUMERIC"})]
ROW = {"k": "10", "name": None, "at": "2026-01-01T00:00:00Z", "price": "2.50"}


def where(condition: str, postgres: bool = False, params: dict[str, Any] | None = None) -> bool | None:
    tree = sqlglot.parse_one(f"SELECT k FROM t WHERE {condition}", read="postgres" if postgres else "bigquery")
    return truth(tree.args["where"].this, ROW, Scope(COLUMNS, postgres, params or {}, "t", None))


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("k > 9", True),  # INT64 stored as text compares as a number, not "10" < "9"
        ("k BETWEEN 1 AND 9", False),
        ("name = 'x'", None),  # NULL compares as unknown
        ("name = 'x' OR k = 10", True),
        ("name = 'x' AND k = 10", None),
        ("NOT name = 'x'", None),
        ("name IS NULL AND k IN (1, 10)", True),
        ("at > '2025-12-31T23:59:59Z'", True),  # a string literal read as the column's TIMESTAMP
        ("price = 2.5", True),
        ("k + 1 = 11", True),
    ],
)
def test_conditions(condition: str, expected: bool | None) -> None:
    assert where(condition) is expected


def test_postgresql_negated_forms_and_parameters() -> None:
    params = {"p1": ({"code": "INT64"}, "10")}
    assert where("name IS NOT NULL", postgres=True) is False
    assert where("k NOT IN ($1)", postgres=True, params=params) is False
    with pytest.raises(QueryError, match=r"No value found for parameter \$2"):
        where("k = $2", postgres=True, params=params)


def test_refusals_name_what_is_not_supported() -> None:
    with pytest.raises(QueryError, match="No matching signature for operator > for argument types: INT64, BOOL") as error:
        where("k > true")
    assert error.value.code == "INVALID_ARGUMENT"
    with pytest.raises(QueryError, match="not supported by the local Spanner server") as unsupported:
        where("UPPER(name) = 'X'")
    assert unsupported.value.code == "UNIMPLEMENTED"
    tree = sqlglot.parse_one("SELECT nope FROM t", read="bigquery")
    with pytest.raises(QueryError, match="Unrecognized name: nope"):
        evaluate(tree.expressions[0], ROW, Scope(COLUMNS, False, {}, "t", None))
