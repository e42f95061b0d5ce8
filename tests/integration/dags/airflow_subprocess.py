"""Run Python snippets under Airflow in a child process, so the test process never configures Airflow itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DAGS = REPO / "dags"


def airflow_env(airflow_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean Airflow environment: no examples, our dags folder, a throwaway AIRFLOW_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SPANNER_CDC_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "PYTHONPATH": str(REPO),
            "XDG_RUNTIME_DIR": env.get("XDG_RUNTIME_DIR", "/tmp"),
        }
    )
    env.update(extra or {})
    return env


def run_json(code: str, env: Mapping[str, str], timeout: float = 300) -> Any:
    """Run `code` (which prints one JSON document on its last stdout line) and return that document."""
    result = subprocess.run(
        [sys.executable, "-c", code], env=dict(env), capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stderr[-4000:]}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])
