"""Exercise checks of notebook 06 (the rescuer, the pool, the DLQ): ``check("06.1")`` ... ``check("06.4")``.

The runs are the notebook's own experiments (``labs.experiments.claiming``, ``rescuers``,
``pool_and_dlq``) on the exercise's streams under ``P``; each check reads those streams and the
run records and compares the student's figures with them (ranges where timing decides):

- 06.1 «Кривая у обрыва» and 06.2 «Без разброса»: ``min_idle_sweep`` with jitter 60 ms and 0 ms
  (``fine_sweep``, ``flat_sweep``); where the duplicates end (``*_zero_from_ms``) and the handler's
  p99 (``*_p99_ms``).
- 06.3 «Пачка спасателя в одну запись»: ``rescuers_race`` with ``count=1``, with a handler shorter
  and longer than min idle (``race_one``, ``race_slow``).
- 06.4 «COUNT 1»: ``pool_run`` with ``count=1`` and ``count=16`` (``count_one``, ``count_sixteen``)
  and the ``XREADGROUP`` calls per entry the student measured (``reads_per_entry``).
- 06.5 «Простой дольше всех попыток»: ``locked_ledger_run`` with a 3 s lock and two attempts
  (``long_outage``); the retry budget a worker would have spent on the outage
  (``attempts_budget_s``) and how many times longer the outage was (``budget_overrun``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from labs.exercises.exercise import Exercise, expect
from labs.exercises.facts import named_stream, number, of_kind
from labs.experiments.claiming import ClaimRun
from labs.experiments.locked_ledger import OutageRun
from labs.experiments.pool_and_dlq import PoolRun
from labs.experiments.rescuers import RaceRun

GROUP = "billing"
SWEEP_ENTRIES = 40
P99_SLACK_MS = 0.5
POOL_ENTRIES = 200
OUTAGE_HOLD_S, OUTAGE_ATTEMPTS, OUTAGE_EVENTS = 3.0, 2, 45  # 5 before the lock, 40 while it is held


def zero_from(runs: Sequence[ClaimRun]) -> int | None:
    """The smallest min idle of the sweep from which on every run had no duplicates (None: never)."""
    found = None
    for run in sorted(runs, key=lambda x: x.min_idle_ms, reverse=True):
        if run.duplicates:
            break
        found = run.min_idle_ms
    return found


def _sweep(ns: Mapping[str, object], name: str, prefix: str, must_have: Sequence[int]) -> list[ClaimRun]:
    runs = of_kind(ns[name], (list, tuple), name, "списком, который вернул `min_idle_sweep(...)`")
    expect(
        bool(runs) and all(isinstance(x, ClaimRun) for x in runs),
        f"`{name}` — список результатов `min_idle_sweep(...)`.",
    )
    values = {x.min_idle_ms for x in runs}
    expect(
        set(must_have) <= values,
        f"В ряду `{name}` нет значений min idle из задания: {', '.join(map(str, must_have))} мс.",
    )
    for run in runs:
        named_stream(ns, f"{prefix}sweep:{run.min_idle_ms}")
        expect(run.entries == SWEEP_ENTRIES, f"В прогонах `{name}` должно быть по {SWEEP_ENTRIES} записей.")
    return list(runs)


def _curve_checker(
    name: str, prefix: str, must_have: Sequence[int], lesson: Callable[[list[ClaimRun], int | None, float], str]
) -> Callable[[Mapping[str, object]], str]:
    """06.1 and 06.2: the student's cut-off and p99 read off their own sweep."""
    stem = name.removesuffix("_sweep")

    def verify(ns: Mapping[str, object]) -> str:
        runs = _sweep(ns, name, prefix, must_have)
        p99 = max(x.handler_p99_ms for x in runs)
        expect(
            abs(number(ns[f"{stem}_p99_ms"], f"{stem}_p99_ms") - p99) <= P99_SLACK_MS,
            f"`{stem}_p99_ms` не совпадает с наибольшим `handler_p99_ms` вашего ряда.",
        )
        cut = zero_from(runs)
        claimed = ns[f"{stem}_zero_from_ms"]
        expect(
            claimed == cut,
            f"`{stem}_zero_from_ms` не то: это наименьший min idle ряда, начиная с которого дублей нет ни в одном "
            "прогоне (и в нём самом, и во всех с бо́льшим min idle); `None`, если такого нет.",
        )
        return lesson(runs, cut, p99)

    return verify


def _no_cut(runs: list[ClaimRun], p99: float) -> str:
    held = max(x.held_max_ms for x in runs)
    return (
        f"Дубли есть во всём ряду: p99 обработки {p99:.0f} мс, а в руках запись бывала до {held:.0f} мс — машина "
        "загружена, и очередь к потокам длиннее самой работы. Добавьте в ряд значения побольше и посмотрите, где "
        "кривая обрывается."
    )


