"""``benchmarks/memory.py`` without a GPU: which variants a choice of ops times, and the rows of
its differences (``launch_new`` and ``launch_between`` share the half they subtract)."""

from __future__ import annotations

from benchmarks import memory
from benchmarks.memory import Variant, difference


def launch_rows() -> list[Variant]:
    new_rows = difference("launch_new", 16, "torch", lambda: None, lambda: None, 1, True)
    between = Variant("launch_between", 16, "torch", lambda: None, 1, True, minus=new_rows[1])
    reused = Variant("launch_reused", 16, "torch", lambda: None, 1, True)
    return [*new_rows, between, reused]


def test_a_chosen_difference_keeps_the_half_it_subtracts_once():
    made = launch_rows()
    alone = made[1]
    assert alone.subtracted
    picked = memory.chosen(made, {"launch_between"})
    assert [v.op for v in picked] == ["launch_between", "launch_new"]
    assert picked[1] is alone
    picked = memory.chosen(made, {"launch_new", "launch_between", "launch_reused"})
    assert sum(v is alone for v in picked) == 1
    assert len(picked) == 4
    assert memory.chosen(made, {"launch_reused"}) == [made[3]]


def test_both_differences_subtract_the_same_rounds_of_the_arrays_alone():
    made = launch_rows()
    whole_new, alone, between, reused = made
    whole_new.seconds = [9e-6, 10e-6, 11e-6]
    alone.seconds = [5e-6, 6e-6, 7e-6]
    between.seconds = [7e-6, 8e-6, 9e-6]
    reused.seconds = [1e-6, 1e-6, 1e-6]
    table = {row["op"]: row for row in memory.rows(made)}
    assert set(table) == {"launch_new", "launch_between", "launch_reused"}
    assert table["launch_new"]["median_us"] == 4.0
    assert table["launch_between"]["median_us"] == 2.0
    assert table["launch_between"]["subtracted_median_us"] == 6.0
    assert table["launch_between"]["p10_us"] == table["launch_between"]["p90_us"] == 2.0
    assert "launch_between" in memory.OPS
