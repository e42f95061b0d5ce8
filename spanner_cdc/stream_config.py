"""The configured streams: `[streams.<name>]` tables of the TOML file, validated into StreamConfig objects."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanner_cdc import validators
from spanner_cdc.errors import ConfigError
from spanner_cdc.names import hourly_dag_id
from spanner_cdc.policy import Policy, parse_policy
from spanner_cdc.read_options import DirectedRead, parse_directed_read, parse_priority
from spanner_cdc.settings import DIALECTS, Settings, output_root
from spanner_cdc.times import utc
from spanner_cdc.validators import boolean, byte_size, choice, duration, fraction, identifier, int_between, text

CRON_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
DATETIME_HINT = "an ISO 8601 date-time such as 2024-01-01T00:00:00Z (no zone means UTC)"


@dataclass(frozen=True)
class StreamConfig:
    """One configured change stream; None means 'use the global setting' (env, connection, config file)."""

    name: str
    change_stream: str
    start_date: dt.datetime
    schedule: str = "@hourly"
    end_date: dt.datetime | None = None  # the last window starts at or before it (None: no end)
    catchup: bool = True
    waves: int = 3
    project: str | None = None
    instance: str | None = None
    database: str | None = None
    dialect: str | None = None
    heartbeat_ms: int | None = None
    output_root: Path | str | None = None
    concurrency: int | None = None
    snapshot: bool = False  # the first run reads every watched table at its window start (the initial snapshot)
    current_state: bool = False  # each closed window: one snapshot of every table's current-state Iceberg table
    current_state_keep: int = Settings.current_state_keep  # window snapshots kept per state table (older ones expired)
    verify: bool = False  # a daily DAG, spanner_cdc_verify__<name>, verifies the newest closed window
    verify_fraction: float = 1.0  # share of each state table's key buckets that daily verify compares
    maintenance_schedule: str = "@daily"  # the stream's lake maintenance DAG
    target_file_size: int | None = None
    snapshot_retention: dt.timedelta | None = None
    orphan_min_age: dt.timedelta | None = None
    lineage_retention: dt.timedelta | None = None
    retry_delay: dt.timedelta = dt.timedelta(seconds=30)  # a failed task's first retry waits this long (to twice), later ones double
    deadline_minutes: int = 90  # a window not complete this long after its end misses its deadline (0: no deadline)
    deadline_notifier: str | None = None  # dotted path of an Airflow notifier (or async callable) run on a miss
    deadline_notifier_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    data_boost: bool | None = None  # the snapshot's and verify's partitioned reads on Data Boost (docs/governance.md)
    request_priority: str | None = None  # low / medium / high, every query of the stream
    directed_read: DirectedRead | None = None  # [streams.<name>.directed_read]: replicas the stream's reads go to
    policy: Policy | None = None  # [streams.<name>.policy]: what lands (spanner_cdc/policy.py, docs/governance.md)

    @property
    def dag_id(self) -> str:
        return hourly_dag_id(self.name)

    def deadline_after(self) -> dt.timedelta | None:
        """How long after a run's logical date (its window's start) the window must be complete; None: no deadline.

        The window's length is the schedule's first interval after start_date (every interval of `@hourly`).
        """
        if not self.deadline_minutes:
            return None
        from croniter import croniter

        fires = croniter(self.schedule, self.start_date)
        first = fires.get_next(dt.datetime)
        return fires.get_next(dt.datetime) - first + dt.timedelta(minutes=self.deadline_minutes)

    def settings(self, base: Settings) -> Settings:
        """`base` with this stream's values on top: per-stream values win over the global ones."""
        overrides: dict[str, Any] = {"stream": self.change_stream}
        for name in ("project", "instance", "database", "dialect", "heartbeat_ms", "output_root", "concurrency",
                     "target_file_size", "snapshot_retention", "orphan_min_age", "lineage_retention", "policy",
                     "data_boost", "request_priority", "directed_read"):  # fmt: skip
            value = getattr(self, name)
            if value is not None:
                overrides[name] = value
        return dataclasses.replace(base, **overrides)


