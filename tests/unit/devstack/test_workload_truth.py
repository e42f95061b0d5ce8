"""Ground-truth lines of the workload generator: read back equal, non-finite floats kept as json writes them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from spanner_cdc.devstack.workload import _truth_text


def line(**values: Any) -> dict[str, Any]:
    return {"commit_timestamp": "2026-11-24T07:00:00.000001Z", "table": "singers", "mod_type": "UPDATE",
            "keys": {"singer_id": "7"}, "new_values": values, "old_values": {"rating": 1.5, "tags": ["a"]},
            "transaction_tag": "app=workload", "transaction": 3}  # fmt: skip


@pytest.mark.parametrize(
    "values",
    [{"name": 'río "雨" \u2028', "rating": -875.992, "tags": [], "info": '{"n":1}', "ok": True, "gone": None},
     {"rating": 5e-324, "scores": [0.1, 1e300, None]}],
    ids=["every kind of value", "extreme finite floats"],
)  # fmt: skip
def test_a_line_reads_back_equal(values: dict[str, Any]) -> None:
    text = _truth_text(line(**values))
    assert text.endswith("\n") and text.count("\n") == 1 and json.loads(text) == line(**values)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan]], ids=["nan", "inf", "-inf", "in an array"])
def test_non_finite_floats_are_written_as_json_writes_them_not_as_null(value: Any) -> None:
    text = _truth_text(line(rating=value))
    assert text == json.dumps(line(rating=value), separators=(",", ":")) + "\n"
    read = json.loads(text)["new_values"]["rating"]
    assert read is not None and json.dumps(read) == json.dumps(value)
