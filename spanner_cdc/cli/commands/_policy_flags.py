"""The landing policy as flags of `extract` and `snapshot` (docs/governance.md): given, they replace the stream's policy."""

from __future__ import annotations

import argparse
from typing import Any

from spanner_cdc.errors import ConfigError

# flag -> the policy key it fills (each flag may be given many times, or as a comma-separated list)
POLICY_FLAGS = {
    "--include-table": "include_tables",
    "--exclude-table": "exclude_tables",
    "--exclude-column": "exclude_columns",
    "--hash-column": "hash_columns",
    "--mask-column": "mask_columns",
    "--null-column": "null_columns",
}


def add_policy_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "landing policy", "what lands (docs/governance.md); any of these replaces the stream's whole policy "
        "(SPANNER_CDC_POLICY, or [streams.<name>.policy] in SPANNER_CDC_CONFIG); columns as Table.Column",
    )  # fmt: skip
    helps = {
        "--include-table": "land only these tables",
        "--exclude-table": "land nothing of this table",
        "--exclude-column": "leave this column out",
        "--hash-column": "land this column as its keyed HMAC-SHA-256 (key columns too: state tables key on the hash)",
        "--mask-column": "land this column as a fixed token",
        "--null-column": "land this column as null",
    }
    for flag, key in POLICY_FLAGS.items():
        group.add_argument(flag, dest=f"policy_{key}", action="append", metavar="NAME", help=helps[flag])
    group.add_argument("--hash-key-env", dest="policy_hash_key_env", metavar="VAR",
                       help="the environment variable holding the HMAC key of --hash-column (never written anywhere)")  # fmt: skip


def policy_from_flags(args: argparse.Namespace) -> dict[str, Any] | None:
    """The policy the flags give (validated with the settings, `policy.parse_policy`), or None when none is given."""
    given: dict[str, Any] = {}
    for key in (*POLICY_FLAGS.values(), "hash_key_env"):
        value = getattr(args, f"policy_{key}", None)
        if value:
            given[key] = [part.strip() for item in value for part in item.split(",") if part.strip()] if isinstance(value, list) else value
    if not given:
        return None
    from spanner_cdc.policy import parse_policy

    try:
        parse_policy("flags", given)
    except ConfigError as exc:  # named as the flag that was given
        key = exc.field.rpartition(".")[2]
        flag = next((f for f, k in POLICY_FLAGS.items() if k == key), "--" + key.replace("_", "-"))
        raise ConfigError(flag, exc.value, exc.accepted) from None
    return given
