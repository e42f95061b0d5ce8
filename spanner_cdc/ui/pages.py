"""Server-rendered HTML pages (no JavaScript): the lineage index and one page per stream and namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from urllib.parse import quote, urlencode

from spanner_cdc.times import display_time, human_duration
from spanner_cdc.ui import tables
from spanner_cdc.ui.health import StuckPartition, freshness, freshness_seconds, headroom, state_counts, stuck
from spanner_cdc.ui.metrics import DEFAULT_HEADROOM_WARNING
from spanner_cdc.ui.svg import STATE_COLOURS, legend_svg, render_lineage_svg
from spanner_cdc.ui.view import StreamView

STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1f2933;background:#fff}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:left}
th{background:#f3f5f7} td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,monospace;font-size:12px}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:10px 0}
.card{border:1px solid #d0d7de;border-radius:8px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:18px} .muted{color:#6b7785;font-size:12px}
.first-screen{display:flex;gap:24px;flex-wrap:wrap} .first-screen h2{margin-top:12px}
.graph{overflow:auto;border:1px solid #d0d7de;border-radius:8px;padding:6px;background:#fbfcfd;direction:rtl}
.graph>svg{direction:ltr}
tr:target{outline:2px solid #1565c0;background:#e3f2fd}
.state{padding:1px 6px;border-radius:4px} .ok{color:#1b5e20;font-weight:600} .bad{color:#b71c1c;font-weight:600}
.error{white-space:pre-wrap;max-width:520px}
.warning{border:1px solid #e0a100;background:#fff6d6;border-radius:8px;padding:8px 12px;margin:10px 0;max-width:1100px}
.card.warn{border-color:#e0a100;background:#fff6d6}
.token{white-space:nowrap} .token-head{display:inline-block;max-width:8ch;overflow:hidden;text-overflow:ellipsis;vertical-align:bottom}
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def stream_href(base: str, stream: str, namespace: str) -> str:
    return f"{base}/streams/{quote(stream, safe='')}?{urlencode({'namespace': namespace})}"


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def render_index(
    base: str, views: Sequence[StreamView], store_label: str, now: datetime, headroom_warning: float = DEFAULT_HEADROOM_WARNING
) -> str:
    rows = []
    for view in views:
        ln = view.lineage
        counts = " · ".join(f"{n} {s.lower()}" for s, n in state_counts(view).items() if n) or "none"
        lag = None if view.low_watermark is None else (now - view.low_watermark).total_seconds()
        stuck_count = len({s.token for s in stuck(view, now)})
        room = headroom(view, now, headroom_warning)
        room_cell = "—" if room is None else human_duration(max(room.seconds, 0.0))
        room_class = "num bad" if room is not None and room.warning else "num"
        rows.append(
            f'<tr data-stream="{_e(ln.stream)}" data-namespace="{_e(ln.namespace)}">'
            f'<td><a href="{_e(stream_href(base, ln.stream, ln.namespace))}">{_e(ln.stream)}</a></td>'
            f"<td>{_e(ln.namespace)}</td><td>{_e(ln.database) or '—'}</td><td>{_e(counts)}</td>"
            f"<td class=num>{human_duration(lag, '—')}</td>{_freshness_cell(view, now)}"
            f'<td class="{room_class}">{room_cell}</td><td class=num>{view.windows_complete} / {view.windows_total}</td>'
            f'<td class="num {"bad" if stuck_count else "ok"}">{stuck_count}</td></tr>'
        )
    table = (
        "<table id=lineages><tr><th>stream</th><th>namespace</th><th>database</th><th>partitions</th>"
        "<th>low watermark lag</th><th>freshness</th><th>retention headroom</th><th>windows complete</th><th>stuck</th></tr>"
        + "".join(rows) + "</table>"
        if views
        else "<p>No lineage yet: the first hourly run (or <code>spanner-cdc extract</code>) bootstraps one.</p>"
    )
    body = (
        f"<h1>Spanner CDC lineages</h1><p class=muted>metadata store: <code>{_e(store_label)}</code> · "
        f'<a href="{_e(base)}/api/lineages">JSON</a> · <a href="{_e(base)}/metrics">metrics</a> · '
        f"shown at {display_time(now, precise=False)}</p>{table}"
    )
    return _page("Spanner CDC", body)


def _freshness_cell(view: StreamView, now: datetime) -> str:
    fresh = freshness(view, now)
    if fresh is None:
        return f"<td class=num>{human_duration(freshness_seconds(view, now), '—')}</td>"
    return (f'<td class="num {"bad" if fresh.late else "ok"}" data-freshness="{fresh.verdict}">'
            f"{fresh.verdict} · {human_duration(fresh.seconds)}</td>")


def headroom_band(view: StreamView, now: datetime, warning_share: float) -> str:
    """The warning band over a stream's cards when its retention headroom is under the threshold, saying what to do."""
    room = headroom(view, now, warning_share)
    if room is None or not room.warning:
        return ""
    ln = view.lineage
    when = (
        f"in {human_duration(room.seconds)}" if room.seconds > 0
        else f"already: changes up to {human_duration(-room.seconds)} of the lineage's backlog are gone"
    )  # fmt: skip
    return (
        f'<div class="warning" role="alert" data-warning="headroom"><b>Retention headroom '
        f"{human_duration(max(room.seconds, 0.0))}</b> (under {human_duration(room.threshold_seconds)}, "
        f"{warning_share:.0%} of the stream's retention_period of {human_duration(room.retention_seconds)}): "
        f"the oldest change this lineage has not landed leaves change stream {_e(ln.stream)}'s retention {when}, "
        "and is then lost for good. Catch up before then: let the hourly DAG run (each run finishes the windows "
        "left open first) and raise the stream's <code>concurrency</code> or <code>waves</code>; land a range now "
        "with the <code>spanner_cdc_backfill</code> DAG; or lengthen the stream's retention "
        f"(<code>ALTER CHANGE STREAM {_e(ln.stream)} SET OPTIONS (retention_period = '7d')</code>).</div>"
    )


