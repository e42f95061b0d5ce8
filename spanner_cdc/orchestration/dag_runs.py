"""Run the project's DAGs with dag.test() in this process: one run per window, or one triggered run with a conf.

The demo and the end-to-end tests start this module as a child process with the Airflow environment of
`spanner_cdc.devstack.airflow_env`, so Airflow is configured before it is imported and never in the caller.
Lines starting with PROGRESS are meant for a person; the result is a JSON file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanner_cdc.compat.airflow import manual_data_interval
from spanner_cdc.times import utc

PROGRESS = "spanner-cdc-progress: "


def _parse_time(value: str) -> dt.datetime:
    return utc(dt.datetime.fromisoformat(value.replace("Z", "+00:00")), assume_utc=True)


def _override_retries(dag: Any, retries: int, delay_s: float) -> None:
    """Fail fast (or retry quickly) when driving runs by hand: dag.test() sleeps through retry delays."""
    delay = dt.timedelta(seconds=delay_s)
    for task in dag.tasks:
        partial = getattr(task, "partial_kwargs", None)
        if partial is not None:
            partial["retries"] = retries
            partial["retry_delay"] = delay
            partial["retry_exponential_backoff"] = 0
        else:
            task.retries = retries
            task.retry_delay = delay
            task.retry_exponential_backoff = 0


def _task_states(run: Any) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    states = {}
    with create_session() as session:
        rows = session.query(TaskInstance).filter(TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id)
        for ti in rows:
            key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
            label = f" {ti.rendered_map_index}" if ti.rendered_map_index else ""
            states[key + label] = str(getattr(ti.state, "value", ti.state))
    return states


def _load_dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    from spanner_cdc.resources import dags_folder

    folder = os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") or str(dags_folder())
    bag = DagBag(folder)
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {json.dumps({k: str(v) for k, v in bag.import_errors.items()})}")
    if dag_id not in bag.dags:
        raise SystemExit(f"no DAG {dag_id} in {folder}; DAGs: {', '.join(sorted(bag.dags)) or 'none'}")
    return bag.dags[dag_id]


def _record(run: Any, started: float, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "state": str(getattr(run.state, "value", run.state)),
        "logical_date": run.logical_date.isoformat() if run.logical_date else None,
        "data_interval_start": run.data_interval_start.isoformat() if run.data_interval_start else None,
        "data_interval_end": run.data_interval_end.isoformat() if run.data_interval_end else None,
        "seconds": round(time.monotonic() - started, 1),
        "tasks": _task_states(run),
        **extra,
    }


def _real_start(run: Any, wall_start: dt.datetime) -> float | None:
    """Give the run the start it really had: dag.test() starts a run at its logical date, so Airflow showed a 5 s run
    of a past window as hours long. Returns the run's duration as Airflow now shows it (None while it has no end)."""
    from spanner_cdc.compat.airflow import set_run_start

    return set_run_start(run.id, wall_start)


