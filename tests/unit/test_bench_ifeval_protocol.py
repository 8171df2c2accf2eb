"""The IFEval benchmark's pre-registered protocols (infra/benchmarks/ifeval/protocol*.py): a committed result was
made by the protocol file in the tree (its recorded SHA-256), version 2 changes only what its docstring says it
changes, and its held-out prompts are none of version 1's."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from dr_core.ifeval import testbed
from infra.benchmarks.ifeval.protocol import PROTOCOL
from infra.benchmarks.ifeval.protocol_v2 import PROTOCOL_V2
from infra.benchmarks.ifeval.run import PROTOCOL_FILES

RESULTS = Path(__file__).resolve().parents[2] / "infra" / "benchmarks" / "results"


@pytest.mark.parametrize("name", ["bench_ifeval.json", "bench_ifeval_v2.json"])
def test_a_committed_result_was_made_by_the_protocol_in_the_tree(name):
    path = RESULTS / name
    if not path.exists():
        pytest.skip(f"{name} is not committed yet")
    r = json.loads(path.read_text())
    assert r["partial"] is False
    assert r["protocol_sha256"] == hashlib.sha256(PROTOCOL_FILES[r["version"]].read_bytes()).hexdigest()
    assert r["protocol"] == json.loads(json.dumps(asdict((PROTOCOL, PROTOCOL_V2)[r["version"] - 1])))


def test_version_2_changes_only_the_controls_budget_the_seeds_and_the_heldout_slice():
    v1, v2 = asdict(PROTOCOL), asdict(PROTOCOL_V2)
    changed = {k for k in v2 if v1.get(k, "absent") != v2[k]}
    assert changed == {"seeds", "policy_steps", "policy_prompts_per_step", "version", "heldout_offset"}
    assert len(PROTOCOL_V2.seeds) >= 3 and PROTOCOL_V2.heldout >= 150


def test_version_2_holds_out_prompts_version_1_never_showed():
    first = {p.row.id for p in testbed.heldout(PROTOCOL.heldout)}
    second = testbed.heldout(PROTOCOL_V2.heldout, start=PROTOCOL_V2.heldout_offset)
    assert len(second) == PROTOCOL_V2.heldout and not first & {p.row.id for p in second}
    whole = testbed.heldout(PROTOCOL_V2.heldout_offset + PROTOCOL_V2.heldout)
    assert [p.row.id for p in second] == [p.row.id for p in whole[PROTOCOL_V2.heldout_offset :]]


def test_the_gate_probe_takes_model_prompt_and_verdicts_and_refuses_anything_else():
    import argparse

    from infra.benchmarks.bench_ifeval_gate import candidate, parser

    assert candidate("qwen2.5-coder-1.5b-instruct:plain:balanced") == (
        "qwen2.5-coder-1.5b-instruct",
        "plain",
        "balanced",
    )
    for bad in ("qwen:plain", "qwen:plain:majority", "qwen:user:choice"):
        with pytest.raises(argparse.ArgumentTypeError, match="want MODEL:PROMPT:MODE"):
            candidate(bad)
    args = parser().parse_args(["--verifier", "m:system:choice", "--verifier", "n:plain:calibrated", "--output", "x"])
    assert args.verifier == [("m", "system", "choice"), ("n", "plain", "calibrated")]
