"""The one-command demo (embedded Postgres, local Spanner in accelerated past time, workload, hourly DAG runs) and `up` (what
cli/commands/demo.py's commands run)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanner_cdc.devstack import airflow_env, embedded_pg
from spanner_cdc.devstack.demo_summary import DemoSummary, summarize
from spanner_cdc.names import IMMUTABLE_KEY_RANGE, LIVE_NAMESPACE, hourly_dag_id
from spanner_cdc.settings import DEFAULT_HOME, Settings

log = logging.getLogger(__name__)

STREAM_NAME = "demo"  # the [streams.demo] table, so the DAG is spanner_cdc_hourly__demo
CHANGE_STREAM = "demo_stream"
DATABASE = "demo"
LINEAGE_DATABASE = embedded_pg.DEV_DATABASE  # the store the CLI reads on this home, so the summary's commands see the demo
HOUR = dt.timedelta(hours=1)
LOCAL_SOURCE, EMULATOR_SOURCE = "local", "emulator"
Echo = Callable[[str], None] | None


@dataclass(frozen=True)
class DemoOptions:
    hours: int = 3
    transactions: int = 1200
    seed: int = 7
    # Real seconds the workload takes; the server clock runs fast enough to fit `hours` of history in them.
    workload_seconds: float = 30.0
    # LOCAL_SOURCE: the local server, its clock in the past and accelerated (hours of history in a minute);
    # EMULATOR_SOURCE: Google's emulator in real time, `hours` minute-long windows (demo_emulator.py).
    source: str = LOCAL_SOURCE
    # The lake's root when not the demo's own directory (e.g. a bucket); its demo stream is emptied first.
    lake_root: Path | str | None = None
    # The demo stream's partition_mode; the DAG and its config are the same for both.
    partition_mode: str = IMMUTABLE_KEY_RANGE


@dataclass(frozen=True)
class DemoPaths:
    root: Path

    @property
    def spanner(self) -> Path:
        return self.root / "spanner"

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def config(self) -> Path:
        return self.root / "streams.toml"

    @property
    def ground_truth(self) -> Path:
        return self.root / "ground_truth.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def runs(self) -> Path:
        return self.root / "dag_runs.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def state(self) -> Path:
        return self.root / "demo.json"


def _say(echo: Echo, text: str) -> None:
    if echo is not None:
        echo(text)


def _floor_hour(value: dt.datetime) -> dt.datetime:
    return value.replace(minute=0, second=0, microsecond=0)


def _server_now(server: Any) -> dt.datetime:
    return dt.datetime.fromisoformat(str(server.control.status()["now"]).replace("Z", "+00:00"))


def _wait_for_server_time(server: Any, when: dt.datetime, rate: float) -> None:
    """Sleep (real time) until the accelerated server clock has passed `when`."""
    while (now := _server_now(server)) < when:
        time.sleep(min(5.0, max(0.05, (when - now).total_seconds() / rate)))


def write_streams_config(path: Path, start: dt.datetime, schedule: str | None = None) -> None:
    path.write_text(
        "# Written by `spanner-cdc demo`: the demo stream on the demo's Spanner.\n"
        f"[streams.{STREAM_NAME}]\n"
        f'database = "{DATABASE}"\n'
        f'change_stream = "{CHANGE_STREAM}"\n'
        'dialect = "GOOGLE_STANDARD_SQL"\n'
        f"start_date = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
        "catchup = false\n"
        "waves = 5\n"
        + (f'schedule = "{schedule}"\n' if schedule else "")
    )


def demo_env(paths: DemoPaths, lineage_url: str, spanner_host: str, settings: Settings, lake: Path | str) -> dict[str, str]:
    """What the Airflow processes of the demo need on top of the stack's environment."""
    return {
        "SPANNER_CDC_CONFIG": str(paths.config),
        "SPANNER_EMULATOR_HOST": spanner_host,
        "SPANNER_CDC_METADATA_URL": lineage_url,
        "SPANNER_CDC_OUTPUT_ROOT": str(lake),
        "SPANNER_CDC_SPARK_MASTER": settings.spark_master,
    }


