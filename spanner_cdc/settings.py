"""Typed settings: CLI flags beat SPANNER_CDC_* env vars, which beat the TOML file named by SPANNER_CDC_CONFIG."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from spanner_cdc import names, validators
from spanner_cdc.errors import ConfigError
from spanner_cdc.policy import Policy, parse_policy
from spanner_cdc.validators import (
    byte_size,
    choice,
    duration,
    fraction,
    identifier,
    int_between,
    optional,
    seconds_at_least,
    text,
)

ENV_PREFIX = "SPANNER_CDC_"
CONFIG_ENV = "SPANNER_CDC_CONFIG"
EMULATOR_HOST_ENV = "SPANNER_EMULATOR_HOST"  # the Spanner client library's own variable
DIALECTS = ("auto", *names.DIALECTS)
SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)\])?|spark://[^/\s]+:\d+|sc://[^/\s]+(:\d+)?(/.*)?|yarn|k8s://\S+)$")


def _postgres_url(name: str, value: Any) -> str | None:
    if value in (None, ""):
        return None
    text = str(value)
    if not re.match(r"^postgres(ql)?(\+\w+)?://", text):
        from spanner_cdc.masking import mask_password  # no setting's error may echo a secret

        raise ConfigError(name, mask_password(text), "a Postgres URL such as postgresql://user:pass@host:5432/db")
    return text


ICEBERG_CATALOG_ACCEPTED = "off, store (a SQL catalog in the metadata store), http(s)://<REST catalog> or thrift://<Hive metastore>"


def _iceberg_catalog(name: str, value: Any) -> str:
    """`off`, `store`, or a REST / Hive catalog URL (credentials never in it: they are refused unshown)."""
    text = validators.text(name, value)
    if text.lower() in ("off", "store"):
        return text.lower()
    if text.startswith(("http://", "https://", "thrift://")) and "@" not in text.split("/")[2]:
        return text.rstrip("/")
    raise ConfigError(name, text.split("://", 1)[0] + "://***" if "@" in text else text, ICEBERG_CATALOG_ACCEPTED)


def _spark_master(name: str, value: Any) -> str:
    text = str(value)
    if not SPARK_MASTER.match(text):
        from spanner_cdc.masking import mask_spark_master  # an sc:// URL's token is a secret

        raise ConfigError(name, mask_spark_master(text), "local[*], local[N], spark://host:port, sc://host:port, yarn or k8s://https://host:port")
    return text


def _path(name: str, value: Any) -> Path:
    return Path(text(name, value)).expanduser()


# The lake's roots: a local path, or a bucket (and prefix) on Google Cloud Storage or S3.
LAKE_SCHEMES = ("gs", "s3")
LAKE_ROOT_ACCEPTED = "a local path, gs://bucket/prefix or s3://bucket/prefix"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):/")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9]$")


def output_root(name: str, value: Any) -> Path | str:
    """A local lake root as a Path; a gs:// or s3:// root as its normalized URL text (no trailing slash).

    Credentials never go in the URL (they come from the standard places), so one with a user part is
    refused without echoing it.
    """
    text = validators.text(name, value)
    scheme = _SCHEME.match(text)
    if scheme is None:
        return Path(text).expanduser()
    prefix = scheme.group(1).lower()
    rest = text[len(prefix) + 3 :] if text[len(prefix) + 1 :].startswith("//") else None
    if prefix not in LAKE_SCHEMES or rest is None:
        raise ConfigError(name, value, LAKE_ROOT_ACCEPTED)
    bucket, _, path = rest.partition("/")
    if "@" in bucket or ":" in bucket:
        raise ConfigError(name, f"{prefix}://***", LAKE_ROOT_ACCEPTED + " without credentials (they come from the environment)")
    if not _BUCKET.match(bucket):
        raise ConfigError(name, value, LAKE_ROOT_ACCEPTED + " with a bucket name of 3-222 lower-case letters, digits, . _ -")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ConfigError(name, value, LAKE_ROOT_ACCEPTED + " without . or .. in the prefix")
    return "/".join([f"{prefix}://{bucket}", *parts])


def is_lake_url(root: Path | str) -> bool:
    """Whether a lake root is a bucket (gs://, s3://) rather than a local path."""
    return isinstance(root, str) and root.split("://", 1)[0] in LAKE_SCHEMES


DEFAULT_HOME = Path(".local")


def _meta(parse: Callable[[str, Any], Any], help: str) -> dict[str, Any]:
    return {"parse": parse, "help": help}


@dataclass(frozen=True)
class Settings:
    """Every setting a command may need; each field is validated by its `parse` metadata."""

    project: str = field(default="local-project", metadata=_meta(text, "Spanner project id"))
    instance: str = field(default="local-instance", metadata=_meta(text, "Spanner instance id"))
    database: str = field(default="cdc", metadata=_meta(text, "Spanner database id"))
    stream: str | None = field(default=None, metadata=_meta(optional(identifier), "change stream name"))
    dialect: str = field(default="auto", metadata=_meta(choice(*DIALECTS), "SQL dialect of the database"))
    heartbeat_ms: int = field(
        default=10_000, metadata=_meta(int_between(1000, 300_000), "heartbeat_milliseconds of queries")
    )
    metadata_url: str | None = field(
        default=None, metadata=_meta(_postgres_url, "Postgres URL of the metadata store (default: embedded)")
    )
    output_root: Path | str = field(
        default=DEFAULT_HOME / "lake", metadata=_meta(output_root, "root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix (default: <home>/lake)")
    )
    iceberg_catalog: str = field(
        default="store", metadata=_meta(_iceberg_catalog, "commit each closed window to an Iceberg table: store (default), off, or a REST/Hive catalog URL")
    )
    target_file_size: int = field(
        default=256 << 20, metadata=_meta(byte_size, "size of a lake file: a landed file rolls to the next past it, compaction aims at it")
    )
    snapshot_retention: timedelta = field(
        default=timedelta(days=7), metadata=_meta(duration, "lake maintain expires Iceberg snapshots older than this")
    )
    orphan_min_age: timedelta = field(
        default=timedelta(hours=24), metadata=_meta(duration, "lake maintain removes unlisted files only once older than this")
    )
    lineage_retention: timedelta = field(
        default=timedelta(days=30), metadata=_meta(duration, "lake maintain folds the metadata store's rows of windows closed longer ago than this into per-window totals")
    )
    spark_master: str = field(default="local[*]", metadata=_meta(_spark_master, "Spark master URL"))
    spark_py_files: str | None = field(
        default=None, metadata=_meta(optional(text), "zip of spanner_cdc shipped to the executors (`spanner-cdc spark-package`)")
    )
    namespace: str = field(default="live", metadata=_meta(identifier, "lineage namespace"))
    concurrency: int = field(default=4, metadata=_meta(int_between(1, 256), "tokens extracted at once"))
    home: Path = field(default=DEFAULT_HOME, metadata=_meta(_path, "where embedded services keep their data"))
    emulator_host: str | None = field(
        default=None, metadata=_meta(optional(text), "host:port of an emulator or the local server")
    )
    headroom_warning: float = field(
        default=0.5, metadata=_meta(fraction, "the UI warns when a lineage's retention headroom falls under this share of the stream's retention_period")
    )
    streams: Mapping[str, Any] = field(default_factory=dict, metadata={"parse": None, "help": "[streams.*] tables"})
    policy: Policy = field(
        default=Policy(), metadata=_meta(parse_policy, "what lands: tables included or excluded, columns excluded, hashed, masked or nulled (docs/governance.md)")
    )

    # ---- tuning: how an extract spends its work; read by the driver, carried to executors in their job specs
    wave_group_tokens: int = field(
        default=512, metadata=_meta(int_between(1, 10_000), "most tokens in one Spark job (and store commit) of a wave; 1: a job per token")
    )
    task_tokens: int = field(
        default=0, metadata=_meta(int_between(0, 1000), "tokens one task of a wave job lands; 0: as few tasks as fill the job's share of Spark's cores (at most 512 tokens each); 1: a task per token")
    )
    task_threads: int = field(
        default=4, metadata=_meta(int_between(1, 64), "how many of a task's tokens it lands at once; 1: one after another")
    )
    check_driver_rows: int = field(
        default=2_000_000, metadata=_meta(int_between(0, 100_000_000), "most rows of a window the close checks in the driver; above, a Spark job; 0: always Spark")
    )
    lake_writer: str = field(
        default="arrow", metadata=_meta(choice("arrow", "spark"), "who writes the Parquet files: arrow (executors, with pyarrow) or spark (Spark's writer)")
    )
    liveness: str = field(
        default="lock", metadata=_meta(choice("lock", "lease"), "what frees a crashed run's tokens: lock (its death, at once) or lease (the lease only)")
    )
    lease_s: float = field(
        default=300.0, metadata=_meta(seconds_at_least(1), "seconds a claim holds a token without renewal")
    )
    current_state_keep: int = field(
        default=24, metadata=_meta(int_between(1, 10_000), "window snapshots kept per current-state table when no stream table says")
    )
    state_task_memory: int | None = field(
        default=None, metadata=_meta(optional(byte_size), "memory each current-state apply task may take (a process of its own, RLIMIT_DATA); unset: no bound")
    )
    state_driver_rows: int = field(
        default=50_000, metadata=_meta(int_between(0, 10_000_000), "most rows a current-state apply or seed handles in the driver (the manifest's counts); above, a Spark job; 0: always Spark")
    )

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_s)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def __repr__(self) -> str:
        """The dataclass's repr, with the store's password and a Spark Connect token shown as ***."""
        from spanner_cdc.masking import mask_password, mask_spark_master

        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.metadata_url:
            shown["metadata_url"] = mask_password(self.metadata_url)
        shown["spark_master"] = mask_spark_master(self.spark_master)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def env_name(field_name: str) -> str:
    """The environment variable of a setting: SPANNER_CDC_ and its name in capitals."""
    return ENV_PREFIX + field_name.upper()


