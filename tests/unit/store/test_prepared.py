import pytest

from spanner_cdc.store.prepared import prepared
from spanner_cdc.store.transition_sql import CLAIM_ANY, CLAIM_NAMED, LAND


def test_parameters_become_numbered_placeholders_in_first_seen_order() -> None:
    statement = prepared("p", "SELECT :b, CAST(:a AS int), :b::text, x::date FROM t WHERE y = 'at 10:30:00' OR z = :a")
    assert statement.params == ("b", "a")
    assert statement.prepare_sql == (
        "PREPARE p AS SELECT $1, CAST($2 AS int), $1::text, x::date FROM t WHERE y = 'at 10:30:00' OR z = $2"
    )
    assert statement.execute_sql == "EXECUTE p (%(b)s, %(a)s)"


def test_a_statement_without_parameters() -> None:
    assert prepared("q", "SELECT 1").execute_sql == "EXECUTE q"


def test_percent_signs_are_refused() -> None:
    with pytest.raises(ValueError, match="driver placeholder"):
        prepared("r", "SELECT 'a%b'")


def test_store_statements_take_the_expected_parameters() -> None:
    assert set(CLAIM_ANY.params) == {"lineage_id", "last", "limit", "owner", "lease", "window_end"}
    assert set(CLAIM_NAMED.params) == set(CLAIM_ANY.params) | {"named"}
    assert {"watermark", "state", "finished", "end", "paths", "owner", "attempt"} <= set(LAND.params)
