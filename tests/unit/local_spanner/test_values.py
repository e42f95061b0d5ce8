"""Values of the local server: the commit timestamp's protobuf and the commit path's fast value checks."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf import timestamp_pb2

from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.values import normalize, pb_timestamp


def test_pb_timestamp_is_what_timestamp_from_datetime_gives() -> None:
    rng = random.Random(1)
    for n in range(3000):
        value = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(-6 * 10**16, 10**17))
        if n % 3 == 0:
            value = value.astimezone(timezone(timedelta(hours=-7)))
        if n % 5 == 0:
            value = value.replace(tzinfo=None)  # naive: UTC
        expected = timestamp_pb2.Timestamp()
        expected.FromDatetime(value)
        assert pb_timestamp(value) == expected, value


@pytest.mark.parametrize(("text", "canonical"), [("12", "12"), ("0", "0"), ("007", "7"), ("-5", "-5"), ("１２", "12"),
                                                 ("9223372036854775807", "9223372036854775807")])  # fmt: skip
def test_int64_text_is_canonical_whichever_path_checks_it(text: str, canonical: str) -> None:
    assert normalize({"code": "INT64"}, text, "column t.k") == canonical


@pytest.mark.parametrize("text", ["9223372036854775808", "²", "1.5", ""])
def test_bad_int64_text_is_refused_naming_the_column(text: str) -> None:
    with pytest.raises(QueryError, match="column t.k: expected INT64"):
        normalize({"code": "INT64"}, text, "column t.k")


@pytest.mark.parametrize("size", [3, 2000])  # small texts are memoised, large ones are not: the same canonical text
def test_json_is_canonical_small_or_large_and_bad_json_is_refused_every_time(size: int) -> None:
    text = '{"b": "' + "x" * size + '", "a": [1, "é"]}'
    assert normalize({"code": "JSON"}, text, "column t.j") == '{"a":[1,"é"],"b":"' + "x" * size + '"}'
    for _ in range(2):
        with pytest.raises(QueryError, match="column t.j: expected JSON"):
            normalize({"code": "JSON"}, text[:-1], "column t.j")
