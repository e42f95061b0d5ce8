"""One extract DAG per configured stream, `spanner_cdc_hourly__<name>`: catch up, plan, waves of mapped extracts, close."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk import (
    DAG,
    Asset,
    AssetAlias,
    AsyncCallback,
    CronDataIntervalTimetable,
    DeadlineAlert,
    DeadlineReference,
    TaskGroup,
    TriggerRule,
    get_current_context,
    task,
)
from airflow.sdk.bases.decorator import task_decorator_factory

from spanner_cdc.names import (
    DEADLINE_CALLBACK,
    LIVE_NAMESPACE,
    SPANNER_POOL,
    current_state_asset_name,
    landed_asset_name,
)
from spanner_cdc.settings import load_settings
from spanner_cdc.stream_config import StreamConfig, load_streams

# Airflow maps tasks once per run, so children made ready by a wave's splits and merges are read by
# the next of a fixed number of waves (`waves` of the stream's table); whatever is still pending after
# the last one is finished by the next run's catch_up, before that run reads its own window.
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "spanner-cdc",
    "retries": 4,  # the first retry after the stream's retry_delay (30 s unless its table says otherwise)
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=15),
}
DOC = """
Extracts the change stream **{change_stream}** for each data interval `[start, end)` into the lake
(`{output_root}/{change_stream}/live/`), keeping lineage and checkpoints in the metadata store.

`current_state` (with `current_state = true`) writes each table's state as of the window end under
`current/` and emits one `spanner_cdc_current_state__{name}` event per new state; `snapshot` (with `snapshot = true`) reads every watched table at the first window's start into
`snapshot/`, once; `catch_up` finishes windows that earlier runs left open; `plan` bootstraps the lineage and lists the
ready partition tokens; each `wave_k.extract` reads one token (or a batch of them) over the window;
`wave_k.next_wave` picks up children of splits and merges; `close` checks completeness and the
transaction counts, writes the window marker and emits the `{asset}` asset event (skipped while
tokens are pending). A run still going `deadline_minutes` after its window's end misses its deadline: the
triggerer logs the stream, the window and the partitions holding it open (or runs `deadline_notifier`). Configuration: the `[streams.{name}]` table of `$SPANNER_CDC_CONFIG`.
"""


class LineageReportingOperator(_PythonDecoratedOperator):
    """A `@task` that tells Airflow's OpenLineage provider what it read and wrote (asked only when it is configured)."""

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


def lineage_task(**kwargs: Any) -> Any:
    """`@task` whose runs report OpenLineage datasets (the change stream in, the lake out, with counts)."""
    return task_decorator_factory(decorated_operator_class=LineageReportingOperator, **kwargs)


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


def build(config: StreamConfig, concurrency: int, output_root: str) -> DAG:
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
        default_args={**DEFAULT_ARGS, "retry_delay": config.retry_delay},
        deadline=deadline_alert(config),
        tags=["spanner-cdc", name],
        doc_md=DOC.format(
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

        @lineage_task(
            task_id="extract",
            pool=SPANNER_POOL,
            max_active_tis_per_dagrun=concurrency,
            map_index_template="{{ token_label }}",
        )
        def extract(batch: list, data_interval_start: Any = None, data_interval_end: Any = None) -> dict:
            from spanner_cdc.orchestration import hourly, waves

            context = get_current_context()
            context["token_label"] = waves.batch_label(batch)  # type: ignore[typeddict-unknown-key]
            owner = hourly.owner_of(context["ti"])
            return hourly.extract(name, data_interval_start, data_interval_end, batch, owner=owner)

        @lineage_task(task_id="close", trigger_rule=TriggerRule.NONE_FAILED, outlets=[asset])
        def close(data_interval_start: Any = None, data_interval_end: Any = None, outlet_events: Any = None) -> dict:
            from spanner_cdc.orchestration import hourly

            summary = hourly.close(name, data_interval_start, data_interval_end)
            outlet_events[asset].extra = hourly.asset_extra(summary)
            return summary

        previous: Any = catch_up()
        if config.snapshot:  # `snapshot = true`: the lineage's initial snapshot first (a no-op once complete)

            @lineage_task(task_id="snapshot")
            def snapshot(data_interval_start: Any = None) -> dict:
                from spanner_cdc.orchestration import snapshot_task

                return snapshot_task.snapshot(name, data_interval_start)

            previous = snapshot() >> previous
        for wave in range(1, config.waves + 1):
            with TaskGroup(group_id=f"wave_{wave}"):
                ready = plan() if wave == 1 else next_wave()
                previous >> ready
                previous = extract.expand(batch=ready)
        closed = close()
        previous >> closed
        if config.current_state:  # `current_state = true`: every table's state as of each closed window's end

            # none_failed: also when this run's close was skipped (its window left open), for the windows that
            # its catch_up closed; the body never goes past a window that is still open
            @lineage_task(task_id="current_state", outlets=[states], trigger_rule=TriggerRule.NONE_FAILED)
            def current_state(data_interval_end: Any = None, outlet_events: Any = None) -> list:
                from spanner_cdc.orchestration import state_task

                made = state_task.current_state(name, data_interval_end)
                for state in made:
                    outlet_events[states].add(state_asset, extra=state)
                return made

            closed >> current_state()
    return dag


def _build_all() -> dict[str, DAG]:
    base = load_settings({})
    dags = {}
    for config in load_streams(base).values():
        resolved = config.settings(base)
        dags[config.dag_id] = build(config, resolved.concurrency, str(resolved.output_root))
    return dags


globals().update(_build_all())
