"""The project's vocabulary: names derived from configuration, and the identifier rule."""

from __future__ import annotations

import pytest

from spanner_cdc import names


def test_a_short_token_is_its_tail_marked_when_cut() -> None:
    token = "A" * 40 + "tail123456"
    assert names.short_token(token) == "…tail123456"
    assert names.short_token(token, width=4) == "…3456"
    assert names.short_token("short") == "short"


def test_dag_and_asset_names_follow_the_stream_name() -> None:
    assert names.hourly_dag_id("orders") == "spanner_cdc_hourly__orders"
    assert names.hourly_dag_id("orders").startswith(names.HOURLY_DAG_PREFIX)
    assert names.landed_asset_name("orders") == "spanner_cdc_landed__orders"


@pytest.mark.parametrize("text", ["orders", "_x", "A" + "b" * 127])
def test_identifiers_accepted(text: str) -> None:
    assert names.IDENTIFIER.fullmatch(text)


@pytest.mark.parametrize("text", ["", "1abc", "a-b", "a b", "A" + "b" * 128, "Orders'Stream"])
def test_identifiers_refused(text: str) -> None:
    assert not names.IDENTIFIER.fullmatch(text)


def test_the_live_read_method_comes_first() -> None:
    assert names.READ_METHODS == (names.LIVE_READ_METHOD, names.BACKFILL_READ_METHOD)
    assert names.LIVE_READ_METHOD == "spanner-change-stream"
