"""The shipped presets: the tiny preset's role assignment (measured, docs/benchmarks/evaluator.md) and
the policy update's whole groups when round.k is overridden."""

import pytest

from dr_core.config import coevolve_preset, preset
from dr_core.model import is_bundled


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


def test_the_presets_numerics_follow_the_hardware(monkeypatch):
    """``auto`` (engines' dtype, training's bf16) is resolved when a preset is built: bf16 where the machine has bf16
    arithmetic, float32 elsewhere; the paper preset asks for bf16 explicitly (GPUs), whatever the machine."""
    from dr_core.config import numerics
    from dr_core.config.training import GRPOSettings

    for native, dtype in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(numerics, "bf16_reason", lambda native=native: (native, "test"))
        cfg = coevolve_preset("tiny")
        assert {getattr(cfg.round.engines, r).dtype for r in ("generator", "verifier", "policy")} == {dtype}
        # the same KV-cache tokens in either dtype: bf16 takes half the bytes per token
        assert {getattr(cfg.round.engines, r).kv_cache_gib for r in ("generator", "verifier", "policy")} == {
            0.25 if native else 0.5
        }
        assert cfg.generator.bf16 is native and cfg.policy.bf16 is native
        assert GRPOSettings().bf16 is native and GRPOSettings(bf16=False).bf16 is False
        paper = coevolve_preset("paper")
        assert paper.round.engines.verifier.dtype == "bfloat16" and paper.generator.bf16 is True
        line = numerics.describe(cfg.round.engines, {"generator": cfg.generator, "policy": cfg.policy})
        assert line.startswith(
            f"numerics: engines {dtype}, training "
            f"{'bf16 mixed precision' if native else 'float32'} (auto here is {dtype}: test)"
        )
    from dr_core.config import EngineConfig, EnginesConfig

    mixed = EnginesConfig(
        generator=EngineConfig(dtype="bfloat16"),
        verifier=EngineConfig(dtype="float32"),
        policy=EngineConfig(kind="openai_http", base_url="http://127.0.0.1:1/v1"),
    )
    line = numerics.describe(mixed, {"generator": GRPOSettings(bf16=True), "policy": GRPOSettings(bf16=False)})
    assert line.startswith(
        "numerics: engines generator bfloat16, verifier float32, training generator bf16 mixed "
        "precision, policy float32 (auto here is"
    )  # a remote engine's dtype is the server's
