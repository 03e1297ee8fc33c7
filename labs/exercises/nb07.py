"""Exercise checks of notebook 07 (graceful shutdown and observability): ``check("07.1")`` ... ``check("07.4")``.

Each check reads independent records, as the notebook's reconciliation does: the group's PEL
and lag in Redis, the worker's SQLite ledger and its log file under the notebook's ``RUN_DIR``.
Each exercise's preparing cell calls one of the ``prepare_*`` functions below, so every attempt
starts from a clean slate (the keys and files of an earlier attempt removed, its worker process
stopped), and each check asserts the mechanism, not only the number: 07.1 that the worker read
all eight entries before the stop, 07.2 that its worker is dead, 07.3 that charged plus
dead-lettered is exactly the events of this attempt, 07.4 that the worker charged events while
the lag grew and the lag grew slower than the producer wrote.

- 07.1 «Бюджет drain»: the reference worker in the kernel, stopped with 4 entries in hand, with
  ``drain_timeout_s`` 0.1 and 2 (``P + "ex:drain:short"`` / ``":long"``); ``left_short``,
  ``left_long`` from ``run()``'s summary.
- 07.2 «Оркестратор не дождался»: a ``billing-worker`` process (consumer ``w-killed``) gets SIGTERM
  and SIGKILL half a second later (``P + "ex:killed"``); ``killed_drain_line``, ``killed_pending``.
- 07.3 «Сломайте обработчик»: ``dlq_run`` with ``fail_every=2`` (``P + "ex:broken"``, ledger
  ``RUN_DIR / "ex-broken.sqlite3"``); ``broken_charged``, ``broken_dead``, ``broken_twice``.
- 07.4 «Отставание, которое видно»: a worker at 50 messages/s fed 200/s (``P + "ex:lag"``, ledger
  ``lag_ledger``); ``lag_samples``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

import redis

from labs.exercises.attempts import cmdline
from labs.exercises.exercise import Exercise, expect
from labs.exercises.facts import id_set, made, named_stream, number, of_kind, run_dir_of
from labs.experiments.pool_and_dlq import POISON
from labs.experiments.worker_procs import charges, pending_ids, produce_backlog
from labs.polling import poll

GROUP = "billing"
DRAIN_ENTRIES = 8  # 07.1 and 07.2
BROKEN_GOOD = 20  # 07.3
LAG_GROWTH = 30  # 07.4: the lag must grow by at least this much over the samples
LAG_SLACK = 40  # 07.4: between the last sample and the stop the worker may still read a batch or two
# 07.4: the lag grows by (producer's rate - worker's rate): 200/s - at most 50/s. Over the sampling it may
# grow by at most this share of what the producer wrote (a loaded machine slows the worker: some slack);
# a worker that never ran while the samples were taken makes it 1.
LAG_SHARE_MAX = 0.9
LAG_CHARGED_MIN = 5  # 07.4: charges while the producer wrote (50/s for about a second when it works)


# -- the preparing cells call these: an attempt starts from a clean slate ---------------------


def _remove(*paths: Path) -> None:
    """A SQLite ledger (with its -wal and -shm) or a log of an earlier attempt."""
    for path in paths:
        for one in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            one.unlink(missing_ok=True)


def workers_on(stream: str) -> list[int]:
    """Worker processes (``solutions.billing``, ``billing-worker``) reading ``stream``: their pids (``/proc``)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                args = cmdline(int(entry.name))
                if "--stream" in args and args[args.index("--stream") + 1 :][:1] == [stream]:
                    found.append(int(entry.name))
    return found


def _kill_workers(stream: str) -> None:
    for pid in workers_on(stream):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    poll(lambda: not workers_on(stream), 5)


def prepare_drain(r: redis.Redis, prefix: str, run_dir: Path) -> tuple[str, str]:
    """07.1: no streams or ledgers of an earlier attempt; the two streams' names (short, long budget)."""
    short, long_ = prefix + "ex:drain:short", prefix + "ex:drain:long"
    r.delete(short, long_)
    _remove(*run_dir.glob("ex-drain-*.sqlite3"))
    return short, long_


def prepare_killed(r: redis.Redis, prefix: str, run_dir: Path) -> str:
    """07.2: no worker, log or ledger of an earlier attempt; the stream with 8 fresh orders. Its name."""
    stream = prefix + "ex:killed"
    _kill_workers(stream)
    _remove(run_dir / "ex-killed.sqlite3", run_dir / "w-killed.log")
    r.delete(stream)
    produce_backlog(r, stream, DRAIN_ENTRIES)
    return stream


