"""The comparison's main tables, from a run's rows only: durability per row, the window sweep with the
CPU each publish cost, where each row's ratio comes from (its ceiling and the side that saturated), the
client's profile, the prefetch sweep, latency under load, memory and the faults. ``lang`` picks the
column names: ``ru`` in notebook 11, ``en`` in ``make compare``'s report and ``docs/compare.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from labs.compare.cpu import CpuFigures, per_message_us, share
from labs.compare.scenarios import Row

SATURATION_SHARE = 0.9  # a window "stops growing" where it reaches this share of the best rate
WINDOWED_FACTOR = 5.0  # the bar: windowed at least this many times the one-in-flight rate
SATURATED_SHARE = 0.8  # a process that used this much of a core or more over a publish saturated it
MACHINE_FULL_SHARE = 0.85  # the client, the broker and other work together on this share of all cores: full
PROFILE_LINES = 5  # the client profile's lines per row in the report (the file beside it has more)
WAL_NOTE = ("RabbitMQ quorum queues keep bodies on disk and grow the Ra WAL in memory up to "
            "raft.wal_max_size_bytes (512 MiB by default) before flushing: the slope is not linear beyond it")
BOUNDS = {"redis": "maxmemory, and MAXLEN/MINID on XADD", "rabbitmq": WAL_NOTE,
          "nats": "max_memory_store / max_file_store, a stream's max_msgs / max_bytes"}


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]


WORDS = {
    "ru": {"broker": "строка", "server": "сервер", "copies": "копий", "fsync": "fsync", "confirm": "что значит «да»",
           "window": "окно", "publish_per_s": "публикаций/с", "factor": "× к окну 1", "publish_p50_ms": "окно, p50 мс",
           "charges_per_s": "списаний/с", "prefetch": "prefetch", "rate": "предложено/с", "p50_ms": "p50 мс",
           "p99_ms": "p99 мс", "points": "(сообщений, RSS МБ)", "bytes": "байт/сообщение", "per_copy": "на копию",
           "bound": "граница", "one": "задержка подтверждённой публикации, p50 мс", "best": "лучшее, публикаций/с",
           "saturates": "рост кончается на окне", "case": "сценарий", "lost": "потеряно", "unknown": "неизвестно",
           "charged_twice": "списано дважды", "absorbed": "повторов поглощено", "dead": "в мёртвых письмах",
           "by": "перенёс", "attempts": "доставок яда", "gap": "самый долгий провал, с",
           "first": "первое после kill, с",
           "redelivered": "повтор после краха, с", "confirmed": "подтверждено", "dead_letters": "мёртвые письма",
           "wall_ms": "публикация, мс", "client_us": "клиент, мкс CPU/сообщ.", "broker_us": "брокер, мкс CPU/сообщ.",
           "client_cores": "клиент, ядра", "broker_cores": "брокер, ядра", "busiest": "самый занятый процесс брокера",
           "busiest_cores": "он, ядра", "others_cores": "прочая работа, ядра", "client_wait": "клиент ждал ядро, доля",
           "load": "load average 1 мин", "one_per_s": "одно в полёте, публикаций/с",
           "one_client": "окно 1: клиент, ядра", "at_window": "на окне", "ceiling": "потолок, публикаций/с",
           "ceiling_factor": "потолок × к окну 1", "reachable": "×5 достижимо здесь", "saturated": "упёрлось в",
           "why": "почему", "rank": "место", "function": "функция", "calls": "вызовов", "own_s": "своё время, с",
           "own_share": "доля", "profiled_per_s": "публикаций/с под cProfile"},
    "en": {"broker": "row", "server": "server", "copies": "copies", "fsync": "fsync", "confirm": "confirm means",
           "window": "window", "publish_per_s": "publish/s", "factor": "x window 1", "publish_p50_ms": "window p50 ms",
           "charges_per_s": "charges/s", "prefetch": "prefetch", "rate": "offered/s", "p50_ms": "p50 ms",
           "p99_ms": "p99 ms", "points": "(messages, RSS MB)", "bytes": "bytes/message", "per_copy": "per copy",
           "bound": "its own bound", "one": "confirmed-publish latency, p50 ms", "best": "best publish/s",
           "saturates": "stops growing at window", "case": "case", "lost": "lost", "unknown": "unknown",
           "charged_twice": "charged twice", "absorbed": "duplicates absorbed", "dead": "dead-lettered",
           "by": "moved by", "attempts": "poison deliveries", "gap": "longest gap s", "first": "first after kill s",
           "redelivered": "redelivered after crash s", "confirmed": "confirmed", "dead_letters": "dead letters",
           "wall_ms": "publish ms", "client_us": "client CPU µs/msg", "broker_us": "broker CPU µs/msg",
           "client_cores": "client cores", "broker_cores": "broker cores", "busiest": "busiest broker process",
           "busiest_cores": "its cores", "others_cores": "other work, cores", "client_wait": "client waited for a CPU",
           "load": "load 1 min", "one_per_s": "one in flight publish/s", "one_client": "window 1 client cores",
           "at_window": "at window", "ceiling": "ceiling publish/s", "ceiling_factor": "ceiling x window 1",
           "reachable": "x5 reachable here", "saturated": "saturated", "why": "why", "rank": "rank",
           "function": "function", "calls": "calls", "own_s": "own s", "own_share": "share",
           "profiled_per_s": "publish/s under cProfile"},
}


def _ok(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if "error" not in r]


def _brokers(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(r["broker"] for r in rows))


def _window(r: Row) -> int:
    return int(str(r["case"]).removeprefix("window-"))


def durability(rows: Sequence[Row], lang: str = "en") -> Table:
    w = WORDS[lang]
    seen: dict[str, Row] = {}
    for r in _ok(rows):
        if "server" in r:
            seen.setdefault(r["broker"], r)

    def said(r: Row, key: str) -> object:
        if lang == "ru" and key in (r.get("durability_ru") or {}):
            return r["durability_ru"][key]
        if key == "dead_letters":
            return str(r.get("durability", "")).rsplit("dead letters: ", 1)[-1]
        return dict(r).get(key, "")

    return Table("durability of each row", (w["broker"], w["server"], w["copies"], w["fsync"], w["confirm"],
                                            w["dead_letters"]),
                 tuple((b, r["server"], r["copies"], said(r, "fsync"), said(r, "confirm"), said(r, "dead_letters"))
                       for b, r in seen.items()))


def _cpu_cells(r: Row) -> tuple[object, ...]:
    """A throughput run's CPU: publish ms, client and broker µs per message, client, broker and other work
    in cores, the client's run-queue wait as a share of the publish, the load average (the busiest broker
    process is in :func:`ceiling`)."""
    fig = r.get("cpu")
    if not fig:
        return (None,) * 8
    wait = fig["client_wait_s"]
    return (round(fig["wall_s"] * 1000, 1), per_message_us(fig, fig["client_cpu_s"]),
            per_message_us(fig, fig["broker_cpu_s"]), share(fig, fig["client_cpu_s"]),
            share(fig, fig["broker_cpu_s"]), share(fig, fig["others_cpu_s"]),
            share(fig, wait) if wait is not None else None, fig["load_1m"])


def _cpu_columns(w: dict[str, str]) -> tuple[str, ...]:
    return (w["wall_ms"], w["client_us"], w["broker_us"], w["client_cores"], w["broker_cores"], w["others_cores"],
            w["client_wait"], w["load"])


def window_sweep(rows: Sequence[Row], lang: str = "en") -> Table:
    """Each window's publish rate, its factor over window 1, and the CPU it cost (:func:`_cpu_cells`)."""
    w = WORDS[lang]
    sweep = [r for r in _ok(rows) if str(r["case"]).startswith("window-")]
    one = {r["broker"]: r.get("publish_per_s") for r in sweep if _window(r) == 1}
    out = []
    for r in sorted(sweep, key=lambda r: (_brokers(sweep).index(r["broker"]), _window(r))):
        base = one.get(r["broker"])
        rate = r.get("publish_per_s")
        out.append((r["broker"], _window(r), rate, round(rate / base, 1) if rate and base else None,
                    r.get("publish_p50_ms"), r.get("charges_per_s"), *_cpu_cells(r)))
    return Table("publish window sweep (everything published, then drained) and the CPU each publish cost",
                 (w["broker"], w["window"], w["publish_per_s"], w["factor"], w["publish_p50_ms"], w["charges_per_s"],
                  *_cpu_columns(w)),
                 tuple(out))