def _scheduled_window(dag: Any, start: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """The first data interval of the DAG's schedule that starts at or after `start`."""
    from airflow.sdk import timezone
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    restriction = TimeRestriction(earliest=timezone.coerce_datetime(start), latest=None, catchup=True)
    info = coerce_to_core_timetable(dag.timetable).next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
    return None if info is None else (info.data_interval.start, info.data_interval.end)


def run_windows(dag: Any, windows: Sequence[tuple[dt.datetime, dt.datetime]]) -> list[dict[str, Any]]:
    """One dag.test() per window, with the scheduler's logical date (the window's start) and data interval."""
    results = []
    for number, (start, end) in enumerate(windows, 1):
        print(f"{PROGRESS}window {number}/{len(windows)} [{start:%Y-%m-%d %H:%M}, {end:%H:%M}) running...", flush=True)
        started, wall_start = time.monotonic(), dt.datetime.now(dt.UTC)
        if _scheduled_window(dag, start) != (start, end):
            raise SystemExit(
                f"{dag.dag_id}: [{start}, {end}) is not a window of the DAG's schedule: give windows that match it"
            )
        with manual_data_interval(start, end):  # the scheduler's logical date: the window's start
            run = dag.test(logical_date=start, run_after=end)
        if (run.logical_date, run.data_interval_start, run.data_interval_end) != (start, start, end):
            raise SystemExit(
                f"{dag.dag_id}: the run for [{start}, {end}) has the logical date {run.logical_date} and covers "
                f"[{run.data_interval_start}, {run.data_interval_end}): this Airflow's dag.test() infers intervals otherwise"
            )
        results.append(_record(run, started, airflow_seconds=_real_start(run, wall_start)))
        print(f"{PROGRESS}window {number}/{len(windows)}: {results[-1]['state']} in {results[-1]['seconds']} s", flush=True)
    return results


def run_triggered(dag: Any, conf: dict[str, Any]) -> list[dict[str, Any]]:
    """One manual run with a trigger-form conf; a conf the Params refuse is recorded as a refused run."""
    from airflow.sdk.exceptions import ParamValidationError

    print(f"{PROGRESS}{dag.dag_id} triggered with {json.dumps(conf)}", flush=True)
    started = time.monotonic()
    try:
        run = dag.test(run_conf=conf)
    except ParamValidationError as exc:
        return [{"state": "refused", "error": str(exc), "seconds": round(time.monotonic() - started, 1)}]
    result = _record(run, started)
    print(f"{PROGRESS}{dag.dag_id}: {result['state']} in {result['seconds']} s", flush=True)
    return [result]


def run_plan(jobs: Sequence[dict[str, Any]], retries: int | None, retry_delay: float) -> list[dict[str, Any]]:
    """Each job is {"dag_id", "windows": [[start, end], ...]} or {"dag_id", "conf": {...}}; one DagBag for all."""
    results: list[dict[str, Any]] = []
    dags: dict[str, Any] = {}
    for job in jobs:
        dag = dags.get(job["dag_id"])
        if dag is None:
            dag = dags[job["dag_id"]] = _load_dag(job["dag_id"])
            # Nobody watches these runs' deadlines, and Airflow 3.3's dag.test() fails a run that succeeds with one
            # (it looks its deadline alerts up by their definitions instead of their ids).
            dag.deadline = None
            if retries is not None:
                _override_retries(dag, retries, retry_delay)
        if "conf" in job:
            runs = run_triggered(dag, job["conf"])
        else:
            runs = run_windows(dag, [(_parse_time(start), _parse_time(end)) for start, end in job["windows"]])
        results += [{"dag_id": job["dag_id"], **run} for run in runs]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spanner_cdc.orchestration.dag_runs", description=__doc__)
    parser.add_argument("dag_id", nargs="?", help="the DAG to run (or give --plan)")
    parser.add_argument("--window", nargs=2, action="append", metavar=("START", "END"), default=[])
    parser.add_argument("--conf", type=json.loads, help="trigger one run with this conf (JSON)")
    parser.add_argument("--plan", type=Path, help='a JSON list of {"dag_id", "windows"} / {"dag_id", "conf"} jobs')
    parser.add_argument("--retries", type=int, help="override every task's retries")
    parser.add_argument("--retry-delay", type=float, default=5.0, help="seconds between retries with --retries")
    parser.add_argument("--result", type=Path, required=True, help="write the runs as JSON here")
    args = parser.parse_args(argv)
    if args.plan is not None:
        jobs = json.loads(args.plan.read_text())
    elif args.dag_id and args.conf is not None:
        jobs = [{"dag_id": args.dag_id, "conf": args.conf}]
    elif args.dag_id:
        jobs = [{"dag_id": args.dag_id, "windows": args.window}]
    else:
        parser.error("give a DAG id or --plan")
    results = run_plan(jobs, args.retries, args.retry_delay)
    args.result.write_text(json.dumps(results, indent=2))
    return 0 if all(result["state"] == "success" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
