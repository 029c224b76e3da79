"""``benchmarks/ufuncs.py`` without a GPU: the rows and table it writes (the issue's schema:
``{"op", "library", "median_us", "p10_us", "p90_us"}``, its ops and libraries)."""

from __future__ import annotations

import json

from benchmarks import ufuncs
from benchmarks.memory import Variant


def test_rows_have_the_schema_and_the_table_names_every_op():
    variants = []
    for op in ufuncs.OPS:
        for library in ufuncs.LIBRARIES:
            variant = Variant(op, 0, library, lambda: None, 1, False)
            variant.seconds = [2e-6, 1e-6, 3e-6]
            variants.append(variant)
    table = ufuncs.rows(variants)
    assert {tuple(sorted(row)) for row in table} == {
        ("library", "median_us", "op", "p10_us", "p90_us")
    }
    assert [(r["op"], r["library"]) for r in table][:2] == [
        ("vectorize_device", "numba-cuda"),
        ("vectorize_device", "fastlaunch"),
    ]
    assert all(r["p10_us"] <= r["median_us"] == 2.0 <= r["p90_us"] for r in table)
    meta = {"measured": "now", "args": "", "rounds": 3, "environment": {}}
    text = ufuncs.markdown(table, meta)
    assert all(f"| {op} |" in text for op in ufuncs.OPS)
    json.dumps({**meta, "rows": table})
