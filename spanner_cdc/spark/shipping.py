"""How the executors get the package: the `spark_py_files` setting (a zip of spanner_cdc, shipped by Spark itself), its
builder, and the one line that names the setting when an executor cannot import the package."""

from __future__ import annotations

import os
import zipfile
from importlib.resources import files
from pathlib import Path
from typing import Any

SETTING = "spark_py_files"
ENV = "SPANNER_CDC_SPARK_PY_FILES"
HINT = (
    f"the Spark executors cannot import spanner_cdc: set {SETTING} ({ENV}) to the zip `spanner-cdc spark-package "
    "OUT.zip` builds (shipped with spark.submit.pyFiles, or Spark Connect's addArtifacts), or install spanner-cdc "
    "in the executors' Python"
)
# What an executor's Python reports when the package is not on its path (a Python worker's traceback, in the job error).
MISSING = ("No module named 'spanner_cdc'", 'No module named "spanner_cdc"')


def configured() -> str | None:
    """The zip named by the setting (environment or config file), or None: the executors have the package already."""
    from spanner_cdc.settings import load_settings

    return load_settings({}).spark_py_files


def classic_conf() -> dict[str, str]:
    """Spark's own setting that ships the zip to a classic driver's executors (and puts it on their sys.path)."""
    shipped = configured()
    return {"spark.submit.pyFiles": shipped} if shipped else {}


def ship_to_connect(session: Any) -> None:
    """Add the zip to a Spark Connect session's artifacts as a Python file (on its workers' sys.path)."""
    shipped = configured()
    if shipped:
        session.addArtifacts(shipped, pyfile=True)


def explain(job_error: BaseException) -> str | None:
    """HINT when the job failed because an executor could not import the package; None for any other failure."""
    text = str(job_error)
    return HINT if any(marker in text for marker in MISSING) else None


def build_package(out: Path) -> Path:
    """Write the installed spanner_cdc package as a zip an executor imports from (pure Python; its dependencies
    must be in the executors' Python, as pyspark's own are)."""
    root = Path(str(files("spanner_cdc")))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("spanner_cdc") / path.relative_to(root))
    tmp.replace(out)
    return out
