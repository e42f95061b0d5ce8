"""run_dags: a caller interrupted while the DAG runs go on takes their whole process tree down with it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from spanner_cdc.devstack import airflow_env
from spanner_cdc.orchestration.dag_runs import PROGRESS

# Stands in for the dag_runs child (whatever its arguments): starts a grandchild, as a task starts a Spark driver,
# reports progress, then runs on.
CHILD = f"""
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print({PROGRESS!r} + str(grandchild.pid), flush=True)
time.sleep(600)
"""


class Interrupted(Exception):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone but not yet reaped by its parent
        return stat.read().split()[2] != "Z"


def test_an_interrupted_caller_leaves_no_dag_run_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    launcher = tmp_path / "python"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    launcher.chmod(0o755)
    monkeypatch.setattr(airflow_env.sys, "executable", str(launcher))
    seen: list[int] = []

    def interrupt(line: str) -> None:
        seen.append(int(line))
        raise Interrupted

    with pytest.raises(Interrupted):
        airflow_env.run_dags(airflow_env.AirflowEnv(home=tmp_path, env={}), [], log_path=tmp_path / "runs.log", on_progress=interrupt)
    deadline = time.monotonic() + 10
    while seen and _alive(seen[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert seen and not _alive(seen[0]), "the DAG runs' grandchild outlived the interrupted caller"