def _label(stream: str, key: str) -> str:
    return f"streams.{stream}.{key}"


def parse_datetime(label: str, value: Any) -> dt.datetime:
    """A TOML date / date-time or an ISO 8601 string, as an aware UTC datetime."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ConfigError(label, value, DATETIME_HINT) from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise ConfigError(label, value, DATETIME_HINT)
    return utc(value, assume_utc=True)


def _schedule(label: str, value: Any) -> str:
    text = validators.text(label, value)
    if text in CRON_PRESETS:
        return text
    from croniter import croniter

    if len(text.split()) != 5 or not croniter.is_valid(text):
        raise ConfigError(label, value, "a 5-field cron expression or one of " + ", ".join(CRON_PRESETS))
    return text


def _dotted_path(label: str, value: Any) -> str:
    path = text(label, value)
    if not all(part.isidentifier() for part in path.split(".")) or "." not in path:
        raise ConfigError(label, value, "a dotted path such as airflow.providers.slack.notifications.slack.SlackNotifier")
    return path


def _table(label: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(label, value, "a TOML table of keyword arguments")
    return dict(value)


PARSERS: dict[str, Any] = {
    "change_stream": identifier,
    "start_date": parse_datetime,
    "schedule": _schedule,
    "end_date": parse_datetime,
    "catchup": boolean,
    "waves": int_between(1, 10),
    "project": text,
    "instance": text,
    "database": text,
    "dialect": choice(*DIALECTS),
    "heartbeat_ms": int_between(1000, 300_000),
    "output_root": output_root,
    "concurrency": int_between(1, 256),
    "snapshot": boolean,
    "current_state": boolean,
    "current_state_keep": int_between(1, 10_000),
    "verify": boolean,
    "verify_fraction": fraction,
    "maintenance_schedule": _schedule,
    "target_file_size": byte_size,
    "snapshot_retention": duration,
    "orphan_min_age": duration,
    "lineage_retention": duration,
    "retry_delay": duration,
    "deadline_minutes": int_between(0, 10_080),
    "deadline_notifier": _dotted_path,
    "deadline_notifier_kwargs": _table,
    "policy": parse_policy,
    "data_boost": boolean,
    "request_priority": parse_priority,
    "directed_read": parse_directed_read,
}
ACCEPTED_KEYS = ("name", *PARSERS)


def parse_stream(key: str, table: Any) -> StreamConfig:
    """Validate one `[streams.<key>]` table."""
    name = identifier(f"streams.{key}", key)
    if not isinstance(table, Mapping):
        raise ConfigError(f"streams.{key}", table, "a TOML table [streams.<name>]")
    values: dict[str, Any] = {}
    for field, value in table.items():
        if field == "name":
            if value != key:
                raise ConfigError(_label(key, "name"), value, f"the table's own name {key!r} (or leave it out)")
            continue
        if field not in PARSERS:
            raise ConfigError(_label(key, field), value, "one of the keys " + ", ".join(ACCEPTED_KEYS))
        values[field] = PARSERS[field](_label(key, field), value)
    if "start_date" not in values:
        raise ConfigError(_label(key, "start_date"), None, DATETIME_HINT)
    if "end_date" in values and values["end_date"] < values["start_date"]:
        raise ConfigError(_label(key, "end_date"), table["end_date"], "a date-time not before start_date")
    values.setdefault("change_stream", name)
    return StreamConfig(name=name, **values)


def load_streams(settings: Settings) -> dict[str, StreamConfig]:
    """Every configured stream by name, in name order.

    Lineage and the lake are keyed by the change stream's name, so two tables naming the same change
    stream would share (and corrupt) one lineage: refused.
    """
    streams = {key: parse_stream(key, table) for key, table in sorted(settings.streams.items())}
    seen: dict[str, str] = {}
    for config in streams.values():
        if config.change_stream in seen:
            raise ConfigError(
                _label(config.name, "change_stream"),
                config.change_stream,
                f"a change stream name not already used by [streams.{seen[config.change_stream]}]",
            )
        seen[config.change_stream] = config.name
    return streams