def saturation(rows: Sequence[Row], lang: str = "en") -> Table:
    """Per row: the one-in-flight round trip, the best windowed rate, the factor, where growth stops."""
    w = WORDS[lang]
    sweep = [r for r in _ok(rows) if str(r["case"]).startswith("window-")]
    out = []
    for broker in _brokers(sweep):
        mine = sorted((r for r in sweep if r["broker"] == broker), key=_window)
        rates = [(_window(r), r.get("publish_per_s") or 0.0) for r in mine]
        best = max(rate for _w, rate in rates)
        at = next((win for win, rate in rates if rate >= SATURATION_SHARE * best), None)
        one = next((r for r in mine if _window(r) == 1), None)
        base = one.get("publish_per_s") if one else None
        out.append((broker, one.get("publish_p50_ms") if one else None, best,
                    round(best / base, 1) if base else None, at))
    return Table("where each row's publish rate stops growing",
                 (w["broker"], w["one"], w["best"], w["factor"], w["saturates"]), tuple(out))


@dataclass(frozen=True)
class Bound:
    """Why a row's windowed/one-in-flight ratio is what it is: its window-1 run and its best windowed run,
    with the CPU per message each side spent (µs) and the cores each used over the publish."""

    broker: str
    one_per_s: float  # window 1: one event in flight
    one_client_cores: float | None  # the client's share of a core at window 1 (low: round trips bind it)
    best_per_s: float
    window: int
    window_p50_ms: float | None  # a window's round trip at the best window
    client_us: float  # client CPU per message at the best window
    broker_us: float  # every broker process
    busiest: str
    busiest_us: float
    client_cores: float
    broker_cores: float
    busiest_cores: float
    others_cores: float  # the machine's other work over the same publish
    cores: int
    load_1m: float
    client_waited: float | None = None  # the share of the publish the client waited in the run queue for a CPU

    @property
    def factor(self) -> float:
        return self.best_per_s / self.one_per_s if self.one_per_s else math.inf

    @property
    def ceilings(self) -> dict[str, float]:
        """Publish/s each side allows at the best window's CPU per message: the client and the busiest
        broker process one core each, all of the client's and the broker's work the machine's cores."""
        def per_s(cores: float, us: float) -> float:
            return cores * 1e6 / us if us > 0 else math.inf

        return {"client": per_s(1, self.client_us), "broker": per_s(1, self.busiest_us),
                "machine": per_s(self.cores, self.client_us + self.broker_us)}

    @property
    def ceiling_per_s(self) -> float:
        return min(self.ceilings.values())

    @property
    def ceiling_factor(self) -> float:
        return self.ceiling_per_s / self.one_per_s if self.one_per_s else math.inf

    @property
    def reachable(self) -> bool:
        """x5 (:data:`WINDOWED_FACTOR`) fits under the ceiling on this machine."""
        return self.ceiling_factor >= WINDOWED_FACTOR

    @property
    def saturated(self) -> str:
        """The side that bound the best window: ``client`` or ``broker`` (a process at
        :data:`SATURATED_SHARE` of a core or more, the busier one), ``machine`` (all cores full with the
        other work), or ``waiting`` (nobody full: the confirms' round trips bound it)."""
        if max(self.client_cores, self.busiest_cores) >= SATURATED_SHARE:
            return "client" if self.client_cores >= self.busiest_cores else "broker"
        if self.client_cores + self.broker_cores + self.others_cores >= MACHINE_FULL_SHARE * self.cores:
            return "machine"
        return "waiting"


