"""infra/benchmarks/learning/render.py: the committed learning-benchmark result as Markdown tables, each row with
its header's columns, every seed and the pooled difference present."""

from __future__ import annotations

import json
from pathlib import Path

from infra.benchmarks.learning.render import markdown

RESULT = Path(__file__).resolve().parents[2] / "infra/benchmarks/results/bench_learning.json"


def test_every_table_row_has_its_headers_columns_and_every_seed_is_shown():
    result = json.loads(RESULT.read_text())
    lines = markdown(result).splitlines()
    tables, current = [], None
    for line in lines:
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            current.append(line.count("|") - 1)
        else:
            current = None
    assert len(tables) == 4  # sweep, training, held out, policy
    for columns in tables:
        assert columns[1] == columns[0] and set(columns) == {columns[0]}  # the rule and each row as wide as the header
    assert len(tables[0]) == 2 + len(result["sweep"]) and len(tables[1]) == 2 + len(result["seeds"])
    assert len(tables[2]) == 2 + 1 + 2 * len(result["seeds"]) + 2
    assert any(line.startswith("| **G(S) - G(0) pooled** | ") for line in lines)
