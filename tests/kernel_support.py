"""A student's path through an exercise of the student edition, in a real kernel, cell by cell as JupyterLab sends it.

:class:`KernelCells` sends ``execute_request`` messages with the cell's id in the metadata (``cellId``), as
JupyterLab does, so the kernel's bookkeeping of attempts (``labs.exercises.attempts``) sees the same
requests a student's browser sends. :func:`student_path` walks one exercise:

1. the preparing cell, the blank and its check: red (the names are missing);
2. a wrong answer typed into the solution cell (``WRONG``: a plausible mistake and the words the check must
   say; by default, each answer name set to ``None``): red, with the way to try again;
3. the reference solution, without re-running anything else: green, with the task's numbers (``SAYS``);
4. the same again, on what the first right run left: green;
5. the preparing cell, then the solution: green.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.manager import KernelManager

from labs.exercises import edition
from labs.exercises.attempts import answer_names

CELL_TIMEOUT_S = 120


@dataclass
class Out:
    """What one cell showed: its error outputs, its HTML displays and its printed text."""

    errors: list[dict[str, Any]] = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    text: str = ""

    def box(self) -> str:
        """The check's box (the last exercise-check HTML display), or ''."""
        boxes = [h for h in self.html if "exercise-check" in h]
        return boxes[-1] if boxes else ""


class KernelCells:
    """Run cells in a started kernel with their cell ids, as JupyterLab does."""

    def __init__(self, km: KernelManager):
        self.kc = km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, cell_id: str | None = None, timeout_s: float = CELL_TIMEOUT_S) -> Out:
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": False}
        msg = self.kc.session.msg("execute_request", content)
        if cell_id:
            msg["metadata"]["cellId"] = cell_id
        self.kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        out = Out()
        while True:
            reply = self.kc.get_iopub_msg(timeout=timeout_s)
            if reply["parent_header"].get("msg_id") != msg_id:
                continue
            kind, body = reply["msg_type"], reply["content"]
            if kind == "status" and body["execution_state"] == "idle":
                break
            if kind == "stream":
                out.text += body["text"]
            elif kind == "error":
                out.errors.append(body)
            elif kind in ("display_data", "execute_result") and "text/html" in body["data"]:
                out.html.append(body["data"]["text/html"])
        return out

    def close(self) -> None:
        self.kc.stop_channels()


# A plausible first try per exercise, typed where the stub was, and the words its check must say.
WRONG: dict[str, tuple[str, str]] = {
    "01.3": (  # the setting not put back: the notebook (and the next attempt) would run on nodes of 10
        "def fill_nodes(stream):\n"
        "    r.delete(stream)\n"
        "    pipe = r.pipeline(transaction=False)\n"
        "    for i in range(2555):\n"
        '        pipe.xadd(stream, {"i": str(i)}, maxlen=1000, approximate=True)\n'
        "    pipe.execute()\n"
        "    return r.xlen(stream) - 1000\n"
        'excess_100 = fill_nodes(P + "ex:nodes:100")\n'
        'r.config_set("stream-node-max-entries", 10)\n'
        'excess_10 = fill_nodes(P + "ex:nodes:10")\n',
        "не вернулся к 100",
    ),
    "02.1": (
        '_, two_claimed, _ = r.xautoclaim(two_stream, "billing", "rescuer", min_idle_time=100, count=100)\n'
        'two_owners = {row["message_id"]: row["consumer"]\n'
        '              for row in r.xpending_range(two_stream, "billing", "-", "+", 100)}\n'
        "two_journal = [(msg_id, two_owners[msg_id]) for msg_id, _ in two_claimed]\n"
        'r.xack(two_stream, "billing", *[msg_id for msg_id, _ in two_journal])\n',
        "до",
    ),
    "05.1": (  # a typo: the cell raises, and the check must not judge what an earlier run left
        "edge_results = {block_ms: block_past_socket_timeot(REDIS_URL, edge_stream, socket_timeout_s=0.5, "
        "block_ms=block_ms) for block_ms in (300, 700)}\n",
        "закончился ошибкой (NameError",
    ),
    "05.2": (  # the second run copied without changing its stream
        'held_64 = work_held_at_crash(REDIS_URL, P + "ex:held:64", count=64, read_ahead=False,\n'
        "                             crash_after_handled=64).held_at_crash\n"
        'held_65 = work_held_at_crash(REDIS_URL, P + "ex:held:64", count=64, read_ahead=False,\n'
        "                             crash_after_handled=65).held_at_crash\n",
        'ex:held:65',
    ),
    "07.1": (  # a blocking wait: the worker's task never runs while the cell sleeps
        "async def stop_with_budget(stream, budget_s):\n"
        "    produce_backlog(r, stream, 8)\n"
        '    worker = Worker(Settings(redis_url=REDIS_URL, stream=stream, group="billing", consumer="ex-drain",\n'
        '                             ledger=RUN_DIR / f"ex-drain-{budget_s}.sqlite3", block_ms=200,\n'
        "                             handler_delay_ms=300, parallelism=4, count=4, drain_timeout_s=budget_s,\n"
        "                             metrics_interval_s=60))\n"
        "    task = asyncio.create_task(worker.run())\n"
        "    time.sleep(1)\n"
        "    worker.request_stop()\n"
        "    return (await asyncio.wait_for(task, 15)).left_pending\n"
        'left_short = await stop_with_budget(P + "ex:drain:short", 0.1)\n'
        'left_long = await stop_with_budget(P + "ex:drain:long", 2.0)\n',
        "не прочитал",
    ),
    "07.2": (  # SIGTERM, then wait for the worker to finish its drain: no SIGKILL in time
        'killed = WorkerProcess.start(REDIS_URL, killed_stream, RUN_DIR / "ex-killed.sqlite3", "w-killed", RUN_DIR,\n'
        "                             handler_delay_ms=2000, count=4, parallelism=4)\n"
        'wait_until(lambda: killed.alive() and len(pending_ids(r, killed_stream)) >= 4, 20, "4 messages in hand")\n'
        "killed.proc.send_signal(signal.SIGTERM)\n"
        "killed.proc.wait(20)\n"
        'killed_drain_line = "drain complete" in killed.log_text()\n'
        "killed_pending = pending_ids(r, killed_stream)\n",
        "drain complete",
    ),
    "07.3": (  # the three poison messages counted by hand
        'broken_run = await dlq_run(REDIS_URL, P + "ex:broken", broken_ledger, good=20, fail_every=2, max_attempts=3)\n'
        "with sqlite3.connect(broken_ledger) as broken_db:\n"
        '    broken_charged, broken_events = broken_db.execute("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM '
        'charges").fetchone()\n'
        "broken_db.close()\n"
        "broken_dead = 3\n"
        "broken_twice = broken_charged - broken_events\n",
        "`broken_dead` не совпадает",
    ),
    "07.4": (  # time.sleep instead of await asyncio.sleep: the lag grows because the worker never runs
        'slow_worker = Worker(Settings(redis_url=REDIS_URL, stream=lag_stream, group="billing", consumer="ex-slow",\n'
        "                              ledger=lag_ledger, block_ms=200, handler_delay_ms=20, parallelism=1,\n"
        "                              count=16, metrics_interval_s=60))\n"
        "slow_task = asyncio.create_task(slow_worker.run())\n"
        "feeding = start_feeding()\n"
        "lag_samples = []\n"
        "while feeding.is_alive():\n"
        "    time.sleep(0.1)\n"
        '    lag_samples.append(r.xinfo_groups(lag_stream)[0]["lag"])\n'
        "slow_worker.request_stop()\n"
        "await asyncio.wait_for(slow_task, 15)\n",
        "воркер почти ничего не списал",
    ),
}
# Words of the green verdict that carry the task's own numbers.
SAYS: dict[str, str] = {
    "02.1": "Спасатель забрал 7 записей у billing-1, billing-2",
    "05.2": "в PEL 63 записи",
    "07.1": "оставил в PEL 8 записей из 8",
    "07.2": "списаний 0, а 8 записей по-прежнему в PEL",
    "07.3": "из 23, дважды — 0",
    "03.1": "До снимка — 1000 из 1000 на месте, после снимка — 0 из 500",
    "08.3": "XPENDING пуст (0), а 4 подтверждённых",
    "10.3": "Отставание 20 с совпало",
}


