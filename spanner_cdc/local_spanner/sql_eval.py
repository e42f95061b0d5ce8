"""Values of SQL expressions (sqlglot trees) over one row: types, comparisons, NULL logic, the supported functions."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlglot import exp

from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.values import (
    COMMIT_TIMESTAMP_PLACEHOLDER,
    format_timestamp,
    normalize,
    sort_key,
    type_name,
)

Type = dict[str, Any]
Typed = tuple["Type | None", Any]  # (Spanner JSON type, value in the stored encoding); type None: an untyped NULL
_INT64, _FLOAT64, _STRING, _BOOL, _TIMESTAMP = ({"code": c} for c in ("INT64", "FLOAT64", "STRING", "BOOL", "TIMESTAMP"))
_NUMBERS = ("INT64", "FLOAT64", "FLOAT32", "NUMERIC")
_CAST_TYPES = {
    "TIMESTAMP": "TIMESTAMP", "TIMESTAMPTZ": "TIMESTAMP", "DATE": "DATE", "DECIMAL": "NUMERIC", "BIGDECIMAL": "NUMERIC",
    "BIGINT": "INT64", "INT": "INT64", "DOUBLE": "FLOAT64", "FLOAT": "FLOAT64", "TEXT": "STRING", "VARCHAR": "STRING",
    "BOOLEAN": "BOOL", "JSON": "JSON", "JSONB": "JSON", "BINARY": "BYTES", "VARBINARY": "BYTES",
}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def unsupported(what: str) -> QueryError:
    return QueryError("UNIMPLEMENTED", f"{what} is not supported by the local Spanner server")


class Scope:
    """Names a statement can use: the columns of its one table (and its alias) and the request's parameters."""

    def __init__(
        self, columns: list[tuple[str, Type]], postgres: bool, params: Mapping[str, Typed], table: str, alias: str | None,
        now: datetime | None = None,
    ) -> None:  # fmt: skip
        self.columns = columns
        self.now = now  # CURRENT_TIMESTAMP: the read's timestamp (one value for the whole query, as Spanner gives)
        self.postgres = postgres
        self.params = params
        self.qualifiers = {q.lower() for q in (table, alias) if q}
        self._exact = {name: (name, type_) for name, type_ in columns}
        self._folded = {name.lower(): (name, type_) for name, type_ in columns}

    def column(self, node: exp.Column) -> tuple[str, Type]:
        if node.table and node.table.lower() not in self.qualifiers:
            raise QueryError("INVALID_ARGUMENT", f"Unrecognized name: {node.table}")
        identifier = node.this
        name = identifier.this if isinstance(identifier, exp.Identifier) else str(identifier)
        if self.postgres:  # PostgreSQL folds unquoted names to lower case; quoted ones match exactly
            found = self._exact.get(name if identifier.quoted else name.lower())
        else:
            found = self._folded.get(name.lower())
        if found is None:
            raise QueryError("INVALID_ARGUMENT", f"Unrecognized name: {name}")
        return found

    def param(self, node: exp.Parameter | exp.Placeholder) -> Typed:
        inner = node.this
        text = inner.this if isinstance(inner, (exp.Var, exp.Literal, exp.Identifier)) else str(inner)
        name = f"p{text}" if self.postgres and str(text).isdigit() else str(text)
        if name not in self.params:
            shown = f"${text}" if self.postgres and str(text).isdigit() else f"@{text}"
            raise QueryError("INVALID_ARGUMENT", f"No value found for parameter {shown}")
        return self.params[name]


def comparable(type_: Type | None, value: Any) -> Any:
    """A Python value ordering as Spanner orders values of the type (None for NULL)."""
    if value is None or type_ is None:
        return None
    code = type_["code"]
    if code == "INT64":
        return int(value)
    if code in ("FLOAT64", "FLOAT32"):
        return float(value.lower().replace("infinity", "inf")) if isinstance(value, str) else float(value)
    if code == "NUMERIC":
        return Decimal(value)
    if code == "BYTES":
        return base64.b64decode(value)
    if code == "TIMESTAMP":
        return sort_key(type_, value)
    if code in ("ARRAY", "STRUCT", "JSON"):
        raise QueryError("INVALID_ARGUMENT", f"Values of type {type_name(type_)} cannot be compared or ordered")
    return value


def convert(target: Type, typed: Typed, where: str) -> Any:
    """A value in the stored encoding of `target` (strings and numbers coerced as Spanner coerces literals)."""
    type_, value = typed
    if value is None:
        return None
    if type_ is None or type_["code"] == target["code"]:
        return value
    code = target["code"]
    if code in ("FLOAT64", "FLOAT32") and type_["code"] in _NUMBERS:
        return normalize(target, float(comparable(type_, value)), where)
    if code == "NUMERIC" and type_["code"] == "INT64":
        return normalize(target, value, where)
    if type_["code"] == "STRING" and code not in ("STRING", "ARRAY", "BOOL") + _NUMBERS[:3]:
        return normalize(target, value, where)  # a string literal or parameter for a TIMESTAMP / DATE / JSON / BYTES column
    raise QueryError("INVALID_ARGUMENT", f"Value of type {type_name(type_)} cannot be used as {type_name(target)} for {where}")


