"""One maintenance DAG per stream, `spanner_cdc_maintenance__<name>`: compaction, expiry, orphans, store retention."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task

from spanner_cdc.names import MAINTENANCE_POOL, maintenance_dag_id
from spanner_cdc.settings import load_settings
from spanner_cdc.stream_config import StreamConfig, load_streams

DOC = """
Maintains the lake of the change stream **{change_stream}** (`{output_root}/{change_stream}/live/`), on its own
schedule (`maintenance_schedule`, daily by default) and in its own pool (`{pool}`, one slot), so it never takes a
slot of the hourly extract: `maintain` rewrites each closed window's small files of a table into files near
`target_file_size` (one Iceberg replace snapshot each, then the window's next marker generation), expires snapshots
superseded longer than `snapshot_retention` ago, removes data files nothing lists once older than
`orphan_min_age`, and folds the metadata store's partitions, attempts and manifest rows of windows closed longer
than `lineage_retention` ago into per-window totals. Every step is idempotent and safe to kill; a retry finishes the work. The same as
`spanner-cdc lake maintain --stream {change_stream}`.
"""


def build(config: StreamConfig, output_root: str) -> DAG:
    name = config.name
    with DAG(
        dag_id=maintenance_dag_id(name),
        schedule=config.maintenance_schedule,
        start_date=config.start_date,
        catchup=False,  # one run maintains every closed window: missed days need no runs of their own
        max_active_runs=1,
        default_args={"owner": "spanner-cdc", "retries": 2, "retry_delay": dt.timedelta(minutes=5)},
        tags=["spanner-cdc", name, "maintenance"],
        doc_md=DOC.format(change_stream=config.change_stream, output_root=output_root, pool=MAINTENANCE_POOL),
    ) as dag:

        @task(task_id="maintain", pool=MAINTENANCE_POOL)
        def maintain() -> dict[str, Any]:
            from spanner_cdc.orchestration import maintenance_task

            return maintenance_task.maintain(name)

        maintain()
    return dag


def _build_all() -> dict[str, DAG]:
    base = load_settings({})
    dags = {}
    for config in load_streams(base).values():
        dags[maintenance_dag_id(config.name)] = build(config, str(config.settings(base).output_root))
    return dags


globals().update(_build_all())
