"""Exercise checks of notebook 07 (graceful shutdown and observability): ``check("07.1")`` ... ``check("07.4")``.

Each check reads independent records, as the notebook's reconciliation does: the group's PEL
and lag in Redis, the worker's SQLite ledger and its log file under the notebook's ``RUN_DIR``.

- 07.1 «Бюджет drain»: the reference worker in the kernel, stopped with 4 entries in hand, with
  ``drain_timeout_s`` 0.1 and 2 (``P + "ex:drain:short"`` / ``":long"``); ``left_short``,
  ``left_long`` from ``run()``'s summary.
- 07.2 «Оркестратор не дождался»: a ``billing-worker`` process (consumer ``w-killed``) gets SIGTERM
  and SIGKILL half a second later (``P + "ex:killed"``); ``killed_drain_line``, ``killed_pending``.
- 07.3 «Сломайте обработчик»: ``dlq_run`` with ``fail_every=2`` (``P + "ex:broken"``, ledger
  ``RUN_DIR / "ex-broken.sqlite3"``); ``broken_charged``, ``broken_dead``, ``broken_twice``.
- 07.4 «Отставание, которое видно»: a worker at 50 messages/s fed 200/s (``P + "ex:lag"``);
  ``lag_samples``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing

from labs.exercises.exercise import Exercise, expect
from labs.exercises.facts import id_set, named_stream, number, of_kind, run_dir_of
from labs.experiments.pool_and_dlq import POISON
from labs.experiments.worker_procs import charges, pending_ids

GROUP = "billing"
BROKEN_GOOD = 20  # 07.3
LAG_GROWTH = 30  # 07.4: the lag must grow by at least this much over the samples
LAG_SLACK = 40  # 07.4: between the last sample and the stop the worker may still read a batch or two


def _verify_drain_budget(ns: Mapping[str, object]) -> str:
    """07.1: a short budget leaves the work in the PEL and names it; a long one finishes it."""
    client, short = named_stream(ns, "ex:drain:short")
    _, long_ = named_stream(ns, "ex:drain:long")
    left_short, left_long = id_set(ns["left_short"], "left_short"), id_set(ns["left_long"], "left_long")
    in_pel = pending_ids(client, short)
    expect(
        bool(in_pel),
        "После короткого drain PEL пуст: воркер успел доделать всё — остановите его, когда в PEL все 8 записей, с "
        "`drain_timeout_s=0.1` при обработке 300 мс.",
    )
    expect(
        left_short == in_pel,
        "`left_short` не совпадает с PEL стрима `ex:drain:short`: возьмите `left_pending` из итога, который "
        "вернул `run()` (его `await`), и останавливайте воркер, когда обе пачки уже у него, а не только в PEL "
        "(короткая пауза после того, как их стало 8).",
    )
    expect(
        not pending_ids(client, long_) and not left_long,
        "После длинного drain в PEL что-то осталось: с `drain_timeout_s=2` воркер успевает доделать то, что в руках.",
    )
    return (
        f"С бюджетом 0,1 с воркер оставил в PEL {len(in_pel)} зап. и назвал их (не подтвердив — их доработает "
        "спасатель другого воркера), с бюджетом 2 с доделал всё и ушёл с пустым списком. Бюджет drain — меньше "
        "окна оркестратора, но больше обычной обработки."
    )


def _verify_killed(ns: Mapping[str, object]) -> str:
    """07.2: SIGKILL during the drain: no 'drain complete' line, the work still in the PEL, nothing charged."""
    client, stream = named_stream(ns, "ex:killed")
    run_dir = run_dir_of(ns)
    log = (run_dir / "w-killed.log").read_text(errors="replace") if (run_dir / "w-killed.log").exists() else ""
    expect("received SIGTERM" in log, "В логе воркера `w-killed` нет `received SIGTERM`: сначала пошлите SIGTERM.")
    expect(
        "drain complete" not in log,
        "Воркер успел написать `drain complete`: SIGKILL должен прийти раньше, чем закончится drain (полсекунды "
        "после SIGTERM при обработке 2 с).",
    )
    expect(ns["killed_drain_line"] is False, "`killed_drain_line` — есть ли в логе строка `drain complete` (bool).")
    in_pel = pending_ids(client, stream)
    expect(bool(in_pel), "PEL стрима пуст: воркер должен держать записи в руках в момент SIGTERM.")
    expect(
        id_set(ns["killed_pending"], "killed_pending") == in_pel,
        "`killed_pending` не совпадает с PEL стрима `ex:killed` после убийства.",
    )
    charged = len(charges(run_dir / "ex-killed.sqlite3"))  # none yet: no file, or no table
    return (
        f"В логе нет `drain complete`, списаний {charged}, а {len(in_pel)} зап. по-прежнему в PEL: Redis работу не "
        "потерял, потерялся только итог в логе. Их подберёт спасатель; поэтому drain короче окна оркестратора."
    )


def _verify_broken(ns: Mapping[str, object]) -> str:
    """07.3: with every second attempt failing, charged + dead-lettered still add up, nobody twice."""
    client, stream = named_stream(ns, "ex:broken")
    ledger = run_dir_of(ns) / "ex-broken.sqlite3"
    expect(ledger.exists(), 'Леджера `RUN_DIR / "ex-broken.sqlite3"` нет: передайте этот путь в `dlq_run`.')
    with closing(sqlite3.connect(ledger)) as db:
        rows, events = db.execute("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM charges").fetchone()
    dead = int(client.xlen(stream + ":dlq"))
    total = BROKEN_GOOD + len(POISON)
    expect(
        int(client.xpending(stream, GROUP)["pending"]) == 0 and rows + dead >= total,
        "Прогон не закончен: в PEL ещё есть записи или списано и в DLQ меньше, чем отправлено. Дождитесь конца "
        "`dlq_run` (он сам ждёт, пока всё не разберут).",
    )
    expect(number(ns["broken_charged"], "broken_charged") == rows, "`broken_charged` не совпадает с леджером.")
    expect(number(ns["broken_dead"], "broken_dead") == dead, "`broken_dead` не совпадает с `XLEN` стрима DLQ.")
    expect(
        number(ns["broken_twice"], "broken_twice") == rows - events,
        "`broken_twice` — сколько событий списано больше одного раза: строк леджера минус разных `event_id`.",
    )
    return (
        f"Списано {rows}, в DLQ {dead} — вместе {rows + dead} из {total}, дважды — {rows - events}, PEL пуст. Ошибок "
        "и повторов было много (на дашборде — всплеск `errors/s` и `reclaimed`), но сверка сходится: повторы лечат "
        "временные сбои, DLQ забирает безнадёжное, `sqlite`-дедуп не даёт списать дважды."
    )


def _verify_lag(ns: Mapping[str, object]) -> str:
    """07.4: the group's lag grew while the worker fell behind, and stays after it stopped."""
    client, stream = named_stream(ns, "ex:lag")
    samples = of_kind(ns["lag_samples"], (list, tuple), "lag_samples", "списком чисел — `lag` группы в моменты замеров")
    expect(
        len(samples) >= 5 and all(isinstance(x, int) for x in samples),
        "Нужно хотя бы 5 замеров `lag` (целые числа из `XINFO GROUPS`), раз в 0,1 с, пока идёт нагрузка.",
    )
    expect(
        samples[-1] - samples[0] >= LAG_GROWTH and max(samples) == max(samples[-3:]),
        "`lag` не растёт: воркер успевает. Нужна обработка 20 мс при `parallelism=1` (не больше 50 записей в "
        "секунду) против 200 в секунду у продюсера.",
    )
    group = next(g for g in client.xinfo_groups(stream) if g["name"] == GROUP)
    expect(
        group["lag"] is not None and group["lag"] >= samples[-1] - LAG_SLACK,
        "После остановки `lag` в Redis меньше последнего замера: замеряйте `lag` той же группы `billing` этого стрима.",
    )
    return (
        f"`lag` вырос с {samples[0]} до {samples[-1]} и после остановки остался {group['lag']}: группа отстаёт, и "
        "Redis показывает это числом. Дашборд раздела 4 по такому росту пишет «отстаёт: lag растёт»."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="07.1",
        title="Бюджет drain",
        needs=("left_short", "left_long"),
        verify=_verify_drain_budget,
        nudge=(
            "Бюджет drain ограничивает, сколько воркер ждёт начатые обработки после сигнала остановки."
        ),
        hint=(
            "Воркер задачей asyncio с медленным обработчиком и параллелизмом из условия; дождитесь "
            "нужного числа записей в PEL, попросите остановку (`request_stop`) и посмотрите "
            "`left_pending` в итоге `run()`."
        ),
    ),
    Exercise(
        id="07.2",
        title="Оркестратор не дождался",
        setup=("r", "P", "RUN_DIR"),
        needs=("killed_drain_line", "killed_pending"),
        verify=_verify_killed,
        nudge=(
            "Оркестратор даёт процессу время на drain после SIGTERM, а потом убивает; что станет с "
            "начатыми записями?"
        ),
        hint=(
            "Воркер отдельным процессом (`WorkerProcess.start`) с долгой обработкой; дождитесь записей в "
            "PEL, пошлите SIGTERM, через полсекунды убейте процесс и посмотрите его лог и PEL."
        ),
    ),
    Exercise(
        id="07.3",
        title="Сломайте обработчик",
        setup=("r", "P", "RUN_DIR"),
        needs=("broken_charged", "broken_dead", "broken_twice"),
        verify=_verify_broken,
        nudge=(
            "Постоянная ошибка обработчика не лечится повторами: после `max_attempts` запись должна уйти "
            "в DLQ."
        ),
        hint=(
            "Прогон `dlq_run` с обработчиком, падающим на части записей (параметры — в условии); в "
            "леджере SQLite сравните число списаний и число разных событий; длина DLQ — XLEN стрима "
            "`:dlq`."
        ),
    ),
    Exercise(
        id="07.4",
        title="Отставание, которое видно",
        needs=("lag_samples",),
        verify=_verify_lag,
        nudge=(
            "Lag группы — сколько записей стрима группа ещё не выдала; его видно в XINFO GROUPS."
        ),
        hint=(
            "Медленный воркер задачей asyncio и продюсер; в цикле с короткой паузой записывайте `lag` из "
            "XINFO GROUPS в список; потом остановите обоих."
        ),
    ),
)
