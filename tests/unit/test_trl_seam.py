"""The TRL seam (``dr_core.train.trl_seam``): each TRL method the trainer overrides or calls still takes the
parameters it was written against, the installed TRL passes the check, and another TRL version or a changed
parameter list is refused with one line naming it. No model is loaded."""

from __future__ import annotations

import pytest

from dr_core.errors import DRError
from dr_core.train import trainer, trl_seam
from dr_core.train.trl_seam import SEAMS, SUPPORTED_TRL, TrainerSeamError, check_trl_seam

trl = pytest.importorskip("trl")
GRPOTrainer = trl.GRPOTrainer


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.method)
def test_the_installed_trl_method_takes_the_recorded_parameters(seam):
    assert trl_seam.parameters(GRPOTrainer, seam.method) == seam.params
    assert getattr(GRPOTrainer, seam.method).__qualname__ == seam.name  # and is still defined where recorded


def test_the_table_lists_every_method_the_trainer_overrides():
    overrides = {n for n in vars(trainer._Recording) if not n.startswith("__") and hasattr(GRPOTrainer, n)}
    assert overrides == {s.method for s in SEAMS if s.use == "overrides"}


def test_the_installed_trl_passes_and_the_trainer_class_is_built():
    assert trl.__version__ in SUPPORTED_TRL
    check_trl_seam(trainer.added_names())
    assert issubclass(trainer.grpo_trainer_class(), GRPOTrainer)


def test_another_trl_version_is_refused_in_one_line(monkeypatch):
    monkeypatch.delenv(trl_seam.ALLOW_ENV, raising=False)
    monkeypatch.setattr(trl, "__version__", "9.9.9")
    with pytest.raises(TrainerSeamError) as caught:
        trainer.grpo_trainer_class()
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, DRError)
    assert "TRL 9.9.9 is not supported" in message and "trl==1.16.0" in message
    assert "GRPOTrainer._generate_and_score_completions" in message and f"{trl_seam.ALLOW_ENV}=1" in message


def test_the_env_override_tries_another_version_but_still_checks_parameters(monkeypatch):
    monkeypatch.setattr(trl, "__version__", "9.9.9")
    monkeypatch.setenv(trl_seam.ALLOW_ENV, "1")
    check_trl_seam()

    def changed(self, inputs, extra):
        return {}

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", changed)
    with pytest.raises(TrainerSeamError, match=r"TRL 9\.9\.9's GRPOTrainer\._generate_and_score_completions takes"):
        check_trl_seam()


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.method)
def test_a_changed_parameter_list_is_refused_naming_the_method(monkeypatch, seam):
    def changed(self, renamed, *args, **kwargs):
        return None

    monkeypatch.setattr(GRPOTrainer, seam.method, changed)
    with pytest.raises(TrainerSeamError) as caught:
        trainer.grpo_trainer_class()
    message = str(caught.value)
    assert "\n" not in message
    assert f"GRPOTrainer.{seam.method} takes (self, renamed, args, kwargs)" in message
    assert f"({', '.join(seam.params)}) of TRL 1.16.0" in message


def test_a_removed_method_is_refused_naming_it(monkeypatch):
    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    with pytest.raises(TrainerSeamError, match="GRPOTrainer has no _generate_and_score_completions"):
        check_trl_seam()


def test_a_trl_attribute_the_trainer_would_shadow_is_refused(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "dr_advantages", [], raising=False)
    with pytest.raises(TrainerSeamError, match="GRPOTrainer now has dr_advantages"):
        trainer.grpo_trainer_class()


def test_the_settings_passed_by_name_are_grpo_config_arguments_with_their_values(tmp_path):
    """``trainer.PASSED_TO_GRPO_CONFIG``: each name is a GRPOSettings field and a GRPOConfig argument, and the built
    config carries the settings' value for each."""
    import dataclasses

    from dr_core.config.training import GRPOSettings

    config_fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    for name in trainer.PASSED_TO_GRPO_CONFIG:
        assert name in GRPOSettings.model_fields and name in config_fields, name
    settings = GRPOSettings(learning_rate=3e-5, max_steps=7, seed=11, save_steps=5, bf16=False, steps_per_generation=2)
    config = trainer.grpo_config(settings, tmp_path, "group")
    for name in trainer.PASSED_TO_GRPO_CONFIG:
        if getattr(settings, name) is not None:  # None: TRL's own default (steps_per_generation: the accumulation)
            assert getattr(config, name) == getattr(settings, name), name
    assert config.output_dir == str(tmp_path) and config.scale_rewards == "group"
