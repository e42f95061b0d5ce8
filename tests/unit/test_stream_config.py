"""Stream configuration: parsing, defaults, validation messages, and the Settings a stream resolves to."""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.settings import Settings, load_settings
from spanner_cdc.stream_config import load_streams, parse_stream

EXAMPLE = Path(__file__).resolve().parents[2] / "spanner_cdc" / "resources" / "streams.example.toml"


def _settings(streams: dict) -> Settings:
    return Settings(streams=streams)


def test_minimal_table_gets_defaults() -> None:
    config = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z"})
    assert config.name == "orders"
    assert config.change_stream == "orders"
    assert config.schedule == "@hourly"
    assert config.catchup is True
    assert config.waves == 3
    assert config.snapshot is False
    assert config.start_date == dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    assert config.dag_id == "spanner_cdc_hourly__orders"


def test_all_fields_parse() -> None:
    config = parse_stream(
        "orders",
        {
            "name": "orders",
            "project": "p1",
            "instance": "i1",
            "database": "shop",
            "change_stream": "orders_stream",
            "dialect": "postgresql",
            "heartbeat_ms": 5000,
            "output_root": "/data/lake",
            "schedule": "*/30 * * * *",
            "start_date": dt.datetime(2024, 3, 1, 12, 30),
            "catchup": False,
            "concurrency": 8,
            "waves": 5,
            "snapshot": True,
            "current_state": True,
            "current_state_keep": 3,
            "verify": True,
            "verify_fraction": 0.25,
            "retry_delay": "5s",
        },
    )
    assert (config.project, config.instance, config.database) == ("p1", "i1", "shop")
    assert config.change_stream == "orders_stream"
    assert config.dialect == "POSTGRESQL"
    assert config.heartbeat_ms == 5000
    assert config.output_root == Path("/data/lake")
    assert config.schedule == "*/30 * * * *"
    assert config.start_date == dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.UTC)
    assert config.catchup is False
    assert config.concurrency == 8
    assert config.waves == 5
    assert config.snapshot is True
    assert (config.current_state, config.current_state_keep) == (True, 3)
    assert (config.verify, config.verify_fraction) == (True, 0.25)
    assert config.retry_delay == dt.timedelta(seconds=5)
    assert parse_stream("s", {"start_date": "2024-01-01"}).retry_delay == dt.timedelta(seconds=30)
    assert (parse_stream("s", {"start_date": "2024-01-01"}).verify, parse_stream("s", {"start_date": "2024-01-01"}).verify_fraction) == (False, 1.0)


def test_start_date_with_offset_is_converted_to_utc() -> None:
    config = parse_stream("s", {"start_date": "2024-03-01T02:00:00+02:00"})
    assert config.start_date == dt.datetime(2024, 3, 1, 0, 0, tzinfo=dt.UTC)


