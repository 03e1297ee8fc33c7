"""``make check-lab-3``: the compact reference passes; each probe worker fails, and the check says why.

One run of the checker at the tests' scale (the ``smoke`` preset: two workers per cell, 30
events/s, 9 s of load; modes normal, crash and SIGTERM; the ``sqlite`` strategy) with five
workers side by side, each on cells of its own: the compact reference
(``labs/lab3/worker_reference.py``) and four probes (``tests/lab3_probe_worker.py``), each of
which skips one thing. The quick lab in ``tests/test_lab3.py`` covers the full reference in
every mode, failover included. The compact reference and ``solutions`` are also compared
flag by flag, table by table.
"""

from __future__ import annotations

import io
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from labs.lab3 import check
from labs.lab3.contract import ROOT, WorkerConfig, worker_values
from labs.lab3.run import parse_workers, worker_args
from labs.lab3.settings import PRESETS
from labs.report import PIPE_WIDTH, Check, print_checks
from solutions.billing import build_parser
from solutions.dlq import dead_letter_fields
from solutions.ledger import SCHEMA
from solutions.messages import Delivery
from solutions.settings import Settings

PROBE = Path(__file__).with_name("lab3_probe_worker.py")
COMPACT = ROOT / "labs" / "lab3" / "worker_reference.py"
PROBES = {"compact": "none", "never-fails": "never-fails", "no-dedupe": "no-dedupe", "ack-first": "ack-first",
          "no-drain": "no-drain"}
MODES = ("normal", "crash", "sigterm")


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Check]]]:
    """``{worker: its checks, without the "[worker] " prefix}`` from one side-by-side run of the checker."""
    workers: dict[str, str | None] = {label: shlex.join([sys.executable, str(PROBE), "--probe", probe])
                                      for label, probe in PROBES.items()}
    found = check.run_checks(workers=workers, modes=MODES, preset="smoke",
                             reports_dir=tmp_path_factory.mktemp("lab3-check"))
    assert found[0].passed, found[0].detail  # every worker started and read
    by_worker: dict[str, list[Check]] = {label: [] for label in PROBES}
    for c in found[1:]:
        if match := re.match(r"\[(?P<worker>[\w-]+)\] (?P<name>.+)", c.name):
            by_worker[match["worker"]].append(Check(match["name"], c.passed, c.detail))
    yield by_worker


