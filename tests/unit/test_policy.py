"""The landing policy: validation at the edge, its canonical form and fingerprint, and its rules applied to records."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.model.records import ColumnType, DataChangeRecord, Mod
from spanner_cdc.policy import MASK_TOKEN, Policy, PolicyApplier, applier_from, parse_policy, resolve_key

KEY = b"k" * 32
RULES = {
    "exclude_tables": ["Audit"], "exclude_columns": ["Users.Notes"], "hash_columns": ["Users.UserId", "Users.Email"],
    "mask_columns": ["Users.Phone"], "null_columns": ["Users.Birthday"], "hash_key_env": "CDC_KEY",
}  # fmt: skip


@pytest.mark.parametrize(
    ("value", "field", "accepted"),
    [
        ({"hash_columns": ["Users.Email"]}, "p.hash_key_env", "environment variable"),
        ({"exclude_columns": ["Users.Email"], "mask_columns": ["Users.Email"]}, "p.mask_columns", "one rule"),
        ({"include_tables": ["A"], "exclude_tables": ["A"]}, "p.exclude_tables", "not also in include_tables"),
        ({"hash_columns": ["Email"], "hash_key_env": "K"}, "p.hash_columns", "Table.Column"),
        ({"mask_columns": "Users.Phone.x"}, "p.mask_columns", "one dot"),
        ({"redact_columns": ["Users.Email"]}, "p.redact_columns", "one of the policy keys"),
        ({"exclude_tables": [1]}, "p.exclude_tables", "a list of table names"),
        ({"hash_columns": ["U.E"], "hash_key_env": "K", "hash_key_connection": "c"}, "p.hash_key_connection", "one key source"),
        ("{not json", "p", "JSON"),
    ],
)  # fmt: skip
def test_a_bad_policy_is_refused_naming_the_field_and_what_is_accepted(value: object, field: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_policy("p", value)
    assert raised.value.field == field and accepted in raised.value.accepted


def test_the_canonical_form_ignores_order_and_round_trips_through_its_text() -> None:
    policy = parse_policy("p", RULES)
    reordered = parse_policy("p", {**RULES, "hash_columns": "Users.Email, Users.UserId"})
    assert policy == reordered and policy.fingerprint == reordered.fingerprint
    assert parse_policy("p", str(policy)) == policy  # the JSON text a subprocess's environment carries
    assert parse_policy("p", {**RULES, "mask_columns": ["Users.Other"]}).fingerprint != policy.fingerprint
    assert "k" * 32 not in str(policy) and "CDC_KEY" in str(policy)  # the key's source, never the key
    assert Policy().empty and parse_policy("p", None) == Policy() and not policy.empty


def test_the_key_comes_from_its_source_and_a_missing_or_short_one_is_refused() -> None:
    policy = parse_policy("p", RULES)
    assert resolve_key(policy, env={"CDC_KEY": "k" * 32}) == KEY
    for env in ({}, {"CDC_KEY": "short"}):
        with pytest.raises(ConfigError, match="CDC_KEY") as raised:
            resolve_key(policy, env=env)
        assert "short" not in str(raised.value)  # a key is never echoed
    by_conn = Policy(hash_columns=("U.E",), hash_key_connection="cdc_hash")
    assert resolve_key(by_conn, connection=lambda conn_id: type("C", (), {"password": "p" * 20})()) == b"p" * 20
    assert resolve_key(Policy(exclude_tables=("A",)), env={}) == b""  # nothing hashed, no key needed


def _record(table: str, keys: dict, new: dict, old: dict) -> DataChangeRecord:
    types = tuple(ColumnType(name, {"code": "INT64" if name == "UserId" else "STRING"}, name == "UserId", i)
                  for i, name in enumerate(["UserId", "Email", "Phone", "Birthday", "Notes", "Name"]))  # fmt: skip
    return DataChangeRecord(
        commit_timestamp=datetime(2026, 1, 1, tzinfo=UTC), record_sequence="1", server_transaction_id="t",
        is_last_record_in_transaction_in_partition=True, table_name=table, column_types=types,
        mods=(Mod(keys=keys, new_values=new, old_values=old),), mod_type="UPDATE", value_capture_type="OLD_AND_NEW_VALUES",
        number_of_records_in_transaction=1, number_of_partitions_in_transaction=1, transaction_tag="", is_system_transaction=False,
    )  # fmt: skip


def test_a_record_lands_with_its_columns_excluded_hashed_masked_and_nulled_old_and_new_and_keys_alike() -> None:
    applier = PolicyApplier(parse_policy("p", RULES), KEY)
    row = {"Email": "a@x.io", "Phone": "+1 555", "Birthday": "2000-01-01", "Notes": "private", "Name": "Ann"}
    landed = applier.record(_record("Users", {"UserId": "42"}, row, {**row, "Email": None}))
    mod = landed.mods[0]
    assert mod.keys == {"UserId": applier.hash_value("42")}
    assert mod.new_values == {"Email": applier.hash_value("a@x.io"), "Phone": MASK_TOKEN, "Birthday": None, "Name": "Ann"}
    assert mod.old_values["Email"] is None and mod.old_values["Phone"] == MASK_TOKEN  # a null stays null
    types = {c.name: c.type["code"] for c in landed.column_types}
    assert "Notes" not in types and types["UserId"] == types["Email"] == types["Phone"] == "STRING" and types["Birthday"] == "STRING"
    assert applier.record(_record("Audit", {"UserId": "1"}, {}, {})) is None
    untouched = _record("Orders", {"UserId": "1"}, {"Email": "b"}, {})
    assert applier.record(untouched) is untouched  # a table without rules: the record itself


def test_a_hash_is_keyed_and_the_same_for_the_same_value_everywhere() -> None:
    one, again = PolicyApplier(parse_policy("p", RULES), KEY), applier_from(str(parse_policy("p", RULES)), KEY.hex())
    assert again is not None and one.hash_value("42") == again.hash_value("42") != one.hash_value(42)
    assert PolicyApplier(parse_policy("p", RULES), b"o" * 32).hash_value("42") != one.hash_value("42")
    assert len(one.hash_value("42")) == 64 and json.dumps(one.hash_value("42"))
    for key in (KEY, b"x" * 64, b"y" * 100):  # HMAC-SHA-256 itself (RFC 2104), keys shorter and longer than a block
        assert PolicyApplier(parse_policy("p", RULES), key).hash_value("42") == hmac.new(key, b'"42"', hashlib.sha256).hexdigest()
    assert applier_from("", "") is None and applier_from(str(Policy()), "") is None


def test_a_window_keeps_the_policy_it_began_under_and_records_no_key(tmp_path: Path) -> None:
    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.lake.window_policy import policy_location, recorded_policy, window_policy

    layout = LakeLayout(tmp_path, "s", "live")
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 1, tzinfo=UTC)
    first, changed = parse_policy("p", RULES), parse_policy("p", {**RULES, "mask_columns": ["Users.Other"]})
    assert recorded_policy(layout, start, end) is None
    assert window_policy(layout, start, end, first) == first
    assert window_policy(layout, start, end, changed) == first  # a change takes effect from the next window
    assert window_policy(layout, end, end + (end - start), changed) == changed
    text = Path(policy_location(layout, start, end)).read_text()
    assert json.loads(text)["fingerprint"] == first.fingerprint and "k" * 32 not in text


def test_a_stream_table_takes_a_policy_and_its_settings_carry_it() -> None:
    from spanner_cdc.settings import Settings, load_settings
    from spanner_cdc.stream_config import parse_stream

    config = parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "policy": {"exclude_tables": ["Audit"]}})
    assert config.policy == Policy(exclude_tables=("Audit",)) and config.settings(Settings()).policy == config.policy
    with pytest.raises(ConfigError) as raised:
        parse_stream("orders", {"start_date": "2024-03-01T00:00:00Z", "policy": {"null_columns": ["Notes"]}})
    assert raised.value.field == "streams.orders.policy.null_columns"
    assert load_settings({}, env={"SPANNER_CDC_POLICY": '{"exclude_tables": ["Audit"]}'}).policy == config.policy


def test_a_rule_naming_no_column_of_a_watched_table_is_found() -> None:
    from spanner_cdc.policy import unmatched_rules

    policy = parse_policy("p", {"hash_columns": ["Users.Emial"], "mask_columns": ["Later.Phone"], "hash_key_env": "K"})
    found = unmatched_rules(policy, {"Users": ("UserId", "Email")})
    assert found == ["hash_columns names Users.Emial, but the stream watches Users with columns Email, UserId"]  # Later: not watched yet
    assert unmatched_rules(parse_policy("p", RULES), {"Users": ("UserId", "Email", "Phone", "Birthday", "Notes")}) == []


def test_the_key_comes_from_an_airflow_connection_s_password(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("airflow.sdk")
    monkeypatch.setenv("AIRFLOW_CONN_CDC_HASH", json.dumps({"conn_type": "generic", "password": "p" * 20}))
    assert resolve_key(Policy(hash_columns=("U.E",), hash_key_connection="cdc_hash")) == b"p" * 20
    with pytest.raises(ConfigError, match="Airflow connection cdc_missing"):
        resolve_key(Policy(hash_columns=("U.E",), hash_key_connection="cdc_missing"))


def test_the_policy_flags_of_extract_and_snapshot_replace_the_stream_s_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from spanner_cdc.cli.commands.extract import resolve_settings
    from spanner_cdc.cli.main import build_parser

    monkeypatch.setenv("SPANNER_CDC_POLICY", '{"exclude_tables": ["Other"]}')
    window = ["--window-start", "2026-01-01T00:00:00Z", "--window-end", "2026-01-01T01:00:00Z"]
    args = build_parser().parse_args(["extract", "--stream", "s", *window, "--exclude-table", "Audit", "--hash-column",
                                      "Users.Id,Users.Email", "--mask-column", "Users.Phone", "--hash-key-env", "K"])  # fmt: skip
    assert resolve_settings(args).policy == Policy(exclude_tables=("Audit",), hash_columns=("Users.Email", "Users.Id"),
                                                   mask_columns=("Users.Phone",), hash_key_env="K")  # fmt: skip
    snapshot = build_parser().parse_args(["snapshot", "--stream", "s", "--null-column", "Users.Birthday"])
    assert resolve_settings(snapshot).policy == Policy(null_columns=("Users.Birthday",))
    assert resolve_settings(build_parser().parse_args(["extract", "--stream", "s", *window])).policy == Policy(exclude_tables=("Other",))