def _cards(view: StreamView, stuck_list: Sequence[StuckPartition], now: datetime, warning_share: float) -> str:
    newest = view.newest_window
    lag = None if view.low_watermark is None else (now - view.low_watermark).total_seconds()
    counts = " · ".join(f"{n} {s.lower()}" for s, n in state_counts(view).items() if n)
    cards = [
        ("partitions", str(len(view.partitions) + view.folded_partitions), counts or "none"),  # folded: still counted
        ("low watermark", human_duration(lag, '—') + " ago" if lag is not None else "—",
         f"checkpoint every partition has passed: {display_time(view.low_watermark)}"),
        ("windows complete", f"{view.windows_complete} / {view.windows_total}",
         f"newest {display_time(newest.start)} → {display_time(newest.end)}" if newest else "no window yet"),
        ("stuck", str(len({s.token for s in stuck_list})), "see the stuck list" if stuck_list else "nothing stuck"),
    ]
    fresh = freshness(view, now)
    if fresh is None:
        cards.append(("freshness", human_duration(freshness_seconds(view, now), "—"), "since the end of the newest complete window"))
    else:
        cards.append((
            "freshness", f"{fresh.verdict} · {human_duration(fresh.seconds)}",
            f"since the end of the newest complete window; late past two {human_duration(fresh.schedule_seconds)} windows "
            "of the schedule",
        ))  # fmt: skip
    room = headroom(view, now, warning_share)
    retention = view.lineage.retention_period_s
    cards.append((
        "retention headroom", "—" if room is None else human_duration(max(room.seconds, 0.0)),
        "retention not read yet" if retention is None else f"of a {human_duration(float(retention))} retention_period",
    ))  # fmt: skip
    warn = {"retention headroom"} if room is not None and room.warning else set()
    if fresh is not None and fresh.late:
        warn.add("freshness")
    return '<div class="cards">' + "".join(
        f'<div class="card{" warn" if name in warn else ""}" data-card="{_e(name)}"><span class=muted>{_e(name)}</span>'
        f"<b>{_e(value)}</b><span class=muted>{_e(detail)}</span></div>"
        for name, value, detail in cards
    ) + "</div>"


@dataclass(frozen=True)
class StreamQuery:
    """The stream page's query parameters: pages of each table, the partition search, windows to expand."""

    page: int = 1
    frontier_page: int = 1
    stuck_page: int = 1
    windows_page: int = 1
    q: str = ""
    state: str = ""
    expand: frozenset[datetime] = frozenset()

    def params(self, namespace: str, changes: Mapping[str, str | None]) -> list[tuple[str, str]]:
        values: dict[str, str | None] = {
            "namespace": namespace, "q": self.q or None, "state": self.state or None,
            **{name: str(getattr(self, name)) if getattr(self, name) != 1 else None for name in PAGE_PARAMS},
        }  # fmt: skip
        values.update(changes)
        pairs = [(k, v) for k, v in values.items() if v is not None]
        expand = set(self.expand)
        if changes.get("expand"):
            pairs = [(k, v) for k, v in pairs if k != "expand"]
            expand.add(datetime.fromisoformat(str(changes["expand"])))
        return pairs + [("expand", at.isoformat()) for at in sorted(expand)]


