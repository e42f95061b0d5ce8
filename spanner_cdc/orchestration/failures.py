"""Which errors a retry can fix: the others fail the task at once, with the project's one-line message."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from spanner_cdc.errors import ConfigError, NotFound, RetentionError, SchemaOutdated, UsageError

P = ParamSpec("P")
R = TypeVar("R")

# A bad setting, a window out of retention, a missing schema or database: the same call fails again.
# Unreachable services and failed token reads (SourceError, StoreUnreachable, ExtractError) are retried.
NOT_RETRYABLE = (ConfigError, UsageError, RetentionError, SchemaOutdated, NotFound)


def fail_fast(func: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except NOT_RETRYABLE as exc:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc

    return wrapper