def typed(blank: str, code: str) -> str:
    """The student's cell with ``code`` where the stub was (the task's comment lines stay)."""
    indent = re.search(r"^([ \t]*)" + re.escape(edition.CODE_STUB), blank, re.MULTILINE)
    assert indent, blank
    body = "\n".join(indent[1] + line if line else line for line in code.rstrip("\n").splitlines())
    return blank.replace(indent[1] + edition.CODE_STUB, body, 1)


def _kind(cell: Any) -> str:
    if edition.check_ids(cell.source):
        return "check"
    return "blank" if edition.CODE_STUB in cell.source else "prepare"


def student_path(session: KernelCells, exercise_id: str, ref: list[Any], stu: list[Any]) -> None:
    """One exercise's path (see the module docstring); asserts each step's box."""
    by_kind = {_kind(cell): cell for cell in stu}
    blank, check = by_kind["blank"], by_kind["check"]
    prepare = by_kind.get("prepare")
    solution = next(c.source for c in ref if edition.is_solution(c) and c.id == blank.id)

    def run(step: str, cell: Any, source: str | None = None) -> Out:
        out = session.run(cell.source if source is None else source, cell.id)
        if step != "wrong":  # a wrong answer may raise (a typo); the check must then say so
            assert not out.errors, f"{exercise_id} {step}: the cell raised {out.errors}"
        return out

    def judge(step: str, passed: bool, words: str = "") -> None:
        out = session.run(check.source, check.id)
        box = out.box()
        assert box, f"{exercise_id} {step}: no box: {out}"
        assert (f"data-passed='{str(passed).lower()}'" in box), f"{exercise_id} {step}: {box}"
        if passed:
            assert not out.errors, f"{exercise_id} {step}: {out.errors}"
        else:
            assert [e["ename"] for e in out.errors] == ["CheckFailed"], f"{exercise_id} {step}: {out.errors}"
            (line,) = out.errors[0]["traceback"]
            assert f"Проверка {exercise_id} не пройдена" in line
        said = html.unescape(re.sub(r"<[^>]+>", "", box))
        assert words.replace("`", "") in said, f"{exercise_id} {step}: {words!r} not in {said}"

    if prepare is not None:
        run("blank", prepare)
    run("blank", blank)
    judge("blank", False, "пока не")
    code, says = WRONG.get(exercise_id, ("".join(f"{name} = None\n" for name in answer_names(exercise_id)), ""))
    if code:
        run("wrong", blank, typed(blank.source, code))
        judge("wrong", False, says)
    for step in ("right", "right again"):
        run(step, blank, solution)
        judge(step, True, SAYS.get(exercise_id, ""))
    if prepare is not None:
        run("prepared", prepare)
    run("right after the preparing cell", blank, solution)
    judge("right after the preparing cell", True, SAYS.get(exercise_id, ""))
