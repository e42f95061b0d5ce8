"""Atomic publication of one token's staged Parquet files, with a journal that lets a retry remove orphans."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq

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
    manifest: list[ManifestFile] = []
    for staged, dest in moves:
        rows = pq.read_metadata(staged.path).num_rows
        size = staged.path.stat().st_size
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.path, dest)
        _fsync_dir(dest.parent)
        manifest.append(
            ManifestFile(
                path=str(dest),
                token=token,
                range_start=range_start,
                range_end=range_end,
                window_start=window_start,
                window_end=window_end,
                rows=rows,
                bytes=size,
                table_name=staged.table,
            )
        )
    return manifest


def read_journal(layout: LakeLayout, token: str) -> dict | None:
    try:
        with open(layout.journal_path(token), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def remove_orphans(layout: LakeLayout, token: str, committed: Collection[str]) -> list[str]:
    """Delete files a crashed attempt published for `token` that never reached the manifest (`committed`)."""
    journal = read_journal(layout, token)
    if journal is None:
        return []
    removed = []
    for path in journal.get("paths", []):
        if path not in committed and os.path.exists(path):
            os.remove(path)
            removed.append(path)
    if removed:
        log.warning("%s %s: removed %d file(s) published by a crashed attempt", layout.stream, token[:12], len(removed))
    clear_journal(layout, token)
    return removed


def clear_journal(layout: LakeLayout, token: str) -> None:
    try:
        os.remove(layout.journal_path(token))
    except FileNotFoundError:
        pass


def clear_staging(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
