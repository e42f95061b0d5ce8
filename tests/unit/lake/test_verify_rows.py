"""verify's pure part: the fraction's check, the seeded buckets, row hashes, the change log's comparison and the text."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.lake.verify_rows import (
    SHOWN,
    ChangeLogCheck,
    Mismatch,
    TableCheck,
    VerifyResult,
    check_fraction,
    choose_buckets,
    compare_changes,
    row_hash,
    state_problem,
)


@pytest.mark.parametrize("bad", ["0", "1.01", "-1", "nan", "abc", "", 0, 2.0])
def test_a_fraction_outside_0_1_names_the_flag(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        check_fraction(bad)
    assert "--fraction" in str(caught.value) and "(0, 1]" in str(caught.value)


def test_buckets_are_drawn_by_the_seed_and_cover_the_fraction() -> None:
    assert choose_buckets(1.0, 1, 16) == list(range(16))
    assert choose_buckets(0.25, 42, 16) == choose_buckets(0.25, 42, 16) and len(choose_buckets(0.25, 42, 16)) == 4
    assert {tuple(choose_buckets(0.25, s, 16)) for s in range(20)} != {tuple(choose_buckets(0.25, 0, 16))}  # seeds differ
    assert len(choose_buckets(0.01, 3, 16)) == 1 and len(choose_buckets(0.5, 3, 16)) == 8 and len(choose_buckets(0.3, 3, 16)) == 5


def test_row_hashes_see_every_value_and_its_type() -> None:
    row = [1, "a", Decimal("1.500000000"), datetime(2026, 1, 1, tzinfo=UTC), date(2026, 1, 1), b"\x00\xff", [1, 2], None, 0.5]
    assert row_hash(row) == row_hash(list(row))
    for i, other in enumerate([2, "b", Decimal("1.5000000001"), datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), date(2026, 1, 2), b"\x00", [2, 1], 0, 0.25]):
        assert row_hash([*row[:i], other, *row[i + 1 :]]) != row_hash(row), i
    assert row_hash([1, None]) != row_hash([None, 1]) and row_hash(["1"]) != row_hash([1])


def test_change_log_rows_missing_extra_and_twice_are_counted_and_shown_in_order() -> None:
    source = {"u1": ("T", '{"Id":"1"}'), "u2": ("T", '{"Id":"2"}'), "u3": ("A", '{"Id":"3"}')}
    lake = [("u1", "T", '{"Id":"1"}'), ("u1", "T", '{"Id":"1"}'), ("u9", "T", '{"Id":"9"}')]
    rows, missing, extra, found = compare_changes(source, lake)
    assert (rows, missing, extra) == (3, 2, 2)
    assert [(m.table, m.key, m.problem) for m in found] == [
        ("A", '{"Id":"3"}', "missing in the lake"), ("T", '{"Id":"1"}', "in the lake 2 times"),
        ("T", '{"Id":"2"}', "missing in the lake"), ("T", '{"Id":"9"}', "in the lake, not in the change stream"),
    ]  # fmt: skip
    many = {f"u{i:03}": ("T", f'{{"Id":"{i:03}"}}') for i in range(50)}
    assert compare_changes(many, [])[1:3] == (50, 0) and len(compare_changes(many, [])[3]) == SHOWN
    assert compare_changes(many, [(u, t, k) for u, (t, k) in many.items()]) == (50, 0, 0, [])


def test_state_problems() -> None:
    assert state_problem("a", "a", 1, 1) is None
    assert state_problem("a", "b", 1, 1) == "values differ"
    assert state_problem(None, "b", 0, 1) == "missing in the lake"
    assert state_problem("a", None, 1, 0) == "in the lake, not in the source"
    assert state_problem("a", "a", 2, 1) == "in the lake 2 times"


def test_the_result_counts_both_parts_and_says_which_window() -> None:
    result = VerifyResult("s", "live", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z", "2026-01-02T00:00:00Z", 0.5, 7, [1, 2])
    result.tables = [TableCheck("T", 5, lake_rows=10, source_rows=11, mismatches=1), TableCheck("U", None, skipped="expired")]
    result.change_log = ChangeLogCheck(True, source_rows=4, lake_rows=3, missing=1, missing_files=["/lake/f.parquet"])
    result.examples = [Mismatch("state", "T", '{"Id":1}', "missing in the lake")]
    assert (result.rows_compared, result.mismatches, result.ok) == (15, 2, False)
    text = "\n".join(result.lines())
    assert text.startswith("verify s/live window [2026-01-01T00:00:00Z, 2026-01-01T01:00:00Z): 2 mismatches, 15 rows compared")
    assert "seed 7" in text and "U: not compared (expired)" in text and "/lake/f.parquet" in text and "first 1" in text
    assert result.to_json()["mismatches"] == 2 and result.to_json()["change_log"]["missing"] == 1
    outside = VerifyResult("s", "live", "a", "b", "c", 1.0, 1, [0], change_log=ChangeLogCheck(False, "past retention"))
    assert outside.ok and "change log: not compared (past retention)" in "\n".join(outside.lines())