def _ceil_hour(value: dt.datetime) -> dt.datetime:
    floor = _floor_hour(value)
    return floor if floor == value else floor + HOUR


def _create_demo_database(server: Any, partition_mode: str) -> Any:
    """The demo database and its change stream on the local server."""
    from spanner_cdc.devstack import workload
    from spanner_cdc.devstack.spanner_server import create_database

    database = create_database(server.host, "local-project", "local-instance", DATABASE)
    workload.setup_database(database, "GOOGLE_STANDARD_SQL", CHANGE_STREAM, "OLD_AND_NEW_VALUES", partition_mode)
    return database


def _run_workload(database: Any, options: DemoOptions, paths: DemoPaths) -> None:
    from spanner_cdc.devstack import workload

    workload.run_workload(
        database,
        transactions=options.transactions,
        tx_per_second=options.transactions / options.workload_seconds,
        seed=options.seed,
        ground_truth=paths.ground_truth,
    )


def demo(settings: Settings, options: DemoOptions, echo: Echo = print) -> DemoSummary:
    """Run the whole demo from a clean slate under <home>/demo and return its checked summary.

    Every process it starts it stops: the local Spanner server, Airflow's, and the embedded Postgres unless
    that was running before (then it stays up)."""
    started = time.monotonic()
    home = settings.home.absolute()
    paths = DemoPaths(home / "demo")
    shutil.rmtree(paths.root, ignore_errors=True)
    paths.logs.mkdir(parents=True)
    lake = options.lake_root if options.lake_root is not None else paths.lake
    if options.lake_root is not None:  # a new lineage store starts its ids again: no earlier demo's files may stay
        from spanner_cdc.lake.storage import join, remove_tree

        remove_tree(join(lake, CHANGE_STREAM, LIVE_NAMESPACE))

    _say(echo, "1/5 embedded Postgres (lineage store and Airflow's metadata database)")
    postgres = embedded_pg.ensure_running(home / "postgres")
    try:
        return _run(settings, options, paths, postgres, lake, started, echo)
    finally:
        # what the demo started, it stops (a Postgres that was already running, e.g. for `make up`, stays up);
        # `make up` starts it again with the demo's data
        if postgres.started:
            postgres.stop()
            up_command, down_command = next_commands(settings)[-1], _down_command(settings)
            _say(echo, f"stopped the embedded Postgres the demo started (data kept in {postgres.data_dir}; "
                       f"`{up_command}` starts it again, `{down_command}` stops one left running)")


def _refuse_other_streams(postgres: embedded_pg.EmbeddedPostgres) -> None:
    """UsageError when the dev store the demo replaces holds lineages of other streams than the demo's (a user's own
    extracts on this home): the demo starts from an empty store and must not drop theirs."""
    from spanner_cdc.errors import UsageError
    from spanner_cdc.store import MetadataStore

    if not postgres.has_database(LINEAGE_DATABASE):
        return
    with MetadataStore.connect(postgres.url(LINEAGE_DATABASE)) as store:
        others = sorted({x.stream for x in store.lineages() if x.stream != CHANGE_STREAM}) if store.schema_version() else []
    if others:
        raise UsageError(
            f"the metadata store {LINEAGE_DATABASE} under {postgres.data_dir.parent} holds lineages of {', '.join(others)}, "
            "which the demo would replace: run it with another --home"
        )


def next_commands(settings: Settings) -> list[str]:
    """What the summary tells the user to run next, each reading what this demo made (its home's store and server)."""
    home = "" if settings.home == DEFAULT_HOME else f" --home {shlex.quote(str(settings.home))}"
    return [
        f"spanner-cdc lineage list{home}",
        f"spanner-cdc lineage show --stream {CHANGE_STREAM}{home}",
        f"spanner-cdc lake show --stream {CHANGE_STREAM}{home}",
        "make up" if not home else f"spanner-cdc up{home}",
    ]


def _down_command(settings: Settings) -> str:
    return "make down" if settings.home == DEFAULT_HOME else f"spanner-cdc down --home {shlex.quote(str(settings.home))}"


