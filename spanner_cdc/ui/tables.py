"""Paged HTML tables of a stream page: open windows, stuck tokens, the frontier, all windows, all partitions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import TypeVar
from urllib.parse import quote

from spanner_cdc.times import display_time, human_duration, parse_rfc3339
from spanner_cdc.ui.health import StuckPartition, lag_seconds, last_verified
from spanner_cdc.ui.svg import STATE_COLOURS
from spanner_cdc.ui.view import PartitionView, StreamView, WindowView

T = TypeVar("T")
FRONTIER_PAGE = 20
STUCK_PAGE = 10
STUCK_SHOWN = 3  # stuck rows shown on the first screen; the rest of the page behind a <details>
# A token is shown as its start and its last TOKEN_TAIL characters (Spanner's tokens share long prefixes and run to
# over 100 characters): the whole token is the element's text (a copy takes it whole) and its title (hover).
TOKEN_TAIL = 10
TOKEN_SHORT = 24
WINDOWS_PAGE = 24
PARTITIONS_PAGE = 100
# href(changes) -> the current page's URL with those query parameters replaced
Href = Callable[[dict[str, str | None]], str]


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def token_html(token: str) -> str:
    """A token shortened on screen (CSS only: the head is cut with an ellipsis), whole in the text and on hover."""
    if len(token) <= TOKEN_SHORT:
        return f'<span class=token title="{_e(token)}">{_e(token)}</span>'
    head, tail = token[:-TOKEN_TAIL], token[-TOKEN_TAIL:]
    return f'<span class=token title="{_e(token)}"><span class=token-head>{_e(head)}</span>{_e(tail)}</span>'


def state_badge(state: str) -> str:
    fill, ink = STATE_COLOURS.get(state, ("#fff", "#000"))
    return f'<span class="state" style="background:{fill};color:{ink}">{_e(state.lower())}</span>'


@dataclass(frozen=True)
class Page:
    """One page of `total` rows; `number` is 1-based and clamped to the pages that exist."""

    number: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    def slice(self, rows: Sequence[T]) -> Sequence[T]:
        start = (self.number - 1) * self.size
        return rows[start : start + self.size]


def page_of(rows: Sequence[object], requested: int, size: int) -> Page:
    total = len(rows)
    pages = max(1, -(-total // size))
    return Page(min(max(requested, 1), pages), size, total)


def pager(page: Page, param: str, href: Href, what: str) -> str:
    """`rows a-b of n` with previous / next links that keep every other query parameter."""
    if page.total <= page.size:
        return ""
    first = (page.number - 1) * page.size + 1
    last = min(page.number * page.size, page.total)
    links = []
    if page.number > 1:
        links.append(f'<a rel="prev" href="{_e(href({param: str(page.number - 1)}))}">previous</a>')
    if page.number < page.pages:
        links.append(f'<a rel="next" href="{_e(href({param: str(page.number + 1)}))}">next</a>')
    return (
        f'<p class="pager muted" data-pager="{_e(param)}">{what} {first}–{last} of {page.total} '
        f"(page {page.number} of {page.pages}) {' · '.join(links)}</p>"
    )


def open_windows_table(view: StreamView) -> str:
    open_ones = sorted((w for w in view.windows if not w.complete), key=lambda w: w.start)
    if not open_ones:
        return "<p id=open-windows class=ok>No open window: every window is complete.</p>"
    rows = "".join(
        f'<tr data-open-window="{_e(w.start.isoformat())}"><td>{display_time(w.start)}</td><td>{display_time(w.end)}</td>'
        f"<td>{_e(w.state.lower())}</td><td>{display_time(w.opened_at, precise=False)}</td></tr>"
        for w in open_ones
    )
    return f"<table id=open-windows><tr><th>start</th><th>end</th><th>state</th><th>opened</th></tr>{rows}</table>"


def stuck_table(stuck_list: Sequence[StuckPartition], requested: int, href: Href) -> str:
    if not stuck_list:
        return "<p id=stuck class=ok>Nothing stuck.</p>"
    page = page_of(stuck_list, requested, STUCK_PAGE)
    shown = list(page.slice(stuck_list))

    def rows(items: Sequence[StuckPartition]) -> str:
        return "".join(
            f"<tr data-stuck-token=\"{_e(s.token)}\"><td class=mono>{token_html(s.token)}</td><td>{state_badge(s.state)}</td>"
            f"<td class=error>{_e(s.reason)}</td></tr>"
            for s in items
        )

    head = "<tr><th>token</th><th>state</th><th>why</th></tr>"
    table = f"<table id=stuck>{head}{rows(shown[:STUCK_SHOWN])}</table>"
    if len(shown) > STUCK_SHOWN:  # collapsed: the first screen keeps room for the frontier
        rest = len(shown) - STUCK_SHOWN
        table += (
            f"<details id=stuck-more><summary>{rest} more stuck row{'s' if rest != 1 else ''} on this page</summary>"
            f"<table>{head}{rows(shown[STUCK_SHOWN:])}</table></details>"
        )
    return table + pager(page, "stuck_page", href, "stuck rows")


def frontier_rows(view: StreamView) -> list[tuple[PartitionView, float | None]]:
    """Unfinished partitions, furthest behind first."""
    alive = [(p, lag_seconds(p, view)) for p in view.partitions if p.state != "FINISHED"]
    return sorted(alive, key=lambda pl: (-(pl[1] or 0.0), pl[0].token))


def frontier_table(view: StreamView, requested: int, href: Href) -> str:
    rows_all = frontier_rows(view)
    if not rows_all:
        return "<p id=frontier>No live partition: every partition is finished.</p>"
    page = page_of(rows_all, requested, FRONTIER_PAGE)
    rows = "".join(
        f'<tr data-token="{_e(p.token)}"><td class=mono>{token_html(p.token)}</td><td>{state_badge(p.state)}</td>'
        f"<td>{display_time(p.watermark)}</td><td class=num>{human_duration(lag, '—')}</td><td class=num>{p.attempts}</td>"
        f"<td>{_e(_lease(p))}</td></tr>"
        for p, lag in page.slice(rows_all)
    )
    table = (
        "<table id=frontier><tr><th>token</th><th>state</th><th>checkpoint (watermark)</th><th>lag behind newest window</th>"
        f"<th>attempts</th><th>lease</th></tr>{rows}</table>"
    )
    return table + pager(page, "frontier_page", href, "live partitions")


def _lease(p: PartitionView) -> str:
    return f"{p.lease_owner} until {display_time(p.lease_expires_at, precise=False)}" if p.lease_owner else "—"


def _check_cell(window: WindowView) -> str:
    """The transaction check as a verdict (ok / failed), its figures one click away."""
    verdict = window.check_passed
    if not window.transaction_check:
        return '<span class=muted data-check="None">—</span>'
    css = "muted" if verdict is None else "ok" if verdict else "bad"
    word = "checked" if verdict is None else "ok" if verdict else "failed"
    return (f'<details class=check data-check="{_e(verdict)}"><summary class="{css}">{word}</summary>'
            f"<span class=muted>{_e(window.check_text)}</span></details>")


def window_anchor(start: datetime) -> str:
    """The id of a window's row in the windows table: a DAG run's tab opens the stream page there."""
    return "window-" + start.strftime("%Y%m%dT%H%M%S%fZ")


def windows_page_of(view: StreamView, start: datetime) -> int:
    """The page of the windows table (newest first) that holds the window starting at `start`; 1 when none does."""
    newest_first = sorted((w.start for w in view.windows), reverse=True)
    return newest_first.index(start) // WINDOWS_PAGE + 1 if start in newest_first else 1


def _marker_cell(window: WindowView) -> str:
    """The window's marker: its name, the whole location on hover and in a copy; a gs:// one links to Cloud Storage's
    console (a browser opens no file:// or s3:// location from a web page)."""
    location = window.marker_path
    if not location:
        return "<td class=muted>—</td>"
    name = location.rstrip("/").rsplit("/", 1)[-1]
    shown = f'<code title="{_e(location)}" data-marker="{_e(location)}">{_e(name)}</code>'
    if location.startswith("gs://"):
        url = "https://console.cloud.google.com/storage/browser/_details/" + quote(location[len("gs://"):])
        shown = f'<a href="{_e(url)}" target=_blank rel=noopener>{shown}</a>'
    return f"<td>{shown}</td>"


def _run_cell(window: WindowView, run_href: Callable[[datetime], str] | None) -> str:
    if run_href is None:
        return "<td class=muted>—</td>"
    # the UI is framed by Airflow's: the run's page replaces the whole window
    return f'<td><a href="{_e(run_href(window.start))}" target=_top data-run-link>DAG run</a></td>'


def windows_table(view: StreamView, requested: int, href: Href, run_href: Callable[[datetime], str] | None = None) -> str:
    """Every window, newest first; `run_href(start)` links each to the DAG run of its window (the live lineage's)."""
    if not view.windows:
        return "<p>No window yet.</p>"
    newest_first = sorted(view.windows, key=lambda w: w.start, reverse=True)
    page = page_of(newest_first, requested, WINDOWS_PAGE)
    rows = "".join(
        f'<tr id="{window_anchor(w.start)}" data-window-start="{_e(w.start.isoformat())}" data-complete="{str(w.complete).lower()}">'
        f"<td>{display_time(w.start)}</td><td>{display_time(w.end)}</td><td>{_e(w.state.lower())}</td>"
        f'<td class="{"ok" if w.complete else "bad"}">{"complete" if w.complete else "open"}</td>'
        f"<td class=num>{_e(w.records) or '—'}</td><td class=num>{_e(w.files) or '—'}</td>"
        f"<td>{_check_cell(w)}</td><td class=num>{human_duration(w.duration_seconds, '—')}</td>{_run_cell(w, run_href)}{_marker_cell(w)}</tr>"
        for w in page.slice(newest_first)
    )
    table = (
        "<table id=windows><tr><th>start</th><th>end</th><th>state</th><th>completeness</th><th>records</th>"
        "<th>files</th><th>transaction check</th><th>duration</th><th>run</th><th>marker</th></tr>" + rows + "</table>"
    )
    older = ""
    if view.older_windows:
        older = (
            f"<p id=older-windows class=muted>{view.older_windows} older complete window"
            f"{'s' if view.older_windows != 1 else ''} ({view.older_records} records, {view.older_files} files) not "
            f"listed: <code>spanner-cdc lineage show --stream {_e(view.lineage.stream)} --namespace "
            f"{_e(view.lineage.namespace)} --format json</code> lists every window.</p>"
        )
    return table + pager(page, "windows_page", href, "windows") + older


VERIFY_EXAMPLES = 5  # mismatches listed on the page; `spanner-cdc lake show --json` has the result's first 20


def verify_table(view: StreamView) -> str:
    """The last `spanner-cdc verify` of the newest window verified (the one `/metrics` reports): which window, when,
    rows compared and mismatches, the first mismatching keys; and how to run one when none ran."""
    window = last_verified(view)
    if window is None:
        return (
            f"<p id=verify-none>No window verified yet: <code>spanner-cdc verify --stream {_e(view.lineage.stream)} "
            f"--namespace {_e(view.lineage.namespace)}</code> compares the newest closed window with the source "
            "(<code>verify = true</code> in the stream's table runs it daily).</p>"
        )
    result = window.verify or {}
    mismatches = int(result.get("mismatches") or 0)
    try:
        when = display_time(parse_rfc3339(str(result.get("verified_at"))), precise=False)
    except ValueError:
        when = "—"
    verdict = "clean" if mismatches == 0 else f"{mismatches} mismatch{'es' if mismatches != 1 else ''}"
    css = "bad" if mismatches else "ok"
    table = (
        f'<table id=verify data-window-end="{_e(window.end.isoformat())}" data-mismatches="{mismatches}">'
        "<tr><th>window</th><th>verified at</th><th>rows compared</th><th>mismatches</th><th>result</th></tr>"
        f"<tr><td>{display_time(window.start)} → {display_time(window.end)}</td><td>{when}</td>"
        f"<td class=num>{_e(result.get('rows_compared', '—'))}</td>"
        f'<td class="num {css}">{mismatches}</td>'
        f'<td class="{css}">{verdict}</td></tr></table>'
    )
    notes = []
    log = result.get("change_log") or {}
    if log and not log.get("checked"):
        notes.append(f"change log not compared: {_e(log.get('reason') or 'no reason given')}")
    skipped = [f"{t.get('table')}: {t.get('skipped')}" for t in result.get("tables") or [] if t.get("skipped")]
    notes += [f"state table not compared: {_e(text)}" for text in skipped]
    examples = list(result.get("examples") or [])[:VERIFY_EXAMPLES]
    items = "".join(
        f"<li class=mono>{_e(m.get('part'))} {_e(m.get('table'))}{' uuid ' + _e(m['uuid']) if m.get('uuid') else ''} "
        f"key {_e(m.get('key'))}: {_e(m.get('problem'))}</li>"
        for m in examples
    )
    shown = f"<p class=muted>first {len(examples)} of {mismatches}:</p><ul id=verify-examples>{items}</ul>" if items else ""
    return table + "".join(f"<p class=muted>{note}</p>" for note in notes) + shown


def partitions_table(view: StreamView, requested: int, href: Href, query: str = "", state: str = "") -> str:
    """Every partition (or those whose token contains `query`, in `state`), oldest first, a page at a time."""
    matching = [
        p for p in view.partitions if (not query or query in p.token) and (not state or p.state == state)
    ]
    matching.sort(key=lambda p: (p.start is not None, p.start.timestamp() if p.start else 0.0, p.token))
    page = page_of(matching, requested, PARTITIONS_PAGE)
    rows = []
    for p in page.slice(matching):
        rows.append(
            f'<tr data-token="{_e(p.token)}"><td class=mono>{token_html(p.token)}</td><td>{state_badge(p.state)}</td>'
            f"<td>{display_time(p.start)}</td><td>{display_time(p.end)}</td><td>{display_time(p.watermark)}</td>"
            f"<td class=num>{human_duration(lag_seconds(p, view), '—')}</td><td class=num>{p.attempts}</td><td>{_e(_lease(p))}</td>"
            f"<td class=mono>{' '.join(token_html(t) for t in p.parents) or '—'}</td>"
            f"<td class='error'>{_e(p.last_error) or '—'}</td></tr>"
        )
    found = f"<p class=muted>{page.total} partition{'s' if page.total != 1 else ''} match.</p>" if query or state else ""
    table = (
        "<table id=partitions><tr><th>token</th><th>state</th><th>start</th><th>end</th><th>checkpoint (watermark)</th>"
        "<th>lag behind newest window</th><th>attempts</th><th>lease</th><th>parents</th><th>last error</th></tr>"
        + "".join(rows) + "</table>"
    )
    return found + table + pager(page, "page", href, "partitions")
