"""Lab 3's plotly charts: per mode, charges per second, group lag and pending over time, fault marked."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from labs.lab3.runner import Run

BIN_S = 1.0


def throughput(run: Run) -> tuple[list[float], list[int]]:
    """Charges per second (from the ledger's ``charged_at``), seconds since the load started."""
    rec = run.record
    bins = Counter(math.floor((c.t - rec.t0) / BIN_S) for c in rec.charges)
    if not bins:
        return [], []
    last = max(bins)
    xs = list(range(min(0, min(bins)), last + 1))
    return [x * BIN_S for x in xs], [int(bins.get(x, 0) / BIN_S) for x in xs]


def mode_figure(variant: str, runs: Sequence[Run]) -> go.Figure:
    """Three rows for one mode: charges/s, group lag, pending; one line per strategy (and WAIT)."""
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("charges per second (SQLite ledger)", "group lag (XINFO GROUPS)", "pending (XPENDING)"),
    )
    palette = qualitative.Plotly
    for i, run in enumerate(runs):
        label = f"{run.worker + ': ' if run.worker else ''}{run.variant}/{run.strategy}"
        line = {"color": palette[i % len(palette)]}  # one colour per cell in all three rows
        x, y = throughput(run)
        fig.add_trace(go.Scatter(x=x, y=y, name=label, mode="lines", legendgroup=label, line=line), row=1, col=1)
        t = [s.t - run.record.t0 for s in run.record.samples]
        lag = [s.lag for s in run.record.samples]
        pending = [s.pending for s in run.record.samples]
        for row, values in ((2, lag), (3, pending)):
            fig.add_trace(go.Scatter(x=t, y=values, name=label, mode="lines", legendgroup=label, line=line,
                                     showlegend=False), row=row, col=1)
    first = runs[0].record
    if first.fault_t is not None:
        fig.add_vline(x=first.fault_t - first.t0, line_dash="dash", line_color="red")
        fig.add_annotation(x=first.fault_t - first.t0, y=1.0, yref="paper", text="fault", showarrow=False,
                           font={"color": "red"}, xanchor="left")
    fig.add_vline(x=first.produce_end - first.t0, line_dash="dot", line_color="gray")
    fig.update_xaxes(title_text="seconds since the load started", row=3, col=1)
    # From 0, so a lag that stays at 0 reads as 0 rather than as a line in the middle of -1..1.
    fig.update_yaxes(rangemode="tozero")
    for row, title in ((1, "charges/s"), (2, "entries"), (3, "entries")):
        fig.update_yaxes(title_text=title, row=row, col=1)
    fig.update_layout(height=720, title=f"Lab 3, mode {variant}: charges, lag and pending over time")
    return fig


def figures(runs: Sequence[Run]) -> list[tuple[str, go.Figure]]:
    """One figure per mode (the failover figure holds the runs with and without WAIT), first repeat."""
    shown = [r for r in runs if r.repeat == 1]
    modes: list[str] = []
    for r in shown:
        mode = r.result.mode
        if mode not in modes:
            modes.append(mode)
    out = []
    for mode in modes:
        mine = [r for r in shown if r.result.mode == mode]
        out.append((f"mode {mode}: throughput, lag and pending (dashed red: the fault; dotted: producer stops)",
                    mode_figure(mode, mine)))
    return out
