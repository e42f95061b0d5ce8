"""Checks a command runs before it starts anything (Postgres, Spark, the Spanner client): each names what is at fault."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from spanner_cdc.errors import ConfigError, SourceError, SparkStartError, UsageError

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings

WAIT_PROGRESS_S = 10.0  # a wait for a window's end says so at least this often
PROBE_TIMEOUT_S = 3.0  # a TCP connect to a local or LAN server answers in milliseconds; a mistyped host must not wait long
CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
CONNECT_DEFAULT_PORT = 15002  # Spark Connect's port when an sc:// URL gives none


def require_stream(settings: Settings) -> str:
    if not settings.stream:
        raise ConfigError("--stream", None, "a change stream name (or set SPANNER_CDC_STREAM)")
    return settings.stream


def check_window(start: datetime, end: datetime, start_flag: str = "--window-start", end_flag: str = "--window-end") -> None:
    if end <= start:
        raise UsageError(f"{end_flag} {end.isoformat()} must be after {start_flag} {start.isoformat()}")


def _probe(host: str, port: int) -> str | None:
    """None when something accepts a TCP connection at host:port within PROBE_TIMEOUT_S, else why not."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except TimeoutError:
        return f"no answer within {PROBE_TIMEOUT_S:.0f} s"
    except socket.gaierror as exc:
        return f"unknown host ({exc.strerror})"
    except OSError as exc:
        return exc.strerror or str(exc)


def _host_port(text: str, default_port: int | None) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep:
        return (text, default_port) if default_port is not None and text else None
    host = host.strip("[]")
    return (host, int(port)) if host and port.isdigit() else None


def check_emulator_host(settings: Settings) -> None:
    """A SPANNER_EMULATOR_HOST that names no listening server: one line now, not the client's deadline later."""
    host = settings.emulator_host
    if not host:
        return
    address = _host_port(host, None)
    if address is None:
        raise ConfigError("SPANNER_EMULATOR_HOST", host, "host:port of the Spanner emulator or the local server")
    reason = _probe(*address)
    if reason is not None:
        raise SourceError(
            f"cannot reach Spanner at SPANNER_EMULATOR_HOST={host} ({reason}): check the variable and that the emulator "
            "or local server runs there"
        )


def check_credentials_file(settings: Settings) -> None:
    """GOOGLE_APPLICATION_CREDENTIALS naming no file (the client would only say it found no credentials)."""
    path = os.environ.get(CREDENTIALS_ENV)
    if settings.emulator_host or not path:
        return
    if not os.path.isfile(path):
        raise ConfigError(CREDENTIALS_ENV, path, "the path of an existing service account key file (or unset it to use "
                                                 "the default credentials)")


def check_spark_master(settings: Settings) -> None:
    """A spark:// or sc:// master with nothing listening: one line naming the URL within seconds, not a silent wait."""
    from spanner_cdc.masking import mask_spark_master

    master = settings.spark_master
    scheme, _, rest = master.partition("://")
    if scheme not in ("spark", "sc"):
        return
    authority = rest.split("/", 1)[0].split(";", 1)[0]
    address = _host_port(authority, CONNECT_DEFAULT_PORT if scheme == "sc" else None)
    if address is None:
        return  # the settings' own check names the accepted forms
    reason = _probe(*address)
    if reason is not None:
        kind = "Spark Connect server" if scheme == "sc" else "Spark master"
        raise SparkStartError(f"cannot reach the {kind} at {mask_spark_master(master)} ({reason}): check --spark-master "
                              "(SPANNER_CDC_SPARK_MASTER) and that the server runs there")


def check_services(settings: Settings) -> None:
    """The services a run will connect to, each probed once: Spanner (or its credentials file) and Spark."""
    check_credentials_file(settings)
    check_emulator_host(settings)
    check_spark_master(settings)


def check_port_free(port: int, flag: str = "--port") -> None:
    """A port a server of ours will listen on, free now (a taken one would fail later as "exited with 3")."""
    if not 1 <= port <= 65535:
        raise ConfigError(flag, port, "a port number in [1, 65535]")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no taker; a listener is
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UsageError(f"{flag} {port}: 127.0.0.1:{port} is taken ({exc.strerror}); stop what listens there or "
                             f"give another {flag}") from None


def wait_for_window_end(database: Any, end: datetime, *, wait: bool, out: TextIO) -> None:
    """A window whose end Spanner's clock has not reached: refused, naming when it can be extracted, or (`wait`) waited
    for with a line on `out` every WAIT_PROGRESS_S; a change stream query to a future end would wait without a word."""
    from spanner_cdc.source.client import server_now
    from spanner_cdc.times import iso_z

    while (now := server_now(database)) < end:
        left = (end - now).total_seconds()
        if not wait:
            raise UsageError(
                f"--window-end {iso_z(end)} is in the future (Spanner's time is {iso_z(now)}): the window can be extracted "
                f"from {iso_z(end)}, in {left:.0f} s; run it then, or give --wait to wait for it"
            )
        out.write(f"waiting for the window's end {iso_z(end)}: Spanner's time is {iso_z(now)}, {left:.0f} s to go\n")
        out.flush()
        time.sleep(min(WAIT_PROGRESS_S, max(0.05, left)))
