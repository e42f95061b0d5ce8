"""DAG integrity: every DAG file parses without errors, cheaply, and wires what the design promises."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.integration.dags.airflow_subprocess import DAGS, REPO, airflow_env, run_json

pytestmark = [pytest.mark.integration, pytest.mark.heavy(14)]  # it mostly waits: started beside the busy modules, not last

EXAMPLE = REPO / "spanner_cdc" / "resources" / "streams.example.toml"

# Parsing a DAG file may load Airflow itself (which already brings SQLAlchemy) and the light config
# modules of the package; it must not load the extract machinery or any client library.
HEAVY_PREFIXES = (
    "pyspark", "sqlalchemy", "google.cloud", "google.api_core", "grpc", "pandas", "pyarrow", "psycopg2",
    "spanner_cdc.extract.window", "spanner_cdc.store", "spanner_cdc.source.client", "spanner_cdc.spark",
    "spanner_cdc.lake", "spanner_cdc.source.reader", "spanner_cdc.local_spanner",
)
ALLOWED_PACKAGE_MODULES = {
    "spanner_cdc", "spanner_cdc.errors", "spanner_cdc.names", "spanner_cdc.settings", "spanner_cdc.stream_config",
    "spanner_cdc.orchestration", "spanner_cdc.airflow", "spanner_cdc.airflow.dags",  # the DAG factory
    "spanner_cdc.validators", "spanner_cdc.times",  # the settings' validators and the one UTC coercion (standard library only)
    "spanner_cdc.policy", "spanner_cdc.masking",  # the landing policy, a setting, and its mask token (standard library only)
    "spanner_cdc.read_options",  # the reads' settings (standard library only)
    # Airflow imports the deadline callback (names.DEADLINE_CALLBACK) to check it while it parses the hourly DAG
    "spanner_cdc.orchestration.deadline",
}

DAGBAG = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag({dags!r})
out = {{"errors": {{k: str(v) for k, v in bag.import_errors.items()}}, "dags": {{}}}}
for dag_id, dag in bag.dags.items():
    out["dags"][dag_id] = {{
        "max_active_runs": dag.max_active_runs,
        "catchup": dag.catchup,
        "timetable": type(dag.timetable).__name__,
        "params": {{k: {{**v.schema, "description": v.description}} for k, v in dag.params.items()}},
        "deadline": [[str(d.interval), d.callback.path, d.callback.kwargs] for d in (dag.deadline or [])],
        "tasks": {{
            t.task_id: {{
                "downstream": sorted(t.downstream_task_ids),
                "pool": t.pool,
                "retries": t.retries,
                "backoff": t.retry_exponential_backoff,
                "retry_delay_s": t.retry_delay.total_seconds(),
                "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule),
                "map_index_template": getattr(t, "map_index_template", None),
                "mapped": any(c.__name__ == "MappedOperator" for c in type(t).__mro__),
                "outlets": [getattr(o, "name", None) for o in (t.outlets or [])],
            }}
            for t in dag.tasks
        }},
    }}
print(json.dumps(out))
"""

