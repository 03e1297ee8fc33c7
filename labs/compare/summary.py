"""The comparison's main tables, from a run's rows only: durability per row, the window sweep, the
prefetch sweep, latency under load, memory and the faults. ``lang`` picks the column names: ``ru``
in notebook 11, ``en`` in ``make compare``'s report and ``docs/compare.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labs.compare.scenarios import Row

SATURATION_SHARE = 0.9  # a window "stops growing" where it reaches this share of the best rate
WINDOWED_FACTOR = 5.0  # the bar: windowed at least this many times the one-in-flight rate
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
           "redelivered": "повтор после краха, с", "confirmed": "подтверждено", "dead_letters": "мёртвые письма"},
    "en": {"broker": "row", "server": "server", "copies": "copies", "fsync": "fsync", "confirm": "confirm means",
           "window": "window", "publish_per_s": "publish/s", "factor": "x window 1", "publish_p50_ms": "window p50 ms",
           "charges_per_s": "charges/s", "prefetch": "prefetch", "rate": "offered/s", "p50_ms": "p50 ms",
           "p99_ms": "p99 ms", "points": "(messages, RSS MB)", "bytes": "bytes/message", "per_copy": "per copy",
           "bound": "its own bound", "one": "confirmed-publish latency, p50 ms", "best": "best publish/s",
           "saturates": "stops growing at window", "case": "case", "lost": "lost", "unknown": "unknown",
           "charged_twice": "charged twice", "absorbed": "duplicates absorbed", "dead": "dead-lettered",
           "by": "moved by", "attempts": "poison deliveries", "gap": "longest gap s", "first": "first after kill s",
           "redelivered": "redelivered after crash s", "confirmed": "confirmed", "dead_letters": "dead letters"},
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


def window_sweep(rows: Sequence[Row], lang: str = "en") -> Table:
    w = WORDS[lang]
    sweep = [r for r in _ok(rows) if str(r["case"]).startswith("window-")]
    one = {r["broker"]: r.get("publish_per_s") for r in sweep if _window(r) == 1}
    out = []
    for r in sorted(sweep, key=lambda r: (_brokers(sweep).index(r["broker"]), _window(r))):
        base = one.get(r["broker"])
        rate = r.get("publish_per_s")
        out.append((r["broker"], _window(r), rate, round(rate / base, 1) if rate and base else None,
                    r.get("publish_p50_ms"), r.get("charges_per_s")))
    return Table("publish window sweep (everything published, then drained)",
                 (w["broker"], w["window"], w["publish_per_s"], w["factor"], w["publish_p50_ms"], w["charges_per_s"]),
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
    return [t for t in (durability(rows, lang), saturation(rows, lang), window_sweep(rows, lang),
                        prefetch_sweep(rows, lang), load_curve(rows, lang), memory(rows, lang), faults(rows, lang),
                        partition(rows, lang))
            if t.rows]


def markdown(table: Table) -> str:
    """A table as Markdown (the notebook displays it; long cells wrap, nothing is cut)."""
    def cell(v: object) -> str:
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)
