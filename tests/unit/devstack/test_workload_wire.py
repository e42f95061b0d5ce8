"""The workload's raw BatchWrite mutations are byte for byte the mutations google-cloud-spanner builds from the same writes."""

from __future__ import annotations

import random

from google.cloud.spanner_v1 import Mutation
from google.cloud.spanner_v1.batch import Batch
from google.cloud.spanner_v1.types import BatchWriteRequest

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.workload_wire import fill_mutation, wire_value


def test_every_planned_write_encodes_as_the_client_encodes_it() -> None:
    rng, rows = random.Random(3), {}
    seen: set[tuple[str, str, bool]] = set()
    for _ in range(400):
        for write in workload._plan(rng, rows):
            client = Batch(None)  # only collects mutations; nothing is sent
            workload._mutate(client, [write])
            (expected,) = [Mutation.pb(m) for m in client._mutations]
            raw = BatchWriteRequest.pb()().mutation_groups.add().mutations.add()
            key_names = [c.name for c in write.table.keys]
            fill_mutation(raw, write.operation, write.table.name, key_names, write.encoded_key, write.columns, write.encoded)
            assert raw == expected, (write.operation, write.table.name)
            workload._apply_to_view(rows, write)
            seen.add((write.table.name, write.operation, None in write.values))
    # the sample covers every table and operation, with and without NULLs
    assert {(t, o) for t, o, _ in seen} >= {(t, o) for t in ("singers", "albums", "concerts") for o in ("insert", "update", "insert_or_update", "delete")}
    assert any(null for _, _, null in seen)


def test_non_finite_floats_go_as_text_like_the_clients() -> None:
    assert wire_value([float("nan"), float("inf"), -float("inf"), 1.5, "1"]) == ["NaN", "Infinity", "-Infinity", 1.5, "1"]
