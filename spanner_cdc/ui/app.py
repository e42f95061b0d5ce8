"""The UI's FastAPI app: HTML pages, JSON endpoints and Prometheus metrics, every route behind `authorize`."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response

from spanner_cdc.errors import NotFound, SpannerCdcError, StoreError
from spanner_cdc.names import BACKFILL_DAG_ID, HOURLY_DAG_PREFIX, LIVE_NAMESPACE, hourly_dag_id
from spanner_cdc.ui import links, metrics, pages, tables
from spanner_cdc.ui.health import (
    freshness,
    freshness_seconds,
    headroom,
    lag_seconds,
    parent_map,
    splits_and_merges,
    stuck,
)
from spanner_cdc.ui.secrets import Redactor
from spanner_cdc.ui.view import StoreLike, StreamView, load_lineages, load_stream

log = logging.getLogger(__name__)
PLUGIN_PREFIX = "/spanner-cdc"  # where the Airflow plugin mounts this app (airflow_glue.URL_PREFIX): Airflow's own pages are above it


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return value


def stream_json(view: StreamView, now: datetime, headroom_warning: float = metrics.DEFAULT_HEADROOM_WARNING) -> dict[str, Any]:
    """The document behind a stream page: lineage, partitions with lag, windows, graph edges, stuck list,
    freshness and retention headroom."""
    splits, merges = splits_and_merges(view)
    parents = parent_map(view)
    partitions = []
    for p in sorted(view.partitions, key=lambda p: p.token):
        item = _jsonable(p)
        item["parents"] = list(parents[p.token])
        item["lag_seconds"] = lag_seconds(p, view)
        item["split"], item["merge"] = p.token in splits, p.token in merges
        partitions.append(item)
    windows = []
    for w in view.windows:
        item = _jsonable(w)
        item["duration_seconds"] = w.duration_seconds
        windows.append(item)
    return {
        "lineage": _jsonable(view.lineage),
        "low_watermark": _jsonable(view.low_watermark),
        "partitions": partitions,
        "edges": [{"parent": parent, "child": child} for child, ps in sorted(parents.items()) for parent in ps],
        "windows": windows,
        # COMPLETE windows older than the RECENT_WINDOWS listed: counted and summed, not listed
        "older_windows": {"windows": view.older_windows, "records": view.older_records, "files": view.older_files},
        "moves": [{"source": s, "destination": d, "at": at.isoformat()} for s, d, at in view.moves],
        "stuck": _jsonable(stuck(view, now)),
        "freshness_seconds": freshness_seconds(view, now),
        "freshness": None if (fresh := freshness(view, now)) is None else fresh.verdict,
        "retention_headroom": _jsonable(headroom(view, now, headroom_warning)),
        "generated_at": now.isoformat(),
    }


@dataclass(frozen=True)
class StoreTarget:
    """Where the UI reads from, resolved when first needed: the raw URL is kept only to redact it."""

    url: str | None
    open: Callable[[], StoreLike]
    stream_names: Mapping[str, str] = field(default_factory=dict)
    # Settings.headroom_warning: the share of retention under which the headroom warns
    headroom_warning: float = metrics.DEFAULT_HEADROOM_WARNING
    # the run id of a DAG's run at a logical date, from Airflow's database (None: the scheduler's id is assumed)
    find_run: Callable[[str, datetime], str | None] | None = None


class _StoreHolder:
    """Opens the store on first use (the plugin is imported by every Airflow process) and closes it at shutdown."""

    def __init__(self, connect: Callable[[], StoreTarget], redactor: Redactor) -> None:
        self._connect = connect
        self._redactor = redactor
        self._store: StoreLike | None = None
        self.stream_names: Mapping[str, str] = {}
        self.headroom_warning = metrics.DEFAULT_HEADROOM_WARNING
        self.find_run: Callable[[str, datetime], str | None] | None = None
        self._lock = threading.Lock()

    def get(self) -> StoreLike:
        with self._lock:
            if self._store is None:
                target = self._connect()
                self._redactor.add(target.url)
                self.stream_names = target.stream_names
                self.headroom_warning = target.headroom_warning
                self.find_run = target.find_run
                self._store = target.open()
            return self._store

    def close(self) -> None:
        with self._lock:
            closer = getattr(self._store, "close", None)
            if callable(closer):
                closer()
            self._store = None


def _wants_html(request: Request) -> bool:
    path = request.url.path.removeprefix(request.scope.get("root_path", ""))
    return not (path.startswith("/api/") or path == "/metrics")


def create_app(
    *,
    authorize: Callable[..., Any],
    connect: Callable[[], StoreTarget],
    login_url: Callable[[str], str] | None = None,
    clock: Callable[[], datetime] = _utcnow,
) -> FastAPI:
    """Build the app; `authorize` is a FastAPI dependency that raises 401/403 and guards every route.

    `connect` resolves the store on first use; its `stream_names` map a configured stream name (the
    suffix of its hourly DAG id) to the change stream its lineage is keyed by.
    """
    redactor = Redactor()
    holder = _StoreHolder(connect, redactor)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        holder.close()

    app = FastAPI(
        title="spanner-cdc monitoring",
        dependencies=[Depends(authorize)],
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    _add_error_handlers(app, redactor, login_url)
    _add_pages(app, holder, redactor, clock)
    _add_api(app, holder, clock)
    return app


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _add_error_handlers(app: FastAPI, redactor: Redactor, login_url: Callable[[str], str] | None) -> None:
    """401/403 as a page with a login link for browsers, JSON otherwise; project errors redacted, never a traceback."""

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code in (401, 403) and _wants_html(request):
            link = None
            if login_url is not None and exc.status_code == 401:
                here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                link = (login_url(here), "Log in to Airflow")
            title = "Log in required" if exc.status_code == 401 else "Not allowed"
            html = pages.render_message(title, str(exc.detail), link)
            return HTMLResponse(html, status_code=exc.status_code, headers=exc.headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(SpannerCdcError)
    async def project_error(request: Request, exc: SpannerCdcError) -> Response:
        status = 404 if isinstance(exc, NotFound) else 503 if isinstance(exc, StoreError) else 500
        message = redactor.redact(str(exc))
        log.warning("ui: %s %s: %s", request.method, request.url.path, message)
        if _wants_html(request):
            back = (_base(request) + "/", "all lineages")
            return HTMLResponse(pages.render_message(type(exc).__name__, message, back), status_code=status)
        return JSONResponse({"error": type(exc).__name__, "detail": message}, status_code=status)


def _all_views(holder: _StoreHolder) -> list[StreamView]:
    store = holder.get()
    return [load_stream(store, ln.stream, ln.namespace) for ln in load_lineages(store)]


def _add_pages(app: FastAPI, holder: _StoreHolder, redactor: Redactor, clock: Callable[[], datetime]) -> None:
    """The HTML pages: the lineage index, one page per stream and namespace, and the links from Airflow's DAG pages."""

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> str:
        views = _all_views(holder)
        return pages.render_index(_base(request), views, redactor.label, clock(), holder.headroom_warning)

    @app.get("/streams/{stream}", response_class=HTMLResponse)
    def stream_page(
        request: Request,
        stream: str,
        namespace: str = "live",
        page: int = 1,
        frontier_page: int = 1,
        stuck_page: int = 1,
        windows_page: int = 1,
        q: str = "",
        state: str = "",
        expand: Annotated[list[datetime] | None, Query()] = None,
        window: datetime | None = None,
    ) -> str:
        store = holder.get()
        view = load_stream(store, stream, namespace)
        now = clock()
        if window is not None and windows_page == 1:  # a DAG run's tab: the windows page that holds its window
            windows_page = tables.windows_page_of(view, window if window.tzinfo else window.replace(tzinfo=UTC))
        namespaces = [ln.namespace for ln in load_lineages(store) if ln.stream == stream]
        query = pages.StreamQuery(
            page, frontier_page, stuck_page, windows_page, q.strip(), state.strip().upper(),
            frozenset(at if at.tzinfo else at.replace(tzinfo=UTC) for at in expand or ()),
        )  # fmt: skip
        here = pages.stream_href(_base(request), stream, namespace).split("?")[0]
        run_href = None if namespace != LIVE_NAMESPACE else (
            lambda start: f"{here}/window-run?{urlencode({'start': start.isoformat()})}"
        )  # fmt: skip
        return pages.render_stream(
            _base(request), view, stuck(view, now), namespaces, redactor.label, now, query, holder.headroom_warning,
            run_href,
        )

    @app.get("/streams/{stream}/window-run")
    def window_run(request: Request, stream: str, start: datetime) -> Response:
        """To Airflow's page of the hourly DAG run of the live window starting at `start` (its logical date)."""
        start = start if start.tzinfo else start.replace(tzinfo=UTC)
        holder.get()  # the configured stream names come with the store
        name = next((n for n, change_stream in holder.stream_names.items() if change_stream == stream), stream)
        dag_id = hourly_dag_id(name)
        run_id = (holder.find_run(dag_id, start) if holder.find_run else None) or f"scheduled__{start.isoformat()}"
        airflow = _base(request).removesuffix(PLUGIN_PREFIX)
        return RedirectResponse(f"{airflow}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}", status_code=307)

    @app.get("/dags/{dag_id}")
    def dag_link(request: Request, dag_id: str, run_id: str | None = None) -> Response:
        target = links.lineage_for_dag(dag_id, run_id, load_lineages(holder.get()), holder.stream_names)
        if target is None:
            if dag_id == BACKFILL_DAG_ID:
                message = ("This backfill run has no lineage: its form was refused (the validate task's log says why), "
                           "or it has not extracted a window yet.")  # fmt: skip
            elif dag_id.startswith(HOURLY_DAG_PREFIX):
                message = f"{dag_id}'s lineage does not exist yet: its first run bootstraps it."
            else:
                message = f"{dag_id} is not a spanner-cdc DAG."
            return HTMLResponse(pages.render_message("No lineage", message, (_base(request) + "/", "all lineages")))
        return RedirectResponse(pages.stream_href(_base(request), *target), status_code=307)

    @app.get("/dags/{dag_id}/runs/{run_id}")
    def dag_run_link(request: Request, dag_id: str, run_id: str) -> Response:
        """An hourly DAG run's tab: its stream's page at the run's window (the run id carries its logical date)."""
        response = dag_link(request, dag_id, run_id)
        start = links.run_logical_date(run_id) if dag_id.startswith(HOURLY_DAG_PREFIX) else None
        if isinstance(response, RedirectResponse) and start is not None:
            location = response.headers["location"]
            response.headers["location"] = f"{location}&{urlencode({'window': start.isoformat()})}#{tables.window_anchor(start)}"
        return response


def _add_api(app: FastAPI, holder: _StoreHolder, clock: Callable[[], datetime]) -> None:
    """The JSON endpoints and Prometheus metrics."""

    @app.get("/api/lineages")
    def api_lineages() -> list[dict[str, Any]]:
        return [_jsonable(ln) for ln in load_lineages(holder.get())]

    @app.get("/api/streams/{stream}")
    def api_stream(stream: str, namespace: str = "live") -> dict[str, Any]:
        view = load_stream(holder.get(), stream, namespace)
        return stream_json(view, clock(), holder.headroom_warning)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics_text() -> Response:
        views = _all_views(holder)
        text = metrics.render_metrics(views, clock(), holder.headroom_warning)
        return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)
