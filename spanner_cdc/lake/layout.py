"""Where things live in the lake: published data, staging, publish journals and window markers."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spanner_cdc.errors import ConfigError, setting
from spanner_cdc.lake.storage import find, join, scheme_of

STAGING_DIR = "_staging"
WINDOWS_DIR = "_windows"
JOURNAL_NAME = "publishing.json"
TASKS_DIR = "_tasks"  # under _staging: a wave task's journal, named for its files' stem (no token's digest starts with _)
SNAPSHOT_DIR = "snapshot"  # the initial snapshot's area: snapshot/table=<T>/part-...; its marker snapshot/_snapshot.json
SNAPSHOT_MARKER = "_snapshot.json"
CURRENT_DIR = "current"  # the Parquet current states of earlier releases (now Iceberg tables under _current/): left to readers
_SAFE_TABLE = re.compile(r"^[A-Za-z0-9_\-.$]+$")
# a URL's scheme (gs://, s3://): Path() keeps it as a first component "gs:"
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/")
OUTPUT_ROOT_FIELD = setting("output_root")


def compact_time(value: datetime) -> str:
    """ISO 8601 basic format with microseconds, safe in file names: 20240501T100000000000Z."""
    return value.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


TABLE_KEY = "table_name"
WINDOW_KEY = "window_id"


def window_id(value: datetime) -> str:
    """A window start as its directory value: ISO 8601 basic format in UTC, `20240501T100000Z`
    (`.ffffff` before the `Z` only when the start has microseconds).

    Neither key is a column, and the value has no `:` to escape, so pyarrow, Spark and DuckDB all
    discover `window_id` as the same string; the typed instant is the `window_start` column.
    """
    text = value.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{text}.{value.microsecond:06d}Z" if value.microsecond else f"{text}Z"


def window_dir(table: str, window_start: datetime) -> str:
    """`table_name=<table>/window_id=<window start>`: the Hive directories of one table's window."""
    return f"{TABLE_KEY}={escape_table(table)}/{WINDOW_KEY}={window_id(window_start)}"


def token_digest(token: str) -> str:
    """A short, file-name-safe, stable stand-in for a partition token (tokens are long opaque strings)."""
    return hashlib.sha256(token.encode()).hexdigest()[:20]


def escape_table(table: str) -> str:
    if _SAFE_TABLE.match(table):
        return table
    return "".join(ch if _SAFE_TABLE.match(ch) else f"%{ord(ch):02X}" for ch in table)


def object_name(
    root: str, *, lineage_id: int, token: str, range_start: datetime, range_end: datetime, table: str,
    window_start: datetime, sequence: int = 0,
) -> str:  # fmt: skip
    """Where a token's range lands one table's rows under a lineage's `root`: deterministic in (lineage,
    token, range, table, window), so a retry writes the same object instead of a second one."""
    stem = f"part-L{lineage_id}-{token_digest(token)}-{compact_time(range_start)}-{compact_time(range_end)}"
    return join(root, window_dir(table, window_start), f"{stem}-{sequence:03d}.parquet")


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _digest(keys: Sequence[tuple[str, datetime, datetime]], size: int) -> str:
    text = "\n".join(f"{token}|{compact_time(start)}|{compact_time(end)}" for token, start, end in keys)
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def task_file_stem(lineage_id: int, keys: Sequence[tuple[str, datetime, datetime]]) -> str:
    """The names of a wave task's files start with this: deterministic in its (token, range start, range end)s."""
    return f"part-L{lineage_id}-t{_digest(keys, 20)}"


def content_digest(keys: Sequence[tuple[str, datetime, datetime]], file_bytes: int) -> str:
    """What a task's files hold: the (token, range)s of the tokens that landed in them (a token that failed is not),
    and the size past which a file rolls (it moves the cuts between a table's files)."""
    return _digest([*keys, (f"roll {file_bytes}", EPOCH, EPOCH)], 16)


def task_object_name(root: str, *, stem: str, content: str, table: str, window_start: datetime, sequence: int) -> str:
    """A wave task's `sequence`-th file of one table: `<stem>-<content>-<sequence>.parquet` in the table's window
    directory. The name says what the file holds, so an attempt that writes the same name writes the same rows."""
    return join(root, window_dir(table, window_start), f"{stem}-{content}-{sequence:03d}.parquet")