PAGE_PARAMS = ("page", "frontier_page", "stuck_page", "windows_page")


def _search_form(query: StreamQuery, namespace: str) -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if s == query.state else ""}>{s or "any state"}</option>'
        for s in ("", *STATE_COLOURS)
    )
    return (
        f'<form id=search method=get><input type=hidden name=namespace value="{_e(namespace)}">'
        f'<input name=q placeholder="token contains" value="{_e(query.q)}"> <select name=state>{options}</select> '
        f"<button type=submit>search</button></form>"
    )


def render_stream(
    base: str,
    view: StreamView,
    stuck_list: Sequence[StuckPartition],
    namespaces: Iterable[str],
    store_label: str,
    now: datetime,
    query: StreamQuery | None = None,
    headroom_warning: float = DEFAULT_HEADROOM_WARNING,
    run_href: Callable[[datetime], str] | None = None,
) -> str:
    """The first screen holds the cards, the open windows, the stuck tokens and the live frontier; the last verify,
    the graph by time, all windows and all partitions (paged, searchable) follow."""
    query = query or StreamQuery()
    ln = view.lineage
    here = stream_href(base, ln.stream, ln.namespace).split("?")[0]

    def href(changes: Mapping[str, str | None]) -> str:
        return f"{here}?{urlencode(query.params(ln.namespace, changes))}"

    others = " · ".join(
        f"<b>{_e(ns)}</b>" if ns == ln.namespace else f'<a href="{_e(stream_href(base, ln.stream, ns))}">{_e(ns)}</a>'
        for ns in namespaces
    )
    api = f"{base}/api/streams/{quote(ln.stream, safe='')}?{urlencode({'namespace': ln.namespace})}"
    graph = render_lineage_svg(
        view, frozenset(s.token for s in stuck_list), expand=query.expand,
        expand_href=lambda at: href({"expand": at.isoformat()}) + "#lineage",
    )  # fmt: skip
    body = (
        f'<p class=muted><a href="{_e(base)}/">all lineages</a> · namespaces: {others} · '
        f'<a href="{_e(api)}">JSON</a> · store <code>{_e(store_label)}</code> · shown at {display_time(now, precise=False)}</p>'
        f"<h1>{_e(ln.stream)} <span class=muted>namespace {_e(ln.namespace)}"
        f"{' · database ' + _e(ln.database) if ln.database else ''}</span></h1>"
        f"{headroom_band(view, now, headroom_warning)}{_cards(view, stuck_list, now, headroom_warning)}"
        f'<div class="first-screen"><section><h2>Open windows</h2>{tables.open_windows_table(view)}</section>'
        f"<section><h2>Stuck</h2>{tables.stuck_table(stuck_list, query.stuck_page, href)}</section></div>"
        f"<h2>Live frontier</h2>{tables.frontier_table(view, query.frontier_page, href)}"
        f"<h2 id=last-verify>Last verify</h2>{tables.verify_table(view)}"
        f'<h2 id=lineage>Lineage by time</h2><p class=muted>One column per window, the newest (the live frontier) at the '
        f"right, where the graph opens; finished partitions of older windows are folded into a box at the top of their "
        f"column (follow it to draw them).</p>"
        f"{legend_svg()}<div class=graph>{graph}</div>"
        f"<h2>Windows</h2>{tables.windows_table(view, query.windows_page, href, run_href)}"
        f"<h2 id=all-partitions>Partitions</h2>{_search_form(query, ln.namespace)}"
        f"{tables.partitions_table(view, query.page, href, query.q, query.state)}"
    )
    return _page(f"{ln.stream} ({ln.namespace}) · Spanner CDC", body)


def render_message(title: str, message: str, link: tuple[str, str] | None = None) -> str:
    extra = f'<p><a href="{_e(link[0])}">{_e(link[1])}</a></p>' if link else ""
    return _page(title, f"<h1>{_e(title)}</h1><p>{_e(message)}</p>{extra}")
