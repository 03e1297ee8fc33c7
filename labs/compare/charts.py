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
COLOURS = {"redis": "#d62728", "redis+WAIT": "#ff7f0e", "rabbitmq": "#2ca02c", "nats": "#1f77b4"}
WORDS: dict[str, dict[str, str]] = {
    "ru": {"timeline": "kill -9 лидера под нагрузкой: списания в секунду по брокерам",
           "x-kill": "с от kill -9", "y-rate": "списаний в секунду", "kill": "kill -9",
           "latency": "задержка «отправлено → списано»: доля событий не дольше x",
           "x-latency": "мс (логарифмическая шкала)", "y-share": "доля событий"},
    "en": {"timeline": "kill -9 of the leader under load: charges per second, per broker",
           "x-kill": "s from the kill -9", "y-rate": "charges per second", "kill": "kill -9",
           "latency": "produce -> charge latency: share of events at most x",
           "x-latency": "ms (log scale)", "y-share": "share of events"},
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
