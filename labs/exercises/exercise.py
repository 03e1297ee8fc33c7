"""One exercise's check: what it needs from the notebook, how it verifies, and its verdict.

An :class:`Exercise` is data: an id (``"02.4"``: notebook 02, exercise 4), a title, the names
it reads from the notebook's namespace, a ``verify`` function and a hint. ``verify`` gets those
names as a mapping, looks at the running Redis (or at the student's objects), and either
returns the success message or raises :class:`Miss` with what is wrong, in Russian, without
giving the answer away (:func:`expect` is the short form)::

    def _verify(ns: Mapping[str, object]) -> str:
        r, stream = client_of(ns), prefix_of(ns) + "ex:rescue"  # labs.exercises.facts
        expect(r.xpending(stream, "billing")["pending"] == 0,
               "В PEL группы ещё есть записи: их надо не только забрать, но и подтвердить.")
        return "PEL пуст, записи на месте в стриме."

:func:`evaluate` turns every outcome into a :class:`Verdict` and never raises: a name the
notebook does not have yet (the student's cell is still blank), a :class:`Miss`, Redis being
down, or the check tripping over an object of an unexpected type each get one clear line.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis

Verify = Callable[[Mapping[str, object]], str]


class Miss(Exception):
    """Raised by a ``verify`` function: the student's result is not right yet; the text says why."""


def expect(condition: object, message: str) -> None:
    """Raise :class:`Miss` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise Miss(message)


@dataclass(frozen=True, kw_only=True)
class Exercise:
    """One "Попробуйте" exercise with a check (see the module docstring).

    ``needs``: names the student's solution cell defines (their absence means the cell is still
    blank or was not run). ``setup``: names the notebook's first code cell defines (``r``, ``P``).
    The hint comes in two steps: ``nudge`` (where to look) first, then ``hint`` (the command or
    the idea), never the finished code (``tests/test_hints.py`` holds every hint to that).
    """

    id: str
    title: str
    verify: Verify
    hint: str
    nudge: str = ""
    needs: tuple[str, ...] = ()
    setup: tuple[str, ...] = ("r", "P")

    def __post_init__(self) -> None:
        notebook, _, number = self.id.partition(".")
        if not (len(notebook) == 2 and notebook.isdigit() and number.isdigit()):
            raise ValueError(f"an exercise id is 'NN.K' (notebook, number): {self.id!r}")
        if not self.title or not self.hint:
            raise ValueError(f"exercise {self.id} needs a title and a hint")

    @property
    def notebook(self) -> str:
        """The two-digit notebook number: ``"02"`` for ``"02.4"``."""
        return self.id.split(".")[0]


@dataclass(frozen=True)
class Verdict:
    """What one check found: passed or not, and the message (Russian) the student reads."""

    exercise: Exercise
    passed: bool
    message: str
    retry: str = ""  # how to start again from a fresh state (the student edition fills it on a failure)

    @property
    def text(self) -> str:
        """One plain line: ``✓ 02.4 «Спасите зависшее»: …`` or ``✗ …``."""
        mark = "✓" if self.passed else "✗"
        retry = f" {self.retry}" if self.retry else ""
        return f"{mark} {self.exercise.id} «{self.exercise.title}»: {self.message}{retry}"

    def _repr_html_(self) -> str:
        colour, background, status = (
            ("#17803d", "#eef8f0", "верно") if self.passed else ("#b3261e", "#fdf0ef", "пока нет")
        )
        retry = (
            f"<div class='exercise-retry' style='margin-top:4px;color:#555'>{_code_spans(self.retry)}</div>"
            if self.retry and not self.passed
            else ""
        )
        hint = (
            ""
            if self.passed
            else "<details class='exercise-hint' style='margin-top:4px'>"
            "<summary style='cursor:pointer'>Подсказка</summary>"
            f"<div style='margin-top:4px'>{_hint_steps(self.exercise)}</div></details>"
        )
        return (
            f"<div class='exercise-check' data-exercise='{html.escape(self.exercise.id)}' "
            f"data-passed='{str(self.passed).lower()}' style='border-left:4px solid {colour};"
            f"background:{background};padding:6px 10px'>"
            f"<b style='color:{colour}'>{'✓' if self.passed else '✗'} {html.escape(self.exercise.id)} "
            f"«{html.escape(self.exercise.title)}» — {status}.</b> {_code_spans(self.message)}{retry}{hint}</div>"
        )

    def __repr__(self) -> str:
        return self.text


def evaluate(exercise: Exercise, namespace: Mapping[str, object]) -> Verdict:
    """Run ``exercise``'s check against ``namespace``; every outcome becomes a Verdict, nothing raises."""
    missing_setup = [name for name in exercise.setup if name not in namespace]
    if missing_setup:
        return Verdict(exercise, False, _missing_setup(missing_setup))
    down = _server_down(namespace.get("r")) if "r" in exercise.setup else None
    if down:  # a dead server first: the student's variables may be missing because their cell met it
        return Verdict(exercise, False, down)
    missing = [name for name in exercise.needs if name not in namespace]
    if missing:
        return Verdict(exercise, False, _missing_names(missing))
    names = {name: namespace[name] for name in (*exercise.setup, *exercise.needs)}
    try:
        return Verdict(exercise, True, exercise.verify(names))
    except Miss as miss:
        return Verdict(exercise, False, str(miss))
    except redis.ConnectionError as exc:
        return Verdict(exercise, False, f"Redis не отвечает ({exc}). {RERUN_FIRST}")
    except redis.RedisError as exc:
        return Verdict(exercise, False, f"Redis ответил ошибкой: {type(exc).__name__}: {exc}.")
    except TimeoutError as exc:  # a wait inside the check ran out: what it waited for, in one line
        return Verdict(exercise, False, f"Проверка не дождалась нужного состояния ({exc}). {RUN_AGAIN}")
    except Exception as exc:  # the student's object was not what the check expected: say so, no traceback
        return Verdict(
            exercise,
            False,
            f"Проверка не смогла разобрать ваш результат ({type(exc).__name__}: {exc}). "
            "Сверьте тип и форму переменных с условием задания.",
        )


