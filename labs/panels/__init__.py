"""Live panels for the notebooks: ipywidgets and plotly widgets fed by stream snapshots.

- :mod:`labs.panels.streams_info`: one snapshot of a stream and its group (XINFO, XPENDING);
- :mod:`labs.panels.figure`: the FigureWidget and status label a panel draws into;
- :mod:`labs.panels.panel`: :class:`~labs.panels.panel.StreamPanel`, sampling from a daemon thread.
"""