def prepare_broken(r: redis.Redis, prefix: str, run_dir: Path) -> Path:
    """07.3: no stream, DLQ or ledger of an earlier attempt (``dlq_run`` appends to its ledger). The ledger's path."""
    stream = prefix + "ex:broken"
    r.delete(stream, stream + ":dlq")
    ledger = run_dir / "ex-broken.sqlite3"
    _remove(ledger)
    return ledger


def prepare_lag(r: redis.Redis, prefix: str, run_dir: Path) -> tuple[str, Path]:
    """07.4: the stream with its group and nothing in it, no ledger of an earlier attempt. (stream, ledger)."""
    stream = prefix + "ex:lag"
    r.delete(stream)
    r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ledger = run_dir / "ex-lag.sqlite3"
    _remove(ledger)
    return stream, ledger


def _delivered(client: redis.Redis, stream: str) -> int:
    """How many entries the group ``billing`` has been handed (0 without the group)."""
    group = next((g for g in client.xinfo_groups(stream) if g["name"] == GROUP), None)
    return 0 if group is None else len(client.xrange(stream, "-", group["last-delivered-id"]) or [])


def _read_all(client: redis.Redis, stream: str, shown: str) -> None:
    """07.1: the worker was stopped once it had all the stream's orders, as the task says."""
    length, delivered = int(client.xlen(stream)), _delivered(client, stream)
    expect(
        length == DRAIN_ENTRIES,
        f"В стриме `{shown}` не {DRAIN_ENTRIES} заказов, как в условии: кладите их заново в каждой попытке "
        "(готовящая ячейка стрим удаляет).",
    )
    expect(
        delivered > 0,
        f"Воркер не прочитал из `{shown}` ни одной записи: пока вы ждали, его задача не работала. Ждать надо "
        "так, чтобы цикл событий шёл дальше (`await asyncio.sleep(...)`); `time.sleep` останавливает и воркер.",
    )
    expect(
        delivered >= length,
        f"Воркер остановлен раньше, чем прочитал все записи `{shown}`: просите остановку, когда в PEL окажутся "
        "все, а не только первая пачка.",
    )


def _verify_drain_budget(ns: Mapping[str, object]) -> str:
    """07.1: a short budget leaves the work in the PEL and names it; a long one finishes it."""
    client, short = named_stream(ns, "ex:drain:short")
    _, long_ = named_stream(ns, "ex:drain:long")
    left_short, left_long = id_set(ns["left_short"], "left_short"), id_set(ns["left_long"], "left_long")
    _read_all(client, short, 'P + "ex:drain:short"')
    in_pel = pending_ids(client, short)
    expect(
        bool(in_pel),
        "После короткого drain PEL пуст: воркер успел доделать всё, что держал. Останавливайте его, как только "
        "в PEL все записи, с `drain_timeout_s=0.1` при обработке 300 мс.",
    )
    expect(
        left_short == in_pel,
        "`left_short` не совпадает с PEL стрима `ex:drain:short`: возьмите `left_pending` из итога, который "
        "вернул `run()` (его `await`), и останавливайте воркер, когда обе пачки уже у него, а не только в PEL "
        "(короткая пауза после того, как их стало 8).",
    )
    _read_all(client, long_, 'P + "ex:drain:long"')
    expect(
        not pending_ids(client, long_) and not left_long,
        "После длинного drain в PEL что-то осталось: с `drain_timeout_s=2` воркер успевает доделать то, что в руках.",
    )
    return (
        f"С бюджетом 0,1 с воркер оставил в PEL {len(in_pel)} записей из {DRAIN_ENTRIES} и назвал их (не "
        "подтвердив — их доработает спасатель другого воркера), с бюджетом 2 с доделал всё и ушёл с пустым "
        "списком. Бюджет drain — меньше окна оркестратора, но больше обычной обработки."
    )


def _verify_killed(ns: Mapping[str, object]) -> str:
    """07.2: SIGKILL during the drain: no 'drain complete' line, the work still in the PEL, nothing charged."""
    client, stream = named_stream(ns, "ex:killed")
    run_dir = run_dir_of(ns)
    expect(
        not workers_on(stream),
        "Воркер `w-killed` всё ещё работает: оркестратор через полсекунды после SIGTERM убивает процесс — "
        "`kill()` (это SIGKILL) в той же ячейке.",
    )
    log_path = run_dir / "w-killed.log"
    expect(log_path.exists(), "Лога воркера `w-killed` нет: запустите его `WorkerProcess.start(...)` с этим именем.")
    log = log_path.read_text(errors="replace")
    expect(
        "received SIGTERM" in log,
        "В логе воркера `w-killed` нет `received SIGTERM`: SIGTERM не дошёл до его обработчика — пошлите его, когда "
        "воркер уже держит записи (их видно в PEL), а не сразу после запуска и не SIGKILL вместо него.",
    )
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
        f"В логе нет `drain complete`, списаний {charged}, а {len(in_pel)} записей по-прежнему в PEL: Redis работу "
        "не потерял, потерялся только итог в логе. Их подберёт спасатель; поэтому drain короче окна оркестратора."
    )