IMPORTS = """
import importlib.util, json, sys
import airflow.sdk
# Baseline: what Airflow itself loads for any DAG file that defines tasks and an asset.
airflow.sdk.Asset(name="baseline", uri="spanner-cdc://baseline/live")
before = set(sys.modules)
spec = importlib.util.spec_from_file_location("dag_under_test", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.fixture(scope="module")
def example_bag(tmp_path_factory: pytest.TempPathFactory) -> dict:
    env = airflow_env(tmp_path_factory.mktemp("airflow"), {"SPANNER_CDC_CONFIG": str(EXAMPLE)})
    return run_json(DAGBAG.format(dags=str(DAGS)), env)


def test_no_import_errors_and_one_hourly_and_one_maintenance_dag_per_stream(example_bag: dict) -> None:
    with EXAMPLE.open("rb") as handle:
        names = sorted(tomllib.load(handle)["streams"])
    assert example_bag["errors"] == {}
    expected = {f"spanner_cdc_{kind}__{name}" for name in names for kind in ("hourly", "maintenance")} | {"spanner_cdc_backfill"}
    assert set(example_bag["dags"]) == expected | {"spanner_cdc_verify__payments"}  # `verify = true` on payments only


def test_maintenance_dag_runs_apart_from_the_extracts(example_bag: dict) -> None:
    dag = example_bag["dags"]["spanner_cdc_maintenance__orders"]
    assert (dag["max_active_runs"], dag["catchup"]) == (1, False)
    maintain = dag["tasks"]["maintain"]
    assert maintain["pool"] == "spanner_cdc_maintenance" and maintain["retries"] > 0


def test_hourly_dag_wiring(example_bag: dict) -> None:
    dag = example_bag["dags"]["spanner_cdc_hourly__orders"]
    assert dag["max_active_runs"] == 1
    assert dag["timetable"] == "CronDataIntervalTimetable"  # real [start, end) intervals, not trigger points
    tasks = dag["tasks"]
    chain = ["catch_up", "wave_1.plan", "wave_1.extract", "wave_2.next_wave", "wave_2.extract", "wave_3.next_wave",
             "wave_3.extract", "close"]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert tasks[upstream]["downstream"] == [downstream]
    for wave in (1, 2, 3):
        extract = tasks[f"wave_{wave}.extract"]
        assert extract["mapped"]
        assert extract["pool"] == "spanner_cdc_spanner_queries"
        assert extract["map_index_template"] == "{{ token_label }}"
        assert extract["retries"] > 0 and extract["backoff"] > 1
    # A wave with nothing to read is skipped, and the waves after it; the close must still run.
    assert tasks["wave_2.next_wave"]["trigger_rule"] == "all_success"  # an empty wave ends the waves
    assert tasks["close"]["trigger_rule"] == "none_failed"
    assert tasks["close"]["outlets"] == ["spanner_cdc_landed__orders"]
    assert tasks["catch_up"]["outlets"] == ["spanner_cdc_caught_up__orders"]  # an alias: events only when it closes one
    # a deadline 90 minutes (the default) after the window's end: logical date (window start) + 1 h + 90 min
    assert dag["deadline"] == [["2:30:00", "spanner_cdc.orchestration.deadline.window_missed", {"stream": "orders", "minutes": 90}]]
    assert example_bag["dags"]["spanner_cdc_hourly__payments"]["deadline"][0][0] == "3:00:00"  # deadline_minutes = 120
    # a stream's retry_delay is its tasks' first retry delay (payments: 1m; orders: the default 30 s)
    assert example_bag["dags"]["spanner_cdc_hourly__payments"]["tasks"]["wave_1.extract"]["retry_delay_s"] == 60
    assert tasks["wave_1.extract"]["retry_delay_s"] == tasks["close"]["retry_delay_s"] == 30
    assert example_bag["dags"]["spanner_cdc_backfill"]["deadline"] == []
    # `waves` of the stream's table sets how many plan/extract groups a run has.
    payments = example_bag["dags"]["spanner_cdc_hourly__payments"]["tasks"]
    assert "wave_5.extract" in payments and "wave_6.extract" not in payments
    assert payments["wave_5.extract"]["downstream"] == ["close"]
    # `snapshot = true`: the initial snapshot runs before anything reads changes; without it there is no such task
    assert payments["snapshot"]["downstream"] == ["catch_up"] and payments["snapshot"]["retries"] > 0
    assert "snapshot" not in tasks
    # `current_state = true`: after the close, with an alias for one asset event per new state
    assert tasks["close"]["downstream"] == [] and "current_state" not in tasks
    assert payments["close"]["downstream"] == ["current_state"]
    assert payments["current_state"]["outlets"] == ["spanner_cdc_current_states__payments"]
    assert payments["current_state"]["trigger_rule"] == "none_failed"  # also for windows catch_up closed


def test_verify_dag_is_daily_and_only_where_asked(example_bag: dict) -> None:
    dag = example_bag["dags"]["spanner_cdc_verify__payments"]
    assert dag["timetable"] == "CronTriggerTimetable"  # daily at 00:30 UTC
    assert not dag["catchup"] and dag["max_active_runs"] == 1
    assert list(dag["tasks"]) == ["verify"] and dag["tasks"]["verify"]["retries"] > 0
    assert "spanner_cdc_verify__orders" not in example_bag["dags"]  # off by default


def test_backfill_form(example_bag: dict) -> None:
    dag = example_bag["dags"]["spanner_cdc_backfill"]
    params = dag["params"]
    assert params["stream"]["enum"] == ["orders", "payments"]
    assert params["start"]["format"] == params["end"]["format"] == "date-time"
    assert (params["heartbeat_ms"]["minimum"], params["heartbeat_ms"]["maximum"]) == (1000, 300_000)
    tasks = dag["tasks"]
    assert tasks["validate"]["retries"] == 0  # a bad form is refused at once, not retried
    assert tasks["validate"]["downstream"] == ["extract_windows"]
    assert tasks["extract_windows"]["pool"] == "spanner_cdc_spanner_queries"


@pytest.mark.parametrize("dag_file", sorted(p.name for p in DAGS.glob("*.py")))
def test_parsing_a_dag_file_imports_nothing_heavy(dag_file: str, tmp_path: Path) -> None:
    env = airflow_env(tmp_path, {"SPANNER_CDC_CONFIG": str(EXAMPLE)})
    loaded = run_json(IMPORTS.format(path=str(DAGS / dag_file)), env)
    heavy = [m for m in loaded if m.startswith(HEAVY_PREFIXES)]
    assert heavy == []
    ours = {m for m in loaded if m.split(".")[0] == "spanner_cdc"}
    assert ours <= ALLOWED_PACKAGE_MODULES
    assert "spanner_cdc.stream_config" in ours  # the check sees the file's own imports


def test_no_streams_configured_leaves_the_backfill_dag_only(tmp_path: Path) -> None:
    bag = run_json(DAGBAG.format(dags=str(DAGS)), airflow_env(tmp_path))
    assert bag["errors"] == {}
    assert set(bag["dags"]) == {"spanner_cdc_backfill"}


def test_a_bad_stream_table_is_an_import_error_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[streams.orders]\nstart_date = 2024-01-01T00:00:00Z\nheartbeat_ms = 10\n')
    bag = run_json(DAGBAG.format(dags=str(DAGS)), airflow_env(tmp_path, {"SPANNER_CDC_CONFIG": str(config)}))
    messages = "\n".join(bag["errors"].values())
    assert "streams.orders.heartbeat_ms" in messages
    assert "[1000, 300000]" in messages


def test_the_backfill_form_says_utc_the_earliest_start_what_is_optional_and_each_streams_change_stream(
    example_bag: dict,
) -> None:
    params = example_bag["dags"]["spanner_cdc_backfill"]["params"]
    for name in ("start", "end"):
        assert "UTC" in params[name]["title"] and "in UTC" in params[name]["description"]
    assert "Earliest allowed: now minus the change stream's retention_period" in params["start"]["description"]
    # optional fields accept empty (no "required" mark in the form) and say so
    for name in ("output_root", "heartbeat_ms"):
        assert "null" in params[name]["type"] and params[name]["title"].endswith("optional"), params[name]
    config = tomllib.loads(EXAMPLE.read_text())["streams"]
    shown = params["stream"]["values_display"]
    assert set(shown) == set(params["stream"]["enum"]) == set(config)
    for name, table in config.items():
        assert shown[name] == f"{name} (change stream {table.get('change_stream', name)})"
