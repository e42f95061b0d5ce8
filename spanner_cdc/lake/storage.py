"""The lake's storage: a local path, gs:// or s3:// through fsspec, with the standard credentials and endpoints."""

from __future__ import annotations

import glob as _glob
import os
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spanner_cdc.settings import LAKE_SCHEMES

# Endpoints and credentials come from where the cloud clients look for them: for GCS, Application
# Default Credentials and STORAGE_EMULATOR_HOST (read by gcsfs); for S3, the AWS environment / profile
# and AWS_ENDPOINT_URL (read by botocore). Nothing here is configured by the project itself.
GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL"

_filesystems: dict[tuple[Any, ...], Any] = {}
_filesystems_lock = threading.Lock()


def scheme_of(location: str | Path) -> str | None:
    """`gs` or `s3` for a bucket location, None for a local path."""
    if isinstance(location, Path):
        return None
    head, sep, _ = location.partition("://")
    return head if sep and head in LAKE_SCHEMES else None


def join(root: str | Path, *parts: str) -> str:
    """`root/part/...` as text: object stores have no path type, and a local root keeps its own form."""
    return "/".join([str(root).rstrip("/") or "/", *(p.strip("/") for p in parts if p)])


def identity(location: str | Path) -> str:
    """One text per file whatever its spelling (a local path relative or absolute), to compare listings with the manifest."""
    return str(location) if scheme_of(location) else os.path.abspath(location)


def filesystem(location: str | Path) -> Any:
    """The fsspec filesystem of a location, one per process and endpoint (listings are never cached:
    other processes write the same prefixes)."""
    scheme = scheme_of(location)
    key = (scheme, os.getpid(), os.environ.get(GCS_EMULATOR_ENV), os.environ.get(S3_ENDPOINT_ENV))
    with _filesystems_lock:
        fs = _filesystems.get(key)
        if fs is None:
            fs = _filesystems[key] = _new_filesystem(scheme)
        return fs


def _new_filesystem(scheme: str | None) -> Any:
    if scheme is None:
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem(auto_mkdir=True)
    if scheme == "gs":
        # gcsfs.core's filesystem speaks the JSON API only; the package's default one (its experimental
        # zonal / HNS support) also calls the storage control API over gRPC, which an emulator has not.
        from gcsfs.core import GCSFileSystem

        # An emulator takes no credentials; the Cloud client libraries do the same (AnonymousCredentials).
        options: dict[str, Any] = {"token": "anon"} if os.environ.get(GCS_EMULATOR_ENV) else {}
        return GCSFileSystem(use_listings_cache=False, skip_instance_cache=True, **options)
    import s3fs

    return s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)


def bare(location: str | Path) -> str:
    """The location as its filesystem names it (fsspec drops the scheme)."""
    text = str(location)
    return text.split("://", 1)[1] if scheme_of(text) else text


def _with_scheme(scheme: str | None, bare: str) -> str:
    return f"{scheme}://{bare}" if scheme else bare


def exists(location: str | Path) -> bool:
    return bool(filesystem(location).exists(bare(location)))


def read_bytes(location: str | Path) -> bytes | None:
    """The object's content, or None when there is none."""
    try:
        return bytes(filesystem(location).cat_file(bare(location)))
    except FileNotFoundError:
        return None


def write_bytes(location: str | Path, data: bytes) -> None:
    """Write a whole object so that readers see the old one or the whole new one, never a part.

    An object store's upload is visible only once complete; a local file is written under a hidden
    name beside its destination, synced, then renamed over it.
    """
    if scheme_of(location) is None:
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        return
    filesystem(location).pipe_file(bare(location), data)


def scratch_for(destination: str | Path, scratch_dir: Path) -> Path:
    """Where to write a file before `put_file` publishes it at `destination`: beside it (hidden) when local,
    so the rename is atomic; in the executor's own scratch directory when the destination is an object."""
    if scheme_of(destination) is None:
        dest = Path(destination)
        dest.parent.mkdir(parents=True, exist_ok=True)
        return dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    scratch_dir.mkdir(parents=True, exist_ok=True)
    return scratch_dir / f"{uuid.uuid4().hex}.parquet"


def put_file(scratch: Path, destination: str | Path) -> int:
    """Publish a finished scratch file at `destination` whole (rename, or one upload); returns its size."""
    size = scratch.stat().st_size
    if scheme_of(destination) is None:
        with open(scratch, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(scratch, destination)
        return size
    try:
        filesystem(destination).put_file(str(scratch), bare(destination))
    finally:
        scratch.unlink(missing_ok=True)
    return size


def size_of(location: str | Path) -> int:
    return int(filesystem(location).size(bare(location)))


def glob(pattern: str | Path) -> list[str]:
    """Locations matching a glob pattern (`*` within one path component), sorted, with their scheme."""
    scheme = scheme_of(pattern)
    if scheme is None:  # the stdlib keeps the pattern's own form (relative stays relative, as in the manifest)
        return sorted(_glob.glob(str(pattern)))
    fs = filesystem(pattern)
    fs.invalidate_cache()
    return sorted(_with_scheme(scheme, p) for p in fs.glob(bare(pattern)))


def find(root: str | Path) -> list[str]:
    """Every file under `root` (recursively), sorted, with its scheme; none when `root` does not exist."""
    scheme = scheme_of(root)
    if scheme is None:
        return sorted(str(p) for p in Path(root).rglob("*") if p.is_file()) if Path(root).is_dir() else []
    fs = filesystem(root)
    fs.invalidate_cache()
    try:
        return sorted(_with_scheme(scheme, p) for p in fs.find(bare(root)))
    except FileNotFoundError:
        return []


def remove(locations: Iterable[str | Path]) -> list[str]:
    """Delete these files (those already gone are skipped); returns what was deleted."""
    removed = []
    for location in locations:
        fs = filesystem(location)
        try:
            if scheme_of(location) and not fs.exists(bare(location)):  # S3 deletes a missing key silently
                continue
            fs.rm_file(bare(location))
        except FileNotFoundError:
            continue
        removed.append(str(location))
    return removed


def remove_unlisted(locations: Iterable[str | Path], listed: Iterable[str | Path]) -> list[str]:
    """Delete the files of `locations` that `listed` does not name in any spelling (`identity`); returns what was
    deleted: a crashed attempt's files, kept where a manifest lists them."""
    kept = {identity(location) for location in listed}
    return remove(location for location in locations if identity(location) not in kept)


def remove_tree(location: str | Path) -> None:
    """Delete everything under `location` (staging of an attempt); nothing there is fine."""
    fs = filesystem(location)
    try:
        fs.rm(bare(location), recursive=True)
    except FileNotFoundError:
        pass


def modified(location: str | Path) -> datetime:
    """When the object was last written, in UTC (a local file's mtime, a bucket object's last modification)."""
    if scheme_of(location) is None:
        return datetime.fromtimestamp(os.stat(location).st_mtime, UTC)
    info = filesystem(location).info(bare(location))
    for key in ("mtime", "LastModified", "updated", "last_modified"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, str) and value:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
    raise OSError(f"{location}: the object store gave no modification time ({sorted(info)})")


def open_input(location: str | Path) -> Any:
    """The file opened for reading (a local file, or a bucket object read in ranges)."""
    if scheme_of(location) is None:
        return open(location, "rb")
    return filesystem(location).open(bare(location), "rb")