def bound(one: Row, best: Row) -> Bound | None:
    """A row's :class:`Bound` from its window-1 row and its best windowed row (None without their CPU)."""
    fig, fig1 = best.get("cpu"), one.get("cpu")
    one_rate, best_rate = one.get("publish_per_s"), best.get("publish_per_s")
    if not fig or not fig["messages"] or fig["wall_s"] <= 0 or not one_rate or not best_rate:
        return None

    def us(seconds: float) -> float:
        return seconds / fig["messages"] * 1e6

    def cores(seconds: float) -> float:
        return seconds / fig["wall_s"]

    return Bound(broker=best["broker"], one_per_s=one_rate,
                 one_client_cores=share(fig1, fig1["client_cpu_s"]) if fig1 else None, best_per_s=best_rate,
                 window=int(best.get("window") or 1), window_p50_ms=best.get("publish_p50_ms"),
                 client_us=us(fig["client_cpu_s"]), broker_us=us(fig["broker_cpu_s"]), busiest=fig["busiest"],
                 busiest_us=us(fig["busiest_cpu_s"]), client_cores=cores(fig["client_cpu_s"]),
                 broker_cores=cores(fig["broker_cpu_s"]), busiest_cores=cores(fig["busiest_cpu_s"]),
                 others_cores=cores(fig["others_cpu_s"]), cores=fig["cores"], load_1m=fig["load_1m"],
                 client_waited=None if fig["client_wait_s"] is None else cores(fig["client_wait_s"]))


