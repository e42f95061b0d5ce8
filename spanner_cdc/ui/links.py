"""Which lineage an Airflow DAG (or DAG run) of this project shows: hourly DAGs map to live, backfills to theirs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
