"""Atomic publication of one token's staged Parquet files, with a journal that lets a retry remove orphans."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import PARTITION_COLUMN
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.store.models import ManifestFile

log = logging.getLogger(__name__)

# Spark names its output part-<task>-<job uuid>.c<file counter>.<codec>.parquet
_SPARK_PART = re.compile(r"^part-(\d+)-.*?\.c(\d+)(\..*)?\.parquet$")


@dataclass(frozen=True)
class StagedFile:
    table: str
    path: Path
    order: tuple[int, int, str]


def staged_files(data_dir: Path) -> list[StagedFile]:
    """The Parquet files of a staging directory written with `partitionBy(PARTITION_COLUMN)`, in a stable order."""
    files: list[StagedFile] = []
    if not data_dir.exists():
        return files
    for table_dir in sorted(data_dir.iterdir()):
        if not table_dir.is_dir() or not table_dir.name.startswith(PARTITION_COLUMN + "="):
            continue
        table = unquote(table_dir.name.split("=", 1)[1])
        for path in table_dir.iterdir():
            if path.suffix != ".parquet" or path.name.startswith(("_", ".")):
                continue
            match = _SPARK_PART.match(path.name)
            order = (int(match.group(1)), int(match.group(2)), path.name) if match else (0, 0, path.name)
            files.append(StagedFile(table, path, order))
    return sorted(files, key=lambda f: (f.table, f.order))


def write_json_atomic(path: Path, payload: object) -> None:
    """Write `payload` as JSON so that readers see either the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=1, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(
    data_dir: Path,
    layout: LakeLayout,
    *,
    lineage_id: int,
    token: str,
    range_start: datetime,
    range_end: datetime,
    window_start: datetime,
    window_end: datetime,
) -> list[ManifestFile]:
    """Move the staged files of one token's range to their deterministic published names.

    A journal naming every destination is written first, so that if the process dies before the
    store commit, the next attempt on this token can delete what this one published
    (`remove_orphans`). Each rename is atomic; a retry of the same range renames onto the same names.
    """
    sequence: dict[str, int] = {}
    moves: list[tuple[StagedFile, Path]] = []
    for staged in staged_files(data_dir):
        number = sequence.get(staged.table, 0)
        sequence[staged.table] = number + 1
        dest = layout.published_path(
            lineage_id=lineage_id,
            token=token,
            range_start=range_start,
            range_end=range_end,
            table=staged.table,
            window_start=window_start,
            sequence=number,
        )
        moves.append((staged, dest))
    write_json_atomic(
        layout.journal_path(token),
        {
            "lineage_id": lineage_id,
            "window_start": window_start.isoformat(),
            "window_end": window_end.isoformat(),
            "range_start": range_start.isoformat(),
            "range_end": range_end.isoformat(),
            "paths": [str(dest) for _, dest in moves],
        },
    )
    entry = partial(
        ManifestFile, token=token, range_start=range_start, range_end=range_end, window_start=window_start,
        window_end=window_end,
    )  # fmt: skip
    return [_move_into_place(staged, dest, entry) for staged, dest in moves]


def _move_into_place(staged: StagedFile, dest: Path, entry: Callable[..., ManifestFile]) -> ManifestFile:
    """One atomic rename to the published name, made durable, and the file's manifest entry."""
    rows = pq.read_metadata(staged.path).num_rows
    size = staged.path.stat().st_size
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged.path, dest)
    _fsync_dir(dest.parent)
    return entry(path=str(dest), rows=rows, bytes=size, table_name=staged.table)


def prepare_attempt(
    layout: LakeLayout, token: str, *, committed: Callable[[datetime, datetime], Collection[str]],
    running: Callable[[Sequence[tuple[str, int]]], bool], journal: dict[str, Any] | None,
) -> None:  # fmt: skip
    """The lake's one step before an attempt of `token` runs: what a crashed attempt journaled, published and never
    committed deleted, its staging cleared, and this attempt's names journaled (`journal`: begin_attempt's fields).

    `committed(window_start, window_end)` gives the manifest's paths of the crashed attempt's window. A wave task's
    files hold the rows of all its tokens, and its tokens journal the same names: they are deleted only once no
    token of that task is still RUNNING in that attempt (`running`), which could still commit them; otherwise they
    are left to the window's close (`markers.remove_window_orphans`) or to `lake maintain`.
    """
    old = read_journal(layout, token)
    if old is not None:
        task = [(str(t), int(a)) for t, a in old.get("task", [])]
        if task and running(task):
            clear_journal(layout, token)
        else:
            done = committed(datetime.fromisoformat(old["window_start"]), datetime.fromisoformat(old["window_end"]))
            remove_orphans(layout, token, done)
    clear_old_attempts(layout, token)
    if journal is not None:
        begin_attempt(layout, token, **journal)


def begin_attempt(
    layout: LakeLayout, token: str, *, lineage_id: int, range_start: datetime, range_end: datetime,
    window_start: datetime, window_end: datetime, stem: str | None = None, task: Sequence[tuple[str, int]] = (),
) -> None:  # fmt: skip
    """Journal, before an executor writes anything, the names its files will take (a glob over the tables of the
    names starting with `stem`, by default the token's own), so that the next attempt on this token can delete
    what a crashed one wrote but never committed; `task`: the (token, attempt)s whose rows those files may hold."""
    stem = stem or layout.file_stem(lineage_id, token, range_start, range_end)
    journal = {
        "lineage_id": lineage_id,
        "window_start": window_start.isoformat(),
        "window_end": window_end.isoformat(),
        "range_start": range_start.isoformat(),
        "range_end": range_end.isoformat(),
        "pattern": layout.window_objects_pattern(lineage_id, window_start, stem),
        "task": [list(pair) for pair in task],
    }
    storage.write_bytes(layout.journal_location(token), json.dumps(journal, indent=1, sort_keys=True).encode())


def read_journal(layout: LakeLayout, token: str) -> dict | None:
    data = storage.read_bytes(layout.journal_location(token))
    return None if data is None else json.loads(data)


def remove_orphans(layout: LakeLayout, token: str, committed: Collection[str]) -> list[str]:
    """Delete files a crashed attempt published for `token` that never reached the manifest (`committed`)."""
    journal = read_journal(layout, token)
    if journal is None:
        return []
    written = list(journal.get("paths", []))
    if journal.get("pattern"):
        written += storage.glob(journal["pattern"])
    kept = {storage.identity(p) for p in committed}
    removed = storage.remove(path for path in written if storage.identity(path) not in kept)
    if removed:
        log.warning("%s %s: removed %d file(s) published by a crashed attempt", layout.stream, token[:12], len(removed))
    clear_journal(layout, token)
    return removed


def clear_journal(layout: LakeLayout, token: str) -> None:
    storage.remove([layout.journal_location(token)])


def clear_staging(location: str | Path) -> None:
    storage.remove_tree(location)


def clear_old_attempts(layout: LakeLayout, token: str) -> None:
    """Staging left by earlier (crashed) attempts of this token; the journal stays for remove_orphans."""
    journal = layout.journal_location(token)
    storage.remove(p for p in storage.find(layout.staging_location(token)) if p != journal)
