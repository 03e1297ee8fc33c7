"""labs.exercises.student in a real IPython shell: a Redis error is one Russian line, reset() re-prepares.

The shell is IPython's own ``InteractiveShell`` (what ipykernel runs cells with), the Redis a
real server: the session's for the live part, a port nobody listens on for the dead one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

import pytest
import redis
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from redis.exceptions import RedisClusterException

from labs.exercises import attempts, student
from labs.exercises.exercise import evaluate
from labs.exercises.notebook import CheckFailed, check, find, with_retry
from labs.launcher import ports

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def shell(redis_url: str, key_prefix: str) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    student.student_mode(ip)
    assert attempts.current() is not None
    ip.user_ns.update(r=redis.Redis.from_url(redis_url, decode_responses=True), P=key_prefix)
    run_cell(ip, "import time, redis")
    yield ip
    cast("Callable[[tuple[()], None], None]", ip.set_custom_exc)((), None)  # IPython: unannotated
    attempts.uninstall()
    ip.user_ns["r"].close()


def unused_port() -> int:
    return ports.free_port()  # below the ephemeral range: no client socket is handed it meanwhile


def run_cell(ip: InteractiveShell, source: str, *, store_history: bool = False) -> ExecutionResult:
    """``ip.run_cell``, which IPython leaves unannotated, typed."""
    return cast("Callable[..., ExecutionResult]", ip.run_cell)(source, store_history=store_history)


def run(ip: InteractiveShell, source: str, capsys: pytest.CaptureFixture[str]) -> tuple[ExecutionResult, str]:
    result = run_cell(ip, source, store_history=True)
    return result, capsys.readouterr().out


def test_a_dead_redis_in_a_cell_is_one_line_naming_the_first_cell(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"redis://127.0.0.1:{unused_port()}/0"
    shell.user_ns["r"] = redis.Redis.from_url(dead, decode_responses=True, socket_connect_timeout=0.5)
    result, out = run(shell, 'rescued = r.xautoclaim(P + "ex:rescue", "billing", "rescuer", 100)', capsys)
    assert isinstance(result.error_in_exec, redis.ConnectionError)  # the cell still failed: Run All knows
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and "Redis не отвечает" in lines[0] and "первую ячейку" in lines[0], out
    assert "Traceback" not in out and "File " not in out
    # ... and the check below blames the server, not the variable the failed cell did not define
    verdict = with_retry(evaluate(find("02.4"), shell.user_ns), shell.user_ns)
    assert not verdict.passed and verdict.message.startswith("Redis не отвечает"), verdict.message
    assert "не определена" not in verdict.message and not verdict.retry


def test_an_error_reply_names_the_line_and_a_python_error_keeps_its_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out = run(shell, 'x = 1\nr.xack(P + "nothing", "billing")', capsys)
    assert isinstance(result.error_in_exec, redis.ResponseError)
    (line,) = [line for line in out.splitlines() if line.strip()]
    assert "Redis ответил ошибкой ResponseError" in line and "строка 2: `r.xack(" in line, line
    result, out = run(shell, "{}['missing']", capsys)
    assert isinstance(result.error_in_exec, KeyError) and "Traceback" in out  # the student's own error, in full


def test_reset_runs_the_preparing_cell_again_and_a_failed_check_says_how(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result, _ = run(shell, 'from labs.exercises.student import reset\nreset("02.4")', capsys)
    assert result.success, result.error_in_exec
    ns = shell.user_ns
    stream = ns["rescue_stream"]
    assert ns["r"].xpending(stream, "billing")["pending"] == 3
    _, claimed, _ = ns["r"].xautoclaim(stream, "billing", "rescuer", min_idle_time=100)
    ns["r"].xack(stream, "billing", *[m for m, _ in claimed])  # a first attempt, acked, then lost its list
    ns["rescued"] = []
    verdict = with_retry(evaluate(find("02.4"), ns), ns)
    assert not verdict.passed and 'reset("02.4")' in verdict.retry and "ячейка над вашим решением" in verdict.retry
    result, out = run(shell, 'reset("02.4")', capsys)
    assert result.success and "подготовлено заново" in out
    assert ns["r"].xpending(stream, "billing")["pending"] == 3  # the state the first attempt found, again
    ns["r"].delete(stream)
    with pytest.raises(KeyError, match="нет задания"):
        student.reset("02.77", {})


def test_every_exercise_with_state_has_a_preparing_cell_to_go_back_to() -> None:
    assert student.preparing_source("02.4") and "a re-run starts from scratch" in str(student.preparing_source("02.4"))
    assert "reset(" in student.retry_advice("02.1")
    assert student.preparing_source("99.9") is None and "reset(" not in student.retry_advice("99.9")


def test_a_cluster_client_refusing_keys_of_two_slots_is_a_command_error_not_a_dead_server(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """09.2's likeliest mistake (a DLQ key without the stream's hash tag) must not read as "Redis is down"."""
    source = ("from redis.exceptions import RedisClusterException\n"
              "raise RedisClusterException('EVALSHA - all keys must map to the same key slot')")
    result, out = run(shell, source, capsys)
    assert isinstance(result.error_in_exec, RedisClusterException)  # the cell still failed: Run All knows
    (line,) = [line for line in out.splitlines() if line.strip()]
    assert "Redis ответил ошибкой RedisClusterException" in line and "same key slot" in line, line
    assert "не отвечает" not in line
    unreachable = RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable node")
    assert student.server_is_down(unreachable) and student.server_is_down(redis.ConnectionError("refused"))
    assert not student.server_is_down(RedisClusterException("EVALSHA - all keys must map to the same key slot"))


def _solution(exercise_id: str) -> str:
    return next(c.source for c in attempts._cells().values() if c.exercise == exercise_id and c.role == "solution")


def test_every_run_of_a_solution_cell_is_a_clean_attempt_and_the_check_judges_only_the_latest(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """02.4 twice in a row without its preparing cell: the second attempt is prepared again by itself (green); then a
    run that raises before it defines ``rescued`` makes the check red with that error, not green on the old list."""
    right = _solution("02.4")
    result, out = run(shell, right, capsys)  # never prepared in this kernel: the attempt prepares it first
    assert result.success, result.error_in_exec
    assert "новая попытка с чистого состояния" in out
    check("02.4", shell.user_ns)
    result, out = run(shell, right, capsys)  # the same again: claimed and acked before, prepared again now
    assert result.success and "новая попытка" in out, (result.error_in_exec, out)
    check("02.4", shell.user_ns)
    typo = right.replace("rescued = [msg_id", "rescued = [msg_idd", 1)
    result, _ = run(shell, typo, capsys)
    assert isinstance(result.error_in_exec, NameError)
    assert "rescued" not in shell.user_ns  # the answer of the earlier attempt is gone
    with pytest.raises(CheckFailed) as failed:
        check("02.4", shell.user_ns)
    assert "закончился ошибкой (NameError" in failed.value.verdict.message
    shell.user_ns["r"].delete(shell.user_ns["rescue_stream"])


def test_a_wait_that_ran_out_is_one_russian_line_naming_what_was_awaited(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    source = "from labs.polling import wait_until\nwait_until(lambda: 0, 0.1, '4 messages in hand', poll_s=0.02)"
    result, out = run(shell, source, capsys)
    assert isinstance(result.error_in_exec, TimeoutError)
    (line,) = [line for line in out.splitlines() if line.strip()]
    assert "Не дождались за 0.1 с" in line and "«4 messages in hand»" in line and "последний ответ: 0" in line
    assert "строка 2" in line and "Traceback" not in out and "polling.py" not in out
