"""The Python daemon a local or standalone driver's workers fork from: the executor side imported, frozen, once."""

from __future__ import annotations

import subprocess
import sys

from spanner_cdc.spark.session import classic_conf

CHECK = """
import gc, sys
from spanner_cdc.spark import worker_daemon
before = {name: name in sys.modules for name in WANTED}
worker_daemon.preimport()
print(before, {name: name in sys.modules for name in WANTED}, gc.get_freeze_count() > 0)
"""
WANTED = ("google.cloud.spanner", "pyarrow.parquet", "pandas", "pyspark.worker", "spanner_cdc.spark.executor")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", f"WANTED = {WANTED!r}\n{code}"], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip() + done.stderr


def test_a_driver_started_here_forks_its_workers_from_the_daemon_that_imported_their_modules() -> None:
    assert classic_conf("local[2]")["spark.python.daemon.module"] == "spanner_cdc.spark.worker_daemon"
    out = _run(CHECK)
    none, every = ({name: False for name in WANTED}, {name: True for name in WANTED})
    assert out.startswith(f"{none} {every} True"), out  # pandas too: pyarrow imports it at its first array


def test_a_failed_import_leaves_the_workers_to_import_their_own() -> None:
    broken = "import builtins\nreal = builtins.__import__\n" \
             "builtins.__import__ = lambda name, *a, **k: (_ for _ in ()).throw(ImportError('no ' + name)) if name == 'pyarrow' else real(name, *a, **k)\n"  # fmt: skip
    out = _run(broken + CHECK)
    assert "preimport failed" in out and "no pyarrow" in out, out
