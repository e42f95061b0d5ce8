"""Errors a retry cannot fix fail the task at once; transient ones are left to Airflow's retries."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spanner_cdc.errors import ConfigError, ExtractError, NotFound, RetentionError, SourceError, StoreUnreachable
from spanner_cdc.orchestration.failures import fail_fast


def _raising(exc: Exception) -> Callable[[], None]:
    @fail_fast
    def body() -> None:
        raise exc

    return body


@pytest.mark.parametrize(
    "exc",
    [ConfigError("heartbeat_ms", 1, "an integer"), RetentionError("window start has left retention"), NotFound("no db")],
)
def test_errors_a_retry_cannot_fix_fail_at_once_with_their_message(exc: Exception) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException) as raised:
        _raising(exc)()
    assert str(exc) in str(raised.value)
    assert raised.value.__cause__ is exc


@pytest.mark.parametrize("exc", [SourceError("unreachable"), StoreUnreachable("down"), ExtractError("token failed")])
def test_transient_errors_are_left_to_the_retries(exc: Exception) -> None:
    with pytest.raises(type(exc)):
        _raising(exc)()


def test_results_pass_through() -> None:
    @fail_fast
    def body(x: int) -> int:
        return x + 1

    assert body(1) == 2
