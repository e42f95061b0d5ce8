"""The local server's control protocol (fault injection, forced splits, merges and moves, status): service and client."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from spanner_cdc.errors import SpannerCdcError
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.values import format_timestamp

SERVICE = "spanner_cdc.local.Control"


class ControlError(SpannerCdcError):
    """The local server refused a control request, or could not be reached."""


class ControlService:
    """JSON request / response handlers; `engine` is the change stream engine, `status` the server's summary."""

    def __init__(
        self, engine: Any, faults: Any, status: Callable[[], dict[str, Any]], commit_lock: Any = None, clock: Any = None,
        sweep_ttl: Callable[[], int] | None = None, requests: Any = None,
    ) -> None:
        self.engine = engine
        self.requests = requests  # request_log.RequestLog of the Spanner service
        self.sweep_ttl = sweep_ttl
        self.clock = clock
        self.faults = faults
        self.status = status
        # splits and merges take a commit timestamp too: hold the server's commit lock so time stays in log order
        self._lock = commit_lock if commit_lock is not None else threading.Lock()

    def fail_next_reads(self, request: dict[str, Any]) -> dict[str, Any]:
        reads, after_rows = int(request.get("reads", 1)), int(request.get("after_rows", 0))
        if reads < 0 or after_rows < 0:
            raise QueryError("INVALID_ARGUMENT", f"reads={reads}, after_rows={after_rows}: expected numbers >= 0")
        self.faults.arm(reads, after_rows)
        return {"armed": reads, "after_rows": after_rows}

    def split(self, request: dict[str, Any]) -> dict[str, Any]:
        database, stream = _required(request, "database"), _required(request, "stream")
        return {"tokens": list(self.engine.split(database, stream, request.get("token")))}

    def merge(self, request: dict[str, Any]) -> dict[str, Any]:
        database, stream = _required(request, "database"), _required(request, "stream")
        tokens = request.get("tokens")
        return {"token": self.engine.merge(database, stream, tokens or None)}

    def move(self, request: dict[str, Any]) -> dict[str, Any]:
        database, stream = _required(request, "database"), _required(request, "stream")
        return {"tokens": list(self.engine.move(database, stream, request.get("tokens") or None))}

    def set_clock_rate(self, request: dict[str, Any]) -> dict[str, Any]:
        rate = float(request.get("rate", 0))
        if self.clock is None or rate <= 0:
            raise QueryError("INVALID_ARGUMENT", f"rate={rate}: expected a number > 0 (server seconds per real second)")
        return {"now": format_timestamp(self.clock.set_rate(rate)), "clock_rate": rate}

    def sweep(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.sweep_ttl is None:
            raise QueryError("UNIMPLEMENTED", "this server has no row deletion policy sweeper")
        return {"deleted": self.sweep_ttl()}

    def read_requests(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.requests is None:
            raise QueryError("UNIMPLEMENTED", "this server keeps no log of requests")
        found = self.requests.entries(int(request.get("since", 0)), request.get("database"))
        if request.get("clear"):
            self.requests.clear()
        return {"requests": found}

    def handlers(self) -> grpc.GenericRpcHandler:
        def unary(method: Callable[[dict[str, Any]], dict[str, Any]]) -> grpc.RpcMethodHandler:
            def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
                try:
                    body = json.loads(request or b"{}")
                    with self._lock:
                        return json.dumps(method(body), default=str).encode()
                except QueryError as exc:
                    context.abort(getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN), str(exc))
                except (ValueError, KeyError, TypeError) as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad control request: {exc}")
                raise AssertionError("unreachable")

            return grpc.unary_unary_rpc_method_handler(handle)

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "FailNextReads": unary(self.fail_next_reads),
                "Split": unary(self.split),
                "Merge": unary(self.merge),
                "Move": unary(self.move),
                "Status": unary(lambda _: self.status()),
                "SetClockRate": unary(self.set_clock_rate),
                "SweepTtl": unary(self.sweep),
                "Requests": unary(self.read_requests),
            },
        )


def _required(request: dict[str, Any], name: str) -> str:
    value = request.get(name)
    if not value:
        raise QueryError("INVALID_ARGUMENT", f"missing {name}")
    return str(value)


class ControlClient:
    """Talks to a running local server at host:port."""

    def __init__(self, host: str, timeout: float = 30.0) -> None:
        self.host = host
        self.timeout = timeout
        self._channel = grpc.insecure_channel(host)

    def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        call = self._channel.unary_unary(f"/{SERVICE}/{method}")
        try:
            response = call(json.dumps(body).encode(), timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise ControlError(f"local Spanner server at {self.host}: {method} failed ({code}): {details}") from None
        return dict(json.loads(response))

    def fail_next_reads(self, reads: int = 1, after_rows: int = 0) -> dict[str, Any]:
        """The next `reads` change stream reads send `after_rows` rows, then fail with UNAVAILABLE."""
        return self._call("FailNextReads", {"reads": reads, "after_rows": after_rows})

    def split(self, database: str, stream: str, token: str | None = None) -> list[str]:
        """Split a partition now (default: the engine's choice); returns the child tokens."""
        return list(self._call("Split", {"database": database, "stream": stream, "token": token})["tokens"])

    def merge(self, database: str, stream: str, tokens: Sequence[str] | None = None) -> str:
        """Merge partitions now (default: the engine's choice of neighbours); returns the child token."""
        return str(self._call("Merge", {"database": database, "stream": stream, "tokens": list(tokens or [])})["token"])

    def move(self, database: str, stream: str, tokens: Sequence[str] | None = None) -> list[str]:
        """Move half of tokens[0]'s key range to its neighbour tokens[1] now (MUTABLE_KEY_RANGE; default: the
        engine's choice); returns the two partition tokens."""
        return list(self._call("Move", {"database": database, "stream": stream, "tokens": list(tokens or [])})["tokens"])

    def status(self) -> dict[str, Any]:
        return self._call("Status", {})

    def set_clock_rate(self, rate: float) -> dict[str, Any]:
        """Run the server's clock at `rate` server seconds per real second from now on (it never goes back)."""
        return self._call("SetClockRate", {"rate": rate})

    def sweep_ttl(self) -> int:
        """Run the row deletion policies now, as the server's sweeper does every --ttl-interval; rows deleted."""
        return int(self._call("SweepTtl", {})["deleted"])

    def requests(self, database: str | None = None, since: int = 0, clear: bool = False) -> list[dict[str, Any]]:
        """The read options the server's last queries and reads asked for (each: method, database, sql, partitioned,
        data_boost_enabled, priority, request_tag, directed_read_options, seq), of `database` if given, after `since`."""
        return list(self._call("Requests", {"database": database, "since": since, "clear": clear})["requests"])

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