def bounds(rows: Sequence[Row]) -> list[Bound]:
    """Every row's :class:`Bound` (rows without a window-1 and a windowed run with CPU are left out)."""
    sweep = [r for r in _ok(rows) if str(r["case"]).startswith("window-")]
    out = []
    for broker in _brokers(sweep):
        mine = [r for r in sweep if r["broker"] == broker]
        one = next((r for r in mine if _window(r) == 1), None)
        best = max((r for r in mine if _window(r) > 1), key=lambda r: r.get("publish_per_s") or 0.0, default=None)
        if one and best and (b := bound(one, best)) is not None:
            out.append(b)
    return out


def _n(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:,.0f}".replace(",", " ")


def why(b: Bound, lang: str = "en") -> str:
    """One sentence from ``b``'s figures: the ratio, the side that saturated at the best window, the
    ceiling that follows and whether x5 fits under it on this machine."""
    ru = lang == "ru"
    under = b.factor < WINDOWED_FACTOR
    head = (f"{b.broker}: ×{b.factor:.1f} на окне {b.window} ({_n(b.best_per_s)}/с против {_n(b.one_per_s)}/с "
            f"с одним в полёте){', меньше ×5' if under else ''}." if ru else
            f"{b.broker}: x{b.factor:.1f} at window {b.window} ({_n(b.best_per_s)}/s against {_n(b.one_per_s)}/s "
            f"one in flight){', under x5' if under else ''}.")
    others = ""
    if b.others_cores >= 0.5:
        others = (f" Прочая работа машины заняла {b.others_cores:.2f} из {b.cores} ядер (load {b.load_1m})." if ru
                  else f" Other work took {b.others_cores:.2f} of the {b.cores} cores (load {b.load_1m}).")
    side = b.saturated
    if side == "client":
        text = (f" Упёрлось в клиента: Python-продюсер занял {b.client_cores:.2f} ядра, {b.client_us:.0f} мкс CPU на "
                f"сообщение, его потолок ~{_n(b.ceilings['client'])}/с; брокер — {b.broker_cores:.2f} ядра "
                f"(больше всех {b.busiest}, {b.busiest_cores:.2f})." if ru else
                f" The client saturated: the Python producer used {b.client_cores:.2f} of a core, {b.client_us:.0f} µs "
                f"of CPU per message, a ceiling of ~{_n(b.ceilings['client'])}/s; the broker used "
                f"{b.broker_cores:.2f} cores (busiest {b.busiest}, {b.busiest_cores:.2f}).")
    elif side == "broker":
        text = (f" Упёрлось в брокер: процесс {b.busiest} занял {b.busiest_cores:.2f} ядра, {b.busiest_us:.0f} мкс "
                f"CPU на сообщение, потолок ~{_n(b.ceilings['broker'])}/с; клиент — {b.client_cores:.2f} ядра." if ru
                else f" The broker saturated: its process {b.busiest} used {b.busiest_cores:.2f} of a core, "
                f"{b.busiest_us:.0f} µs of CPU per message, a ceiling of ~{_n(b.ceilings['broker'])}/s; the client "
                f"used {b.client_cores:.2f}.")
    elif side == "machine":
        text = (f" Ни один процесс не занял ядро, но ядра машины были заняты: клиент {b.client_cores:.2f}, брокер "
                f"{b.broker_cores:.2f}, прочая работа {b.others_cores:.2f} из {b.cores} (load {b.load_1m})." if ru
                else f" No process filled a core, but the machine's cores were full: client {b.client_cores:.2f}, "
                f"broker {b.broker_cores:.2f}, other work {b.others_cores:.2f} of {b.cores} (load {b.load_1m}).")
        if b.client_waited is not None and b.client_waited >= 0.1:
            text += (f" Клиент {b.client_waited:.0%} времени ждал свободного ядра." if ru else
                     f" The client spent {b.client_waited:.0%} of the time waiting for a free core.")
        others = ""
    else:
        rtt = f"{b.window_p50_ms} ms" if b.window_p50_ms is not None else "?"
        text = (f" Ни одна сторона не заняла ядро (клиент {b.client_cores:.2f}, брокер {b.broker_cores:.2f}): "
                f"продюсер ждал подтверждений, {b.window} событий за круговой путь окна {rtt.replace('ms', 'мс')} "
                f"(репликация, fsync)." if ru else
                f" No side saturated (client {b.client_cores:.2f}, broker {b.broker_cores:.2f} cores): the producer "
                f"waited for confirms, {b.window} events per window round trip of {rtt} (replication, fsync).")
    need_us = 1e6 / (WINDOWED_FACTOR * b.one_per_s)
    if b.reachable:
        reach = (f" Потолок {_n(b.ceiling_per_s)}/с = ×{b.ceiling_factor:.1f}: ×5 здесь достижимо"
                 f"{', но в этом прогоне не достигнуто' if under else ''}." if ru else
                 f" Ceiling {_n(b.ceiling_per_s)}/s = x{b.ceiling_factor:.1f}: x5 is reachable here"
                 f"{', not reached in this run' if under else ''}.")
    else:
        busiest_side = max(b.client_us, b.busiest_us)
        reach = (f" Потолок {_n(b.ceiling_per_s)}/с = ×{b.ceiling_factor:.1f}: ×5 здесь недостижимо — одно в полёте "
                 f"уже тратит лишь {1e6 / b.one_per_s:.0f} мкс на сообщение, ×5 требует не больше {need_us:.0f} мкс "
                 f"CPU на сообщение у самой занятой стороны, а она тратит {busiest_side:.0f}." if ru else
                 f" Ceiling {_n(b.ceiling_per_s)}/s = x{b.ceiling_factor:.1f}: x5 is not reachable here: one in flight "
                 f"already takes only {1e6 / b.one_per_s:.0f} µs per message, x5 needs at most {need_us:.0f} µs of "
                 f"CPU per message on the busiest side, and it spends {busiest_side:.0f}.")
    return head + text + others + reach


