"""A wave task lands its tokens side by side (SPANNER_CDC_TASK_THREADS): the same rows, files and summaries as one
after another, a failing token still fails alone, and a task that stops early leaves no token landing."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spanner_cdc.errors import NotFound
from spanner_cdc.extract.window import plan_window
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.names import LIVE_READ_METHOD
from spanner_cdc.spark import executor
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.spec import TokenJobSpec
from tests.integration.extract.lake_reading import change_of
from tests.integration.extract.test_extract_wave import job_of
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = pytest.mark.integration


def _landed(specs: list[TokenJobSpec], threads: int) -> tuple[dict[str, list[dict[str, Any]]], dict[str, ControlSummary]]:
    """A task's rows: each token's files (path relative to its lake) and its summary (timings dropped)."""
    files: dict[str, list[dict[str, Any]]] = {}
    summaries: dict[str, ControlSummary] = {}
    order = []
    for batch in executor.land_wave_tokens(specs, threads):
        for row in batch.to_pylist():
            order.append(row["token"])
            if row["control"] is None:
                files.setdefault(row["token"], []).append(row)
            else:
                summary = ControlSummary.from_text(row["control"])
                summary.elapsed_s = summary.cpu_s = 0.0
                summary.error_message = (summary.error_message or "").split(", request_id")[0]  # the client numbers its calls
                summaries[row["token"]] = summary
    # rows come in the tokens' order, each token's files before its summary, whatever the threads
    assert list(dict.fromkeys(order)) == [s.token for s in specs]
    return files, summaries


def _rows(listing: list[dict[str, Any]]) -> list[Any]:
    table = pa.concat_tables([pq.read_table(row["path"]) for row in listing])
    return sorted(table.drop_columns(["read_timestamp"]).to_pylist(), key=repr)


def test_a_task_lands_its_tokens_side_by_side_as_it_would_one_after_another(
    make_spanner_database: Any, extract_settings: Any, tmp_path: Path
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM)
    work, w0 = SmallWorkload(database), datetime.now(UTC)
    work.phase(range(0, 16))
    w1 = datetime.now(UTC)
    plan = plan_window(settings, w0, w1)
    assert len(plan.ready) >= 2, plan.ready
    connection = job_of(settings, None, None, plan.lineage_id, w0, w1).connection

    def specs(lake: str) -> list[TokenJobSpec]:
        tokens = [t.token for t in plan.ready]
        return [
            TokenJobSpec(
                stream=STREAM, token=token, read_from=w0, read_to=inclusive_end(w1), window_start=w0, window_end=w1,
                read_method=LIVE_READ_METHOD, attempt_dir=str(tmp_path / lake / "attempt" / str(n)),
                lake_root=str(tmp_path / lake), lineage_id=plan.lineage_id, **connection,
            )  # fmt: skip
            for n, token in enumerate([tokens[0], "no-such-partition-token", *tokens[1:]])
        ]

    alone_files, alone_summaries = _landed(specs("alone"), threads=1)
    side_files, side_summaries = _landed(specs("side"), threads=3)
    # the bad token fails alone, in its own summary, beside the others
    assert NotFound.__name__ == side_summaries["no-such-partition-token"].error_type
    assert side_summaries == alone_summaries and "no-such-partition-token" not in side_files
    assert set(side_files) == set(alone_files) and side_files
    for token, listing in side_files.items():
        other = alone_files[token]
        assert [(r["table"], r["rows"]) for r in listing] == [(r["table"], r["rows"]) for r in other]
        assert [Path(r["path"]).relative_to(tmp_path / "side") for r in listing] == [
            Path(r["path"]).relative_to(tmp_path / "alone") for r in other
        ]
        assert _rows(listing) == _rows(other)  # same rows, same uuids and JSON text
    landed = [change_of(row) for listing in side_files.values() for r in listing for row in pq.read_table(r["path"]).to_pylist()]
    assert Counter(landed) == Counter(work.expected)


def test_a_task_that_stops_early_leaves_no_token_landing(monkeypatch: pytest.MonkeyPatch) -> None:
    started, finished = set(), set()
    lock = threading.Lock()

    def slow_landing(spec: Any, max_buffered: int) -> Iterator[pa.RecordBatch]:
        with lock:
            started.add(spec)
        if spec:  # every token but the first takes a while
            time.sleep(0.2)
        with lock:
            finished.add(spec)
        yield pa.record_batch({"token": [str(spec)]})

    monkeypatch.setattr(executor, "land_in_wave", slow_landing)
    rows = executor.land_wave_tokens(list(range(6)), threads=3)  # type: ignore[arg-type]
    assert next(rows).column("token").to_pylist() == ["0"]
    rows.close()  # Spark stops reading the task's rows (a failure, a cancelled job)
    assert started and started == finished  # nothing still landing: no file published after the task ended
    assert len(started) < 6  # the tokens not yet begun were never begun
