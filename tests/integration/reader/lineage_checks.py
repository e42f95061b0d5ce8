"""Test helper: check `spanner-cdc read --all-partitions` jsonl output against written mods and partition lineage."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any

from tests.fixtures.spanner import INSTANCE, PROJECT

Mod = tuple[str, str, str, str]  # (table, mod_type, keys as canonical JSON, commit timestamp RFC 3339 µs)


def canonical_keys(keys: dict[str, Any]) -> str:
    """Key values as text (INT64 arrives as a string in change records), sorted by column."""
    return json.dumps({k: str(v) for k, v in keys.items()}, sort_keys=True)


def read_all(host: str, database_id: str, stream: str, start: str, end: str, *extra: str) -> tuple[list[dict[str, Any]], str]:
    """Run the CLI in a subprocess, as a user would: its parsed jsonl output, and its --debug log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANNER_CDC_")}
    env["SPANNER_EMULATOR_HOST"] = host
    command = [
        sys.executable, "-m", "spanner_cdc", "--debug", "read", "--project", PROJECT, "--instance", INSTANCE, "--database",
        database_id, "--stream", stream, "--start", start, "--end", end, "--all-partitions", "--heartbeat-ms", "1000",
        "--format", "jsonl", *extra,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


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


_WORKFLOW_LOG = re.compile(r" spanner_cdc\.source\.all_partitions: \S+ (\S+): (starting partition query|partition query ended)")


def check_lineage(lines: list[dict[str, Any]], debug_log: str) -> dict[str, set[str]]:
    """Every announced partition queried once, after all its parents' queries ended; its records after
    theirs; no record twice. Returns child -> parents.

    A partition's query may return no record at all (no change, and its range ends before a heartbeat
    is due), so when the queries ran comes from the workflow's --debug log, in the order it decided."""
    parents: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        if line["kind"] == "child_partitions":
            for child in line["child_partitions"]:
                parents[child["token"]].update(child["parent_partition_tokens"])
    events = [("start" if m.group(2).startswith("starting") else "end", m.group(1)) for m in _WORKFLOW_LOG.finditer(debug_log)]
    started = Counter(token for what, token in events if what == "start")
    assert started["None"] == 1 and all(started[token] == 1 for token in parents), f"queries per partition: {started}"
    assert set(started) == {"None", *parents}, "a partition was queried that no child partitions record announced"
    for token, tokens_parents in parents.items():
        for parent in tokens_parents:
            assert events.index(("start", token)) > events.index(("end", parent)), f"{token} queried before {parent} ended"
    positions: dict[Any, list[int]] = defaultdict(list)
    for number, line in enumerate(lines):
        positions[line["partition_token"]].append(number)
    for token, tokens_parents in parents.items():
        for parent in tokens_parents:
            if positions[token] and positions[parent]:
                assert min(positions[token]) > max(positions[parent]), f"{token} printed before its parent {parent} ended"
    identities = [
        (line["partition_token"], line["kind"], line.get("commit_timestamp") or line.get("start_timestamp") or line["timestamp"],
         line.get("server_transaction_id"), line.get("record_sequence"))
        for line in lines
    ]  # fmt: skip
    repeated = [identity for identity, count in Counter(identities).items() if count > 1]
    assert not repeated, f"records delivered twice: {repeated[:5]}"
    return parents
