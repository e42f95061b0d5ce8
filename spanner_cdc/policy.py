"""What lands of a stream: tables included or excluded, columns excluded, and columns hashed, masked or nulled before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spanner_cdc.errors import ConfigError
from spanner_cdc.masking import MASK

# The column rules and what each writes in place of a value. A null value stays null under every rule (its nullness
# is no secret, and a hash of nothing would join every null with every other).
TRANSFORMS = ("hash", "mask", "null")
MASK_TOKEN = MASK  # the fixed token a masked value lands as: the same one the project prints for a hidden secret
HASHED_TYPE = {"code": "STRING"}  # a hashed or masked column lands as text, whatever its Spanner type
MIN_KEY_BYTES = 16
LIST_KEYS = ("include_tables", "exclude_tables", "exclude_columns", "hash_columns", "mask_columns", "null_columns")
TEXT_KEYS = ("hash_key_env", "hash_key_connection")
ACCEPTED_KEYS = LIST_KEYS + TEXT_KEYS
COLUMN_HINT = "a list of column names as Table.Column"
TABLE_HINT = "a list of table names"
FINGERPRINT_CHARS = 16


@dataclass(frozen=True)
class Policy:
    """A stream's landing policy. Empty (the default): every table, every column, as read.

    Holds where the hash key comes from (an environment variable's name, an Airflow connection's id), never the key:
    a policy is printed, recorded in every window's completeness record and fingerprinted.
    """

    include_tables: tuple[str, ...] = ()  # empty: every table the change stream watches
    exclude_tables: tuple[str, ...] = ()
    exclude_columns: tuple[str, ...] = ()  # each Table.Column
    hash_columns: tuple[str, ...] = ()
    mask_columns: tuple[str, ...] = ()
    null_columns: tuple[str, ...] = ()
    hash_key_env: str | None = None
    hash_key_connection: str | None = None

    @property
    def empty(self) -> bool:
        return not any(getattr(self, name) for name in LIST_KEYS)

    @property
    def filters_tables(self) -> bool:
        """Whether some table's changes may not land (then a transaction can land fewer records than it had)."""
        return bool(self.include_tables or self.exclude_tables)

    def to_json(self) -> dict[str, Any]:
        """The canonical form: every key, lists sorted (the order a user wrote them in means nothing)."""
        out: dict[str, Any] = {name: sorted(getattr(self, name)) for name in LIST_KEYS}
        out.update({name: getattr(self, name) for name in TEXT_KEYS})
        return out

    def __str__(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @property
    def fingerprint(self) -> str:
        """A short hash of the canonical policy (what lands and how; the key is not in it): equal fingerprints, equal
        rules."""
        return hashlib.sha256(str(self).encode()).hexdigest()[:FINGERPRINT_CHARS]

    def table_lands(self, table: str) -> bool:
        if self.include_tables and table not in self.include_tables:
            return False
        return table not in self.exclude_tables

    def rules(self) -> dict[str, dict[str, str]]:
        """Table -> column -> rule (exclude, hash, mask or null)."""
        out: dict[str, dict[str, str]] = {}
        for rule, columns in (("exclude", self.exclude_columns), ("hash", self.hash_columns), ("mask", self.mask_columns),
                              ("null", self.null_columns)):  # fmt: skip
            for name in columns:
                table, column = name.split(".", 1)
                out.setdefault(table, {})[column] = rule
        return out

    def key_source(self) -> str:
        if self.hash_key_env:
            return f"the environment variable {self.hash_key_env}"
        return f"the Airflow connection {self.hash_key_connection}"


def _names(label: str, value: Any, hint: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part for part in (p.strip() for p in value.split(",")) if part]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(label, value, hint)
    return tuple(sorted({v.strip() for v in value}))  # sorted: the order a user wrote them in means nothing


def _column(label: str, name: str) -> str:
    table, dot, column = name.partition(".")
    if not dot or not table or not column or "." in column:
        raise ConfigError(label, name, COLUMN_HINT + " (one dot: the table, then the column)")
    return name


def parse_policy(label: str, value: Any) -> Policy:
    """A policy from a TOML table (`[streams.<name>.policy]`), a mapping of flags, or its JSON text (an environment
    variable); validated whole, each error naming the key and what it accepts."""
    if isinstance(value, Policy):
        return value
    if value in (None, ""):
        return Policy()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(label, value, "a policy as JSON text, e.g. {\"exclude_tables\": [\"Audit\"]}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(label, value, "a table of policy keys: " + ", ".join(ACCEPTED_KEYS))
    values: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{label}.{key}"
        if key not in ACCEPTED_KEYS:
            raise ConfigError(where, item, "one of the policy keys " + ", ".join(ACCEPTED_KEYS))
        if item is None:
            continue
        if key in TEXT_KEYS:
            if not isinstance(item, str) or not item.strip():
                raise ConfigError(where, item, "a name (an environment variable's, an Airflow connection's id)")
            values[key] = item.strip()
        elif key.endswith("_tables"):
            values[key] = _names(where, item, TABLE_HINT)
        else:
            values[key] = tuple(_column(where, name) for name in _names(where, item, COLUMN_HINT))
    policy = Policy(**values)
    _check_whole(label, policy)
    return policy


def _check_whole(label: str, policy: Policy) -> None:
    """What no single key shows: a column under two rules, a table both included and excluded, a hash without a key."""
    both = set(policy.include_tables) & set(policy.exclude_tables)
    if both:
        raise ConfigError(f"{label}.exclude_tables", sorted(both), "tables not also in include_tables (use one of the two)")
    seen: dict[str, str] = {}
    for key in ("exclude_columns", "hash_columns", "mask_columns", "null_columns"):
        for name in getattr(policy, key):
            if name in seen:
                raise ConfigError(f"{label}.{key}", name, f"a column not already in {seen[name]}: a column takes one rule")
            seen[name] = key
    if policy.hash_columns and not (policy.hash_key_env or policy.hash_key_connection):
        raise ConfigError(
            f"{label}.hash_key_env", None, "the name of the environment variable (or hash_key_connection: the Airflow "
            "connection) holding the HMAC key, since hash_columns is set",
        )  # fmt: skip
    if policy.hash_key_env and policy.hash_key_connection:
        raise ConfigError(f"{label}.hash_key_connection", policy.hash_key_connection, "unset when hash_key_env is set (one key source)")


def resolve_key(policy: Policy, env: Mapping[str, str] | None = None, connection: Callable[[str], Any] | None = None) -> bytes:
    """The HMAC key of a policy that hashes (b"" for one that does not), from its environment variable or its Airflow
    connection's password. Read where the policy is applied, never written anywhere."""
    if not policy.hash_columns:
        return b""
    label = "hash_key_env" if policy.hash_key_env else "hash_key_connection"
    if policy.hash_key_env:
        text = (os.environ if env is None else env).get(policy.hash_key_env, "")
    else:
        conn = (connection or _airflow_connection)(str(policy.hash_key_connection))
        text = "" if conn is None else (getattr(conn, "password", None) or "")
    if len(text.encode()) < MIN_KEY_BYTES:
        raise ConfigError(label, "***" if text else "(unset)", f"{policy.key_source()} holding a key of at least {MIN_KEY_BYTES} bytes, since hash_columns is set")
    return text.encode()


def _airflow_connection(conn_id: str) -> Any:
    """The Airflow connection `conn_id` (None when it is not defined); Airflow is imported only where a policy names one."""
    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:
        return None
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode


@dataclass
class PolicyApplier:
    """A policy with its key, applied to rows before they are written: the same value gives the same text in every
    window, the snapshot, the state tables and verify's comparison."""

    policy: Policy
    key: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        self._rules = self.policy.rules()
        self._types: dict[int, tuple[Any, Any]] = {}
        self._lands: dict[str, bool] = {}  # per table, asked once: a record's cost without rules is a lookup
        if self.policy.hash_columns and len(self.key) < MIN_KEY_BYTES:
            label = "hash_key_env" if self.policy.hash_key_env else "hash_key_connection"
            raise ConfigError(label, "(unset)", f"{self.policy.key_source()} holding a key of at least {MIN_KEY_BYTES} bytes, since hash_columns is set")
        # HMAC's two keyed SHA-256 states (RFC 2104), hashed once; each value continues copies of them
        block = hashlib.sha256(self.key).digest() if len(self.key) > 64 else self.key
        block = block.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    @property
    def active(self) -> bool:
        return not self.policy.empty

    def table_lands(self, table: str) -> bool:
        return self.policy.table_lands(table)

    def rules_of(self, table: str) -> dict[str, str]:
        return self._rules.get(table, {})

    def hash_value(self, value: Any) -> str:
        """HMAC-SHA-256 of the value's canonical JSON text, as hex."""
        inner = self._inner.copy()
        inner.update(_encode(value).encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def values(self, table: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """A row's values (a mod's keys, new or old values; a snapshot row) with the table's column rules applied."""
        rules = self._rules.get(table)
        if not rules or not values:
            return values if isinstance(values, dict) else dict(values)
        out = dict(values)  # the columns keep their order; a table's rules are few, its columns may be many
        for name, rule in rules.items():
            if name not in out:
                continue
            if rule == "exclude":
                del out[name]
            elif out[name] is None or rule == "null":
                out[name] = None
            elif rule == "hash":
                out[name] = self.hash_value(out[name])
            else:
                out[name] = MASK_TOKEN
        return out

    def column_types(self, table: str, column_types: Any) -> Any:
        """A table's column types as they land: excluded columns gone, hashed and masked ones text. Cached per tuple
        (the reader shares one per table), so a record of a table without rules costs a lookup."""
        rules = self._rules.get(table)
        if not rules:
            return column_types
        cached = self._types.get(id(column_types))
        if cached is not None and cached[0] is column_types:
            return cached[1]
        import msgspec

        out = []
        for column in column_types:
            rule = rules.get(column.name)
            if rule == "exclude":
                continue
            if rule in ("hash", "mask"):
                column = msgspec.structs.replace(column, type=dict(HASHED_TYPE))
            out.append(column)
        landed = tuple(out)
        self._types[id(column_types)] = (column_types, landed)
        return landed

    def record(self, record: Any) -> Any:
        """A data change record as it lands (None when its table does not): its mods' keys, new and old values and its
        column types through the table's rules."""
        table = record.table_name
        lands = self._lands.get(table)
        if lands is None:
            lands = self._lands[table] = self.policy.table_lands(table)
        if not lands:
            return None
        if table not in self._rules:
            return record
        import msgspec

        values = self.values
        mods = tuple(
            msgspec.structs.replace(mod, keys=values(table, mod.keys), new_values=values(table, mod.new_values),
                                    old_values=values(table, mod.old_values))  # fmt: skip
            for mod in record.mods
        )
        return msgspec.structs.replace(record, mods=mods, column_types=self.column_types(table, record.column_types))



def unmatched_rules(policy: Policy, tables: Mapping[str, Iterable[str]]) -> list[str]:
    """The column rules naming a column that a table the stream watches (`tables`: name -> its watched columns, keys
    included) does not have: most likely a typo, under which the clear value would land. A table not watched (yet) is
    not judged."""
    out = []
    for key in ("exclude_columns", "hash_columns", "mask_columns", "null_columns"):
        for name in getattr(policy, key):
            table, _, column = name.partition(".")
            if table in tables and column not in set(tables[table]):
                out.append(f"{key} names {name}, but the stream watches {table} with columns {', '.join(sorted(tables[table]))}")
    return out


_appliers: dict[tuple[str, bytes], PolicyApplier] = {}


def applier_from(policy_text: str, key_hex: str) -> PolicyApplier | None:
    """The applier of a policy shipped to an executor (its JSON text and key as hex), one per process and policy;
    None for the empty policy (nothing to apply)."""
    if not policy_text:
        return None
    key = bytes.fromhex(key_hex) if key_hex else b""
    cached = _appliers.get((policy_text, key))
    if cached is None:
        policy = parse_policy("policy", policy_text)
        cached = _appliers[(policy_text, key)] = PolicyApplier(policy, key)
    return cached if cached.active else None