def _fine_lesson(runs: list[ClaimRun], cut: int | None, p99: float) -> str:
    if cut is None:
        return _no_cut(runs, p99)
    held = max(x.held_max_ms for x in runs if x.min_idle_ms == cut)
    return (
        f"Дубли кончаются на {cut} мс при p99 обработки {p99:.0f} мс: не раньше p99 (запись, которую обрабатывают "
        "дольше min idle, спасатель заберёт обязательно), а с запасом на ожидание потока и XACK — в этом прогоне "
        f"запись была в руках до {held:.0f} мс. Правило — «дольше всего в руках плюс запас», а не кратность p99."
    )


def _flat_lesson(runs: list[ClaimRun], cut: int | None, p99: float) -> str:
    if cut is None:
        return _no_cut(runs, p99)
    p50 = min(x.handler_p50_ms for x in runs)
    return (
        f"Без разброса p50 и p99 обработки почти совпали ({p50:.0f} и {p99:.0f} мс), и кривая обрывается на {cut} мс "
        "— сразу за временем в руках (обработка плюс ожидание потока и XACK). «Два p99» тут — просто запас; а ниже "
        "времени обработки спасатель забирает почти всё."
    )


def _race(ns: Mapping[str, object], name: str, stream: str) -> RaceRun:
    run = of_kind(ns[name], RaceRun, name, "результатом `rescuers_race(...)`")
    expect(not run.lease, f"`{name}`: нужен прогон без аренды (`lease=False`).")
    client, key = named_stream(ns, stream)
    expect(client.xlen(key) == run.entries, f'`{name}` шёл не на стриме `P + "{stream}"`.')
    expect(int(client.xpending(key, GROUP)["pending"]) == 0, f'В PEL стрима `P + "{stream}"` что-то осталось.')
    return run


def _verify_race(ns: Mapping[str, object]) -> str:
    """06.3: with a batch of one, steals vanish while the work is shorter than min idle, and come back when not."""
    one, slow = _race(ns, "race_one", "ex:race:1"), _race(ns, "race_slow", "ex:race:slow")
    expect(
        one.stolen_from_rescuers <= 2,  # a loaded machine can stretch a 30 ms handling past min idle, rarely
        "В `race_one` спасатели по-прежнему крадут друг у друга: у каждого в руках должна быть одна запись "
        "(`count=1`), а её обработка — короче min idle (по умолчанию 30 мс против 100).",
    )
    expect(
        slow.stolen_from_rescuers > 0,
        "В `race_slow` краж нет: обработка должна быть дольше min idle (`work_ms=150` при min idle 100 мс).",
    )
    return (
        f"С пачкой в одну запись краж {one.stolen_from_rescuers}, дублей {one.duplicates}: ждать в очереди пачки "
        f"нечему. Но стоит обработке стать дольше min idle — краж {slow.stolen_from_rescuers}, дублей "
        f"{slow.duplicates}: запись в работе простаивает для Redis так же, как брошенная. Маленькая пачка убирает "
        "ожидание, аренда — саму гонку: спасатель один, что бы ни случилось с обработкой."
    )


def _pool(ns: Mapping[str, object], name: str, count: int) -> PoolRun:
    run = of_kind(ns[name], PoolRun, name, "результатом `pool_run(...)`")
    expect(
        (run.count, run.parallelism, run.entries, run.finished) == (count, 8, POOL_ENTRIES, True),
        f"`{name}`: нужен законченный прогон с `count={count}, parallelism=8, entries={POOL_ENTRIES}`.",
    )
    client, key = named_stream(ns, f"ex:count:{count}")
    expect(client.xlen(key) == POOL_ENTRIES, f'`{name}` шёл не на стриме `P + "ex:count:{count}"`.')
    return run


def _verify_count_one(ns: Mapping[str, object]) -> str:
    """06.4: COUNT 1 costs one XREADGROUP per entry; COUNT 16 a fraction of one."""
    one, sixteen = _pool(ns, "count_one", 1), _pool(ns, "count_sixteen", 16)
    reads = of_kind(ns["reads_per_entry"], dict, "reads_per_entry", "словарём {COUNT: вызовов XREADGROUP на запись}")
    expect(set(reads) == {1, 16}, "Ключи `reads_per_entry` — 1 и 16 (значения `count` прогонов).")
    per_one, per_sixteen = number(reads[1], "reads_per_entry[1]"), number(reads[16], "reads_per_entry[16]")
    expect(
        0.8 <= per_one <= 2.0,
        "При `count=1` должно выйти около одного `XREADGROUP` на запись: делите прирост `calls` из "
        "`INFO commandstats` (`cmdstat_xreadgroup`) за прогон на число записей, 200.",
    )
    expect(
        per_sixteen < per_one / 3,
        "При `count=16` чтений на запись должно быть в разы меньше: замеряйте каждый прогон отдельно — снимок "
        "счётчика до и после именно этого прогона.",
    )
    return (
        f"`count=1`: {per_one:.2f} чтения на запись, разбор {one.drain_s:.2f} с; `count=16`: {per_sixteen:.2f}, "
        f"{sixteen.drain_s:.2f} с. Каждое чтение — поход в Redis, и при короткой обработке эти походы и есть работа; "
        "при 40 мс обработки (раздел 4) они тонут в ней. `COUNT` порядка `parallelism` — и пропускная способность, "
        "и ограниченная работа в руках."
    )


