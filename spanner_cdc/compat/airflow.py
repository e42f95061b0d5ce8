"""Airflow internals without a public equivalent: the API server's authenticated user, dag.test()'s data interval, and
a DAG run's row in Airflow's database (a run's real start, the run of a logical date)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from spanner_cdc.compat import expect

DISTRIBUTION = "apache-airflow-core"


def api_server_user() -> Any:
    """The API server's FastAPI dependency that resolves the caller's JWT (Authorization header or the UI's cookie) to
    its user: 401 when missing or expired, 403 when invalid. Airflow mounts plugin apps unprotected and documents no
    dependency for them; this is the one its own routes use."""
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


@contextlib.contextmanager
def manual_data_interval(start: dt.datetime, end: dt.datetime) -> Iterator[None]:
    """Within this block dag.test() gives its run the data interval [start, end), as the scheduler does.

    dag.test() infers a manual run's interval from its logical date (the last interval ending at it) and takes no
    interval of its own; it asks `airflow.serialization.encoders.coerce_to_core_timetable` for the timetable, which is
    wrapped here for the block.
    """
    from airflow.sdk import timezone
    from airflow.serialization import encoders
    from airflow.timetables.base import DataInterval

    real = encoders.coerce_to_core_timetable

    class Window:
        def __init__(self, timetable: Any) -> None:
            self.timetable = timetable

        def __getattr__(self, name: str) -> Any:
            return getattr(self.timetable, name)

        def infer_manual_data_interval(self, *, run_after: Any) -> Any:
            return DataInterval(timezone.coerce_datetime(start), timezone.coerce_datetime(end))

    encoders.coerce_to_core_timetable = lambda obj: Window(real(obj))  # type: ignore[assignment]
    try:
        yield
    finally:
        encoders.coerce_to_core_timetable = real  # type: ignore[assignment]


def set_run_start(run_pk: int, start: dt.datetime) -> float | None:
    """Set the start of the DAG run with primary key `run_pk` (dag.test() starts one at its logical date); returns the
    duration Airflow shows now, None while the run has no end. Airflow offers no API to set it."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        stored = session.get(DagRun, run_pk)
        if stored is None:
            return None
        stored.start_date = start
        end = stored.end_date
    return None if end is None else round((end - start).total_seconds(), 1)


def run_id_at(dag_id: str, logical_date: dt.datetime) -> str | None:
    """The newest run id of `dag_id` at `logical_date` in Airflow's database (the API server's own session)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(DagRun.run_id).where(DagRun.dag_id == dag_id, DagRun.logical_date == logical_date)
    with create_session() as session:
        run_id = session.scalar(query.order_by(DagRun.id.desc()).limit(1))
    return None if run_id is None else str(run_id)


def check() -> None:
    """The contract: get_user is where the API server keeps it, and dag.test() infers its interval through
    coerce_to_core_timetable (looked up at call time, so the wrap applies)."""
    import inspect

    from airflow.sdk.definitions.dag import DAG
    from airflow.serialization import encoders

    try:
        from airflow.api_fastapi.core_api.security import get_user
    except ImportError:
        get_user = None  # type: ignore[assignment]
    expect(DISTRIBUTION, callable(get_user), "airflow.api_fastapi.core_api.security.get_user")
    expect(DISTRIBUTION, callable(getattr(encoders, "coerce_to_core_timetable", None)),
           "airflow.serialization.encoders.coerce_to_core_timetable")  # fmt: skip
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    expect(DISTRIBUTION, callable(create_session) and all(hasattr(DagRun, c) for c in ("id", "run_id", "dag_id", "logical_date",
           "start_date", "end_date")), "airflow.utils.session.create_session and DagRun's id, run_id, dag_id, "
           "logical_date, start_date and end_date columns")  # fmt: skip
    source = inspect.getsource(inspect.unwrap(DAG.test))
    expect(DISTRIBUTION, "from airflow.serialization.encoders import coerce_to_core_timetable" in source
           and "coerce_to_core_timetable(self.timetable)" in source and "infer_manual_data_interval(" in source,
           "DAG.test() inferring its data interval through coerce_to_core_timetable")  # fmt: skip
