"""Stopping a child process of the dev stack: SIGTERM (or SIGKILL at once), a grace period, then SIGKILL."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any], *, kill: bool = False, grace_s: float = 30.0) -> None:
    """End `process` and reap it; one that has already exited is only reaped."""
    if process.poll() is None:
        if kill:
            process.kill()
        else:
            process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