def test_toml_date_means_midnight_utc() -> None:
    config = parse_stream("s", {"start_date": dt.date(2024, 3, 1)})
    assert config.start_date == dt.datetime(2024, 3, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("key", "table", "field", "accepted"),
    [
        ("orders", {}, "streams.orders.start_date", "ISO 8601"),
        ("orders", {"start_date": "yesterday"}, "streams.orders.start_date", "ISO 8601"),
        ("orders", {"start_date": "2024-01-01", "heartbeat_ms": 999}, "streams.orders.heartbeat_ms", "[1000, 300000]"),
        ("orders", {"start_date": "2024-01-01", "heartbeat_ms": True}, "streams.orders.heartbeat_ms", "[1000, 300000]"),
        ("orders", {"start_date": "2024-01-01", "dialect": "mysql"}, "streams.orders.dialect", "GOOGLE_STANDARD_SQL"),
        ("orders", {"start_date": "2024-01-01", "schedule": "hourly"}, "streams.orders.schedule", "cron"),
        ("orders", {"start_date": "2024-01-01", "schedule": "61 * * * *"}, "streams.orders.schedule", "cron"),
        ("orders", {"start_date": "2024-01-01", "concurrency": 0}, "streams.orders.concurrency", "[1, 256]"),
        ("orders", {"start_date": "2024-01-01", "waves": 11}, "streams.orders.waves", "[1, 10]"),
        ("orders", {"start_date": "2024-01-01", "retry_delay": "soon"}, "streams.orders.retry_delay", "24h"),
        ("orders", {"start_date": "2024-01-01", "change_stream": "x; DROP"}, "streams.orders.change_stream", "identifier"),
        ("orders", {"start_date": "2024-01-01", "catchup": "yes"}, "streams.orders.catchup", "true or false"),
        ("orders", {"start_date": "2024-01-01", "snapshot": 1}, "streams.orders.snapshot", "true or false"),
        ("orders", {"start_date": "2024-01-01", "current_state_keep": 0}, "streams.orders.current_state_keep", "[1, 10000]"),
        ("orders", {"start_date": "2024-01-01", "verify_fraction": 0}, "streams.orders.verify_fraction", "(0, 1]"),
        ("orders", {"start_date": "2024-01-01", "verify_fraction": 1.5}, "streams.orders.verify_fraction", "(0, 1]"),
        ("orders", {"start_date": "2024-01-01", "verify_fraction": "half"}, "streams.orders.verify_fraction", "(0, 1]"),
        ("orders", {"start_date": "2024-01-01", "verify": "yes"}, "streams.orders.verify", "true or false"),
        ("orders", {"start_date": "2024-01-01", "project": ""}, "streams.orders.project", "non-empty"),
        ("orders", {"start_date": "2024-01-01", "heartbeat": 5000}, "streams.orders.heartbeat", "heartbeat_ms"),
        ("orders", {"start_date": "2024-01-01", "name": "other"}, "streams.orders.name", "'orders'"),
        ("bad-name", {"start_date": "2024-01-01"}, "streams.bad-name", "identifier"),
        ("orders", "not a table", "streams.orders", "TOML table"),
    ],
)
def test_bad_values_name_field_value_and_accepted(key: str, table: object, field: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stream(key, table)
    assert raised.value.field == field
    assert accepted in raised.value.accepted
    assert field in str(raised.value)


def test_two_tables_on_one_change_stream_are_refused() -> None:
    settings = _settings(
        {
            "a": {"start_date": "2024-01-01", "change_stream": "shared"},
            "b": {"start_date": "2024-01-01", "change_stream": "shared"},
        }
    )
    with pytest.raises(ConfigError) as raised:
        load_streams(settings)
    assert raised.value.field == "streams.b.change_stream"
    assert "streams.a" in raised.value.accepted


def test_load_streams_orders_by_name() -> None:
    settings = _settings({"zeta": {"start_date": "2024-01-01"}, "alpha": {"start_date": "2024-01-01"}})
    assert list(load_streams(settings)) == ["alpha", "zeta"]


def test_no_streams_configured_is_empty() -> None:
    assert load_streams(Settings()) == {}


def test_stream_values_win_over_global_ones_and_gaps_keep_them() -> None:
    base = Settings(project="global-p", instance="global-i", heartbeat_ms=20_000, concurrency=3, namespace="live")
    config = parse_stream("orders", {"start_date": "2024-01-01", "instance": "own-i", "heartbeat_ms": 2000})
    resolved = config.settings(base)
    assert resolved.stream == "orders"
    assert resolved.project == "global-p"
    assert resolved.instance == "own-i"
    assert resolved.heartbeat_ms == 2000
    assert resolved.concurrency == 3
    assert resolved.namespace == "live"
    assert resolved.output_root == base.output_root


def test_example_file_loads_through_settings() -> None:
    streams = load_streams(load_settings({}, env={"SPANNER_CDC_CONFIG": str(EXAMPLE)}))
    with EXAMPLE.open("rb") as handle:
        tables = tomllib.load(handle)["streams"]
    assert list(streams) == sorted(tables)
    for name, config in streams.items():
        assert config.change_stream == tables[name].get("change_stream", name)


def test_a_stream_lands_in_a_bucket_and_a_bad_scheme_is_refused_by_name() -> None:
    config = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "output_root": "gs://lake-bucket/cdc"})
    assert config.output_root == "gs://lake-bucket/cdc"
    with pytest.raises(ConfigError, match=r"^invalid streams\.orders\.output_root='ftp://h/x': expected a local path, gs://bucket/prefix or s3://bucket/prefix$"):
        parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "output_root": "ftp://h/x"})


def test_maintenance_keys_parse_and_win_over_the_global_settings() -> None:
    config = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "maintenance_schedule": "0 3 * * *",
                                     "target_file_size": "128MB", "snapshot_retention": "3d", "orphan_min_age": "12h",
                                     "lineage_retention": "90d"})  # fmt: skip
    assert parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z"}).maintenance_schedule == "@daily"
    resolved = config.settings(load_settings(env={}))
    assert (resolved.target_file_size, resolved.snapshot_retention, resolved.orphan_min_age, resolved.lineage_retention) == (
        128 << 20, dt.timedelta(days=3), dt.timedelta(hours=12), dt.timedelta(days=90)
    )
    assert parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z"}).settings(load_settings(env={})).lineage_retention == dt.timedelta(days=30)
    with pytest.raises(ConfigError, match=r"streams.orders.lineage_retention.*a duration"):
        parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "lineage_retention": "a month"})
    with pytest.raises(ConfigError, match=r"streams.orders.orphan_min_age.*a duration"):
        parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "orphan_min_age": "soon"})


def test_the_deadline_is_the_window_plus_the_minutes_after_the_logical_date() -> None:
    hourly = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z"})
    assert hourly.deadline_minutes == 90 and hourly.deadline_notifier is None
    assert hourly.deadline_after() == dt.timedelta(hours=1, minutes=90)
    daily = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "schedule": "30 2 * * *", "deadline_minutes": 15})
    assert daily.deadline_after() == dt.timedelta(days=1, minutes=15)
    assert parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "deadline_minutes": 0}).deadline_after() is None
    notified = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "deadline_notifier": "pkg.mod.Notifier",
                                       "deadline_notifier_kwargs": {"text": "late"}})  # fmt: skip
    assert (notified.deadline_notifier, notified.deadline_notifier_kwargs) == ("pkg.mod.Notifier", {"text": "late"})


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("deadline_minutes", -1, "an integer in [0, 10080]"),
        ("deadline_notifier", "not a path", "a dotted path such as"),
        ("deadline_notifier_kwargs", "text=late", "a TOML table of keyword arguments"),
    ],
)
def test_bad_deadline_settings_name_the_field(field: str, value: object, accepted: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", field: value})
    assert f"streams.orders.{field}" in str(caught.value) and accepted in str(caught.value)


def test_end_date_is_optional_and_not_before_start() -> None:
    assert parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z"}).end_date is None
    config = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "end_date": "2024-03-02T05:00:00Z"})
    assert config.end_date == dt.datetime(2024, 3, 2, 5, tzinfo=dt.UTC)
    with pytest.raises(ConfigError, match=r"streams\.orders\.end_date.*not before start_date"):
        parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "end_date": "2024-02-01T00:00:00Z"})