def failing(checks: list[Check]) -> dict[str, str]:
    """``{the check's name up to its colon: detail}`` of the failed checks (the two sqlite checks are told
    apart: ``sqlite`` and ``sqlite dedupe``)."""
    out = {}
    for c in checks:
        key = c.name.split(":")[0] + (" dedupe" if "dedupe held" in c.name else "")
        if not c.passed:
            out[key] = c.detail
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_compact_reference_passes_every_check(checks: dict[str, list[Check]]) -> None:
    mine = checks["compact"]
    assert [c.name.split(":")[0] for c in mine] == [
        "normal", "crash", "sqlite", "sqlite", "XPENDING empty and lag 0 at the end of every run", "SIGTERM"]
    assert failing(mine) == {}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_worker_that_never_fails_is_not_exercised(checks: dict[str, list[Check]]) -> None:
    bad = failing(checks["never-fails"])
    assert list(bad) == ["normal"], bad
    assert bad["normal"].startswith("not exercised: ") and "--fail-every" in bad["normal"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_worker_that_ignores_dedupe_charges_twice(checks: dict[str, list[Check]]) -> None:
    bad = failing(checks["no-dedupe"])
    assert sorted(bad) == ["sqlite", "sqlite dedupe"], bad
    assert re.search(r"crash/sqlite: lost 0, duplicated \d+ \(event_id [0-9a-f]{32}", bad["sqlite"]), bad
    assert re.search(r"crash/sqlite: \d+ events charged twice \(event_id [0-9a-f]{32}", bad["sqlite dedupe"]), bad


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_ack_first_worker_loses_events_and_never_holds_a_charge(checks: dict[str, list[Check]]) -> None:
    bad = failing(checks["ack-first"])
    assert {"normal", "crash", "sqlite", "sqlite dedupe", "SIGTERM"} <= set(bad), bad
    lost = r"acked without doing the work: normal/sqlite: \d+ lost \(event_id [0-9a-f]{32}"
    assert re.search(lost, bad["normal"])
    assert "never held a message that was charged" in bad["crash"] and "XACK before the charge" in bad["crash"]
    assert bad["sqlite dedupe"].startswith("not exercised: ")
    assert re.search(r"\d+ events acked but neither charged nor dead-lettered \(event_id [0-9a-f]{32}",
                     bad["SIGTERM"])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_worker_that_exits_without_draining_is_named(checks: dict[str, list[Check]]) -> None:
    bad = failing(checks["no-drain"])
    assert list(bad) == ["SIGTERM"], bad
    assert "billing-2 wrote no line containing 'drain complete'" in bad["SIGTERM"]


def test_printed_verdicts_stay_one_line_each_when_piped() -> None:
    out = io.StringIO()
    detail = "not exercised: " + "x" * 200
    code = print_checks(Console(file=out, width=PIPE_WIDTH, soft_wrap=True),
                        [Check("[mine] normal: failed attempts were redelivered", False, detail)])
    lines = out.getvalue().splitlines()
    assert code == 1 and lines[0] == "FAIL  [mine] normal: failed attempts were redelivered"
    assert lines[1].strip() == detail and lines[2] == "0 passed, 1 failed"


def test_several_workers_are_given_as_label_and_command() -> None:
    assert parse_workers(["mine=./w --x", "reference"]) == {"mine": "./w --x", "w2": None}
    assert worker_args(["./w"]) == {"worker": "./w"} and worker_args([]) == {"worker": None}
    with pytest.raises(ValueError, match="given twice"):
        parse_workers(["a=x", "a=y"])


def _help(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60, check=True).stdout


def test_compact_reference_takes_the_contract_like_billing_worker(tmp_path: Path) -> None:
    """The compact reference and ``billing-worker`` take every flag of the contract, write the same
    ledger, key the redis strategy's marker alike and give a dead letter the same extra fields."""
    config = WorkerConfig("s", "billing", "billing-1", tmp_path / "l.sqlite3", "sqlite")
    flags = ["sentinel", "master-name", *worker_values(config, PRESETS["quick"])]
    full = build_parser().format_help()
    compact = _help([sys.executable, str(COMPACT), "--help"])
    assert [f for f in flags if f"--{f}" not in full] == [] and [f for f in flags if f"--{f}" not in compact] == []

    from labs.lab3 import worker_reference as ref

    def columns(schema: str) -> dict[str, list[tuple[str, str, int]]]:
        db = sqlite3.connect(":memory:")
        db.executescript(schema)
        return {t: [(r[1], r[2], r[3]) for r in db.execute(f"PRAGMA table_info({t})")]
                for t in ("charges", "applied_events")}

    assert columns(ref.SCHEMA) == columns(SCHEMA)
    assert ref.marker_key("s", "billing", "e1") == Settings(stream="s", group="billing").dedupe_prefix + "e1"
    full_letter = dead_letter_fields(Delivery("1-0", [b"order_id", b"o"], 3), "boom")
    compact_letter = ref.dead_letter_fields("1-0", {"order_id": "o"}, "boom", 3)
    assert [x.decode() for x in full_letter] == [x for kv in compact_letter.items() for x in kv]


def test_node_example_reads_every_flag_of_the_contract_and_parses(tmp_path: Path) -> None:
    """The Node.js example (run by hand against ``make check-lab-3``; CI has no node_modules): every flag
    of the contract is read, and ``node --check`` accepts the file where Node.js is installed."""
    source = (ROOT / "labs" / "lab3" / "examples" / "node" / "worker.js").read_text()
    config = WorkerConfig("s", "billing", "billing-1", tmp_path / "l.sqlite3", "sqlite")
    names = ["master-name", *worker_values(config, PRESETS["quick"])]
    ignored = {"metrics-interval-s"}  # the example logs no metrics
    assert [n for n in names if f'"{n}"' not in source and n not in ignored] == []
    if not shutil.which("node"):
        pytest.skip("node is not installed: only the flags were checked")
    done = subprocess.run(["node", "--check", str(ROOT / "labs/lab3/examples/node/worker.js")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", ["worker_reference", "worker_starter"])
def test_workers_opening_a_new_ledger_at_once_all_get_it(module: str, tmp_path: Path) -> None:
    """Two workers of a lab 3 run open one new ledger at the same moment; the switch to WAL can refuse one of
    them at once ("database is locked", whatever the timeout: seen in a clean-clone CI run), so it is retried."""
    import importlib
    import threading

    open_ledger = importlib.import_module(f"labs.lab3.{module}").open_ledger
    for round_no in range(10):
        path = str(tmp_path / f"l{round_no}.sqlite3")
        start, errors, modes = threading.Barrier(6), list[Exception](), list[str]()

        def opens(path: str = path, start: threading.Barrier = start, errors: list[Exception] = errors,
                  modes: list[str] = modes) -> None:
            start.wait()
            try:
                db = open_ledger(path, 10.0)
                modes.append(db.execute("PRAGMA journal_mode").fetchone()[0])
                db.close()
            except sqlite3.Error as exc:
                errors.append(exc)

        threads = [threading.Thread(target=opens) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and modes == ["wal"] * 6, (errors, modes)
