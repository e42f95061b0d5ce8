"""How a stream's reads spare production: Data Boost, request priority and directed reads, validated and as client arguments."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spanner_cdc.errors import ConfigError

PRIORITIES = ("low", "medium", "high")
REPLICA_TYPES = ("READ_ONLY", "READ_WRITE")
MAX_REPLICAS = 10  # Spanner takes at most 10 replica selections in include_replicas / exclude_replicas
DIRECTED_KEYS = ("include", "exclude", "auto_failover_disabled")
DIRECTED_ACCEPTED = (
    'a table (or its JSON text) with include or exclude: a list of replicas as "location", "location:TYPE" or '
    '":TYPE" (TYPE READ_ONLY or READ_WRITE), and optionally auto_failover_disabled = true with include, '
    'e.g. {"include": ["us-east1:READ_ONLY"]}'
)


@dataclass(frozen=True)
class Replica:
    """One replica selection: a location (e.g. us-east1; "" any), a type (READ_ONLY / READ_WRITE; "" any)."""

    location: str = ""
    type: str = ""

    def __str__(self) -> str:
        return f"{self.location}:{self.type}" if self.type else self.location

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.location:
            out["location"] = self.location
        if self.type:
            out["type_"] = self.type
        return out


@dataclass(frozen=True)
class DirectedRead:
    """Replicas a read goes to (`include`, in order of preference) or never goes to (`exclude`): one of the two."""

    include: tuple[Replica, ...] = ()
    exclude: tuple[Replica, ...] = ()
    auto_failover_disabled: bool = False

    def __str__(self) -> str:
        """Canonical JSON text: what an environment variable or a job spec carries, and parses back."""
        out: dict[str, Any] = {"include" if self.include else "exclude": [str(r) for r in self.include or self.exclude]}
        if self.auto_failover_disabled:
            out["auto_failover_disabled"] = True
        return json.dumps(out, sort_keys=True)

    def client_options(self) -> dict[str, Any]:
        """The `directed_read_options` argument of the client (a DirectedReadOptions mapping)."""
        if self.include:
            selected: dict[str, Any] = {"replica_selections": [r.as_dict() for r in self.include]}
            if self.auto_failover_disabled:
                selected["auto_failover_disabled"] = True
            return {"include_replicas": selected}
        return {"exclude_replicas": {"replica_selections": [r.as_dict() for r in self.exclude]}}


def _replica(label: str, value: Any) -> Replica:
    if isinstance(value, Mapping):
        unknown = set(value) - {"location", "type"}
        if unknown:
            raise ConfigError(label, value, 'a replica as {location = ..., type = ...} or "location:TYPE"')
        location, kind = str(value.get("location") or ""), str(value.get("type") or "")
    elif isinstance(value, str):
        location, _, kind = value.strip().partition(":")
    else:
        raise ConfigError(label, value, 'a replica as "location", "location:TYPE" or ":TYPE"')
    location, kind = location.strip(), kind.strip().upper()
    if kind and kind not in REPLICA_TYPES:
        raise ConfigError(label, value, "a replica type of " + " or ".join(REPLICA_TYPES))
    if not location and not kind:
        raise ConfigError(label, value, "a replica naming a location, a type or both")
    if location and not all(c.isalnum() or c in "-_" for c in location):
        raise ConfigError(label, value, "a location such as us-east1 (letters, digits, - and _)")
    return Replica(location, kind)


def parse_directed_read(label: str, value: Any) -> DirectedRead | None:
    """A directed-read setting from a TOML table or its JSON text; "" / "off" / an empty table: none."""
    if value is None or isinstance(value, DirectedRead):
        return value
    if isinstance(value, str):
        if value.strip().lower() in ("", "off", "none"):
            return None
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(label, value, DIRECTED_ACCEPTED) from None
    if not isinstance(value, Mapping):
        raise ConfigError(label, value, DIRECTED_ACCEPTED)
    if not value:
        return None
    for key in value:
        if key not in DIRECTED_KEYS:
            raise ConfigError(f"{label}.{key}", value[key], "one of the keys " + ", ".join(DIRECTED_KEYS))
    if ("include" in value) == ("exclude" in value):
        raise ConfigError(label, value, "exactly one of include or exclude (Spanner takes one list)")
    key = "include" if "include" in value else "exclude"
    items = value[key]
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_REPLICAS:
        raise ConfigError(f"{label}.{key}", items, f"a list of 1 to {MAX_REPLICAS} replicas")
    replicas = tuple(_replica(f"{label}.{key}[{i}]", item) for i, item in enumerate(items))
    failover = value.get("auto_failover_disabled", False)
    if not isinstance(failover, bool):
        raise ConfigError(f"{label}.auto_failover_disabled", failover, "true or false")
    if failover and key != "include":
        raise ConfigError(
            f"{label}.auto_failover_disabled", failover, "false, or an include list (it applies to include only)"
        )
    return DirectedRead(replicas if key == "include" else (), replicas if key == "exclude" else (), failover)


def parse_switch(label: str, value: Any) -> bool:
    """An on/off setting: a TOML boolean, or the text of an environment variable or a flag (true/false, 1/0, on/off)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "on", "yes"):
        return True
    if text in ("false", "0", "off", "no", ""):
        return False
    raise ConfigError(label, value, "true or false")


