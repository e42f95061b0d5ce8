"""The installed dependency set is consistent: pip agrees with itself, and no two distributions share a file."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyspark

# Measured on a fresh `make install`: no two distributions install the same file, so nothing is
# allowed to overlap. A path added here needs a reason (e.g. a namespace package's shared
# `__init__.py` that every distribution of the namespace ships identically).
ALLOWED_OVERLAPS: dict[str, str] = {}


def _owners() -> dict[Path, set[str]]:
    """Each installed file (absolute path) and the distributions whose RECORD lists it."""
    owners: dict[Path, set[str]] = defaultdict(set)
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]  # parsed anew on every access
        for file in dist.files or ():
            # byte-code caches are written by whoever imports or installs first and follow their
            # source file, whose own overlap is caught; .dist-info directories are per distribution
            if "__pycache__" in file.parts:
                continue
            owners[Path(os.path.normpath(dist.locate_file(file)))].add(name)
    return owners


def _allowed(path: Path) -> bool:
    return any(path.as_posix().endswith("/" + allowed) for allowed in ALLOWED_OVERLAPS)


def test_no_two_distributions_install_the_same_file() -> None:
    shared = {path: names for path, names in _owners().items() if len(names) > 1 and not _allowed(path)}
    by_pair: dict[tuple[str, ...], list[Path]] = defaultdict(list)
    for path, names in shared.items():
        by_pair[tuple(sorted(names))].append(path)
    assert not by_pair, "; ".join(
        f"{' and '.join(pair)} both install {len(paths)} file(s), e.g. {sorted(paths)[0]}" for pair, paths in by_pair.items()
    )


def test_pyspark_is_the_version_pip_installed() -> None:
    assert pyspark.__version__ == importlib.metadata.version("pyspark")


def _record_hash(path: Path, mode: str) -> str:
    """A file's digest the way a wheel's RECORD writes it (urlsafe base64, no padding)."""
    return base64.urlsafe_b64encode(hashlib.new(mode, path.read_bytes()).digest()).rstrip(b"=").decode()


def test_pyspark_python_files_are_the_ones_its_record_lists() -> None:
    """Another distribution writing into pyspark/ (or removing its files on uninstall) changes them."""
    dist = importlib.metadata.distribution("pyspark")
    checked, wrong = 0, []
    for file in dist.files or ():
        if file.suffix != ".py" or file.hash is None:
            continue
        path = Path(dist.locate_file(file))
        checked += 1
        if not path.exists() or _record_hash(path, file.hash.mode) != file.hash.value:
            wrong.append(str(file))
    assert checked > 100  # the RECORD was read
    assert not wrong, f"{len(wrong)} of pyspark's files differ from its RECORD, e.g. {wrong[:3]}"


def test_pip_check_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
