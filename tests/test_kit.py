"""The student kit: starters are derived from their references and kept in sync."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from labs import kit

REFERENCE = """def f(x: int) -> int:
    \"\"\"Doubles x.\"\"\"
    # region solution: return twice "x"
    y = x * 2
    return y
    # endregion


def g() -> None:
    pass
"""


def test_committed_starters_are_in_sync() -> None:
    assert kit.check() == []


def test_derive_replaces_the_region_with_a_stub_carrying_the_task() -> None:
    text = kit.derive(REFERENCE, header="# header\n")
    assert text.startswith("# header\n")
    assert "y = x * 2" not in text and "# region" not in text and "# endregion" not in text
    assert "raise NotImplementedError(\n        \"return twice 'x'\"\n    )" in text
    assert "def g() -> None:\n    pass" in text
    namespace: dict[str, object] = {}
    exec(compile(text, "<starter>", "exec"), namespace)
    with pytest.raises(NotImplementedError, match="return twice 'x'"):
        starter_f = namespace["f"]
        assert callable(starter_f)
        starter_f(1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x = 1\n", "no '# region solution"),
        ("# region solution: a\nx = 1\n", "never closed"),
        ("# endregion\n", "without a region"),
        ("# region solution: a\n# region solution: b\n# endregion\n", "inside the region"),
    ],
)
def test_malformed_markers_are_reported(text: str, problem: str) -> None:
    with pytest.raises(kit.KitError, match=problem):
        kit.derive(text)


def test_check_reports_a_drifted_starter(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(REFERENCE)
    one = kit.Kit(reference=Path("ref.py"), starter=Path("out/starter.py"))
    assert "missing" in kit.check([one], tmp_path)[0]
    kit.write([one], tmp_path)
    assert kit.check([one], tmp_path) == []
    (tmp_path / "out/starter.py").write_text("edited by hand\n")
    assert "differs" in kit.check([one], tmp_path)[0]


def test_lab1_starter_stubs_every_solution_part() -> None:
    starter = importlib.import_module("labs.lab1.starter")
    reference = importlib.import_module("solutions.lab1")
    for name in ("ensure_group", "produce_one", "consume_once", "rescue_once"):
        assert callable(getattr(starter, name))
        assert getattr(starter, name).__doc__ == getattr(reference, name).__doc__
    with pytest.raises(NotImplementedError, match="approximate MAXLEN"):
        starter.produce_one(None, "s", 1)
    assert "NotImplementedError" not in (kit.ROOT / "solutions/lab1.py").read_text()


def test_cli_check_exits_zero_when_in_sync(capsys: pytest.CaptureFixture[str]) -> None:
    assert kit.main(["--check"]) == 0
    assert "in sync" in capsys.readouterr().out
