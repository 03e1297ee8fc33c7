"""The workload of one comparison: which cases run, at which scale, in which order.

:func:`cases` is ``make compare``'s plan (``quick`` a short run); :func:`load_cases` makes the
latency-under-load cases of one row from its measured maximum and :func:`profile_cases` the profiled
publish at its best window (so both run after the sweep).
Notebook 11 takes :func:`notebook_cases`, a short run whose scale it states.
"""

from __future__ import annotations

from labs.compare.scenarios import Case, Row

WINDOWS_QUICK = (1, 16, 256)
WINDOWS_FULL = (1, 4, 16, 64, 256)
PREFETCHES = (16, 100, 300)
LOAD_SHARES = (0.25, 0.5, 0.75, 0.9)  # offered rates, as shares of the row's measured end-to-end maximum
MEMORY_QUICK = (5_000, 20_000)
MEMORY_FULL = (20_000, 100_000)
# events of a windowed publish: enough that the fastest row publishes for 0.1 s or more, so its CPU per
# message is measured over many scheduler slices (800 took 35 ms at 23,000/s)
WINDOWED_EVENTS_QUICK = 3000
WINDOWED_EVENTS_FULL = 8000


def window_cases(windows: tuple[int, ...], events: int, one_in_flight_events: int) -> list[Case]:
    """Publish everything first with each window (window 1: one event in flight), then drain."""
    return [Case(f"window-{w}", one_in_flight_events if w == 1 else events, hold=True, window=w) for w in windows]


def cases(quick: bool) -> list[Case]:
    """The workload: small with ``quick`` (a few minutes per broker), larger otherwise."""
    k = 1 if quick else 10
    windows = WINDOWS_QUICK if quick else WINDOWS_FULL
    return [
        *window_cases(windows, WINDOWED_EVENTS_QUICK if quick else WINDOWED_EVENTS_FULL, 150 * k),
        *[Case(f"prefetch-{p}", 800 * k, hold=True, window=256, prefetch=p) for p in PREFETCHES],
        Case("latency", 50 * k, rate_per_s=50),
        Case("leader-kill", 60 * k, rate_per_s=30, kill_leader_at_s=1.0 * k),
        Case("consumer-kill", 20 * k, crash_consumer=True),
        Case("poison", 20 * k, poison=True),
        Case("order", 40 * k, orders=4, consumers=3),
        Case("memory", (MEMORY_QUICK if quick else MEMORY_FULL)[-1], memory_at=MEMORY_QUICK if quick else MEMORY_FULL),
    ]


def notebook_cases() -> list[Case]:
    """Notebook 11's short run: the window sweep at a small scale, the consumer kill and the poison
    message; the leader kill is :func:`notebook_leader_kill`, run last."""
    return [
        *window_cases((1, 16, 256), 600, 100),
        Case("consumer-kill", 20, crash_consumer=True),
        Case("poison", 20, poison=True),
    ]


def notebook_leader_kill(*, restart: bool) -> Case:
    """Notebook 11's leader kill, the last case of its run: the killed node is started again only where
    another row still runs on the same cluster (``restart``; Redis's two rows share theirs)."""
    return Case("leader-kill", 100, rate_per_s=40, kill_leader_at_s=0.5, restart_killed=restart)


def end_to_end_max_per_s(rows: list[Row], broker: str) -> float | None:
    """The row's measured end-to-end maximum: the best windowed publish rate or the drain's charge rate,
    whichever is lower (an offered rate above it only grows a backlog)."""
    sweep = [r for r in rows if r.get("broker") == broker and "error" not in r
             and str(r.get("case", "")).startswith(("window-", "prefetch-"))]
    publish = max((r.get("publish_per_s") or 0 for r in sweep), default=0)
    drains = sorted(r.get("charges_per_s") or 0 for r in sweep)
    drain = drains[len(drains) // 2] if drains else 0  # the median drain: one fast drain is not a steady rate
    best = min(publish, drain)
    return best or None


def load_cases(rows: list[Row], broker: str, *, seconds: float) -> list[Case]:
    """Fixed offered rates at :data:`LOAD_SHARES` of the row's end-to-end maximum, ``seconds`` each."""
    top = end_to_end_max_per_s(rows, broker)
    if not top:
        return []
    out = []
    for share in LOAD_SHARES:
        rate = max(5.0, round(top * share))
        window = max(1, round(rate / 50))  # a window every 20 ms
        name = f"load-{round(share * 100)}pct"  # a queue's name too: RabbitMQ refuses a '%' in it
        out.append(Case(name, max(20, round(rate * seconds)), rate_per_s=rate, window=window))
    return out


def best_window(rows: list[Row], broker: str) -> int | None:
    """The window of the row's fastest windowed publish (window > 1) in the sweep, None without one."""
    sweep = [r for r in rows if r.get("broker") == broker and "error" not in r
             and str(r.get("case", "")).startswith("window-") and (r.get("window") or 1) > 1]
    best = max(sweep, key=lambda r: r.get("publish_per_s") or 0.0, default=None)
    return int(best.get("window") or 1) if best else None


def profile_cases(rows: list[Row], broker: str, *, quick: bool) -> list[Case]:
    """The row's publish at its best window again under cProfile (the client's own time per function)."""
    window = best_window(rows, broker)
    if window is None:
        return []
    events = WINDOWED_EVENTS_QUICK if quick else WINDOWED_EVENTS_FULL
    return [Case(f"profile-{window}", events, hold=True, window=window, profile=True)]
