"""One generator update and one policy update of a single GRPO step each on the real default model
(SmolLM2-135M-Instruct), with the session's in-process vLLM engine as frozen verifier and as fixed G(t).

Small on purpose (2 prompts, K=2, short rollouts): a couple of minutes on a 2-core CPU.
"""

from __future__ import annotations

import pytest

from dr_core.constants import COMPLETE_MARKER
from dr_core.train import grpo
from dr_core.train.grpo import GeneratorRow, GRPOSettings, PolicyRow
from tests.support.reference import eq12

pytestmark = [pytest.mark.slow]

SMALL = dict(
    learning_rate=1e-5,
    num_generations=2,
    per_device_train_batch_size=4,
    max_steps=1,
    save_steps=1,
    seed=0,
    rubric_max_tokens=160,
)


def test_generator_and_policy_update_on_the_default_model(default_model_dir, vllm_engine, tmp_path):
    pytest.importorskip("trl")
    gen_rows = [
        GeneratorRow(0, "What is 2 + 2?", ("4", "2 + 2 is 5."), ("2 + 2 = 4.", "It is 5.")),
        GeneratorRow(1, "Name a colour.", ("Blue.", "I like trains."), ("Red is a colour.", "Trains.")),
    ]
    gen_records = []
    gen = grpo.train_generator(
        default_model_dir,
        gen_rows,
        vllm_engine,
        GRPOSettings(**SMALL, max_completion_length=64),
        tmp_path / "generator",
        on_rollouts=gen_records.extend,
    )
    assert gen.steps == 1 and (tmp_path / "generator" / "final" / COMPLETE_MARKER).is_file()
    assert len(gen_records) == 4 and {r["group_id"] for r in gen_records} == {0, 1}
    for r in gen_records:
        assert r["scorable"] == (r["verdicts_C"] is not None)
        if r["scorable"]:
            assert len(r["verdicts_C"]) == 2 and len(r["verdicts_anchor"]) == 2
    h = gen.history[0]
    assert h["rollouts"] == 4 and h["unparseable"] == sum(r["items"] is None for r in gen_records)
    assert h["unparseable"] + h["unscorable_verdicts"] == sum(not r["scorable"] for r in gen_records)

    pol_records = []
    pol = grpo.train_policy(
        default_model_dir,
        [PolicyRow(0, "p0", "What is 2 + 2?"), PolicyRow(1, "p1", "Name a colour.")],
        vllm_engine,
        vllm_engine,
        GRPOSettings(**SMALL, max_completion_length=24),
        tmp_path / "policy",
        on_rollouts=pol_records.extend,
    )
    assert pol.steps == 1 and grpo.is_complete(pol.checkpoint)
    assert len(pol_records) == 4
    for r in pol_records:  # each reward is Eq. 12 of its own verdicts, or None when one is missing
        if r["rubric_items"] is None or r["verdicts"] is None or None in r["verdicts"]:
            assert r["score"] is None, r
        else:
            weights = [w for _, w in r["rubric_items"]]
            assert r["score"] == pytest.approx(eq12(weights, [r["verdicts"]])[0]), r
    assert pol.history[0]["unscorable"] == sum(r["score"] is None for r in pol_records)
    print(
        f"generator step {gen.step_seconds:.1f} s, policy step {pol.step_seconds:.1f} s; "
        f"generator history {gen.history}; policy history {pol.history}"
    )
