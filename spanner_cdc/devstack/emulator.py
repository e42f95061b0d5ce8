"""Find and run Google's Cloud Spanner emulator (`emulator_main`) as a subprocess, with the suite's and demo's settings."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanner_cdc.devstack.processes import stop_process
from spanner_cdc.errors import SpannerCdcError

if TYPE_CHECKING:
    from spanner_cdc.devstack.workload import GroundTruthRow

log = logging.getLogger(__name__)

BINARY_ENV = "SPANNER_CDC_EMULATOR_BINARY"
INSTALL_HINT = (
    "install Google's Cloud Spanner emulator with `gcloud components install cloud-spanner-emulator` (or Debian's "
    f"google-cloud-cli-spanner-emulator), or run its image gcr.io/cloud-spanner-emulator/emulator, or set {BINARY_ENV} "
    "to its emulator_main"
)
# The emulator's version the suite runs on these machines (the gcloud SDK's component) and docker-compose.yml's image.
EMULATOR_VERSION = "1.5.28"
# A partition token lives TOKEN_ALIVE_SECONDS to twice that before the emulator splits or merges it (its default is
# 20-40 s): the suite and the demo see several lineage changes within a minute. docker-compose.yml's emulator profile
# passes the same flag to the image's gateway (tests/unit/test_compose.py holds them equal).
TOKEN_ALIVE_SECONDS = 2
EMULATOR_FLAGS = (f"--override_change_stream_partition_token_alive_seconds={TOKEN_ALIVE_SECONDS}",)
_READY = "Server address: "


class EmulatorNotFound(SpannerCdcError):
    """Google's emulator is not installed where it is looked for."""


def find_emulator(binary: str | None = None) -> Path:
    """`binary`, else $SPANNER_CDC_EMULATOR_BINARY, else emulator_main under the gcloud SDK's folder."""
    named = binary or os.environ.get(BINARY_ENV)
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EmulatorNotFound(f"{BINARY_ENV}={named!r} is not an executable emulator_main; {INSTALL_HINT}")
        return path
    for root in _sdk_roots():
        path = root / "bin" / "cloud_spanner_emulator" / "emulator_main"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise EmulatorNotFound(f"Google's Cloud Spanner emulator was not found; {INSTALL_HINT}")


@functools.cache
def _sdk_roots() -> tuple[Path, ...]:
    """Where the gcloud SDK is: the folder its `gcloud` lives in (bin/ under the root), else what `gcloud info` says
    (several seconds, so asked only when the first is not it), else the Debian package's folder."""
    roots = [Path("/usr/lib/google-cloud-sdk")]
    gcloud = shutil.which("gcloud")
    if gcloud:
        beside = Path(gcloud).resolve().parent.parent
        if (beside / "bin" / "cloud_spanner_emulator").is_dir():
            return (beside, *roots)
        try:
            found = subprocess.run([gcloud, "info", "--format=value(installation.sdk_root)"], capture_output=True,
                                   text=True, timeout=60, check=False).stdout.strip()  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            found = ""
        if found:
            roots.insert(0, Path(found))
    return tuple(roots)


class SpannerEmulator:
    """One emulator process on a free port of `bind`; `host` is "127.0.0.1:PORT" once started. State is in memory."""

    def __init__(
        self, binary: Path | str | None = None, bind: str = "127.0.0.1", port: int = 0, extra_args: Sequence[str] = EMULATOR_FLAGS,
        startup_timeout: float = 60.0, log_path: Path | str | None = None,
    ) -> None:  # fmt: skip
        self.binary = Path(binary) if binary is not None else find_emulator()
        self.bind = bind
        self.port = port
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="spanner-emulator-", suffix=".log")[1])
        self._process: subprocess.Popen[str] | None = None

    @property
    def host(self) -> str:
        if self._process is None:
            raise SpannerCdcError("the Spanner emulator is not running: call start() first")
        return f"{self.bind}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        return [str(self.binary), "--host_port", f"{self.bind}:{self.port}", *self.extra_args]

    def start(self) -> SpannerEmulator:
        if self.running:
            return self
        # the emulator logs to stderr: its "Server address: HOST:PORT" line says it listens, and on which port
        process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
        self._process = process
        address: list[str] = []
        got = threading.Event()

        def copy_stderr() -> None:
            assert process.stderr is not None
            with self.log_path.open("a", encoding="utf-8") as out:
                for line in process.stderr:
                    out.write(line)
                    out.flush()
                    if not address and _READY in line:
                        address.append(line.rsplit(_READY, 1)[1].strip())
                        got.set()
            got.set()

        threading.Thread(target=copy_stderr, name="spanner-emulator-stderr", daemon=True).start()
        got.wait(self.startup_timeout)
        if not address:
            self._terminate()
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise SpannerCdcError(f"the Spanner emulator {self.binary} did not start (log {self.log_path}):\n{tail}")
        self.port = int(address[0].rsplit(":", 1)[1])
        log.info("Spanner emulator running at %s (pid %s, log %s)", self.host, process.pid, self.log_path)
        return self

    def _terminate(self) -> None:
        if self._process is not None:
            stop_process(self._process)
        self._process = None

    def stop(self) -> None:
        self._terminate()

    def env(self) -> dict[str, str]:
        return {"SPANNER_EMULATOR_HOST": self.host}

    def __enter__(self) -> SpannerEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def as_recorded(row: GroundTruthRow) -> GroundTruthRow:
    """A workload change as the emulator's change streams record it: TIMESTAMP values truncated to the second, no
    transaction tag (two of its listed limits; docs/local-spanner.md)."""
    from spanner_cdc.devstack.workload_schema import TABLES_BY_NAME

    types = TABLES_BY_NAME[row.table].types

    def recorded(values: dict[str, Any]) -> dict[str, Any]:
        return {k: _whole_seconds(v) if types.get(k) == "TIMESTAMP" and isinstance(v, str) else v for k, v in values.items()}

    return dataclasses.replace(row, new_values=recorded(row.new_values), old_values=recorded(row.old_values), transaction_tag="")


def _whole_seconds(value: str) -> str:
    """An RFC 3339 UTC timestamp ("...T05:06:07.123456Z") truncated to the second ("...T05:06:07Z")."""
    return value[:19] + "Z" if len(value) > 20 and value[19] == "." else value


def record_ground_truth_as_the_emulator(path: Path) -> None:
    """Rewrite a workload's ground-truth file (workload.run_workload) as the emulator records its changes."""
    from spanner_cdc.devstack.workload import load_ground_truth

    lines = []
    for row in map(as_recorded, load_ground_truth(path)):
        data = dataclasses.asdict(row)
        data["commit_timestamp"] = row.commit_timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(json.dumps(data, separators=(",", ":")) + "\n")
    path.write_text("".join(lines), encoding="utf-8")
