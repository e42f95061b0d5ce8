"""Which lineage an Airflow DAG (or DAG run) of this project shows: hourly DAGs map to live, backfills to theirs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from spanner_cdc.names import BACKFILL_DAG_ID, HOURLY_DAG_PREFIX, LIVE_NAMESPACE, backfill_namespace
from spanner_cdc.ui.view import LineageView


def lineage_for_dag(
    dag_id: str,
    run_id: str | None,
    lineages: Sequence[LineageView],
    stream_names: Mapping[str, str],
) -> tuple[str, str] | None:
    """(stream, namespace) to show for a DAG id and optional run id, or None when none fits.

    `stream_names` maps a configured stream name to its change stream (lineages are keyed by the latter).
    """
    if dag_id.startswith(HOURLY_DAG_PREFIX):
        name = dag_id[len(HOURLY_DAG_PREFIX):]
        stream = stream_names.get(name, name)
        for ln in lineages:
            if ln.stream == stream and ln.namespace == LIVE_NAMESPACE:
                return ln.stream, ln.namespace
        return None
    if dag_id == BACKFILL_DAG_ID and run_id:
        wanted = backfill_namespace(run_id)
        for ln in lineages:
            if ln.namespace == wanted:
                return ln.stream, ln.namespace
    return None


def run_logical_date(run_id: str) -> datetime | None:
    """The logical date an Airflow run id carries (`scheduled__<iso>`, `manual__<iso>`), None when it carries none."""
    _, sep, rest = run_id.partition("__")
    try:
        at = datetime.fromisoformat(rest) if sep else None
    except ValueError:
        return None
    return None if at is None else at if at.tzinfo else at.replace(tzinfo=UTC)
