"""The audit's picture: one self-contained HTML page of lag and commit rate per group over
the retained history, and the findings table.

How this works: ``render`` builds one plotly figure per group (``history.GroupSeries``): lag
(summed over the group's partitions) above, commits per minute below, on one time axis.
plotly.js is embedded once in the page's head (``plotly.offline.get_plotlyjs``, about 4.5 MiB),
so the page needs no network: it opens offline, from a mail attachment or an artifact store.
Groups are ordered by their highest lag and at most ``MAX_CHARTS`` are drawn (the page says
how many were left out); the groups table lists every group. The findings table shows the
findings the audit brought back (its top ones by severity), every text HTML-escaped. Each
chart's div has class ``kgc-chart`` and ``data-group``, which the test looks for after
plotly has drawn.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from coordinator.audit.history import GroupSeries

__all__ = ["MAX_CHARTS", "render"]

MAX_CHARTS = 50
_FINDING_COLUMNS = ["severity", "check", "group", "topic", "partition", "detail"]
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; }
tr.error td:first-child { color: #b00020; font-weight: 600; }
tr.warn td:first-child { color: #a65f00; font-weight: 600; }
.kgc-chart { margin: 0.5em 0 1.5em; }
.meta { color: #555; }
"""


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def _figure_html(s: GroupSeries, index: int) -> str:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    times = [datetime.fromtimestamp(t / 1000, tz=UTC) for t in s.times_ms]
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
        subplot_titles=("lag (records)", "offset commits per minute (per partition)"),
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=times, y=s.lag, mode="lines+markers", name="lag", connectgaps=False,
                   line={"color": "#c0392b"}, marker={"size": 4}),
        row=1, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=times, y=s.commit_rate, mode="lines+markers", name="commits/min",
                   line={"color": "#2471a3"}, marker={"size": 4}),
        row=2, col=1,
    )  # fmt: skip
    fig.update_layout(
        title={"text": f"group {s.group}", "x": 0.01},
        height=420, margin={"l": 60, "r": 20, "t": 60, "b": 40}, showlegend=False,
        template="plotly_white",
    )  # fmt: skip
    div: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=f"kgc-chart-{index}",
        config={"displaylogo": False, "responsive": True},
    )  # fmt: skip
    return f'<div class="kgc-chart" data-group="{html.escape(s.group, quote=True)}">{div}</div>'


def _table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], classes: Sequence[str] = ()
) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{html.escape(classes[i])}"' if i < len(classes) and classes[i] else ""
        cells = "".join(
            f'<td class="num">{v}</td>'
            if isinstance(v, int | float) and not isinstance(v, bool)
            else f"<td>{html.escape('' if v is None else str(v))}</td>"
            for v in row
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _finding_detail(f: dict[str, Any]) -> str:
    for key in ("message", "detail"):
        if f.get(key):
            return str(f[key])
    rest = {k: v for k, v in f.items() if k not in _FINDING_COLUMNS and v is not None}
    return json.dumps(rest, default=str, sort_keys=True)


def render(
    history: dict[str, Any] | None, findings: list[dict[str, Any]], summary: dict[str, Any]
) -> str:
    """The page: ``history`` as ``history.group_history`` returns it (None: no history
    kept), ``findings`` the audit's top findings, ``summary`` its summary figures."""
    from plotly.offline import get_plotlyjs

    groups: list[GroupSeries] = list(history["groups"]) if history else []
    ranked = sorted(groups, key=lambda s: (-max((x or 0) for x in s.lag or [0]), s.group))
    parts = [
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>kgc audit</title>',
        f"<style>{_STYLE}</style><script>{get_plotlyjs()}</script></head><body>",
        "<h1>kgc audit</h1>",
        f'<p class="meta">source {html.escape(str(summary.get("source", "")))}; audit time '
        f"{_iso(int(summary.get('now_ms') or 0))}; {summary.get('groups', 0)} groups, "
        f"{summary.get('partitions', 0)} partitions, total lag {summary.get('total_lag', 0)}; "
        f"{summary.get('findings', {}).get('total', 0)} findings</p>",
        "<h2>Lag and commit rate over the retained history</h2>",
    ]
    if not history or not groups:
        parts.append("<p>No group history was read: none is kept here "
                     "(offsets.history.retention.ms=0, nothing committed, or a database "
                     "older than schema version 3).</p>")  # fmt: skip
    else:
        parts.append(
            f'<p class="meta">{_iso(history["start_ms"])} to {_iso(history["end_ms"])}, in steps '
            f"of {history['step_ms'] / 1000:g} s; lag is the log end offset at each step less "
            "the committed offset, summed over the group's partitions"
            + (f"; {history['bad_values']} history values did not decode" if history["bad_values"] else "")
            + "</p>"
        )  # fmt: skip
        rows = [
            [s.group, s.partitions, s.commits, s.lag[-1] if s.lag else None,
             max((x for x in s.lag if x is not None), default=None)]
            for s in ranked
        ]  # fmt: skip
        parts.append(_table(["group", "partitions", "commits", "lag now", "highest lag"], rows))
        parts += [_figure_html(s, i) for i, s in enumerate(ranked[:MAX_CHARTS])]
        if len(ranked) > MAX_CHARTS:
            parts.append(
                f"<p>{len(ranked) - MAX_CHARTS} more groups are in the table, not drawn.</p>"
            )
    parts.append("<h2>Findings</h2>")
    if findings:
        rows = [[f.get(c) for c in _FINDING_COLUMNS[:-1]] + [_finding_detail(f)] for f in findings]
        parts.append(
            _table(_FINDING_COLUMNS, rows, [str(f.get("severity") or "") for f in findings])
        )
    else:
        parts.append("<p>No findings.</p>")
    parts.append("</body></html>\n")
    return "".join(parts)
