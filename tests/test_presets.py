"""The shipped presets: the tiny preset's role assignment (measured, README "Choosing the verdict procedure") and
the policy update's whole groups when round.k is overridden."""

import pytest

from dr_core.model import is_bundled
from dr_core.presets import coevolve_preset, preset


def test_tiny_verifier_is_the_measured_bundled_model_and_procedure():
    eng = preset("tiny").engines
    assert eng.verifier.model == "qwen2.5-coder-0.5b-instruct" and is_bundled(eng.verifier.model)
    assert (eng.verifier.verifier_prompt, eng.verifier.verdict_mode) == ("plain", "balanced")
    assert eng.generator.model == eng.policy.model == "default"  # the trained roles stay SmolLM2-135M


def test_tiny_policy_update_scores_two_groups_per_step_and_keeps_that_when_k_changes():
    cfg = coevolve_preset("tiny")
    assert cfg.policy.per_device_train_batch_size == 2 * cfg.policy.num_generations == 2 * cfg.round.k
    small = coevolve_preset("tiny", round={"k": 2})
    assert (small.policy.num_generations, small.policy.per_device_train_batch_size) == (2, 4)
    explicit = coevolve_preset("tiny", round={"k": 2}, policy={"per_device_train_batch_size": 2})
    assert explicit.policy.per_device_train_batch_size == 2


def test_a_policy_group_that_does_not_match_k_is_refused():
    with pytest.raises(ValueError, match="must equal round.k"):
        coevolve_preset("tiny", round={"k": 3}, policy={"num_generations": 2, "per_device_train_batch_size": 4})


def test_tiny_generator_update_scores_two_sets_in_its_step():
    cfg = coevolve_preset("tiny")
    g = cfg.generator
    per_step = g.per_device_train_batch_size * g.gradient_accumulation_steps  # one generation per step
    assert (g.steps_per_generation or g.gradient_accumulation_steps) == g.gradient_accumulation_steps
    assert per_step == 2 * g.num_generations
    assert g.max_steps * per_step // g.num_generations <= cfg.round.n_prompts  # every group is a different set
