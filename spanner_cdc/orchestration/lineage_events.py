"""What the hourly DAG's tasks report to OpenLineage: the change stream in, the lake's locations out, with counts.

Airflow's OpenLineage provider asks a finished task for its lineage (`get_openlineage_facets_on_complete`) only
when OpenLineage is configured; the DAG file's operator hands the task's return value here. Datasets follow
OpenLineage's naming: the change stream is `spanner://<project>/<instance>/<database>` / `<stream>`, a watched
table the same namespace / `<table>`, a lake location `file` / `<absolute path>` or `gs://<bucket>` (`s3://`) /
`<path in the bucket>`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# which task reports what: the task id's last part (mapped extracts are `wave_<k>.extract`)
EXTRACT, CLOSE, SNAPSHOT, CURRENT_STATE = "extract", "close", "snapshot", "current_state"
REPORTING_TASKS = (EXTRACT, CLOSE, SNAPSHOT, CURRENT_STATE)


@dataclass(frozen=True)
class Counts:
    rows: int
    files: int
    bytes: int


@dataclass(frozen=True)
class DatasetRef:
    """One dataset as OpenLineage names it, with the facets this project fills."""

    namespace: str
    name: str
    schema: Sequence[tuple[str, str]] = ()  # (column, type)
    counts: Counts | None = None  # an output's statistics


@dataclass(frozen=True)
class TaskLineage:
    inputs: list[DatasetRef] = field(default_factory=list)
    outputs: list[DatasetRef] = field(default_factory=list)


def spanner_namespace(project: str, instance: str, database: str) -> str:
    return f"spanner://{project}/{instance}/{database}"


def location_dataset(location: str, **facets: Any) -> DatasetRef:
    """A lake location (a local path or a gs:// / s3:// URL) as an OpenLineage dataset."""
    for scheme in ("gs://", "s3://", "s3a://"):
        if location.startswith(scheme):
            bucket, _, path = location[len(scheme):].partition("/")
            return DatasetRef(f"{scheme}{bucket}", "/" + path.strip("/"), **facets)
    return DatasetRef("file", str(Path(location).absolute()), **facets)


def lake_schema() -> list[tuple[str, str]]:
    """The change log's columns (lake/columns.py), as the schema facet lists them."""
    from spanner_cdc.lake.columns import LAKE_SCHEMA

    return [(f.name, str(f.type)) for f in LAKE_SCHEMA]


def task_kind(task_id: str) -> str | None:
    kind = task_id.rsplit(".", 1)[-1]
    return kind if kind in REPORTING_TASKS else None


def change_log_lineage(source: DatasetRef, change_log: str, counts: Counts) -> TaskLineage:
    """An extract or a close: the change stream in, the change log location out with the rows landed."""
    return TaskLineage([source], [location_dataset(change_log, schema=lake_schema(), counts=counts)])


def snapshot_lineage(namespace: str, snapshot_location: str, result: Mapping[str, Any], files: Iterable[Any]) -> TaskLineage:
    """The snapshot: every watched table in, the snapshot location out (nothing when it was already complete)."""
    tables = result.get("tables") or {}
    if result.get("skipped") or not tables:
        return TaskLineage()
    counts = Counts(int(result.get("rows") or 0), 0, 0)
    chosen = list(files)
    if chosen:
        counts = Counts(sum(f.rows for f in chosen), len(chosen), sum(f.bytes for f in chosen))
    inputs = [DatasetRef(namespace, table) for table in sorted(tables)]
    return TaskLineage(inputs, [location_dataset(snapshot_location, counts=counts)])


def current_state_lineage(change_log: str, current_location: str, states: Iterable[Mapping[str, Any]]) -> TaskLineage:
    """The current state: the change log in, the state tables' location out, rows of the windows applied.

    A state's `tables` maps each table to its rows at the window's end (one snapshot of its state table each).
    """
    made = list(states)
    if not made:
        return TaskLineage()
    rows = files = 0
    for state in made:
        for table in (state.get("tables") or {}).values():
            rows += int(table.get("rows") or 0) if isinstance(table, Mapping) else int(table or 0)
            files += 1
    return TaskLineage([location_dataset(change_log)], [location_dataset(current_location, counts=Counts(rows, files, 0))])


def manifest_counts(files: Iterable[Any], tokens: Iterable[str] | None = None) -> Counts:
    """Rows, files and bytes of published manifest entries (those of `tokens` when given)."""
    wanted = None if tokens is None else set(tokens)
    chosen = [f for f in files if wanted is None or f.token in wanted]
    return Counts(sum(f.rows for f in chosen), len(chosen), sum(f.bytes for f in chosen))


def for_task(stream: str, task_id: str, start: dt.datetime, end: dt.datetime, result: Any,
             batch: Sequence[dict[str, str]] | None = None) -> TaskLineage:  # fmt: skip
    """The lineage a finished task of the stream's hourly DAG reports (reads the store for the manifest's bytes)."""
    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.names import LIVE_NAMESPACE
    from spanner_cdc.orchestration.connections import stream_settings
    from spanner_cdc.orchestration.hourly import utc
    from spanner_cdc.orchestration.waves import tokens_of

    kind = task_kind(task_id)
    if kind is None or result is None:
        return TaskLineage()
    config, settings = stream_settings(stream)
    namespace = spanner_namespace(str(settings.project), str(settings.instance), str(settings.database))
    layout = LakeLayout(settings.output_root, config.change_stream, LIVE_NAMESPACE)
    if kind == CURRENT_STATE:
        from spanner_cdc.lake.state_table import STATE_DIR
        from spanner_cdc.lake.storage import join as join_location

        return current_state_lineage(layout.location, join_location(layout.location, STATE_DIR), result)
    from spanner_cdc.store import open_store

    with open_store(settings) as store:
        lineage = store.get_lineage(config.change_stream, LIVE_NAMESPACE)
        if kind == SNAPSHOT:
            return snapshot_lineage(namespace, layout.snapshot_location, result, store.snapshot_files(lineage.id))
        files = store.manifest(lineage.id, window_start=utc(start), window_end=utc(end))
    counts = manifest_counts(files, tokens_of(batch) if kind == EXTRACT and batch is not None else None)
    return change_log_lineage(DatasetRef(namespace, config.change_stream), layout.location, counts)


def to_operator_lineage(lineage: TaskLineage) -> Any:
    """The provider's OperatorLineage of `lineage` (OpenLineage's classes are imported only here)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import datasource_dataset, output_statistics_output_dataset, schema_dataset

    def facets(ref: DatasetRef) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if ref.schema:
            found["schema"] = schema_dataset.SchemaDatasetFacet(
                fields=[schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in ref.schema]
            )
        if ref.namespace.startswith("spanner://"):
            found["dataSource"] = datasource_dataset.DatasourceDatasetFacet(name=ref.namespace, uri=ref.namespace)
        return found

    def output_facets(ref: DatasetRef) -> dict[str, Any]:
        if ref.counts is None:
            return {}
        return {"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=ref.counts.rows, size=ref.counts.bytes, fileCount=ref.counts.files)}  # fmt: skip

    return OperatorLineage(
        inputs=[InputDataset(namespace=r.namespace, name=r.name, facets=facets(r)) for r in lineage.inputs],
        outputs=[OutputDataset(namespace=r.namespace, name=r.name, facets=facets(r), outputFacets=output_facets(r))
                 for r in lineage.outputs],
    )  # fmt: skip
