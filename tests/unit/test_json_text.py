"""The JSON text of change values is json's, whichever encoder writes it: floats at and around msgspec's limits."""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import pytest

from spanner_cdc.json_text import float_free_text, value_text


def jsons(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class Amount(float):
    def __repr__(self) -> str:
        return "amount"


EDGES = [0.0, -0.0, 1.0, 0.1, 1e-4, -1e-4, 9.999999999999999e-05, 1e-05, 1e16, -1e16, 9999999999999998.0, 1e15 + 0.3,
         5e-324, 1e300, 1.7976931348623157e308, float("nan"), float("inf"), float("-inf")]  # fmt: skip


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_a_float_at_the_edges_is_written_as_json_writes_it(value: float) -> None:
    for holder in (value, [value], {"f": value}, {"o": {"a": [1, "x", value]}}, {"k": None, "t": True, "s": "é"}):
        assert value_text(holder) == jsons(holder)


def test_random_floats_are_written_as_json_writes_them() -> None:
    draw = random.Random(15)
    for _ in range(20_000):
        bits = struct.unpack("<d", draw.getrandbits(64).to_bytes(8, "little"))[0]  # any double, NaN and infinities too
        scaled = draw.uniform(-1, 1) * 10 ** draw.randint(-8, 20)  # around the limits of repr's plain notation
        value = {"bits": bits, "scaled": scaled, "rounded": round(scaled, draw.randint(0, 6)), "list": [scaled, bits]}
        assert value_text(value) == jsons(value)


def test_keys_and_types_msgspec_would_write_otherwise_go_to_json() -> None:
    for value in ({1e16: "float key"}, {0.5: 1}, {True: 1}, {None: 2}, {3: "int key"}, {"f": Amount(1.5)}, [Amount(2.0)]):
        assert value_text(value) == jsons(value)


def test_float_free_values_stay_msgspecs() -> None:
    value = {"s": "a\"b\\c\x00\u2028😀", "i": 2**70, "n": None, "l": [True, {"x": "y"}]}
    assert value_text(value) == float_free_text(value) == jsons(value)