RUN_AGAIN = "Выполните ячейку с решением ещё раз (попытка начнётся с чистого состояния), затем проверку."
RERUN_FIRST = (
    "Выполните первую ячейку кода ноутбука заново (она поднимет Redis, если его нет; или `make up` в терминале), "
    "затем ячейку, которая готовит задание, ваше решение и проверку."
)


def _server_down(client: object) -> str | None:
    """The Russian line for a server that does not answer ``PING``, or None when it does (or is no client)."""
    ping = getattr(client, "ping", None)
    if not callable(ping):
        return None
    try:
        ping()
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException) as exc:
        return f"Redis не отвечает ({type(exc).__name__}: {exc}). {RERUN_FIRST}"
    except redis.RedisError:  # it answered, if with an error (a cluster mid-failover): not "down"
        return None
    return None


def _hint_steps(exercise: Exercise) -> str:
    """The nudge, and the second step one more click away (or the hint alone, when there is no nudge)."""
    if not exercise.nudge:
        return _code_spans(exercise.hint)
    return (
        f"{_code_spans(exercise.nudge)}<details class='exercise-hint-more' style='margin-top:4px'>"
        f"<summary style='cursor:pointer'>Ещё подсказка</summary><div style='margin-top:4px'>"
        f"{_code_spans(exercise.hint)}</div></details>"
    )


def _code_spans(text: str) -> str:
    """Escaped HTML with `backticked` parts as <code>, as Markdown would show them."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _missing_names(names: list[str]) -> str:
    listed = ", ".join(f"`{name}`" for name in names)
    many = len(names) > 1
    return (
        f"{'Переменные' if many else 'Переменная'} {listed} пока не {'определены' if many else 'определена'}. "
        "Впишите решение в ячейку с `# ваш код` выше и выполните её, затем запустите проверку снова."
    )


def _missing_setup(names: list[str]) -> str:
    listed = ", ".join(f"`{name}`" for name in names)
    return f"Нет {listed}: сначала выполните первую ячейку кода ноутбука (она подключается к Redis)."