@dataclass(frozen=True)
class LakeLayout:
    """The lake of one lineage: `<output_root>/<stream>/<namespace>/`."""

    output_root: Path | str
    stream: str
    namespace: str

    @property
    def root(self) -> Path:
        """The local root as a Path (a bucket root has none: see `location`)."""
        return Path(self.output_root) / self.stream / self.namespace

    @property
    def location(self) -> str:
        """The root as text, the same for a local path and a bucket: gs://bucket/prefix/<stream>/<namespace>."""
        return join(self.output_root if isinstance(self.output_root, str) else str(Path(self.output_root)), self.stream, self.namespace)

    @property
    def is_url(self) -> bool:
        return scheme_of(self.output_root) is not None

    def window_prefix(self, table: str, window_start: datetime) -> str:
        return join(self.location, window_dir(table, window_start))

    def published_location(self, **name: Any) -> str:
        """object_name() under this lineage's root."""
        return object_name(self.location, **name)

    def window_objects_pattern(self, lineage_id: int, window_start: datetime, stem: str = "") -> str:
        """Every object a lineage's extracts of one window may have written (a token's with its `stem`)."""
        return join(self.location, f"{TABLE_KEY}=*", f"{WINDOW_KEY}={window_id(window_start)}", f"{stem or f'part-L{lineage_id}-'}*")

    def staging_location(self, token: str) -> str:
        return join(self.location, STAGING_DIR, token_digest(token))

    def journal_location(self, token: str) -> str:
        return join(self.staging_location(token), JOURNAL_NAME)

    @property
    def staging_area(self) -> str:
        """Every token's staging and every wave task's journal: `_staging/` under the lineage's root."""
        return join(self.location, STAGING_DIR)

    def task_journal_location(self, stem: str) -> str:
        return join(self.staging_area, TASKS_DIR, f"{stem}.json")

    def marker_location(self, window_start: datetime, window_end: datetime) -> str:
        return join(self.location, WINDOWS_DIR, f"{compact_time(window_start)}--{compact_time(window_end)}.json")

    @property
    def snapshot_location(self) -> str:
        return join(self.location, SNAPSHOT_DIR)

    def snapshot_table_location(self, table: str) -> str:
        return join(self.snapshot_location, f"table={escape_table(table)}")

    def snapshot_object(self, table: str, at: datetime, index: int, count: int) -> str:
        """Deterministic in (table, timestamp, partition): a re-read of the table writes the same names."""
        return join(self.snapshot_table_location(table), f"part-{compact_time(at)}-{index:05d}-of-{count:05d}.parquet")

    @property
    def snapshot_marker_location(self) -> str:
        return join(self.snapshot_location, SNAPSHOT_MARKER)


    @property
    def staging_root(self) -> Path:
        return self.root / STAGING_DIR

    @property
    def windows_dir(self) -> Path:
        return self.root / WINDOWS_DIR

    def table_window_dir(self, table: str, window_start: datetime) -> Path:
        return self.root / window_dir(table, window_start)

    def file_stem(self, lineage_id: int, token: str, range_start: datetime, range_end: datetime) -> str:
        """Deterministic in (lineage, token, range): a retry of the same range writes the same names."""
        return f"part-L{lineage_id}-{token_digest(token)}-{compact_time(range_start)}-{compact_time(range_end)}"

    def published_path(
        self,
        *,
        lineage_id: int,
        token: str,
        range_start: datetime,
        range_end: datetime,
        table: str,
        window_start: datetime,
        sequence: int,
    ) -> Path:
        stem = self.file_stem(lineage_id, token, range_start, range_end)
        return self.table_window_dir(table, window_start) / f"{stem}-{sequence:03d}.parquet"

    def token_staging(self, token: str) -> Path:
        return self.staging_root / token_digest(token)

    def journal_path(self, token: str) -> Path:
        return self.token_staging(token) / JOURNAL_NAME

    def marker_path(self, window_start: datetime, window_end: datetime) -> Path:
        return self.windows_dir / f"{compact_time(window_start)}--{compact_time(window_end)}.json"


def is_published(path: Path, root: Path) -> bool:
    """The lake contract: a Parquet file counts unless a path component starts with `_` or `.`."""
    parts = Path(path).relative_to(root).parts
    return path.suffix == ".parquet" and not any(part.startswith(("_", ".")) for part in parts)


def published_locations(root: str | Path) -> list[str]:
    """Every published Parquet file under a local or bucket root, as text, sorted."""
    base = str(root).rstrip("/") + "/"
    return [
        p for p in find(root)
        if p.endswith(".parquet") and not any(part.startswith(("_", ".")) for part in p[len(base):].split("/"))
    ]  # fmt: skip


def published_files(root: Path) -> list[Path]:
    """Every published Parquet file under `root`, sorted."""
    if not Path(root).exists():
        return []
    return sorted(p for p in Path(root).rglob("*.parquet") if is_published(p, Path(root)))


def check_output_root(output_root: str | Path) -> None:
    """Refuse, before anything is claimed or Spark started, a local lake root that cannot take the lake's files.

    Nothing is created here. A URL root (gs://, s3://) has no local directory to look at and passes:
    its own writer checks it.
    """
    text = str(output_root)
    if scheme_of(output_root) is not None or _URL_SCHEME.match(text):
        return
    problem = _local_root_problem(Path(text))
    if problem:
        raise ConfigError(OUTPUT_ROOT_FIELD, text, f"a directory this user can write, or a path where one can be created; {problem}")


def _local_root_problem(root: Path) -> str | None:
    """Why `root` cannot be (made) a writable directory, or None."""
    existing = root.absolute()
    try:
        while not existing.exists():  # False too when an ancestor is a file: the walk stops at that file
            existing = existing.parent
    except OSError as exc:  # e.g. a parent that cannot be searched
        return f"{existing} cannot be looked at ({exc.strerror})"
    if not existing.is_dir():
        return f"{existing} is a file" if existing.is_file() else f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None