def ceiling(rows: Sequence[Row], lang: str = "en") -> Table:
    """Per row: one in flight, the best window, the CPU per message there, the ceiling and x5's fate."""
    w = WORDS[lang]
    yes, no = ("да", "нет") if lang == "ru" else ("yes", "no")
    sides = {"client": "клиент", "broker": "брокер", "machine": "машина", "waiting": "ожидание"} if lang == "ru" else {}
    out = tuple((b.broker, round(b.one_per_s, 1), None if b.one_client_cores is None else round(b.one_client_cores, 2),
                 round(b.best_per_s, 1), b.window, round(b.factor, 1), round(b.client_us, 1), round(b.broker_us, 1),
                 f"{b.busiest} {b.busiest_cores:.2f}", round(b.ceiling_per_s), round(b.ceiling_factor, 1),
                 yes if b.reachable else no, sides.get(b.saturated, b.saturated))
                for b in bounds(rows))
    return Table("why each row's ratio is what it is: the ceiling from the CPU per message at the best window",
                 (w["broker"], w["one_per_s"], w["one_client"], w["best"], w["at_window"], w["factor"], w["client_us"],
                  w["broker_us"], w["busiest"], w["ceiling"], w["ceiling_factor"], w["reachable"], w["saturated"]),
                 out)


