"""The comparison's pictures: charges over time around the leader's kill, and latency distributions.

Both are drawn from the rows :func:`labs.compare.scenarios.run_case` returns (``charge_times_s``,
``kill_at_s``, ``latencies_ms``): the ledger's and the consumers' records, never a broker's own
figures. ``lang`` picks the words: ``ru`` in notebook 11, ``en`` in ``make compare``'s report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labs.compare.scenarios import Row

BIN_S = 0.25
COLOURS = {"redis": "#d62728", "redis+WAIT": "#ff7f0e", "redis+WAIT+always": "#8c564b", "rabbitmq": "#2ca02c",
           "nats": "#1f77b4", "nats+always": "#17becf"}
WORDS: dict[str, dict[str, str]] = {
    "ru": {"timeline": "kill -9 лидера под нагрузкой: списания в секунду по брокерам",
           "x-kill": "с от kill -9", "y-rate": "списаний в секунду", "kill": "kill -9",
           "latency": "задержка «отправлено → списано»: доля событий не дольше x",
           "x-latency": "мс (логарифмическая шкала)", "y-share": "доля событий",
           "window": "подтверждённых публикаций в секунду по окну (сколько событий в полёте)",
           "x-window": "окно (логарифмическая шкала)", "y-publish": "публикаций/с",
           "load": "задержка «отправлено → списано» под нагрузкой: p50 (сплошная) и p99 (пунктир)",
           "x-load": "предложенная нагрузка, событий/с", "y-load": "мс (логарифмическая шкала)"},
    "en": {"timeline": "kill -9 of the leader under load: charges per second, per broker",
           "x-kill": "s from the kill -9", "y-rate": "charges per second", "kill": "kill -9",
           "latency": "produce -> charge latency: share of events at most x",
           "x-latency": "ms (log scale)", "y-share": "share of events",
           "window": "confirmed publishes per second by window (events in flight)",
           "x-window": "window (log scale)", "y-publish": "publishes/s",
           "load": "produce -> charge latency under load: p50 (solid) and p99 (dashed)",
           "x-load": "offered load, events/s", "y-load": "ms (log scale)"},
}


def timeline(rows: Sequence[Row], *, case: str = "leader-kill", lang: str = "ru") -> go.Figure:
    """Charges per second in bins of :data:`BIN_S`, one line per broker, time 0 at its kill -9 of the leader."""
    words = WORDS[lang]
    fig = go.Figure()
    for row in rows:
        if row.get("case") != case or "kill_at_s" not in row or not row.get("charge_times_s"):
            continue
        kill = row["kill_at_s"]
        bins = Counter(int((t - kill) // BIN_S) for t in row["charge_times_s"])
        xs = list(range(min(bins), max(bins) + 1))
        fig.add_scatter(x=[b * BIN_S for b in xs], y=[bins.get(b, 0) / BIN_S for b in xs], mode="lines",
                        name=row["broker"], line={"color": COLOURS.get(row["broker"]), "shape": "hv"})
    fig.add_vline(x=0, line_dash="dash", line_color="grey", annotation_text=words["kill"])
    fig.update_layout(title=words["timeline"], xaxis_title=words["x-kill"], yaxis_title=words["y-rate"],
                      height=380, template="plotly_white")
    return fig


def latency_cdf(rows: Sequence[Row], *, cases: Sequence[str] = ("latency",), lang: str = "ru") -> go.Figure:
    """The share of events charged within x ms of their production, per broker (one panel per case)."""
    words = WORDS[lang]
    fig = make_subplots(rows=1, cols=len(cases), subplot_titles=list(cases), shared_yaxes=True)
    for col, case in enumerate(cases, start=1):
        for row in rows:
            values = row.get("latencies_ms") or []
            if row.get("case") != case or not values:
                continue
            ordered = sorted(max(v, 0.01) for v in values)
            shares = [(i + 1) / len(ordered) for i in range(len(ordered))]
            fig.add_scatter(x=ordered, y=shares, mode="lines", name=row["broker"], legendgroup=row["broker"],
                            showlegend=col == 1, line={"color": COLOURS.get(row["broker"]), "shape": "hv"},
                            row=1, col=col)
        fig.update_xaxes(type="log", title_text=words["x-latency"], row=1, col=col)
    fig.update_yaxes(title_text=words["y-share"], range=[0, 1.02], row=1, col=1)
    fig.update_layout(title=words["latency"], height=380, template="plotly_white")
    return fig


def _case_rows(rows: Sequence[Row], prefix: str, broker: str) -> list[Row]:
    return [r for r in rows if r.get("broker") == broker and str(r.get("case", "")).startswith(prefix)
            and "error" not in r]


def window_sweep(rows: Sequence[Row], *, lang: str = "ru") -> go.Figure:
    """Confirmed publishes per second against the window, one line per row (log x)."""
    words = WORDS[lang]
    fig = go.Figure()
    for broker in dict.fromkeys(r["broker"] for r in rows):
        sel = sorted(_case_rows(rows, "window-", broker), key=lambda r: r.get("window") or 1)
        if sel:
            fig.add_scatter(x=[r.get("window") for r in sel], y=[r.get("publish_per_s") for r in sel],
                            mode="lines+markers", name=broker, line={"color": COLOURS.get(broker)})
    fig.update_layout(title=words["window"], xaxis_title=words["x-window"], yaxis_title=words["y-publish"],
                      xaxis_type="log", height=380, template="plotly_white")
    return fig


def load_curve(rows: Sequence[Row], *, lang: str = "ru") -> go.Figure:
    """End-to-end p50 and p99 at each fixed offered rate, every row on one chart."""
    words = WORDS[lang]
    fig = go.Figure()
    for broker in dict.fromkeys(r["broker"] for r in rows):
        sel = sorted(_case_rows(rows, "load-", broker), key=lambda r: r.get("offered_per_s") or 0)
        for q, dash in (("p50_ms", "solid"), ("p99_ms", "dash")):
            if sel:
                fig.add_scatter(x=[r.get("offered_per_s") for r in sel], y=[r.get(q) for r in sel],
                                mode="lines+markers", name=f"{broker} {q[:3]}", legendgroup=broker,
                                line={"color": COLOURS.get(broker), "dash": dash})
    fig.update_layout(title=words["load"], xaxis_title=words["x-load"], yaxis_title=words["y-load"],
                      yaxis_type="log", height=420, template="plotly_white")
    return fig


def report_figures(rows: Sequence[Row]) -> list[tuple[str, go.Figure]]:
    """``make compare``'s charts, in English."""
    ok = [r for r in rows if "error" not in r]
    kill = go.Figure()
    sel = [r for r in ok if r["case"] == "leader-kill"]
    for q in ("first_charge_after_kill_s", "longest_gap_s"):
        kill.add_bar(name=q, x=[r["broker"] for r in sel], y=[r.get(q) for r in sel])
    kill.update_layout(barmode="group", title="kill -9 of the leader: seconds without charges")
    return [("publish window sweep", window_sweep(ok, lang="en")), ("latency under load", load_curve(ok, lang="en")),
            ("failover", kill), ("failover timeline", timeline(ok, lang="en")),
            ("latency distributions", latency_cdf(ok, cases=("latency", "leader-kill"), lang="en"))]