def _run(
    settings: Settings, options: DemoOptions, paths: DemoPaths, postgres: embedded_pg.EmbeddedPostgres,
    lake: Path | str, started: float, echo: Echo,
) -> DemoSummary:  # fmt: skip
    """The demo's steps on its running Postgres."""
    from spanner_cdc.devstack.spanner_server import LocalSpanner

    _refuse_other_streams(postgres)
    postgres.drop_database(LINEAGE_DATABASE)
    lineage_url = postgres.create_database(LINEAGE_DATABASE)
    airflow_env.upgrade_store(lineage_url)
    env = airflow_env.prepare(settings)
    if options.source == EMULATOR_SOURCE:
        from spanner_cdc.devstack.demo_emulator import SCHEDULE, emulator_history

        with emulator_history(options, paths, DATABASE, CHANGE_STREAM, echo) as (host, windows, run_windows):
            write_streams_config(paths.config, windows[0][0], schedule=SCHEDULE)
            _say(echo, f"4/5 Airflow: {hourly_dag_id(STREAM_NAME)} (schedule '{SCHEDULE}'), one run per minute and "
                       "one for the minute after (dag.test)")
            job = {"dag_id": hourly_dag_id(STREAM_NAME), "windows": [[s.isoformat(), e.isoformat()] for s, e in run_windows]}
            runs = airflow_env.run_dags(
                env, [job], extra_env=demo_env(paths, lineage_url, host, settings, lake), log_path=paths.logs / "airflow.log",
                retries=1, on_progress=None if echo is None else (lambda line: _say(echo, "  " + line)),
            )
        return _summary(paths, lineage_url, lake, windows, runs, 1.0, started, echo, source=EMULATOR_SOURCE,
                        commands=next_commands(settings))

    # The clock starts early enough that the stream exists before the first window, whatever the start-up
    # takes, and the history ends an hour before the wall clock's hour (inside the stream's retention).
    clock_start = _floor_hour(dt.datetime.now(dt.UTC)) - (options.hours + 2) * HOUR
    # 90% of the history span in workload_seconds: the workload ends inside the last window.
    rate = options.hours * 3600 * 0.9 / options.workload_seconds
    _say(echo, f"2/5 local Spanner server, clock from {clock_start:%Y-%m-%d %H:%M} UTC at {rate:.0f}x real time")
    with LocalSpanner(data_dir=paths.spanner, clock_start=clock_start, clock_rate=rate,
                      log_path=paths.logs / "local-spanner.log") as server:
        database = _create_demo_database(server, options.partition_mode)
        first = _ceil_hour(_server_now(server))  # the first whole hour with the stream in place
        windows = [(first + k * HOUR, first + (k + 1) * HOUR) for k in range(options.hours)]
        _wait_for_server_time(server, first, rate)
        _say(echo, f"3/5 workload: {options.transactions} transactions from {first:%H:%M} to about "
                   f"{first + options.hours * 0.9 * HOUR:%H:%M} (server time)")
        _run_workload(database, options, paths)
        _wait_for_server_time(server, windows[-1][1] + HOUR + dt.timedelta(minutes=1), rate)
        # Real time from here on (the clock resumes where it was): at the accelerated rate the history
        # would leave the stream's one-day retention while the DAGs run.
        server.clock_start, server.clock_rate = None, 1.0
        server.restart()
        write_streams_config(paths.config, first)
        extra = demo_env(paths, lineage_url, server.host, settings, lake)
        _say(echo, f"4/5 Airflow: {hourly_dag_id(STREAM_NAME)}, one run per hour and one for the hour after "
                   "(dag.test)")
        # One run more than the history: the next hour's run finishes a window an earlier run left open.
        run_windows = [*windows, (windows[-1][1], windows[-1][1] + HOUR)]
        job = {"dag_id": hourly_dag_id(STREAM_NAME), "windows": [[s.isoformat(), e.isoformat()] for s, e in run_windows]}
        runs = airflow_env.run_dags(
            env, [job], extra_env=extra, log_path=paths.logs / "airflow.log", retries=1,
            on_progress=None if echo is None else (lambda line: _say(echo, "  " + line)),
        )
    return _summary(paths, lineage_url, lake, windows, runs, rate, started, echo, source=LOCAL_SOURCE,
                    commands=next_commands(settings))