def reasons(rows: Sequence[Row], lang: str = "en") -> Table:
    """:func:`why` of every row, one sentence each."""
    return Table("why, in words (generated from the figures above)", (WORDS[lang]["broker"], WORDS[lang]["why"]),
                 tuple((b.broker, why(b, lang)) for b in bounds(rows)))


def profiles(rows: Sequence[Row], lang: str = "en", lines: int = PROFILE_LINES) -> Table:
    """The client's profile of each row's windowed publish: the top ``lines`` functions by own time."""
    w = WORDS[lang]
    out = []
    for r in _ok(rows):
        if str(r["case"]).startswith("profile-"):
            for i, line in enumerate(r.get("profile_top", [])[:lines], 1):
                out.append((r["broker"], r.get("window"), r.get("publish_per_s") if i == 1 else None, i,
                            line["function"], line["calls"], line["own_s"], line["own_share"]))
    return Table(f"client profile (cProfile of the publishing loop at the best window, top {lines} by own time)",
                 (w["broker"], w["window"], w["profiled_per_s"], w["rank"], w["function"], w["calls"], w["own_s"],
                  w["own_share"]),
                 tuple(out))


def profile_text(row: Row) -> str:
    """The text of ``profile-<row>.txt``: what was profiled, its CPU, and pstats' listing."""
    fig: CpuFigures | None = row.get("cpu")
    head = [f"client profile of {row['broker']}: case {row['case']}, window {row.get('window')}, "
            f"{row.get('confirmed')} events confirmed, {row.get('publish_per_s')} publish/s under cProfile"]
    if fig:
        head.append(f"over {fig['wall_s']:.3f} s: client CPU {fig['client_cpu_s']:.3f} s, broker CPU "
                    f"{fig['broker_cpu_s']:.3f} s (busiest {fig['busiest']} {fig['busiest_cpu_s']:.3f} s), other work "
                    f"{fig['others_cpu_s']:.3f} s, {fig['cores']} cores, load {fig['load_1m']}")
    head.append("cProfile slows Python code: this rate is not a throughput figure; the shares of own time are "
                "the point. Own time is wall time (a loaded machine's waits for a core inside a function count); "
                "each resumption of a coroutine counts as a call.")
    return "\n".join(head) + "\n\n" + str(row.get("profile_text", ""))


