"""The DAG factory: one hourly, maintenance and (with `verify = true`) verify DAG per configured stream, and the backfill form.

A DAG file is a few lines that call it (`globals().update(all_dags())`). Parsing stays cheap: at the top this module
imports Airflow's public SDK and the package's configuration only; task bodies import the orchestration when they run.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import (  # type: ignore[attr-defined]  # the deadline classes are lazy exports of airflow.sdk
    DAG,
    Asset,
    AssetAlias,
    AsyncCallback,
    CronDataIntervalTimetable,
    DeadlineAlert,
    DeadlineReference,
    Param,
    TaskGroup,
    TriggerRule,
    get_current_context,
    task,
)

from spanner_cdc.names import (
    BACKFILL_DAG_ID,
    DEADLINE_CALLBACK,
    LIVE_NAMESPACE,
    MAINTENANCE_POOL,
    SPANNER_POOL,
    current_state_asset_name,
    landed_asset_name,
    maintenance_dag_id,
)
from spanner_cdc.settings import load_settings
from spanner_cdc.stream_config import StreamConfig, load_streams

# Airflow maps tasks once per run, so children made ready by a wave's splits and merges are read by
# the next of a fixed number of waves (`waves` of the stream's table); whatever is still pending after
# the last one is finished by the next run's catch_up, before that run reads its own window.
HOURLY_DEFAULT_ARGS: dict[str, Any] = {
    "owner": "spanner-cdc",
    "retries": 4,  # the first retry after the stream's retry_delay (30 s unless its table says otherwise)
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=15),
}
HOURLY_DOC = """
Extracts the change stream **{change_stream}** for each data interval `[start, end)` into the lake
(`{output_root}/{change_stream}/live/`), keeping lineage and checkpoints in the metadata store.