def _verify_long_outage(ns: Mapping[str, object]) -> str:
    """06.5: a 3 s lock with two attempts of 100 ms min idle: nothing dead-lettered, one outage."""
    run = of_kind(ns["long_outage"], OutageRun, "long_outage", "результатом `await locked_ledger_run(...)`")
    expect(
        (run.hold_s, run.max_attempts, run.sent, run.finished) == (OUTAGE_HOLD_S, OUTAGE_ATTEMPTS, OUTAGE_EVENTS, True),
        "`long_outage`: нужен законченный прогон с `hold_s=3.0, max_attempts=2, during=40`.",
    )
    client, key = named_stream(ns, "ex:store")
    expect(client.xlen(key) == run.sent, '`long_outage` шёл не на стриме `P + "ex:store"`.')
    expect(
        run.dead_lettered == 0 and run.charged == run.sent and run.charged_twice == 0 and run.pending_left == 0,
        "В прогоне что-то не так с событиями: ожидалось всё списано по разу, DLQ и PEL пусты. Запустите его заново.",
    )
    budget_s = run.max_attempts * run.min_idle_ms / 1000
    expect(
        abs(number(ns["attempts_budget_s"], "attempts_budget_s") - budget_s) < 1e-6,
        "`attempts_budget_s` — за сколько секунд событие израсходовало бы все попытки, если бы каждая неудачная "
        "запись была попыткой: `max_attempts` доставок, между ними по `min_idle_ms` (в секундах).",
    )
    overrun = run.hold_s / budget_s
    expect(
        abs(number(ns["budget_overrun"], "budget_overrun") - overrun) < 0.01,
        "`budget_overrun` — во сколько раз простой (`hold_s`) длиннее `attempts_budget_s`.",
    )
    downs = sum(line.startswith("business store down") for line in run.store_log)
    return (
        f"Простой {run.hold_s:.0f} с — в {overrun:.0f} раз длиннее бюджета попыток ({budget_s:.1f} с), а в DLQ 0 из "
        f"{run.sent}: неудачная запись в реестр вернула доставку (счётчик в PEL — {run.max_delivered_in_outage}), "
        f"и {run.unread_in_outage} событий простой переждали непрочитанными в стриме. В логе за весь простой "
        f"{len(run.store_log)} строки от предохранителя, из них «down» — {downs}: строка на смену состояния, а не на "
        "сообщение."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="06.1",
        title="Кривая у обрыва",
        needs=("fine_sweep", "fine_zero_from_ms", "fine_p99_ms"),
        verify=_curve_checker("fine_sweep", "ex:fine:", (90, 110), _fine_lesson),
        nudge=(
            "Дубли появляются, когда min idle меньше самой долгой обработки; у обработки с разбросом "
            "«самая долгая» — это хвост, p99."
        ),
        hint=(
            "Сетка `min_idle_sweep` из условия (с разбросом 60 мс). Обрыв — наименьший min idle, при "
            "котором дублей ещё 0; идите по сетке от большего к меньшему. p99 — наибольший из "
            "`handler_p99_ms` прогонов."
        ),
    ),
    Exercise(
        id="06.2",
        title="Без разброса",
        needs=("flat_sweep", "flat_zero_from_ms", "flat_p99_ms"),
        verify=_curve_checker("flat_sweep", "ex:flat:", (20, 40, 50, 60, 80), _flat_lesson),
        nudge=(
            "Без разброса все обработки одинаковы: где теперь окажется обрыв относительно work_ms?"
        ),
        hint=(
            "Та же функция, сетка из условия и разброс 0; обрыв и p99 — так же, как в задании 1."
        ),
    ),
    Exercise(
        id="06.3",
        title="Пачка спасателя в одну запись",
        needs=("race_one", "race_slow"),
        verify=_verify_race,
        nudge=(
            "Если каждый спасатель берёт по одной записи, сталкиваются ли они на одной и той же?"
        ),
        hint=(
            "`rescuers_race` без аренды с пачкой в одну запись, затем то же на медленной обработке "
            "(параметры — в условии); сравните дубли двух прогонов."
        ),
    ),
    Exercise(
        id="06.4",
        title="COUNT 1",
        needs=("count_one", "count_sixteen", "reads_per_entry"),
        verify=_verify_count_one,
        nudge=(
            "Сколько раз воркеры ходили в XREADGROUP, Redis считает сам, по каждой команде."
        ),
        hint=(
            "До и после каждого прогона `pool_run` читайте счётчик вызовов XREADGROUP из `INFO "
            "commandstats`; разница, делённая на число записей, — чтений на запись."
        ),
    ),
    Exercise(
        id="06.5",
        title="Простой дольше всех попыток",
        needs=("long_outage", "attempts_budget_s", "budget_overrun"),
        verify=_verify_long_outage,
        nudge=(
            "Каждая попытка ждёт min idle, и попыток `max_attempts`: сколько всего времени есть у записи "
            "до DLQ?"
        ),
        hint=(
            "Прогон `locked_ledger_run` с параметрами из условия. Бюджет попыток — их число, умноженное "
            "на min idle (в секундах); перерасход — время простоя хранилища, делённое на бюджет."
        ),
    ),
)