def _verify_broken(ns: Mapping[str, object]) -> str:
    """07.3: with every second attempt failing, charged + dead-lettered are exactly this attempt's events."""
    client, stream = named_stream(ns, "ex:broken")
    ledger = run_dir_of(ns) / "ex-broken.sqlite3"
    expect(ledger.exists(), 'Леджера `RUN_DIR / "ex-broken.sqlite3"` нет: передайте этот путь в `dlq_run`.')
    with closing(sqlite3.connect(ledger)) as db:
        rows, events = db.execute("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM charges").fetchone()
    dead = int(client.xlen(stream + ":dlq"))
    total = int(client.xlen(stream))
    expect(
        int(client.xpending(stream, GROUP)["pending"]) == 0 and rows + dead >= total,
        "Прогон не закончен: в PEL ещё есть записи или списано и в DLQ меньше, чем отправлено. Дождитесь конца "
        "`dlq_run` (он сам ждёт, пока всё не разберут).",
    )
    expect(
        events + dead == total and total == BROKEN_GOOD + len(POISON),
        "Списанных и отправленных в DLQ событий больше, чем событий этой попытки: в леджере есть списания "
        "другого прогона. Выполните ячейку с решением ещё раз — попытка начнётся с пустым леджером.",
    )
    expect(number(ns["broken_charged"], "broken_charged") == rows, "`broken_charged` не совпадает с леджером.")
    expect(number(ns["broken_dead"], "broken_dead") == dead, "`broken_dead` не совпадает с `XLEN` стрима DLQ.")
    expect(
        number(ns["broken_twice"], "broken_twice") == rows - events,
        "`broken_twice` — сколько событий списано больше одного раза: строк леджера минус разных `event_id`.",
    )
    return (
        f"Списано {rows}, в DLQ {dead} — вместе {rows + dead} из {total}, дважды — {rows - events}, PEL пуст. "
        "Ошибок и повторов было много (на дашборде — всплеск `errors/s` и `reclaimed`), но сверка сходится: "
        "повторы лечат временные сбои, DLQ забирает безнадёжное, `sqlite`-дедуп не даёт списать дважды."
    )


def _verify_lag(ns: Mapping[str, object]) -> str:
    """07.4: the group's lag grew while the worker worked (slower than the producer wrote), and stays after the stop."""
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
    ledger = made(ns, "lag_ledger", Path)
    expect(ledger.exists(), "Леджера `lag_ledger` нет: передайте его воркеру (`Settings(..., ledger=lag_ledger)`).")
    entries = client.xrange(stream) or []
    written_until_s = int(str(entries[-1][0]).split("-")[0]) / 1000 if entries else 0.0
    during = [c for c in charges(ledger) if c.charged_at <= written_until_s]
    expect(
        len(during) >= LAG_CHARGED_MIN,
        "Пока продюсер писал, воркер почти ничего не списал (его леджер `lag_ledger`): `lag` рос потому, что "
        "воркер стоял, а не потому, что он не успевает. Пауза в цикле замеров должна отдавать управление циклу "
        "событий (`await asyncio.sleep`): `time.sleep` останавливает и задачу воркера.",
    )
    share = (samples[-1] - samples[0]) * len(samples) / ((len(samples) - 1) * max(1, len(entries)))
    expect(
        share <= LAG_SHARE_MAX,
        "`lag` рос так же быстро, как писал продюсер: между замерами воркер не работал. Пауза в цикле замеров "
        "должна отдавать управление циклу событий (`await asyncio.sleep`).",
    )
    group = next(g for g in client.xinfo_groups(stream) if g["name"] == GROUP)
    expect(
        group["lag"] is not None and group["lag"] >= samples[-1] - LAG_SLACK,
        "После остановки `lag` в Redis меньше последнего замера: замеряйте `lag` той же группы `billing` этого стрима.",
    )
    return (
        f"`lag` вырос с {samples[0]} до {samples[-1]}, хотя воркер работал (списал {len(during)}, пока продюсер "
        f"писал), и после остановки остался {group['lag']}: группа отстаёт, и Redis показывает это числом. "
        "Дашборд раздела 4 по такому росту пишет «отстаёт: lag растёт»."
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
        needs=("lag_samples", "lag_ledger"),
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
