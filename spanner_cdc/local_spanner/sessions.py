"""Sessions of the local server's Spanner API: created, listed, deleted, and adopted after a restart."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc
from google.cloud.spanner_v1.types import BatchCreateSessionsResponse, ListSessionsResponse, Session
from google.protobuf import empty_pb2, timestamp_pb2

from spanner_cdc.local_spanner.catalog import Catalog
from spanner_cdc.local_spanner.model import QueryError


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


@dataclass
class _Session:
    name: str
    database: str
    multiplexed: bool
    create_time: datetime
    labels: dict[str, str]
    creator_role: str


class Sessions:
    """The sessions of every database; a session holds no state the server needs beyond its database."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}

    def _new_session(self, database: str, template: Any) -> bytes:
        self.catalog.database(database)
        name = f"{database}/sessions/{secrets.token_hex(12)}"
        session = _Session(name, database, template.multiplexed, self.catalog.now(), dict(template.labels), template.creator_role)
        with self._lock:
            self._sessions[name] = session
        return Session.pb().SerializeToString(self._session_pb(session))

    @staticmethod
    def _session_pb(session: _Session) -> Any:
        message = Session.pb()(name=session.name, multiplexed=session.multiplexed, creator_role=session.creator_role)
        message.labels.update(session.labels)
        message.create_time.CopyFrom(_timestamp(session.create_time))
        message.approximate_last_use_time.CopyFrom(_timestamp(session.create_time))
        return message

    def session(self, name: str) -> _Session:
        """The session named; one unknown to this process (e.g. after a restart) is adopted if its database exists."""
        with self._lock:
            found = self._sessions.get(name)
        if found is not None:
            return found
        database, sep, _ = name.partition("/sessions/")
        if not sep:
            raise QueryError("INVALID_ARGUMENT", f"Invalid session name: {name}")
        try:
            self.catalog.database(database)
        except QueryError:
            raise QueryError("NOT_FOUND", f"Session not found: {name}") from None
        session = _Session(name, database, False, self.catalog.now(), {}, "")
        with self._lock:
            self._sessions[name] = session
        return session

    def create_session(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return self._new_session(request.database, request.session)

    def batch_create_sessions(self, request: Any, context: grpc.ServicerContext) -> bytes:
        response = BatchCreateSessionsResponse.pb()()
        for _ in range(max(1, request.session_count)):
            response.session.add().MergeFromString(self._new_session(request.database, request.session_template))
        return response.SerializeToString()

    def get_session(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            session = self._sessions.get(request.name)
        if session is None:
            raise QueryError("NOT_FOUND", f"Session not found: {request.name}")
        return self._session_pb(session).SerializeToString()

    def list_sessions(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            sessions = [s for s in self._sessions.values() if s.database == request.database]
        return ListSessionsResponse.pb()(sessions=[self._session_pb(s) for s in sessions]).SerializeToString()

    def delete_session(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self._sessions.pop(request.name, None)
        return empty_pb2.Empty().SerializeToString()
