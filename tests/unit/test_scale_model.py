"""infra/benchmarks/scale_model.py: docs/benchmarks/scale.md's scale model counts what the paper preset says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("scale_model", ROOT / "infra/benchmarks/scale_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["scale_model"] = mod  # its dataclass looks the module up there
    spec.loader.exec_module(mod)
    return mod


def test_paper_round_counts_follow_the_preset(capsys):
    mod = _module()
    mod.main(["--items", "12"])
    out = capsys.readouterr().out
    # measurement: 256 sets x 8 rubric rollouts x 12 items x (K=8 + 7 anchors) verdicts
    assert "| verifier | measure: verdicts | 368,640 |" in out
    # generator update: 100 steps x 8 x 32 rollouts, each verified on 15 responses
    assert "| verifier | update: R_disc + R_anchor verdicts | 4,608,000 |" in out
    assert "| policy | measure: sample P(t) | 256 |" in out and "round total" in out
    mod.main(["--items", "24"])
    assert "| verifier | measure: verdicts | 737,280 |" in capsys.readouterr().out
