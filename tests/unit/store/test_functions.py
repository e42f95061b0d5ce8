"""The claims and the landing as server-side functions (store/functions.py): arguments, bodies and names."""

from __future__ import annotations

import re

import sqlalchemy as sa

from spanner_cdc.store import functions
from spanner_cdc.store.batch_sql import LAND_MANY
from spanner_cdc.store.functions import FUNCTIONS, PARAMETER_TYPES, Function
from spanner_cdc.store.transition_sql import CLAIM_ANY, CLAIM_NAMED


def test_each_function_holds_its_statement_with_positional_arguments() -> None:
    assert [f.statement for f in FUNCTIONS] == [CLAIM_ANY, CLAIM_NAMED, LAND_MANY]
    for function in FUNCTIONS:
        assert set(function.parameters) <= set(PARAMETER_TYPES), function.stem
        assert not re.search(r"(?<![:\w]):\w", function.body), function.stem  # no parameter left by name
        arguments = {int(n) for n in re.findall(r"\$(\d+)", function.body)}
        assert arguments == set(range(1, len(function.parameters) + 1)), function.stem
        assert function.body.strip() in function.definition()
        assert function.definition().startswith(f"CREATE OR REPLACE FUNCTION {function.name}(")
        assert "SET enable_nestloop = off" in function.definition()


def test_the_call_passes_the_statements_own_parameters_typed() -> None:
    land = functions.LAND_MANY_FUNCTION
    assert land.parameters == ("batch", "lineage_id", "manifest")  # in order of first use
    assert land.call.text == (
        f"SELECT * FROM {land.name}(CAST(:batch AS json), CAST(:lineage_id AS bigint), CAST(:manifest AS json))"
    )
    assert "named" in functions.CLAIM_NAMED_FUNCTION.parameters
    assert "named" not in functions.CLAIM_ANY_FUNCTION.parameters


def test_a_function_is_named_by_its_definition() -> None:
    """Another body is another function: code never runs a body of another release's under its own name."""
    names = {f.name for f in FUNCTIONS}
    assert len(names) == len(FUNCTIONS)
    assert all(re.fullmatch(r"cdc_[a-z_]+_[0-9a-f]{12}", name) for name in names)
    same = Function("cdc_land_many", sa.text(LAND_MANY.text), "SETOF text")
    assert same.name == functions.LAND_MANY_FUNCTION.name
    changed = Function(
        "cdc_land_many", sa.text(LAND_MANY.text.replace("SELECT token FROM landed", "SELECT 'x'")), "SETOF text"
    )
    assert changed.name != functions.LAND_MANY_FUNCTION.name


def test_a_parameter_inside_a_cast_or_a_string_is_found_once() -> None:
    function = Function(
        "cdc_t", sa.text("SELECT :owner || ':x' || CAST(:lease AS interval)::text, :owner"), "SETOF text"
    )
    assert function.parameters == ("owner", "lease")
    assert function.body == "SELECT $1 || ':x' || CAST($2 AS interval)::text, $1"
