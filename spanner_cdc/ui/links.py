"""Which lineage an Airflow DAG (or DAG run) of this project shows: hourly DAGs map to live, backfills to theirs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spanner_cdc.orchestration.backfill import backfill_namespace
from spanner_cdc.ui.view import LineageView

HOURLY_PREFIX = "spanner_cdc_hourly__"
BACKFILL_DAG = "spanner_cdc_backfill"
LIVE = "live"


def lineage_for_dag(
    dag_id: str,
    run_id: str | None,
    lineages: Sequence[LineageView],
    stream_names: Mapping[str, str],
) -> tuple[str, str] | None:
    """(stream, namespace) to show for a DAG id and optional run id, or None when none fits.

    `stream_names` maps a configured stream name to its change stream (lineages are keyed by the latter).
    """
    if dag_id.startswith(HOURLY_PREFIX):
        name = dag_id[len(HOURLY_PREFIX):]
        stream = stream_names.get(name, name)
        for ln in lineages:
            if ln.stream == stream and ln.namespace == LIVE:
                return ln.stream, ln.namespace
        return None
    if dag_id == BACKFILL_DAG and run_id:
        wanted = backfill_namespace(run_id)
        for ln in lineages:
            if ln.namespace == wanted:
                return ln.stream, ln.namespace
    return None
