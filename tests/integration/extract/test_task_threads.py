"""A wave task reads its tokens side by side (SPANNER_CDC_TASK_THREADS): the same rows, files and summaries as one
after another, a failing token still fails alone (its rows in no file), and a task that fails leaves no token reading."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spanner_cdc.errors import SourceError
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
    """A task's rows: each token's files (its rows in each) and its summary (timings dropped)."""
    files: dict[str, list[dict[str, Any]]] = {}
    summaries: dict[str, ControlSummary] = {}
    for batch in executor.land_wave_tokens(specs, threads):
        for row in batch.to_pylist():
            if row["control"] is None:
                assert not summaries  # every file's rows come before the summaries
                files.setdefault(row["token"], []).append(row)
            else:
                summary = ControlSummary.from_text(row["control"])
                summary.elapsed_s = summary.cpu_s = 0.0
                summary.error_message = (summary.error_message or "").split(", request_id")[0]  # the client numbers its calls
                summaries[row["token"]] = summary
    # the summaries come in the tokens' order, whatever the threads
    assert list(summaries) == [s.token for s in specs]
    return files, summaries


def _rows(paths: set[str]) -> list[Any]:
    table = pa.concat_tables([pq.read_table(path) for path in sorted(paths)])
    return table.drop_columns(["read_timestamp"]).to_pylist()


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
    assert SourceError.__name__ == side_summaries["no-such-partition-token"].error_type  # INVALID_ARGUMENT, as the emulator answers
    assert side_summaries == alone_summaries and "no-such-partition-token" not in side_files
    assert set(side_files) == set(alone_files) and len(side_files) >= 2
    for token, listing in side_files.items():
        other = alone_files[token]
        assert [(r["table"], r["rows"]) for r in listing] == [(r["table"], r["rows"]) for r in other]
        assert [Path(r["path"]).relative_to(tmp_path / "side") for r in listing] == [
            Path(r["path"]).relative_to(tmp_path / "alone") for r in other
        ]
    side = {r["path"] for listing in side_files.values() for r in listing}
    alone = {r["path"] for listing in alone_files.values() for r in listing}
    # one file per table for all the task's tokens, their rows in the tokens' order: the same bytes either way
    assert len(side) == len({r["table"] for listing in side_files.values() for r in listing})
    assert _rows(side) == _rows(alone)  # same rows, same order, same uuids and JSON text
    assert Counter(change_of(row) for row in _rows(side)) == Counter(work.expected)


def test_a_task_that_fails_leaves_no_token_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    started, finished = set(), set()
    lock = threading.Lock()

    def slow_spool(spec: Any, directory: Path, tokens: int) -> tuple[Any, Any]:
        with lock:
            started.add(spec)
        try:
            if spec == 0:  # the first token's worker breaks at once (not a token's own error: the task's)
                raise MemoryError("worker out of memory")
            time.sleep(0.2)
            return None, None
        finally:
            with lock:
                finished.add(spec)

    monkeypatch.setattr(executor, "spool_token", slow_spool)
    rows = executor.land_wave_tokens(list(range(6)), threads=2)  # type: ignore[arg-type]
    with pytest.raises(MemoryError):
        next(rows)
    assert started and started == finished  # nothing still reading once the task has ended
    assert len(started) < 6  # the tokens not yet begun were never begun