def _common(left: Typed, right: Typed, operator: str) -> tuple[Any, Any]:
    (ltype, lvalue), (rtype, rvalue) = left, right
    if ltype is None or rtype is None or ltype["code"] == rtype["code"]:
        return comparable(ltype, lvalue), comparable(rtype, rvalue)
    if ltype["code"] in _NUMBERS and rtype["code"] in _NUMBERS:
        return comparable(ltype, lvalue), comparable(rtype, rvalue)
    if rtype["code"] == "STRING":
        return comparable(ltype, lvalue), comparable(ltype, convert(ltype, right, f"operator {operator}"))
    if ltype["code"] == "STRING":
        return comparable(rtype, convert(rtype, left, f"operator {operator}")), comparable(rtype, rvalue)
    raise QueryError("INVALID_ARGUMENT", f"No matching signature for operator {operator} for argument types: {type_name(ltype)}, {type_name(rtype)}")


def _compare(node: exp.Expression, left: Typed, right: Typed) -> bool | None:
    symbols: dict[type, str] = {exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
    symbol = symbols[type(node)]
    a, b = _common(left, right, symbol)
    if a is None or b is None:
        return None
    return {"=": a == b, "!=": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[symbol]


def truth(node: exp.Expression, row: Mapping[str, Any], scope: Scope) -> bool | None:
    """A condition's value in SQL's three-valued logic (None: unknown)."""
    type_, value = evaluate(node, row, scope)
    if value is None:
        return None
    if type_ is not None and type_["code"] != "BOOL":
        raise QueryError("INVALID_ARGUMENT", f"Expected a BOOL condition, got {type_name(type_)}")
    return bool(value)


def _and(values: list[bool | None]) -> bool | None:
    if False in values:
        return False
    return None if None in values else True


def _or(values: list[bool | None]) -> bool | None:
    if True in values:
        return True
    return None if None in values else False


def _like(value: str, pattern: str) -> bool:
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def evaluate(node: exp.Expression, row: Mapping[str, Any], scope: Scope) -> Typed:
    """The typed value of an expression for one row (a row of Nones gives each expression's type)."""
    if isinstance(node, exp.Paren):
        return evaluate(node.this, row, scope)
    if isinstance(node, exp.Column):
        name, type_ = scope.column(node)
        return type_, row.get(name)
    if isinstance(node, (exp.Parameter, exp.Placeholder)):
        return scope.param(node)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return _STRING, node.this
        text = node.this
        return (_INT64, str(int(text))) if re.fullmatch(r"\d+", text) else (_FLOAT64, float(text))
    if isinstance(node, exp.Boolean):
        return _BOOL, bool(node.this)
    if isinstance(node, exp.Null):
        return None, None
    if isinstance(node, exp.Neg):
        operand_type, value = evaluate(node.this, row, scope)
        if value is None or operand_type is None:
            return operand_type, None
        type_ = operand_type
        if type_["code"] not in _NUMBERS:
            raise QueryError("INVALID_ARGUMENT", f"No matching signature for operator - for argument type {type_name(type_)}")
        negated = -comparable(type_, value)
        return type_, str(negated) if type_["code"] in ("INT64", "NUMERIC") else negated
    if isinstance(node, exp.Cast):
        return _cast(node, row, scope)
    if isinstance(node, _COMPARISONS):
        return _BOOL, _compare(node, evaluate(node.this, row, scope), evaluate(node.expression, row, scope))
    if isinstance(node, exp.And):
        return _BOOL, _and([truth(node.this, row, scope), truth(node.expression, row, scope)])
    if isinstance(node, exp.Or):
        return _BOOL, _or([truth(node.this, row, scope), truth(node.expression, row, scope)])
    if isinstance(node, exp.Not):
        value = truth(node.this, row, scope)
        return _BOOL, None if value is None else not value
    if isinstance(node, (exp.Is, exp.In, exp.Between, exp.Like)):
        result = _predicate(node, row, scope)
        if node.args.get("negate") and result is not None:  # PostgreSQL's reading of IS NOT / NOT IN / NOT LIKE
            result = not result
        return _BOOL, result
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        return _arithmetic(node, row, scope)
    if isinstance(node, exp.DPipe):
        (_, a), (_, b) = evaluate(node.this, row, scope), evaluate(node.expression, row, scope)
        return _STRING, None if a is None or b is None else str(a) + str(b)
    if is_pending_commit_timestamp(node):
        return _TIMESTAMP, COMMIT_TIMESTAMP_PLACEHOLDER
    if isinstance(node, exp.CurrentTimestamp):  # GoogleSQL's CURRENT_TIMESTAMP(), PostgreSQL's now() / CURRENT_TIMESTAMP
        if scope.now is None:
            raise unsupported("CURRENT_TIMESTAMP outside a read-only read")
        return _TIMESTAMP, format_timestamp(scope.now)
    raise unsupported(f"The expression {node.sql()!r} ({type(node).__name__})")


def _predicate(node: exp.Expression, row: Mapping[str, Any], scope: Scope) -> bool | None:
    if isinstance(node, exp.Is):
        return _is(node, row, scope)
    if isinstance(node, exp.In):
        return _in(node, row, scope)
    if isinstance(node, exp.Between):
        target = evaluate(node.this, row, scope)
        low = _compare(exp.GTE(), target, evaluate(node.args["low"], row, scope))
        high = _compare(exp.LTE(), target, evaluate(node.args["high"], row, scope))
        return _and([low, high])
    (_, value), (_, pattern) = evaluate(node.this, row, scope), evaluate(node.expression, row, scope)
    return None if value is None or pattern is None else _like(value, pattern)


def is_pending_commit_timestamp(node: exp.Expression) -> bool:
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and node.this.this.lower() == "spanner":
        node = node.expression
    return isinstance(node, exp.Anonymous) and str(node.this).upper() == "PENDING_COMMIT_TIMESTAMP" and not node.expressions


def _cast(node: exp.Cast, row: Mapping[str, Any], scope: Scope) -> Typed:
    target_name = node.to.this.name if hasattr(node.to.this, "name") else str(node.to.this)
    code = _CAST_TYPES.get(target_name.upper(), target_name.upper())
    if code not in ("TIMESTAMP", "DATE", "NUMERIC", "INT64", "FLOAT64", "STRING", "BOOL", "JSON", "BYTES"):
        raise unsupported(f"CAST to {target_name}")
    target = {"code": code}
    type_, value = evaluate(node.this, row, scope)
    if value is None:
        return target, None
    if type_ is not None and type_["code"] == code:
        return target, value
    if code == "STRING":
        return target, str(comparable(type_, value)) if type_ is not None and type_["code"] in _NUMBERS else str(value)
    if code == "INT64" and type_ is not None and type_["code"] in ("STRING", "FLOAT64", "NUMERIC"):
        return target, normalize(target, str(int(Decimal(str(value)))) if type_["code"] != "STRING" else value.strip(), "CAST")
    return target, convert(target, (type_, value), "CAST")


def _is(node: exp.Is, row: Mapping[str, Any], scope: Scope) -> bool:
    _, value = evaluate(node.this, row, scope)
    other = node.expression
    if isinstance(other, exp.Null):
        return value is None
    if isinstance(other, exp.Boolean):
        return value is bool(other.this)
    raise unsupported(f"IS {other.sql()}")


def _in(node: exp.In, row: Mapping[str, Any], scope: Scope) -> bool | None:
    target = evaluate(node.this, row, scope)
    candidates: list[Typed] = []
    unnest = node.args.get("unnest")
    if unnest is not None:  # x IN UNNEST(@array)
        array_type, values = evaluate(unnest.expressions[0], row, scope)
        element = array_type.get("array_element_type") if array_type else None
        candidates = [(element, v) for v in values or []]
    elif node.args.get("query") is not None:
        raise unsupported("IN with a subquery")
    else:
        candidates = [evaluate(e, row, scope) for e in node.expressions]
    return _or([_compare(exp.EQ(), target, candidate) for candidate in candidates])


def _arithmetic(node: exp.Expression, row: Mapping[str, Any], scope: Scope) -> Typed:
    left, right = evaluate(node.this, row, scope), evaluate(node.expression, row, scope)
    symbols: dict[type, str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}
    symbol = symbols[type(node)]
    for type_ in (left[0], right[0]):
        if type_ is not None and type_["code"] not in _NUMBERS:
            raise QueryError("INVALID_ARGUMENT", f"No matching signature for operator {symbol} for argument type {type_name(type_)}")
    codes = {t["code"] for t in (left[0], right[0]) if t is not None}
    result_type = _FLOAT64 if codes & {"FLOAT64", "FLOAT32"} else {"code": "NUMERIC"} if "NUMERIC" in codes else _INT64
    if left[1] is None or right[1] is None:
        return result_type, None
    a, b = comparable(left[0], left[1]), comparable(right[0], right[1])
    if result_type["code"] == "NUMERIC":
        a, b = Decimal(a), Decimal(b)
    value = a + b if symbol == "+" else a - b if symbol == "-" else a * b
    if result_type["code"] == "FLOAT64":
        return result_type, float(value)
    return result_type, normalize(result_type, str(value), f"operator {symbol}")
