"""How the embedded Airflow's services are stopped: SIGTERM to each one's process group, then SIGKILL after its grace."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys

import pytest

from spanner_cdc.devstack import airflow_env

# a service that stops on SIGTERM, and one whose handler was lost (as the dag-processor's can be): it ignores it
STOPS = "import time; print('ready', flush=True); time.sleep(600)"
IGNORES = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"


def service(code: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"  # its handler is in place
    return process


def test_a_service_that_ignores_sigterm_is_killed_after_its_own_grace_not_the_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(airflow_env, "SHORT_GRACE_S", {"dag-processor": 1.0})
    processes = {"scheduler": service(STOPS), "dag-processor": service(IGNORES)}
    with caplog.at_level(logging.INFO, logger=airflow_env.log.name):
        airflow_env._stop(processes)
    for process in processes.values():
        process.stdout.close()  # type: ignore[union-attr]
    assert processes["scheduler"].returncode == -signal.SIGTERM
    assert processes["dag-processor"].returncode == -signal.SIGKILL
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [("INFO", "airflow dag-processor did not stop within 1 s: killing it")], said
