"""Local object store servers for tests and benchmarks: S3 (moto's server mode) and GCS (gcp-storage-emulator),
each a subprocess on loopback, reached only through the standard endpoint variables."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spanner_cdc.devstack.processes import stop_process

BUCKET = "spanner-cdc-lake"
# moto takes any key; the AWS clients want some in the environment (as in any deployment)
S3_ENV = {"AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class ObjectStore:
    scheme: str
    endpoint: str
    env: dict[str, str]

    def root(self, prefix: str) -> str:
        return f"{self.scheme}://{BUCKET}/{prefix}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(command: list[str], endpoint: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{command[0]} exited: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return process
        except OSError as exc:
            if getattr(exc, "code", None):  # an HTTP error status: the server answers
                return process
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{command[0]} did not answer on {endpoint}: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    stop_process(process, grace_s=10)


@contextmanager
def running_s3_server(log_dir: Path) -> Iterator[ObjectStore]:
    """moto's server mode on a free loopback port, with the lake's bucket created."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = _serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], endpoint, log_dir / "moto.log")
    try:
        import boto3

        keys = {"aws_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"]}
        boto3.client("s3", endpoint_url=endpoint, region_name=S3_ENV["AWS_DEFAULT_REGION"], **keys).create_bucket(Bucket=BUCKET)
        yield ObjectStore("s3", endpoint, {**S3_ENV, "AWS_ENDPOINT_URL": endpoint})
    finally:
        _stop(process)


@contextmanager
def running_gcs_server(log_dir: Path) -> Iterator[ObjectStore]:
    """gcp-storage-emulator (the GCS JSON API) on a free loopback port, in memory, with the lake's bucket."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    binary = str(Path(sys.executable).with_name("gcp-storage-emulator"))
    command = [binary, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--default-bucket", BUCKET]
    process = _serve(command, endpoint, log_dir / "gcs.log")
    try:
        yield ObjectStore("gs", endpoint, {"STORAGE_EMULATOR_HOST": endpoint})
    finally:
        _stop(process)
