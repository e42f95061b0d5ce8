"""Test helper: check `spanner-cdc read --all-partitions` jsonl output against written mods and partition lineage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any

from tests.fixtures.spanner import INSTANCE, PROJECT

Mod = tuple[str, str, str, str]  # (table, mod_type, keys as canonical JSON, commit timestamp RFC 3339 µs)


def canonical_keys(keys: dict[str, Any]) -> str:
    """Key values as text (INT64 arrives as a string in change records), sorted by column."""
    return json.dumps({k: str(v) for k, v in keys.items()}, sort_keys=True)


def read_all(host: str, database_id: str, stream: str, start: str, end: str, *extra: str) -> list[dict[str, Any]]:
    """Run the CLI in a subprocess, as a user would, and parse its jsonl output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANNER_CDC_")}
    env["SPANNER_EMULATOR_HOST"] = host
    command = [
        sys.executable, "-m", "spanner_cdc", "read", "--project", PROJECT, "--instance", INSTANCE, "--database",
        database_id, "--stream", stream, "--start", start, "--end", end, "--all-partitions", "--heartbeat-ms", "1000",
        "--format", "jsonl", *extra,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def mods_of(lines: list[dict[str, Any]]) -> list[tuple[int, Mod]]:
    """(output line number, mod) of every mod of every data change record, in output order."""
    out = []
    for number, line in enumerate(lines):
        if line["kind"] == "data_change":
            for mod in line["mods"]:
                out.append((number, (line["table_name"], line["mod_type"], canonical_keys(mod["keys"]), line["commit_timestamp"])))
    return out


def check_every_mod_once_in_key_order(lines: list[dict[str, Any]], truth: list[Mod]) -> None:
    found = mods_of(lines)
    got = Counter(mod for _, mod in found)
    want = Counter(truth)
    assert got == want, f"missing {sorted((want - got).elements())[:5]}, unexpected {sorted((got - want).elements())[:5]}"
    by_key: dict[tuple[str, str], list[str]] = defaultdict(list)
    for _, (table, _, keys, commit) in found:
        by_key[(table, keys)].append(commit)
    for key, commits in by_key.items():
        assert commits == sorted(commits), f"{key}: changes out of commit order {commits}"


def check_lineage(lines: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Each token's lines come after all lines of all its parents; no record twice; returns child -> parents."""
    parents: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        if line["kind"] == "child_partitions":
            for child in line["child_partitions"]:
                parents[child["token"]].update(child["parent_partition_tokens"])
    positions: dict[Any, list[int]] = defaultdict(list)
    for number, line in enumerate(lines):
        positions[line["partition_token"]].append(number)
    for token, tokens_parents in parents.items():
        assert token in positions, f"partition {token} was announced but never read"
        for parent in tokens_parents:
            assert min(positions[token]) > max(positions[parent]), f"{token} read before its parent {parent} ended"
    identities = [
        (line["partition_token"], line["kind"], line.get("commit_timestamp") or line.get("start_timestamp") or line["timestamp"],
         line.get("server_transaction_id"), line.get("record_sequence"))
        for line in lines
    ]  # fmt: skip
    repeated = [identity for identity, count in Counter(identities).items() if count > 1]
    assert not repeated, f"records delivered twice: {repeated[:5]}"
    return parents
