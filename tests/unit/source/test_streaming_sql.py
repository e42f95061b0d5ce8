"""streaming_sql's lookup: made once per database object, forgotten with it; None for what is not the client's Database."""

from __future__ import annotations

import gc

from spanner_cdc.source import streaming_sql as module


class StandIn:
    """Not google-cloud-spanner's Database (no spanner_api): its queries go through snapshot.execute_sql."""

    def __eq__(self, other: object) -> bool:  # as the client's Database: __eq__ without __hash__
        return self is other

    __hash__ = None  # type: ignore[assignment]


def test_a_database_is_looked_up_once_and_forgotten_when_collected() -> None:
    database = StandIn()
    key = id(database)
    assert module.streaming_sql(database) is None
    assert module._queries[key][0]() is database  # kept by id, the object itself unhashable
    assert module.streaming_sql(database) is None
    del database
    gc.collect()
    assert key not in module._queries
