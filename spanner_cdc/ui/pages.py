"""Server-rendered HTML pages (no JavaScript): the lineage index and one page per stream and namespace."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from urllib.parse import quote, urlencode

from spanner_cdc.times import display_time, human_duration
from spanner_cdc.ui.health import StuckPartition, lag_seconds, state_counts, stuck
from spanner_cdc.ui.svg import STATE_COLOURS, legend_svg, render_lineage_svg
from spanner_cdc.ui.view import StreamView, WindowView

STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1f2933;background:#fff}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:left}
th{background:#f3f5f7} td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,monospace;font-size:12px}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:10px 0}
.card{border:1px solid #d0d7de;border-radius:8px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:18px} .muted{color:#6b7785;font-size:12px}
.graph{overflow:auto;border:1px solid #d0d7de;border-radius:8px;padding:6px;background:#fbfcfd}
.state{padding:1px 6px;border-radius:4px} .ok{color:#1b5e20;font-weight:600} .bad{color:#b71c1c;font-weight:600}
.error{white-space:pre-wrap;max-width:520px}
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


def _state_badge(state: str) -> str:
    fill, ink = STATE_COLOURS.get(state, ("#fff", "#000"))
    return f'<span class="state" style="background:{fill};color:{ink}">{_e(state)}</span>'


def render_index(base: str, views: Sequence[StreamView], store_label: str, now: datetime) -> str:
    rows = []
    for view in views:
        ln = view.lineage
        counts = " · ".join(f"{n} {s.lower()}" for s, n in state_counts(view).items() if n) or "none"
        lag = None if view.low_watermark is None else (now - view.low_watermark).total_seconds()
        complete = sum(1 for w in view.windows if w.complete)
        stuck_count = len({s.token for s in stuck(view, now)})
        rows.append(
            f'<tr data-stream="{_e(ln.stream)}" data-namespace="{_e(ln.namespace)}">'
            f'<td><a href="{_e(stream_href(base, ln.stream, ln.namespace))}">{_e(ln.stream)}</a></td>'
            f"<td>{_e(ln.namespace)}</td><td>{_e(ln.database) or '—'}</td><td>{_e(counts)}</td>"
            f"<td class=num>{human_duration(lag, '—')}</td><td class=num>{complete} / {len(view.windows)}</td>"
            f'<td class="num {"bad" if stuck_count else "ok"}">{stuck_count}</td></tr>'
        )
    table = (
        "<table id=lineages><tr><th>stream</th><th>namespace</th><th>database</th><th>partitions</th>"
        "<th>low watermark lag</th><th>windows complete</th><th>stuck</th></tr>" + "".join(rows) + "</table>"
        if views
        else "<p>No lineage yet: the first hourly run (or <code>spanner-cdc extract</code>) bootstraps one.</p>"
    )
    body = (
        f"<h1>Spanner CDC lineages</h1><p class=muted>metadata store: <code>{_e(store_label)}</code> · "
        f'<a href="{_e(base)}/api/lineages">JSON</a> · <a href="{_e(base)}/metrics">metrics</a> · '
        f"shown at {display_time(now, precise=False)}</p>{table}"
    )
    return _page("Spanner CDC", body)


def _cards(view: StreamView, stuck_list: Sequence[StuckPartition], now: datetime) -> str:
    newest = view.newest_window
    lag = None if view.low_watermark is None else (now - view.low_watermark).total_seconds()
    counts = " · ".join(f"{n} {s.lower()}" for s, n in state_counts(view).items() if n)
    complete = sum(1 for w in view.windows if w.complete)
    cards = [
        ("partitions", str(len(view.partitions)), counts or "none"),
        ("low watermark", human_duration(lag, '—') + " ago" if lag is not None else "—", display_time(view.low_watermark)),
        ("windows complete", f"{complete} / {len(view.windows)}",
         f"newest {display_time(newest.start)} → {display_time(newest.end)}" if newest else "no window yet"),
        ("stuck", str(len({s.token for s in stuck_list})), "see the stuck list" if stuck_list else "nothing stuck"),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card" data-card="{_e(name)}"><span class=muted>{_e(name)}</span><b>{_e(value)}</b>'
        f"<span class=muted>{_e(detail)}</span></div>"
        for name, value, detail in cards
    ) + "</div>"


def _partitions_table(view: StreamView) -> str:
    rows = []
    for p in sorted(view.partitions, key=lambda p: (p.start is not None, p.start.timestamp() if p.start else 0.0, p.token)):
        lag = lag_seconds(p, view)
        lease = f"{p.lease_owner} until {display_time(p.lease_expires_at, precise=False)}" if p.lease_owner else "—"
        rows.append(
            f'<tr data-token="{_e(p.token)}"><td class=mono>{_e(p.token)}</td><td>{_state_badge(p.state)}</td>'
            f"<td>{display_time(p.start)}</td><td>{display_time(p.end)}</td><td>{display_time(p.watermark)}</td>"
            f"<td class=num>{human_duration(lag, '—')}</td><td class=num>{p.attempts}</td><td>{_e(lease)}</td>"
            f"<td class=mono>{_e(', '.join(p.parents)) or '—'}</td>"
            f"<td class='error'>{_e(p.last_error) or '—'}</td></tr>"
        )
    return (
        "<table id=partitions><tr><th>token</th><th>state</th><th>start</th><th>end</th><th>watermark</th>"
        "<th>lag behind newest window</th><th>attempts</th><th>lease</th><th>parents</th><th>last error</th></tr>"
        + "".join(rows) + "</table>"
    )


def _check_cell(window: WindowView) -> str:
    verdict = window.check_passed
    css = "muted" if verdict is None else "ok" if verdict else "bad"
    return f'<span class="{css}" data-check="{_e(verdict)}">{_e(window.check_text)}</span>'


def _windows_table(view: StreamView) -> str:
    rows = "".join(
        f'<tr data-window-start="{_e(w.start.isoformat())}" data-complete="{str(w.complete).lower()}">'
        f"<td>{display_time(w.start)}</td><td>{display_time(w.end)}</td><td>{_e(w.state)}</td>"
        f'<td class="{"ok" if w.complete else "bad"}">{"complete" if w.complete else "open"}</td>'
        f"<td class=num>{_e(w.records) or '—'}</td><td class=num>{_e(w.files) or '—'}</td>"
        f"<td>{_check_cell(w)}</td><td class=num>{human_duration(w.duration_seconds, '—')}</td></tr>"
        for w in sorted(view.windows, key=lambda w: w.start, reverse=True)
    )
    return (
        "<table id=windows><tr><th>start</th><th>end</th><th>state</th><th>completeness</th><th>records</th>"
        "<th>files</th><th>transaction check</th><th>duration</th></tr>" + rows + "</table>"
        if view.windows
        else "<p>No window yet.</p>"
    )


def _stuck_table(stuck_list: Sequence[StuckPartition]) -> str:
    if not stuck_list:
        return "<p id=stuck class=ok>Nothing stuck.</p>"
    rows = "".join(
        f"<tr><td class=mono>{_e(s.token)}</td><td>{_state_badge(s.state)}</td><td class=error>{_e(s.reason)}</td></tr>"
        for s in stuck_list
    )
    return f"<table id=stuck><tr><th>token</th><th>state</th><th>why</th></tr>{rows}</table>"


def render_stream(
    base: str,
    view: StreamView,
    stuck_list: Sequence[StuckPartition],
    namespaces: Iterable[str],
    store_label: str,
    now: datetime,
) -> str:
    ln = view.lineage
    others = " · ".join(
        f"<b>{_e(ns)}</b>" if ns == ln.namespace else f'<a href="{_e(stream_href(base, ln.stream, ns))}">{_e(ns)}</a>'
        for ns in namespaces
    )
    api = f"{base}/api/streams/{quote(ln.stream, safe='')}?{urlencode({'namespace': ln.namespace})}"
    graph = render_lineage_svg(view, frozenset(s.token for s in stuck_list))
    body = (
        f'<p class=muted><a href="{_e(base)}/">all lineages</a> · namespaces: {others} · '
        f'<a href="{_e(api)}">JSON</a> · store <code>{_e(store_label)}</code> · shown at {display_time(now, precise=False)}</p>'
        f"<h1>{_e(ln.stream)} <span class=muted>namespace {_e(ln.namespace)}"
        f"{' · database ' + _e(ln.database) if ln.database else ''}</span></h1>"
        f"{_cards(view, stuck_list, now)}"
        f"<h2>Lineage</h2>{legend_svg()}<div class=graph>{graph}</div>"
        f"<h2>Stuck</h2>{_stuck_table(stuck_list)}"
        f"<h2>Windows</h2>{_windows_table(view)}"
        f"<h2>Partitions</h2>{_partitions_table(view)}"
    )
    return _page(f"{ln.stream} ({ln.namespace}) · Spanner CDC", body)


def render_message(title: str, message: str, link: tuple[str, str] | None = None) -> str:
    extra = f'<p><a href="{_e(link[0])}">{_e(link[1])}</a></p>' if link else ""
    return _page(title, f"<h1>{_e(title)}</h1><p>{_e(message)}</p>{extra}")
