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

from spanner_cdc import names
from spanner_cdc.errors import ConfigError

ENV_PREFIX = "SPANNER_CDC_"
CONFIG_ENV = "SPANNER_CDC_CONFIG"
DIALECTS = ("auto", *names.DIALECTS)
SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)\])?|spark://[^/\s]+:\d+|sc://[^/\s]+(:\d+)?(/.*)?)$")


def _int_between(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(name, value, f"an integer in [{low}, {high}]") from None
        if isinstance(value, bool) or not low <= number <= high:
            raise ConfigError(name, value, f"an integer in [{low}, {high}]")
        return number

    return parse


def env_int(name: str, default: int, low: int, high: int) -> int:
    """An integer setting of the environment variable `name` (unset or empty: `default`), in [low, high]."""
    raw = os.environ.get(name)
    return default if not raw else _int_between(low, high)(name, raw)


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        text = str(value)
        for choice in choices:
            if text.upper() == choice.upper():
                return choice
        raise ConfigError(name, value, "one of " + ", ".join(choices))

    return parse


def _identifier(name: str, value: Any) -> str:
    text = str(value)
    if not names.IDENTIFIER.fullmatch(text):
        raise ConfigError(name, value, names.IDENTIFIER_ACCEPTED)
    return text


def _optional_identifier(name: str, value: Any) -> str | None:
    return None if value in (None, "") else _identifier(name, value)


def _text(name: str, value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ConfigError(name, value, "a non-empty string")
    return text


def _optional_text(name: str, value: Any) -> str | None:
    return None if value in (None, "") else _text(name, value)


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
    text = _text(name, value)
    if text.lower() in ("off", "store"):
        return text.lower()
    if text.startswith(("http://", "https://", "thrift://")) and "@" not in text.split("/")[2]:
        return text.rstrip("/")
    raise ConfigError(name, text.split("://", 1)[0] + "://***" if "@" in text else text, ICEBERG_CATALOG_ACCEPTED)


_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
SIZE_ACCEPTED = "a size in bytes from 1KB to 16GB: an integer, or a number with KB, MB or GB (powers of 1024)"


def byte_size(name: str, value: Any) -> int:
    """A size such as 268435456, `256MB` or `256 MiB` (units are powers of 1024), in [1 KB, 16 GB]."""
    match = None if isinstance(value, bool) else _SIZE.match(str(value))
    if match is None:
        raise ConfigError(name, value, SIZE_ACCEPTED)
    size = int(match.group(1)) * _UNITS[(match.group(2) or "").upper().replace("IB", "B")]
    if not 1 << 10 <= size <= 16 << 30:
        raise ConfigError(name, value, SIZE_ACCEPTED)
    return size


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
DURATION_ACCEPTED = "a duration: seconds, or a number with s, m, h or d (such as 24h or 7d), from 0 to 3650d"


def duration(name: str, value: Any) -> timedelta:
    """A duration such as 86400, `24h` or `7d`."""
    if isinstance(value, timedelta):
        return value
    match = None if isinstance(value, bool) else _DURATION.match(str(value))
    if match is None:
        raise ConfigError(name, value, DURATION_ACCEPTED)
    seconds = float(match.group(1)) * _SECONDS[match.group(2).lower()]
    if seconds > 3650 * 86_400:
        raise ConfigError(name, value, DURATION_ACCEPTED)
    return timedelta(seconds=seconds)


def _spark_master(name: str, value: Any) -> str:
    text = str(value)
    if not SPARK_MASTER.match(text):
        from spanner_cdc.masking import mask_spark_master  # an sc:// URL's token is a secret

        raise ConfigError(name, mask_spark_master(text), "local[*], local[N], spark://host:port or sc://host:port")
    return text


def _path(name: str, value: Any) -> Path:
    return Path(_text(name, value)).expanduser()


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
    text = _text(name, value)
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


def _meta(parse: Callable[[str, Any], Any], help: str) -> dict[str, Any]:
    return {"parse": parse, "help": help}


@dataclass(frozen=True)
class Settings:
    """Every setting a command may need; each field is validated by its `parse` metadata."""

    project: str = field(default="local-project", metadata=_meta(_text, "Spanner project id"))
    instance: str = field(default="local-instance", metadata=_meta(_text, "Spanner instance id"))
    database: str = field(default="cdc", metadata=_meta(_text, "Spanner database id"))
    stream: str | None = field(default=None, metadata=_meta(_optional_identifier, "change stream name"))
    dialect: str = field(default="auto", metadata=_meta(_choice(*DIALECTS), "SQL dialect of the database"))
    heartbeat_ms: int = field(
        default=10_000, metadata=_meta(_int_between(1000, 300_000), "heartbeat_milliseconds of queries")
    )
    metadata_url: str | None = field(
        default=None, metadata=_meta(_postgres_url, "Postgres URL of the metadata store (default: embedded)")
    )
    output_root: Path | str = field(
        default=Path(".local/lake"), metadata=_meta(output_root, "root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix")
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
    spark_master: str = field(default="local[*]", metadata=_meta(_spark_master, "Spark master URL"))
    namespace: str = field(default="live", metadata=_meta(_identifier, "lineage namespace"))
    concurrency: int = field(default=4, metadata=_meta(_int_between(1, 256), "tokens extracted at once"))
    home: Path = field(default=Path(".local"), metadata=_meta(_path, "where embedded services keep their data"))
    emulator_host: str | None = field(
        default=None, metadata=_meta(_optional_text, "host:port of an emulator or the local server")
    )
    streams: Mapping[str, Any] = field(default_factory=dict, metadata={"parse": None, "help": "[streams.*] tables"})

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
    if "SPANNER_EMULATOR_HOST" in env:
        raw["emulator_host"] = ("SPANNER_EMULATOR_HOST", env["SPANNER_EMULATOR_HOST"])
    for name in Settings.field_names():
        env_name = ENV_PREFIX + name.upper()
        if env_name in env and name != "streams":
            raw[name] = (env_name, env[env_name])
    for name, value in (flags or {}).items():
        if value is not None and name in Settings.field_names():
            raw[name] = ("--" + name.replace("_", "-"), value)
    values: dict[str, Any] = {"streams": streams}
    for f in dataclasses.fields(Settings):
        if f.name in raw:
            label, value = raw[f.name]
            values[f.name] = f.metadata["parse"](label, value)
    return Settings(**values)


SUBPROCESS_FIELDS = ("project", "instance", "database", "stream", "metadata_url", "output_root", "iceberg_catalog", "target_file_size",
                     "snapshot_retention", "orphan_min_age", "spark_master",
                     "namespace", "concurrency", "heartbeat_ms", "home")  # fmt: skip


def subprocess_env(settings: Settings, **extra: str) -> dict[str, str]:
    """This process's environment with SPANNER_CDC_* replaced so a `spanner-cdc` subprocess uses `settings`."""
    # nor pyspark's Connect markers of this process (a spark-submit child on a standalone master failed with them)
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX) and k not in names.SPARK_CONNECT_MARKERS}
    for name in SUBPROCESS_FIELDS:
        value = getattr(settings, name)
        env[ENV_PREFIX + name.upper()] = str(value.total_seconds() if isinstance(value, timedelta) else value)
    env["SPANNER_EMULATOR_HOST"] = str(settings.emulator_host)
    env.update(extra)
    return env