def parse_priority(label: str, value: Any) -> str | None:
    """A request priority: low, medium or high (any case; PRIORITY_ prefix allowed); "" : Spanner's default (high)."""
    if value is None:
        return None
    text = str(value).strip().lower().removeprefix("priority_")
    if not text:
        return None
    if text not in PRIORITIES:
        raise ConfigError(label, value, "one of " + ", ".join(PRIORITIES))
    return text


@dataclass(frozen=True)
class ReadOptions:
    """A stream's read settings as one value: carried in job specs as JSON text, turned into client arguments here."""

    data_boost: bool = False
    priority: str | None = None
    directed_read: DirectedRead | None = None

    def __str__(self) -> str:
        out: dict[str, Any] = {}
        if self.data_boost:
            out["data_boost"] = True
        if self.priority:
            out["priority"] = self.priority
        if self.directed_read is not None:
            out["directed_read"] = json.loads(str(self.directed_read))
        return json.dumps(out, sort_keys=True) if out else ""

    @classmethod
    def from_text(cls, text: str | None) -> ReadOptions:
        """The inverse of str(): "" is the default (no Data Boost, Spanner's priority, any replica)."""
        if not text:
            return cls()
        fields = json.loads(text)
        return cls(
            bool(fields.get("data_boost", False)),
            parse_priority("priority", fields.get("priority")),
            parse_directed_read("directed_read", fields.get("directed_read")),
        )

    def request_options(self, tag: str | None = None) -> Any:
        """A RequestOptions with this priority (and `tag`), or None when neither is set."""
        if not self.priority and not tag:
            return None
        from google.cloud.spanner_v1 import RequestOptions

        options = RequestOptions()
        if tag:
            options.request_tag = tag
        if self.priority:
            options.priority = getattr(RequestOptions.Priority, f"PRIORITY_{self.priority.upper()}")
        return options

    def query_kwargs(self, tag: str | None = None) -> dict[str, Any]:
        """Keyword arguments of `execute_sql` for a read of this stream (priority and directed reads)."""
        out: dict[str, Any] = {}
        request = self.request_options(tag)
        if request is not None:
            out["request_options"] = request
        if self.directed_read is not None:
            out["directed_read_options"] = self.directed_read.client_options()
        return out

    def partition_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `generate_query_batches` (Data Boost and directed reads travel in each batch)."""
        out: dict[str, Any] = {"data_boost_enabled": self.data_boost}
        if self.directed_read is not None:
            out["directed_read_options"] = self.directed_read.client_options()
        return out

    def batch_query(self, sql: str, partition: bytes, tag: str | None = None) -> dict[str, Any]:
        """The batch `process_query_batch` runs on an executor: the partition's query with this stream's options."""
        query: dict[str, Any] = {"sql": sql, **self.partition_kwargs()}
        request = self.request_options(tag)
        if request is not None:
            query["request_options"] = request
        return {"partition": partition, "query": query}
