"""Airflow's REST API as a test's client: a token from the simple auth manager, JSON in and out."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


class Api:
    """Airflow's REST API with a token from the simple auth manager (every user is admin on the embedded stack).

    Its requests wait up to two minutes: on a loaded 2-core machine the api-server's first answers take half a minute.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        with urllib.request.urlopen(f"{url}/auth/token", timeout=120) as response:  # GET: no credentials needed
            self.token = json.load(response)["access_token"]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", method=method, data=data, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)

    def unpause(self, dag_id: str, timeout: float = 120) -> None:
        """Unpause the DAG as the UI's toggle does (PATCH /api/v2/dags/{dag_id}), once the dag-processor has parsed it
        (404 until then): one request a second, not an `airflow dags unpause` process (an Airflow start) each."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                paused = self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})["is_paused"]
                assert paused is False, f"{dag_id} is still paused"
                return
            except urllib.error.HTTPError as error:
                if error.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(1.0)
