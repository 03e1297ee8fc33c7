"""Live panels for the notebooks: ipywidgets and plotly widgets fed by stream snapshots.

- :mod:`labs.panels.streams_info`: one snapshot of a stream and its group (XINFO, XPENDING);
- :mod:`labs.panels.figure`: the FigureWidget and status label a panel draws into (the look it shares
  with the dashboard in :mod:`labs.panels.style`);
- :mod:`labs.panels.monitor`: :class:`~labs.panels.monitor.MonitorThread`, the sampling daemon thread
  both live panels are built on (start, stop, backoff, waits);
- :mod:`labs.panels.panel`: :class:`~labs.panels.panel.StreamPanel`, XPENDING per consumer, live;
- :mod:`labs.panels.scrape`: one scrape of a worker's Prometheus ``/metrics``;
- :mod:`labs.panels.dashboard`: :class:`~labs.panels.dashboard.MetricsDashboard`, a worker's metrics beside
  Redis's, live (its charts in :mod:`labs.panels.dashboard_figure`, its samples and verdicts in
  :mod:`labs.panels.dashboard_sample`).
"""
