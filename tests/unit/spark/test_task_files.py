"""A wave task's files: tokens spooled apart, then written into one file per table, rolled past a size."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spanner_cdc.lake.columns import LAKE_SCHEMA
from spanner_cdc.lake.layout import published_locations, task_object_name
from spanner_cdc.spark import task_files
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.executor import envelope_batches
from spanner_cdc.spark.task_files import TaskFiles, TokenSpool
from tests.unit.extract.test_token import LAST, spec
from tests.unit.lake.records import T0, data_record


def spooled(tmp_path: Path, token: str, count: int, offset: int, memory_bytes: int = task_files.SPOOL_MEMORY_BYTES) -> TokenSpool:
    records = [data_record(offset + i, tx=f"{token}{i}", table="Users" if i % 3 else "Orders", mods=2) for i in range(count)]
    spool = TokenSpool(tmp_path / "spool" / token, memory_bytes)
    for batch in envelope_batches(spec(tmp_path, token=token), records, ControlSummary(token, T0, LAST)):
        spool.write(batch)
    spool.close()
    return spool


def test_a_tasks_tokens_share_one_file_per_table_in_the_tokens_order(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    a, b = spooled(tmp_path, "a", 6, 0), spooled(tmp_path, "b", 3, 100)
    assert published_locations(root) == []  # a spool publishes nothing

    def destination(table: str, sequence: int) -> str:
        return task_object_name(root, stem="part-L1-tX", content="c", table=table, window_start=T0, sequence=sequence)

    files = TaskFiles(destination, tmp_path / "scratch", max_bytes=1 << 30)
    for table in ("Orders", "Users"):
        files.write_table(table, [("a", a), ("b", b)])
    assert [(f.table, f.rows_by_token) for f in files.published] == [
        ("Orders", (("a", 4), ("b", 2))),
        ("Users", (("a", 8), ("b", 4))),
    ]
    assert [f.path for f in files.published] == published_locations(root) == [destination(t, 0) for t in ("Orders", "Users")]
    assert [f.bytes for f in files.published] == [Path(f.path).stat().st_size for f in files.published]
    users = pq.ParquetFile(files.published[1].path).read()  # the file as written (read_table adds hive columns before pyarrow 25)
    assert users.schema == LAKE_SCHEMA
    assert [r["partition_token"] for r in users.to_pylist()] == ["a"] * 8 + ["b"] * 4  # the tokens' order
    assert not any(p.name.startswith(".") for p in (tmp_path / "lake").rglob("*"))  # no scratch left behind


def test_a_file_rolls_to_the_next_past_the_size_and_the_cut_is_the_same_on_a_retry(tmp_path: Path) -> None:
    a, b = spooled(tmp_path, "a", 30, 0), spooled(tmp_path, "b", 30, 100)

    def land(root: Path) -> list[task_files.TaskFile]:
        def destination(table: str, sequence: int) -> str:
            return task_object_name(str(root), stem="part-L1-tX", content="c", table=table, window_start=T0, sequence=sequence)

        files = TaskFiles(destination, tmp_path / "scratch", max_bytes=1)  # every batch past the size: a file each
        files.write_table("Users", [("a", a), ("b", b)])
        return files.published

    first, again = land(tmp_path / "one"), land(tmp_path / "two")
    assert len(first) > 2
    assert [f.path.endswith(f"-{n:03d}.parquet") for n, f in enumerate(first)] == [True] * len(first)
    assert sum(rows for f in first for token, rows in f.rows_by_token if token == "a") == 40
    assert sum(rows for f in first for token, rows in f.rows_by_token if token == "b") == 40
    assert [(f.rows_by_token, f.bytes) for f in first] == [(f.rows_by_token, f.bytes) for f in again]


def test_a_failed_write_leaves_no_file_and_a_dropped_spool_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = spooled(tmp_path, "a", 6, 0)
    root = tmp_path / "lake"

    def destination(table: str, sequence: int) -> str:
        return task_object_name(str(root), stem="part-L1-tX", content="c", table=table, window_start=T0, sequence=sequence)

    def broken(scratch: Path, path: str) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(task_files.storage, "put_file", broken)
    with pytest.raises(OSError, match="disk full"):
        TaskFiles(destination, tmp_path / "scratch", max_bytes=1 << 30).write_table("Users", [("a", a)])
    assert [p for p in root.rglob("*") if p.is_file()] == []
    a.drop()
    assert not (tmp_path / "spool" / "a").exists()


def test_the_content_digest_names_the_tokens_and_ranges_landed(tmp_path: Path) -> None:
    one, two = spec(tmp_path, token="a"), spec(tmp_path, token="b")
    later = spec(tmp_path, token="a", read_from=T0 + timedelta(seconds=1))
    rolled = spec(tmp_path, token="a", file_bytes=1 << 20)  # another roll size cuts the files elsewhere
    digests = {task_files.content_digest(s) for s in ([one], [two], [one, two], [later], [rolled])}
    assert len(digests) == 5
    assert task_files.content_digest([one, two]) == task_files.content_digest([spec(tmp_path, token="a"), two])


@pytest.mark.parametrize("memory_bytes", [task_files.SPOOL_MEMORY_BYTES, 1])
def test_a_small_spool_stays_in_memory_and_a_large_one_moves_to_disk_with_the_same_rows(tmp_path: Path, memory_bytes: int) -> None:
    spool = spooled(tmp_path, "a", 30, 0, memory_bytes)
    on_disk = sorted(p.name for p in (tmp_path / "spool").rglob("*") if p.is_file())
    assert on_disk == ([] if memory_bytes > 1 else ["00000.arrows", "00001.arrows"])
    assert sorted(spool.tables) == ["Orders", "Users"] and spool.rows == {"Users": 40, "Orders": 20}
    held = TokenSpool(tmp_path / "held" / "a")
    for batch in envelope_batches(spec(tmp_path, token="a"), [data_record(i, tx=f"a{i}", table="Users" if i % 3 else "Orders", mods=2)
                                                             for i in range(30)], ControlSummary("a", T0, LAST)):
        held.write(batch)
    for table in spool.tables:  # the same rows whichever way they were kept (read timestamps aside)
        rows = [r for b in spool.batches(table) for r in b.drop_columns(["read_timestamp"]).to_pylist()]
        assert rows == [r for b in held.batches(table) for r in b.drop_columns(["read_timestamp"]).to_pylist()]
        assert len(rows) == spool.rows[table]
    spool.drop()
    assert not (tmp_path / "spool" / "a").exists()


def test_a_task_of_one_token_writes_the_same_files_while_it_reads_and_publishes_them_only_when_told(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    records = [data_record(i, tx=f"a{i}", table="Users" if i % 3 else "Orders", mods=2) for i in range(30)]
    batches = list(envelope_batches(spec(tmp_path, token="a", max_rows=7), records, ControlSummary("a", T0, LAST)))
    spool = TokenSpool(tmp_path / "spool" / "a")
    for batch in batches:
        spool.write(batch)

    def destination(root: Path) -> Any:
        return lambda table, sequence: task_object_name(str(root), stem="part-L1-tX", content="c", table=table, window_start=T0,
                                                        sequence=sequence)  # fmt: skip

    spooled = TaskFiles(destination(tmp_path / "one"), tmp_path / "scratch", max_bytes=4000)
    for table in ("Orders", "Users"):
        spooled.write_table(table, [("a", spool)])
    with ThreadPoolExecutor(1) as encoder:
        streamed = task_files.StreamedFiles(destination(tmp_path / "two"), tmp_path / "scratch", 4000, encoder)
        for batch in batches:
            streamed.write("a", batch)
        assert published_locations(str(tmp_path / "two")) == []  # nothing before publish
        published = streamed.publish()
    assert len(published) > 2  # rolled
    assert [(f.table, f.rows_by_token, Path(f.path).name) for f in published] == [
        (f.table, f.rows_by_token, Path(f.path).name) for f in spooled.published
    ]
    for one, two in zip(spooled.published, published, strict=True):
        assert pq.read_table(one.path).drop_columns(["read_timestamp"]) == pq.read_table(two.path).drop_columns(["read_timestamp"])


def test_a_task_of_one_token_that_fails_leaves_no_file(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    records = [data_record(i, tx=f"a{i}", table="Users", mods=2) for i in range(30)]
    root = tmp_path / "lake"
    with ThreadPoolExecutor(1) as encoder:
        streamed = task_files.StreamedFiles(
            lambda table, sequence: task_object_name(str(root), stem="part-L1-tX", content="c", table=table, window_start=T0, sequence=sequence),
            tmp_path / "scratch", 2000, encoder,
        )  # fmt: skip
        for batch in envelope_batches(spec(tmp_path, token="a", max_rows=7), records, ControlSummary("a", T0, LAST)):
            streamed.write("a", batch)
        streamed.abort()
    assert [p for p in root.rglob("*") if p.is_file()] == []  # no file, no scratch beside their names


def test_small_tokens_held_unbuilt_land_the_same_files_as_tokens_spooled_one_by_one(tmp_path: Path) -> None:
    """A wave task builds its small tokens' rows together (build_held): the same files, rows and listing, whichever
    tokens were held and however the held ones are grouped into batches."""
    from spanner_cdc.lake.envelope import EnvelopeBatcher
    from spanner_cdc.spark.task_files import build_held

    counts = {"a": 6, "b": 0, "c": 3, "d": 40, "e": 5}

    def spools(hold: set[str], root: Path) -> list[TokenSpool]:
        out = []
        for n, (token, count) in enumerate(counts.items()):
            records = [data_record(100 * n + i, tx=f"{token}{i}", table="Users" if i % 3 else "Orders", mods=2) for i in range(count)]
            held: list[EnvelopeBatcher] = []
            spool = TokenSpool(root / "spool" / token)
            token_spec = spec(tmp_path, token=token, max_rows=64)  # d's 80 rows: a batch taken while it reads, never held
            for batch in envelope_batches(token_spec, records, ControlSummary(token, T0, LAST), held if token in hold else None):
                spool.write(batch)
            spool.close()
            assert bool(held) == (token in hold and token != "d")
            if held:
                spool.hold(held[0])
                assert spool.tables == [t for t in ("Orders", "Users") if count > (t == "Users")]
            out.append(spool)
        return out

    def land(spooled: list[TokenSpool], root: Path) -> list[Any]:
        build_held(spooled)

        def destination(table: str, sequence: int) -> str:
            return task_object_name(str(root), stem="part-L1-tX", content="c", table=table, window_start=T0, sequence=sequence)

        files = TaskFiles(destination, root / "scratch", max_bytes=1 << 30)
        for table in ("Orders", "Users"):
            files.write_table(table, [(token, s) for token, s in zip(counts, spooled, strict=True) if table in s.rows])
        return [(f.table, f.rows_by_token, pq.read_table(f.path).drop_columns(["read_timestamp"]).to_pylist()) for f in files.published]

    expected = land(spools(set(), tmp_path / "none"), tmp_path / "none")
    assert land(spools(set(counts), tmp_path / "all"), tmp_path / "all") == expected
    assert land(spools({"a", "e"}, tmp_path / "some"), tmp_path / "some") == expected
    small = spools(set(counts), tmp_path / "small")
    for spool in small:  # batches of at most 16 rows: the held tokens built in several groups
        if spool.unbuilt is not None:
            spool.unbuilt.max_rows = 16
    assert land(small, tmp_path / "small") == expected
    assert [r for _, _, rows in expected for r in rows]  # rows landed
    unbuilt = spools({"a"}, tmp_path / "unbuilt")[0]
    with pytest.raises(ValueError, match="not built"):
        list(unbuilt.batches("Users"))