def _summary(
    paths: DemoPaths, lineage_url: str, lake: Path | str, windows: list[tuple[dt.datetime, dt.datetime]],
    runs: list[dict[str, Any]], rate: float, started: float, echo: Echo, *, source: str, commands: list[str],
) -> DemoSummary:  # fmt: skip
    state = {"lineage_url": lineage_url, "first_window": windows[0][0].isoformat(), "rate": rate, "lake": str(lake), "source": source}
    paths.state.write_text(json.dumps(state))
    _say(echo, "5/5 summary: reading back the lake and the lineage store")
    summary = summarize(
        paths=paths, lake_root=lake, lineage_url=lineage_url, stream=CHANGE_STREAM, windows=windows, runs=runs,
        elapsed_s=time.monotonic() - started, commands=commands,
    )
    if source == EMULATOR_SOURCE:
        summary.notes.append("on Google's emulator TIMESTAMP values in change records are whole seconds (its limit): "
                             "the ground truth is compared as the emulator records it")
    paths.summary.write_text(summary.to_json_text())
    return summary


def up(settings: Settings, *, port: int = 8080, echo: Echo = print) -> int:
    """Airflow on the embedded stack until Ctrl-C; after a demo, with its config, store and Spanner server."""
    home = settings.home.absolute()
    paths = DemoPaths(home / "demo")
    # the embedded Postgres, unless both of its databases are configured elsewhere: stopped on the way out if started here
    configured = bool(os.environ.get(airflow_env.SQL_CONN_VAR)) and bool(settings.metadata_url)
    postgres = None if configured else embedded_pg.ensure_running(home / "postgres")
    try:
        return _serve(settings, paths, port, echo)
    finally:
        if postgres is not None and postgres.started:
            postgres.stop()
            _say(echo, "stopped the embedded Postgres")


def _serve(settings: Settings, paths: DemoPaths, port: int, echo: Echo) -> int:
    import signal
    import threading

    from spanner_cdc.devstack.spanner_server import LocalSpanner

    env = airflow_env.prepare(settings, api_port=port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def ready(url: str, logs: Path) -> None:
        _say(echo, f"Airflow UI: {url}  (no login on the embedded stack; logs in {logs}); Ctrl-C stops it")

    state = json.loads(paths.state.read_text()) if paths.state.exists() else {}
    if state.get("source") == EMULATOR_SOURCE and not os.environ.get("SPANNER_CDC_CONFIG"):
        _say(echo, "the last demo ran on Google's emulator, which kept its database in memory: Airflow without the demo stream")
    if not state or state.get("source") == EMULATOR_SOURCE or os.environ.get("SPANNER_CDC_CONFIG"):
        code = airflow_env.serve(env, stop=stop, on_ready=ready)
    else:
        # Real time from here on: the server's clock resumes where the demo left it (it never goes back).
        with LocalSpanner(data_dir=paths.spanner, clock_rate=1.0, log_path=paths.logs / "local-spanner-up.log") as server:
            lake = state.get("lake", str(paths.lake))  # a bucket's URL stays text: a Path would fold its //
            # the demo's store on the embedded Postgres, wherever it listens now (the demo stopped it)
            lineage_url = embedded_pg.ensure_running(settings.home.absolute() / "postgres").url(LINEAGE_DATABASE)
            extra = demo_env(paths, lineage_url, server.host, settings, lake)
            _say(echo, f"demo stream: local Spanner server at {server.host}, lake {lake}")
            code = airflow_env.serve(env, extra_env=extra, stop=stop, on_ready=ready)
    _say(echo, "Airflow stopped" if code == 0 else "Airflow stopped: a service died (see its log)")
    return code


def down(settings: Settings, echo: Echo = print) -> int:
    """Stop the embedded Postgres under <home> if it runs (one a CLI command on a laptop started, or a killed demo's)."""
    postgres = embedded_pg.running(settings.home.absolute() / "postgres")
    if postgres is None:
        _say(echo, f"no embedded Postgres running in {settings.home.absolute() / 'postgres'}")
        return 0
    postgres.stop()
    _say(echo, f"stopped the embedded Postgres on 127.0.0.1:{postgres.port} (data kept in {postgres.data_dir})")
    return 0