`current_state` (with `current_state = true`) applies each closed window to every table's current-state Iceberg
table (`live.{change_stream}__current__<table>`, files under `_current/`: one snapshot per table as of the window's end)
and emits one `spanner_cdc_current_state__{name}` event per window applied; `snapshot` (with `snapshot = true`) reads every watched table at the first window's start into
`snapshot/`, once; `catch_up` finishes windows that earlier runs left open; `plan` bootstraps the lineage and lists the
ready partition tokens; each `wave_k.extract` reads one token (or a batch of them) over the window;
`wave_k.next_wave` picks up children of splits and merges; `close` checks completeness and the
transaction counts, writes the window marker and emits the `{asset}` asset event (skipped while
tokens are pending). A run still going `deadline_minutes` after its window's end misses its deadline: the
triggerer logs the stream, the window and the partitions holding it open (or runs `deadline_notifier`). Configuration: the `[streams.{name}]` table of `$SPANNER_CDC_CONFIG`.
"""


class LineageReportingOperator(PythonOperator):
    """A PythonOperator that tells Airflow's OpenLineage provider what it read and wrote, through the provider's
    documented operator hook `get_openlineage_facets_on_complete` (called only when OpenLineage is configured)."""

    def execute(self, context: Any) -> Any:
        result = super().execute(context)
        self.lineage_of = (context["data_interval_start"], context["data_interval_end"], result)
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from spanner_cdc.orchestration import lineage_events

        if not hasattr(self, "lineage_of"):  # failed or skipped (a close whose window stays open): nothing landed
            return None
        start, end, result = self.lineage_of
        stream = self.dag_id.split("__", 1)[1]
        batch = self.op_kwargs.get("batch")
        return lineage_events.to_operator_lineage(lineage_events.for_task(stream, self.task_id, start, end, result, batch))


def _batch_kwargs(batch: Any) -> dict[str, Any]:
    """One mapped extract's keyword arguments from one item of the wave's list of batches."""
    return {"batch": batch}


def landed_asset(config: StreamConfig) -> Asset:
    return Asset(
        name=landed_asset_name(config.name),
        uri=f"spanner-cdc://{config.change_stream}/{LIVE_NAMESPACE}",
        group="spanner-cdc",
        extra={"stream": config.change_stream, "namespace": LIVE_NAMESPACE},
    )


def deadline_alert(config: StreamConfig) -> DeadlineAlert | None:
    """`deadline_minutes` after its window's end a run still going misses its deadline; the callback runs once.

    A run's logical date is its window's start, so the deadline is that plus the window's length plus the minutes.
    """
    after = config.deadline_after()
    if after is None:
        return None
    if config.deadline_notifier:
        callback = AsyncCallback(config.deadline_notifier, kwargs=dict(config.deadline_notifier_kwargs))
    else:
        callback = AsyncCallback(DEADLINE_CALLBACK, kwargs={"stream": config.name, "minutes": config.deadline_minutes})
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_LOGICAL_DATE, interval=after, callback=callback,
        name=f"window not complete {config.deadline_minutes} min after its end",
    )  # fmt: skip


def hourly_dag(config: StreamConfig, concurrency: int, output_root: str) -> DAG:
    """The extract DAG of one stream, `spanner_cdc_hourly__<name>`: catch up, plan, waves of mapped extracts, close."""
    name = config.name
    asset = landed_asset(config)
    # Events for windows that catch_up finishes: one per window, none when there is nothing to finish.
    caught_up = AssetAlias(f"spanner_cdc_caught_up__{name}")
    # One event per new current state (a run may make several when earlier windows closed late).
    state_asset = Asset(
        name=current_state_asset_name(name), uri=f"spanner-cdc://{config.change_stream}/{LIVE_NAMESPACE}/current",
        group="spanner-cdc", extra={"stream": config.change_stream, "namespace": LIVE_NAMESPACE},
    )  # fmt: skip
    states = AssetAlias(f"spanner_cdc_current_states__{name}")
    with DAG(
        dag_id=config.dag_id,
        schedule=CronDataIntervalTimetable(config.schedule, timezone="UTC"),
        start_date=config.start_date,
        end_date=config.end_date,
        catchup=config.catchup,
        max_active_runs=1,
        default_args={**HOURLY_DEFAULT_ARGS, "retry_delay": config.retry_delay},
        deadline=deadline_alert(config),
        tags=["spanner-cdc", name],
        doc_md=HOURLY_DOC.format(
            name=name, change_stream=config.change_stream, output_root=output_root, asset=asset.name
        ),
    ) as dag:

        @task(task_id="catch_up", outlets=[caught_up])
        def catch_up(data_interval_start: Any = None, outlet_events: Any = None) -> list:
            from spanner_cdc.orchestration import hourly

            closed = hourly.catch_up(name, data_interval_start)
            for summary in closed:
                outlet_events[caught_up].add(asset, extra=hourly.asset_extra(summary))
            return closed

        @task(task_id="plan")
        def plan(data_interval_start: Any = None, data_interval_end: Any = None) -> list:
            from spanner_cdc.orchestration import hourly

            return hourly.plan(name, data_interval_start, data_interval_end)

        # all_success: a wave whose extract had nothing to read (mapped over no tokens: skipped) ends the run's waves,
        # the later ones skipped by the scheduler without starting a task; close still runs (none_failed). An extract
        # whose tokens a re-run no longer has (removed, e.g. a backfill of a closed window) lets the next wave run.
        @task(task_id="next_wave")
        def next_wave(data_interval_start: Any = None, data_interval_end: Any = None) -> list:
            from spanner_cdc.orchestration import hourly

            return hourly.next_wave(name, data_interval_start, data_interval_end)

        def extract(batch: list, data_interval_start: Any = None, data_interval_end: Any = None) -> dict:
            from spanner_cdc.orchestration import hourly, waves

            context = get_current_context()
            context["token_label"] = waves.batch_label(batch)  # type: ignore[typeddict-unknown-key]
            owner = hourly.owner_of(context["ti"])
            return hourly.extract(name, data_interval_start, data_interval_end, batch, owner=owner)

        def close(data_interval_start: Any = None, data_interval_end: Any = None, outlet_events: Any = None) -> dict:
            from spanner_cdc.orchestration import hourly

            summary = hourly.close(name, data_interval_start, data_interval_end)
            outlet_events[asset].extra = hourly.asset_extra(summary)
            return summary

        previous: Any = catch_up()
        if config.snapshot:  # `snapshot = true`: the lineage's initial snapshot first (a no-op once complete)

            def snapshot(data_interval_start: Any = None) -> dict:
                from spanner_cdc.orchestration import snapshot_task

                return snapshot_task.snapshot(name, data_interval_start)

            previous = LineageReportingOperator(task_id="snapshot", python_callable=snapshot) >> previous
        for wave in range(1, config.waves + 1):
            with TaskGroup(group_id=f"wave_{wave}"):
                ready = plan() if wave == 1 else next_wave()
                previous >> ready
                previous = LineageReportingOperator.partial(
                    task_id="extract",
                    python_callable=extract,
                    pool=SPANNER_POOL,
                    max_active_tis_per_dagrun=concurrency,
                    map_index_template="{{ token_label }}",
                ).expand(op_kwargs=ready.map(_batch_kwargs))  # type: ignore[arg-type]  # an XComArg of dicts
        closed = LineageReportingOperator(
            task_id="close", python_callable=close, trigger_rule=TriggerRule.NONE_FAILED, outlets=[asset]
        )
        previous >> closed
        if config.current_state:  # `current_state = true`: every table's state as of each closed window's end

            # none_failed: also when this run's close was skipped (its window left open), for the windows that
            # its catch_up closed; the body never goes past a window that is still open
            def current_state(data_interval_end: Any = None, outlet_events: Any = None) -> list:
                from spanner_cdc.orchestration import state_task

                made = state_task.current_state(name, data_interval_end)
                for state in made:
                    outlet_events[states].add(state_asset, extra=state)
                return made

            closed >> LineageReportingOperator(
                task_id="current_state", python_callable=current_state, outlets=[states],
                trigger_rule=TriggerRule.NONE_FAILED,
            )  # fmt: skip
    return dag


def hourly_dags() -> dict[str, DAG]:
    """One extract DAG per stream of $SPANNER_CDC_CONFIG, by DAG id."""
    base = load_settings({})
    dags = {}
    for config in load_streams(base).values():
        resolved = config.settings(base)
        dags[config.dag_id] = hourly_dag(config, resolved.concurrency, str(resolved.output_root))
    return dags


MAINTENANCE_DOC = """
Maintains the lake of the change stream **{change_stream}** (`{output_root}/{change_stream}/live/`), on its own
schedule (`maintenance_schedule`, daily by default) and in its own pool (`{pool}`, one slot), so it never takes a
slot of the hourly extract: `maintain` rewrites each closed window's small files of a table into files near
`target_file_size` (one Iceberg replace snapshot each, then the window's next marker generation), expires snapshots
superseded longer than `snapshot_retention` ago, removes data files nothing lists once older than
`orphan_min_age`, and folds the metadata store's partitions, attempts and manifest rows of windows closed longer
than `lineage_retention` ago into per-window totals; last, it folds the current-state tables' position-delete files
into their data files. Every step is idempotent and safe to kill; a retry finishes the work. The same as
`spanner-cdc lake maintain --stream {change_stream}`.
"""


def maintenance_dag(config: StreamConfig, output_root: str) -> DAG:
    """The maintenance DAG of one stream, `spanner_cdc_maintenance__<name>`: compaction, expiry, orphans, store retention."""
    name = config.name
    with DAG(
        dag_id=maintenance_dag_id(name),
        schedule=config.maintenance_schedule,
        start_date=config.start_date,
        catchup=False,  # one run maintains every closed window: missed days need no runs of their own
        max_active_runs=1,
        default_args={"owner": "spanner-cdc", "retries": 2, "retry_delay": dt.timedelta(minutes=5)},
        tags=["spanner-cdc", name, "maintenance"],
        doc_md=MAINTENANCE_DOC.format(change_stream=config.change_stream, output_root=output_root, pool=MAINTENANCE_POOL),
    ) as dag:

        @task(task_id="maintain", pool=MAINTENANCE_POOL)
        def maintain() -> dict[str, Any]:
            from spanner_cdc.orchestration import maintenance_task

            return maintenance_task.maintain(name)

        maintain()
    return dag


def maintenance_dags() -> dict[str, DAG]:
    """One maintenance DAG per stream of $SPANNER_CDC_CONFIG, by DAG id."""
    base = load_settings({})
    dags = {}
    for config in load_streams(base).values():
        dags[maintenance_dag_id(config.name)] = maintenance_dag(config, str(config.settings(base).output_root))
    return dags


VERIFY_DOC = """
Verifies, once a day (its one task, `verify`, as `spanner-cdc verify`), the newest closed window of change stream
**{change_stream}** against the source: each
current-state table's snapshot of the window against a stale read at its end - 1 µs ({fraction:g} of the key buckets),
and the window's change log against a fresh read of the change stream, by uuid. The result is kept with the window
(`spanner_cdc_verify_mismatches` in `/metrics`, `lake show --json`); a mismatch fails the task, without retries, with
the keys in its log. Off unless the `[streams.{name}]` table of `$SPANNER_CDC_CONFIG` says `verify = true`.
"""


def verify_dag(config: StreamConfig) -> DAG:
    """The daily verify DAG of one stream, `spanner_cdc_verify__<name>`: the newest closed window against the source."""
    with DAG(
        dag_id=f"spanner_cdc_verify__{config.name}",
        # daily at 00:30 UTC: the hourly run has closed [23:00, 00:00) by then, and its end is half an hour old, within
        # Spanner's default version_retention_period (1 h) for the stale read of the state part
        schedule="30 0 * * *",
        start_date=config.start_date,
        catchup=False,  # a verify checks the newest closed window: a missed day has nothing of its own to check
        max_active_runs=1,
        default_args={"owner": "spanner-cdc", "retries": 2, "retry_delay": dt.timedelta(minutes=5)},
        tags=["spanner-cdc", config.name],
        doc_md=VERIFY_DOC.format(name=config.name, change_stream=config.change_stream, fraction=config.verify_fraction),
    ) as dag:

        @task(task_id="verify")
        def verify() -> dict:
            from spanner_cdc.orchestration import verify_task

            return verify_task.verify(config.name)

        verify()
    return dag


def verify_dags() -> dict[str, DAG]:
    """One verify DAG per stream of $SPANNER_CDC_CONFIG with `verify = true`, by DAG id."""
    return {f"spanner_cdc_verify__{c.name}": verify_dag(c) for c in load_streams(load_settings({})).values() if c.verify}


BACKFILL_DEFAULT_ARGS: dict[str, Any] = {
    "owner": "spanner-cdc",
    "retries": 3,
    "retry_delay": dt.timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=15),
}
BACKFILL_DOC = """
Re-extracts `[start, end)` of one configured stream, hour by hour, into a lineage namespace of its
own (`backfill_<run id>`), so the live hourly lineage and its checkpoints are not touched. Rows carry
`read_method = spanner-change-stream-backfill`; files land under `<output_root>/<stream>/<namespace>/`.
The first task, `validate`, refuses the form (with the reason in its log, without retrying) when end is not after
start, end is in the future or before the stream was created, or start is outside the change stream's retention;
`extract_windows` then extracts the range hour by hour.
"""


def _params() -> dict[str, Param]:
    base = load_settings({})
    streams = load_streams(base)
    names = list(streams)
    stream = Param(
        names[0] if names else None,
        type="string",
        title="Stream",
        description="A configured stream ([streams.<name>] in $SPANNER_CDC_CONFIG), shown with its change stream.",
        # JSON-schema keywords of Param's **kwargs: the choices, and each shown as "<name> (change stream <stream>)"
        **({"enum": names, "values_display": {n: f"{n} (change stream {c.change_stream})" for n, c in streams.items()}}
           if names else {}),  # type: ignore[arg-type]
    )  # fmt: skip
    return {
        "stream": stream,
        "start": Param(
            type="string",
            format="date-time",
            title="Start (UTC)",
            description="First instant to extract (inclusive), in UTC. Earliest allowed: now minus the change stream's "
            "retention_period (1 day unless the stream sets it; the stream's page in the spanner-cdc UI shows it): "
            "the first task refuses an earlier start, whose changes Spanner no longer keeps.",
        ),
        "end": Param(
            type="string",
            format="date-time",
            title="End (UTC)",
            description="Where to stop (exclusive), in UTC; after start and not in the future.",
        ),
        "heartbeat_ms": Param(
            base.heartbeat_ms,
            type=["null", "integer"],
            minimum=1000,
            maximum=300_000,
            title="Heartbeat (ms), optional",
            description=f"heartbeat_milliseconds of the change stream queries; empty: {base.heartbeat_ms}.",
        ),
        "output_root": Param(
            None,
            type=["null", "string"],
            title="Output root, optional",
            description="Root of the lake to write to: a path, gs://bucket/prefix or s3://bucket/prefix; empty: the "
            "stream's configured output root.",
        ),
    }


def backfill_dag() -> DAG:
    """`spanner_cdc_backfill`: a manual trigger form that extracts a past range of one stream in its own namespace."""
    with DAG(
        dag_id=BACKFILL_DAG_ID,
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        catchup=False,
        default_args=BACKFILL_DEFAULT_ARGS,
        params=_params(),
        tags=["spanner-cdc", "backfill"],
        doc_md=BACKFILL_DOC,
    ) as dag:

        @task(task_id="validate", retries=0)
        def validate(params: Any = None, run_id: Any = None) -> dict:
            from spanner_cdc.orchestration import backfill

            return backfill.validate(params, run_id)

        @task(task_id="extract_windows", pool=SPANNER_POOL)
        def extract_windows(spec: dict, run_id: Any = None) -> dict:
            from spanner_cdc.orchestration import backfill

            return backfill.run(spec, run_id)

        extract_windows(validate())  # type: ignore[arg-type]  # the XComArg of validate's dict
    return dag


def all_dags() -> dict[str, DAG]:
    """Every DAG of the package for the streams of $SPANNER_CDC_CONFIG, by DAG id (what the shipped DAG file loads)."""
    return {**hourly_dags(), **maintenance_dags(), **verify_dags(), BACKFILL_DAG_ID: backfill_dag()}
