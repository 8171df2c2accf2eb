"""The evaluator end to end on the real default model (one in-process vLLM engine for the session)."""

import json

import pytest

from dr_core.datasets import load_pairwise, load_ranked
from dr_core.evaluator.calibrate import verdict_bias
from dr_core.evaluator.items import Check, EvalItem, RubricSampling
from dr_core.evaluator.score import evaluate_sets
from dr_core.evaluator.verify import verify
from dr_core.paths import bundled
from dr_core.rubric.schema import UNSCORABLE
from tests.support.reference import eq12

pytestmark = [pytest.mark.slow]


def test_dynamic_evaluation_of_human_pairs_with_anchors(vllm_engine):
    pairs = load_pairwise(bundled("eval_hh_harmless_pairs.jsonl"), limit=2)
    anchor = load_ranked(bundled("anchors_alpacaeval.jsonl"), limit=1)[0]
    items = [EvalItem(p.prompt, (p.chosen, p.rejected)) for p in pairs]
    items.append(EvalItem(anchor.prompt, anchor.responses[:3], anchors=anchor.responses[-3:]))
    ev = evaluate_sets(vllm_engine, vllm_engine, items, [0, 1], RubricSampling(max_tokens=384))
    assert len(ev.results) == 3 and all(len(row) == 2 for row in ev.results)
    assert ev.generation.requests == 6 and ev.generation.prompt_tokens > 0 and ev.generation.completion_tokens > 0
    for item, row in zip(items, ev.results):
        for r in row:
            assert sorted(r.generation.permutation) == list(range(len(item.candidates)))
            if r.generation.rubric is None:
                assert r.generation.error and r.scores is None and r.unscorable
                continue
            m = len(r.generation.rubric.items)
            assert len(r.verdicts) == len(item.candidates) and all(len(v) == m for v in r.verdicts)
            assert all(v in (0, 1, UNSCORABLE) for row_ in r.verdicts for v in row_)
            for score, v in zip(r.scores, r.verdicts, strict=True):  # Eq. 12 of the row's own verdicts
                if UNSCORABLE in v:
                    assert score is UNSCORABLE
                else:
                    assert score == pytest.approx(eq12(r.generation.rubric.weights, [v])[0])
            if item.anchors:
                assert len(r.anchor_scores) == 3


def test_verification_reuses_the_shared_prefix(vllm_engine):
    long_response = "Paris is the capital of France. " * 60
    checks = [
        Check("What is the capital of France?", long_response, f"The response mentions {w}.")
        for w in ("Paris", "France", "London", "a river", "the Eiffel tower", "a number")
    ]
    verdicts, stats = verify(vllm_engine, checks)
    assert len(verdicts) == 6 and all(v in (0, 1, UNSCORABLE) for v in verdicts)
    assert stats.cached_tokens > stats.prompt_tokens / 2  # most of the prompt tokens come from the prefix cache


def test_calibrated_verifier_gives_both_verdicts_on_the_probe(vllm_engine):
    """The plain choice says yes to all 24 probe checks on this model; the calibrated verdict is read from the
    first token's log-odds and says both yes and no (measured: 1 yes of 24, accuracy 0.458, i.e. no better than
    the constant answer: infra/benchmarks/results/bench_verdict_calibration.json)."""
    rows = [json.loads(line) for line in bundled("verifier_probe.jsonl").read_text().splitlines()]
    checks = [Check(r["prompt"], r["response"], r["criterion"]) for r in rows]
    verdicts, stats = verify(vllm_engine, checks, verdict_mode="calibrated")
    assert len(verdicts) == 24 and UNSCORABLE not in verdicts
    assert set(verdicts) == {0, 1}
    bias = verdict_bias(vllm_engine)
    assert bias is not None and abs(bias) < 50
    again, stats2 = verify(vllm_engine, checks[:2], verdict_mode="calibrated")
    assert again == verdicts[:2] and stats2.requests == 2  # bias cached on the engine, verdicts deterministic
