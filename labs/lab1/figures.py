"""Lab 1's plotly charts: the run over time, the survivors of kill -9, and the XADD latency bonus."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labs.experiments.latency import LatencyStats
from labs.experiments.persistence import SurvivalResult
from labs.lab1.record import ScenarioResult

GREY, GREEN, RED = "#7f7f7f", "#2ca02c", "#d62728"  # acknowledged, survived, lost: red is the loss


def timeline(result: ScenarioResult) -> go.Figure:
    """Sent and processed over time (top), XPENDING per consumer (bottom), rescues marked."""
    rec = result.recorder
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("events sent (XADD acknowledged) and processed", "XPENDING per consumer"),
    )
    t = [s.t_s for s in rec.samples]
    fig.add_trace(go.Scatter(x=t, y=[s.sent for s in rec.samples], name="sent", mode="lines"), row=1, col=1)
    fig.add_trace(
        go.Scatter(x=t, y=[s.processed for s in rec.samples], name="processed", mode="lines"), row=1, col=1
    )
    consumers = sorted({c for s in rec.samples for c in s.pending_by_consumer})
    for consumer in consumers:
        pending = [s.pending_by_consumer.get(consumer, 0) for s in rec.samples]
        fig.add_trace(go.Scatter(x=t, y=pending, name=f"pending {consumer}", mode="lines"), row=2, col=1)
    rescued = [j for j in rec.journal if j.ok]
    if rescued:
        fig.add_trace(
            go.Scatter(
                x=[j.t_s for j in rescued],
                y=[0] * len(rescued),
                mode="markers",
                name="rescued (XAUTOCLAIM)",
                marker={"symbol": "triangle-up", "size": 9},
                text=[f"#{j.counter} from {j.from_consumer}" for j in rescued],
            ),
            row=2,
            col=1,
        )
    fig.update_xaxes(title_text="seconds since start", row=2, col=1)
    fig.update_layout(height=600, title="Lab 1: producer, billing-1, billing-2 and the rescuer")
    return fig


def survival(results: Sequence[SurvivalResult]) -> go.Figure:
    """Acknowledged versus survived writes after kill -9, per topology (SurvivalResult-like)."""
    names = [r.topology for r in results]
    fig = go.Figure(
        data=[
            go.Bar(name="acknowledged", x=names, y=[r.acknowledged for r in results], marker_color=GREY),
            go.Bar(name="survived kill -9", x=names, y=[r.survived for r in results], marker_color=GREEN),
            go.Bar(name="lost", x=names, y=[r.lost for r in results], marker_color=RED),
        ]
    )
    fig.update_layout(
        barmode="group",
        title="kill -9: what survived, without persistence and with AOF everysec",
        yaxis_title="writes",
    )
    return fig


def latency(cases: Sequence[tuple[str, LatencyStats]]) -> go.Figure:
    """Client p50/p99/p99.9 per case (left) beside the server's usec_per_call (right)."""
    labels = [label for label, _ in cases]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.65, 0.35],
        subplot_titles=("client round trip, µs", "server usec_per_call (INFO commandstats)"),
    )
    for name, attr in (("p50", "p50_us"), ("p99", "p99_us"), ("p99.9", "p999_us")):
        fig.add_trace(go.Bar(name=name, x=labels, y=[getattr(s, attr) for _, s in cases]), row=1, col=1)
    fig.add_trace(
        go.Bar(name="server µs/call", x=labels, y=[s.server_usec_per_call for _, s in cases]), row=1, col=2
    )
    fig.update_layout(barmode="group", title="XADD latency: the price of MAXLEN", height=450)
    return fig