def prefetch_sweep(rows: Sequence[Row], lang: str = "en") -> Table:
    w = WORDS[lang]
    sweep = [r for r in _ok(rows) if str(r["case"]).startswith("prefetch-")]
    return Table("prefetch sweep (the same backlog drained by two consumers)",
                 (w["broker"], w["prefetch"], w["charges_per_s"], w["p50_ms"]),
                 tuple((r["broker"], r.get("prefetch"), r.get("charges_per_s"), r.get("p50_ms")) for r in sweep))


def load_curve(rows: Sequence[Row], lang: str = "en") -> Table:
    w = WORDS[lang]
    sel = [r for r in _ok(rows) if str(r["case"]).startswith("load-")]
    return Table("latency under load (produce -> charge, fixed offered rates)",
                 (w["broker"], w["case"], w["rate"], w["p50_ms"], w["p99_ms"]),
                 tuple((r["broker"], r["case"], r.get("offered_per_s"), r.get("p50_ms"), r.get("p99_ms"))
                       for r in sel))


def memory(rows: Sequence[Row], lang: str = "en") -> Table:
    w = WORDS[lang]
    sel = [r for r in _ok(rows) if r["case"] == "memory"]
    return Table("memory with the backlog held at two sizes (RSS of all the row's servers)",
                 (w["broker"], w["copies"], w["points"], w["bytes"], w["per_copy"], w["bound"]),
                 tuple((r["broker"], r.get("copies"), r.get("memory_points"), r.get("bytes_per_message"),
                        r.get("bytes_per_message_per_copy"), BOUNDS.get(str(r["broker"]).split("+")[0], ""))
                       for r in sel))


def faults(rows: Sequence[Row], lang: str = "en") -> Table:
    w = WORDS[lang]
    cases = ("leader-kill", "consumer-kill", "poison", "order", "latency")
    sel = [r for r in _ok(rows) if r["case"] in cases]
    cols = ("broker", "case", "confirmed", "unknown", "lost", "charged_twice", "duplicates_absorbed", "dead_lettered",
            "dead_lettered_by", "poison_attempts", "first_charge_after_kill_s", "longest_gap_s",
            "crash_redelivered_after_s", "p50_ms", "p99_ms")
    names = {"duplicates_absorbed": "absorbed", "dead_lettered": "dead", "dead_lettered_by": "by",
             "poison_attempts": "attempts", "first_charge_after_kill_s": "first", "longest_gap_s": "gap",
             "crash_redelivered_after_s": "redelivered"}
    return Table("faults and semantics", tuple(w[names.get(c, c)] for c in cols),
                 tuple(tuple(r.get(c, "") for c in cols) for r in sel))


def partition(rows: Sequence[Row], lang: str = "en") -> Table:
    """The partition case (labs.compare.partition_case): what was acknowledged and then lost, what the
    cut-off leader kept confirming and for how long, the gap before the first charge, the timers."""
    sel = [r for r in _ok(rows) if r["case"] == "partition"]
    cols = ("broker", "confirmed", "lost", "lost_cut_off_side", "minority_confirmed_in_cut", "minority_accepting_s",
            "first_charge_after_cut_s", "timers")
    return Table("partition: the leader and a producer cut off from the majority", cols,
                 tuple(tuple(dict(r).get(c, "") for c in cols) for r in sel))


def all_tables(rows: Sequence[Row], lang: str = "en") -> list[Table]:
    return [t for t in (durability(rows, lang), saturation(rows, lang), ceiling(rows, lang), reasons(rows, lang),
                        window_sweep(rows, lang), profiles(rows, lang), prefetch_sweep(rows, lang),
                        load_curve(rows, lang), memory(rows, lang), faults(rows, lang),
                        partition(rows, lang))
            if t.rows]


def markdown(table: Table) -> str:
    """A table as Markdown (the notebook displays it; long cells wrap, nothing is cut)."""
    def cell(v: object) -> str:
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)