def _read_config_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(CONFIG_ENV, path, "the path of an existing TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(CONFIG_ENV, path, f"valid TOML ({exc})") from None


def load_settings(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Merge defaults, the config file, env vars and flags (None means 'not given'), then validate."""
    env = os.environ if env is None else env
    raw: dict[str, tuple[str, Any]] = {}
    config_path = env.get(CONFIG_ENV)
    streams: Mapping[str, Any] = {}
    if config_path:
        config = _read_config_file(config_path)
        streams = config.pop("streams", {}) or {}
        if not isinstance(streams, dict):
            raise ConfigError("streams", streams, "TOML tables [streams.<name>]")
        for key, value in config.items():
            if key not in Settings.field_names():
                raise ConfigError(f"{config_path}: {key}", value, "one of " + ", ".join(Settings.field_names()))
            raw[key] = (f"{key} (in {config_path})", value)
    if EMULATOR_HOST_ENV in env:
        raw["emulator_host"] = (EMULATOR_HOST_ENV, env[EMULATOR_HOST_ENV])
    for name in Settings.field_names():
        env_name = ENV_PREFIX + name.upper()
        if env_name in env and name != "streams" and not (name in TUNING_FIELDS and not env[env_name].strip()):
            raw[name] = (env_name, env[env_name])
    for name, value in (flags or {}).items():
        if value is not None and name in Settings.field_names():
            raw[name] = ("--" + name.replace("_", "-"), value)
    values: dict[str, Any] = {"streams": streams}
    for f in dataclasses.fields(Settings):
        if f.name in raw:
            label, value = raw[f.name]
            values[f.name] = f.metadata["parse"](label, value)
    if "output_root" not in values:  # the default lake is the home's, wherever the command runs
        values["output_root"] = values.get("home", DEFAULT_HOME) / "lake"
    return Settings(**values)


TUNING_FIELDS = ("wave_group_tokens", "task_tokens", "task_threads", "check_driver_rows", "lake_writer", "liveness", "lease_s",
                 "current_state_keep", "state_task_memory", "state_driver_rows")  # fmt: skip
SUBPROCESS_FIELDS = ("project", "instance", "database", "stream", "metadata_url", "output_root", "iceberg_catalog", "spark_master",
                     "namespace", "concurrency", "heartbeat_ms", "home", "target_file_size", "snapshot_retention",
                     "orphan_min_age", "lineage_retention", "policy", *TUNING_FIELDS)  # fmt: skip


def subprocess_env(settings: Settings, **extra: str) -> dict[str, str]:
    """This process's environment with SPANNER_CDC_* replaced so a `spanner-cdc` subprocess uses `settings`.

    A setting that is unset (None) stays out, so the child takes its default (the embedded metadata store, no
    stream, no emulator) rather than the text "None"."""
    # nor pyspark's Connect markers of this process (a spark-submit child on a standalone master failed with them)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(ENV_PREFIX) and k != EMULATOR_HOST_ENV and k not in names.SPARK_CONNECT_MARKERS
    }
    for name in SUBPROCESS_FIELDS:
        value = getattr(settings, name)
        if value is not None:
            env[ENV_PREFIX + name.upper()] = str(value.total_seconds() if isinstance(value, timedelta) else value)
    if settings.emulator_host is not None:
        env[EMULATOR_HOST_ENV] = settings.emulator_host
    env.update(extra)
    return env
