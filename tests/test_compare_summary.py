"""labs.compare.summary and labs.compare.plan: the tables and the load plan from a run's rows alone."""

from __future__ import annotations

import pytest

from labs.compare import plan, summary
from labs.compare.scenarios import Row

pytestmark = pytest.mark.timeout(30)


def _sweep(broker: str, rates: dict[int, float], drain: float = 400.0) -> list[Row]:
    return [{"broker": broker, "case": f"window-{w}", "window": w, "publish_per_s": r, "publish_p50_ms": 1.0,
             "charges_per_s": drain, "lost": 0, "charged_twice": 0} for w, r in rates.items()]


def test_the_saturation_table_names_the_first_window_at_nine_tenths_of_the_best_and_the_factor() -> None:
    rows = _sweep("redis+WAIT", {1: 500.0, 16: 4000.0, 256: 4300.0}) + _sweep("rabbitmq", {1: 100.0, 16: 500.0,
                                                                                            256: 1000.0})
    table = summary.saturation(rows)
    assert table.rows == (("redis+WAIT", 1.0, 4300.0, 8.6, 16), ("rabbitmq", 1.0, 1000.0, 10.0, 256))
    sweep = summary.window_sweep(rows)
    assert [r[:4] for r in sweep.rows][:3] == [("redis+WAIT", 1, 500.0, 1.0), ("redis+WAIT", 16, 4000.0, 8.0),
                                               ("redis+WAIT", 256, 4300.0, 8.6)]
    assert summary.saturation(rows, "ru").columns[1].startswith("задержка подтверждённой публикации")


def test_rows_that_failed_or_belong_to_other_cases_are_left_out() -> None:
    rows: list[Row] = [*_sweep("nats", {1: 100.0, 256: 1200.0}),
                       {"broker": "nats", "case": "window-16", "error": "boom"}, {"broker": "nats", "case": "poison"}]
    assert [r[1] for r in summary.window_sweep(rows).rows] == [1, 256]
    assert not summary.memory(rows).rows and not summary.load_curve(rows).rows


def test_the_load_plan_offers_shares_of_the_lower_of_publish_and_drain_rates() -> None:
    rows = _sweep("redis", {1: 500.0, 256: 9000.0}, drain=400.0)
    cases = plan.load_cases(rows, "redis", seconds=2.0)
    assert [c.rate_per_s for c in cases] == [100.0, 200.0, 300.0, 360.0]  # 25..90 % of 400/s, the drain
    assert all(c.window >= 1 and c.events >= 20 for c in cases)
    assert plan.load_cases(rows, "nats", seconds=2.0) == []  # no sweep for that row: no load plan


def test_memory_rows_give_the_slope_per_copy_and_each_brokers_own_bound() -> None:
    rows: list[Row] = [{"broker": "rabbitmq", "case": "memory", "copies": 3, "memory_points": [(5000, 300.0),
                       (25000, 330.0)], "bytes_per_message": 1500, "bytes_per_message_per_copy": 500}]
    (row,) = summary.memory(rows).rows
    assert row[3:5] == (1500, 500) and "wal_max_size_bytes" in str(row[5])


def test_markdown_escapes_pipes_and_shows_none_as_empty() -> None:
    text = summary.markdown(summary.Table("t", ("a", "b"), (("x|y", None),)))
    assert text.splitlines()[2] == "| x\\|y |  |"


def test_the_durability_table_speaks_russian_in_the_notebook_and_english_in_the_report() -> None:
    row: Row = {"broker": "nats", "case": "poison", "server": "NATS 2.15.1", "copies": 3, "fsync": "every 2 minutes",
                "confirm": "PubAck once a majority has it", "durability": "...; dead letters: the consumer",
                "durability_ru": {"fsync": "раз в 2 минуты", "confirm": "PubAck от большинства",
                                  "dead_letters": "консьюмер"}}
    (ru,) = summary.durability([row], "ru").rows
    assert ru == ("nats", "NATS 2.15.1", 3, "раз в 2 минуты", "PubAck от большинства", "консьюмер")
    assert summary.durability([row]).rows[0][3:] == ("every 2 minutes", "PubAck once a majority has it", "the consumer")


def test_kafkas_column_says_documented_not_measured_in_english_and_in_russian() -> None:
    from labs.compare import kafka

    en, ru = kafka.column(), kafka.column("ru")
    assert len(en) == len(ru) and all(kafka.NOT_MEASURED in text for text in en.values()), en
    assert all(kafka.NOT_MEASURED_RU in text and kafka.NOT_MEASURED not in text for text in ru.values()), ru
    assert set(ru) == set(kafka.TOPICS_RU.values()) and all(cell.text_ru for cell in kafka.CELLS)
