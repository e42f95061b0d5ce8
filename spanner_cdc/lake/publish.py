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
from urllib.parse import unquote

import pyarrow.parquet as pq

from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import PARTITION_COLUMN
from spanner_cdc.lake.layout import TASKS_DIR, LakeLayout, token_digest
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
    running: Callable[[Sequence[tuple[str, int]]], bool],
) -> None:  # fmt: skip
    """The lake's one step before an attempt of `token` runs on its own staging (the `spark` writer): what a crashed
    attempt journaled, published and never committed deleted, and its staging cleared.

    `committed(window_start, window_end)` gives the manifest's paths of the crashed attempt's window. A journal of an
    earlier release's wave task (its `task`: the (token, attempt)s whose rows its files hold) deletes them only once no
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


def begin_task(
    layout: LakeLayout, stem: str, *, lineage_id: int, window_start: datetime, window_end: datetime,
    task: Sequence[tuple[str, int]],
) -> None:  # fmt: skip
    """Journal, before a wave task's executor writes anything, the names its files will take (the window's objects
    whose names start with `stem`) and the (token, attempt)s whose rows they may hold: one journal per task, so that
    the next attempt of any of those tokens can delete what the task published but never committed
    (`sweep_crashed`). `clear_tasks` once all of them are committed."""
    journal = {
        "lineage_id": lineage_id,
        "window_start": window_start.isoformat(),
        "window_end": window_end.isoformat(),
        "pattern": layout.window_objects_pattern(lineage_id, window_start, stem),
        "task": [list(pair) for pair in task],
    }
    storage.write_bytes(layout.task_journal_location(stem), json.dumps(journal).encode())


def clear_tasks(layout: LakeLayout, stems: Collection[str]) -> None:
    """The journals of these tasks, whose tokens are all committed: their files are the manifest's now."""
    storage.remove(layout.task_journal_location(stem) for stem in stems)


def sweep_crashed(
    layout: LakeLayout, tokens: Collection[str], *, committed: Callable[[datetime, datetime], Collection[str]],
    running: Callable[[Sequence[tuple[str, int]]], bool],
) -> dict[str, Exception]:
    """Before a wave's attempts of `tokens` begin: what crashed attempts left, deleted, found by one listing of the
    staging area rather than by a request per token. Returns the tokens whose cleanup failed, with why.

    - Every wave task's journal (`begin_task`) whose (token, attempt)s are none of them RUNNING any more (`running`):
      no attempt can commit its files now, so those the manifest of its window (`committed(window_start,
      window_end)`) does not list are deleted, then the journal. A journal with an attempt still RUNNING (another
      run's task, or one whose commit is late) is left, with its files; the window's close
      (`markers.remove_window_orphans`) or `lake maintain` deletes files nobody committed, and a later sweep the journal.
    - A token of `tokens` with its own staging (a `spark` writer's attempt, or a journal of an earlier release):
      `prepare_attempt`, as before a token's own job.
    """
    by_digest = {token_digest(token): token for token in tokens}
    base = storage.identity(layout.staging_area) + "/"
    journals: list[str] = []
    staged: set[str] = set()
    for location in storage.find(layout.staging_area):
        parts = storage.identity(location).removeprefix(base).split("/")
        if parts[0] == TASKS_DIR and len(parts) == 2 and parts[1].endswith(".json") and not parts[1].startswith("."):
            journals.append(location)
        elif parts[0] in by_digest:
            staged.add(by_digest[parts[0]])
    failures: dict[str, Exception] = {}
    wanted = set(by_digest.values())
    for location in journals:
        failures.update(_sweep_task(location, wanted, committed, running))
    for token in sorted(staged - failures.keys()):
        try:
            prepare_attempt(layout, token, committed=committed, running=running)
        except Exception as exc:  # noqa: BLE001 - this token's failure, for its caller to record
            failures[token] = exc
    return failures


def _sweep_task(
    location: str, tokens: Collection[str], committed: Callable[[datetime, datetime], Collection[str]],
    running: Callable[[Sequence[tuple[str, int]]], bool],
) -> dict[str, Exception]:
    """One task journal of `sweep_crashed`: {} when handled or left; when its cleanup failed, the failure of the tokens
    of `tokens` it names (another run's journal that could not be swept is only a warning: a later sweep retries).
    A journal that cannot be read fails the whole sweep (it may name any token)."""
    name = location.rsplit("/", 1)[-1]
    data = storage.read_bytes(location)
    if data is None:  # cleared since the listing (its task committed)
        return {}
    try:
        journal = json.loads(data)
        task = [(str(t), int(a)) for t, a in journal["task"]]
    except (ValueError, KeyError, TypeError) as exc:  # not a journal this project wrote: never ours to act on
        log.warning("%s: not a wave task's journal, left alone: %s", name, exc)
        return {}
    try:
        if running(task):
            return {}
        done = committed(datetime.fromisoformat(journal["window_start"]), datetime.fromisoformat(journal["window_end"]))
        removed = storage.remove_unlisted(storage.glob(journal["pattern"]), done)
        if removed:
            log.warning("%s: removed %d file(s) a crashed wave task published", name, len(removed))
        storage.remove([location])
    except Exception as exc:  # noqa: BLE001 - the failure of every token of ours the task held
        mine = [token for token, _ in task if token in tokens]
        if not mine:
            log.warning("%s: could not sweep a wave task's journal: %s", name, exc)
        return dict.fromkeys(mine, exc)
    return {}


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
    removed = storage.remove_unlisted(written, committed)
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
