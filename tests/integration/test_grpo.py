"""The integration half of tests/unit/test_grpo.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dr_core.constants import COMPLETE_MARKER
from dr_core.rubric.schema import Rubric, RubricItem
from dr_core.scoring.equations import (
    combined_advantages,
    group_advantages,
)
from dr_core.train import grpo, rewards
from dr_core.train import trainer as grpo_trainer
from dr_core.train.grpo import (
    GRPOSettings,
    PolicyRow,
)
from tests.unit.test_grpo import (
    GEN_ROWS,
    TINY,
    _changed,
    _rubric_json,
    _train_until_a_crash_at_the_third_step,
    _weights,
    fake_engine,
)


@pytest.mark.slow
def test_train_policy_moves_weights_with_whole_groups_and_eq_21_advantages(tiny_llama_dir, tmp_path):
    rows = [PolicyRow(i, f"p{i}", q) for i, q in enumerate(["Name a fruit.", "Say hi.", "Count to 3.", "Why?"])]
    records = []
    result = grpo.train_policy(
        tiny_llama_dir,
        rows,
        fake_engine(_rubric_json(("a", 1), ("e", 2), ("o", 3))),
        fake_engine(),
        GRPOSettings(**TINY),
        tmp_path / "policy",
        on_rollouts=records.extend,
    )
    assert result.steps == 2 and result.resumed_from is None
    final = tmp_path / "policy" / "final"
    assert result.checkpoint == str(final) and (final / COMPLETE_MARKER).is_file()
    assert (final / "tokenizer_config.json").is_file()
    assert _changed(_weights(tiny_llama_dir), _weights(final))
    # every reward call saw whole groups of K=2, each with one group id
    by_call = {}
    for r in records:
        by_call.setdefault(r["step"], []).append(r)
    for recs in by_call.values():
        ids = [r["group_id"] for r in recs]
        assert ids[0::2] == ids[1::2] and [r["rollout"] for r in recs] == [0, 1] * (len(recs) // 2)
    # TRL's advantages (scale_rewards="group") are Eq. 21 on our scores
    scores = [r["score"] for r in records]
    trl = [a for call in result.trl_advantages for a in call]
    np.testing.assert_allclose(trl, group_advantages(scores, 2), atol=1e-4)
    assert result.step_seconds and result.reward_first is not None and len(result.history) == 2
    # a second call finds the finished model and does not train again
    again = grpo.train_policy(
        tiny_llama_dir, rows, fake_engine(), fake_engine(), GRPOSettings(**TINY), tmp_path / "policy"
    )
    assert again.checkpoint == result.checkpoint and again.steps == 2 and len(again.history) == 2


@pytest.mark.slow
def test_train_generator_hands_eq_24_25_advantages_to_trl(tiny_llama_dir, tmp_path, monkeypatch):
    # A random model writes no rubric: map each rollout text to a pseudo-random rubric so rewards vary.
    def fake_parse(text, truncated=False):
        h = hashlib.md5(text.encode()).digest()
        return Rubric((RubricItem(f"criterion {h[0] % 5}", 1 + h[1] % 5), RubricItem(f"other {h[2] % 3}", 2)))

    monkeypatch.setattr(rewards, "parse_rollout", fake_parse)  # GeneratorReward looks it up there
    records = []
    result = grpo.train_generator(
        tiny_llama_dir,
        GEN_ROWS,
        fake_engine(),
        GRPOSettings(**TINY, lam=0.5),
        tmp_path / "gen",
        on_rollouts=records.extend,
    )
    assert result.steps == 2
    r_disc = [r["r_disc"] for r in records]
    r_anchor = [r["r_anchor"] for r in records]
    ours = combined_advantages(r_disc, r_anchor, 2, 0.5)
    np.testing.assert_allclose([r["advantage"] for r in records], ours, atol=1e-12)
    trl = [a for call in result.trl_advantages for a in call]
    np.testing.assert_allclose(trl, ours, atol=1e-5)  # scale_rewards="none": TRL leaves them unchanged
    assert any(abs(a) > 0.1 for a in ours)
    assert _changed(_weights(tiny_llama_dir), _weights(tmp_path / "gen" / "final"))
    assert {"r_disc_mean", "r_anchor_mean", "unparseable", "truncated"} <= set(result.history[0])


@pytest.mark.slow
def test_a_group_of_unparseable_rollouts_gets_no_advantage(tiny_llama_dir, tmp_path):
    records = []
    result = grpo.train_generator(
        tiny_llama_dir,
        GEN_ROWS[:1] + GEN_ROWS[1:],
        fake_engine(),
        GRPOSettings(**{**TINY, "max_steps": 1, "rubric_format": "json"}),
        tmp_path / "gen",
        on_rollouts=records.extend,
    )
    # no rollout of a group parses: no scorable rollout to take the lowest reward of, so 0 for all (no gradient)
    assert records and all(r["items"] is None and r["r_disc"] == 0.0 and r["advantage"] == 0.0 for r in records)
    assert all(r["r_anchor"] == 0.0 and r["truncated"] for r in records)
    assert result.history[0]["unparseable"] == len(records)


@pytest.mark.slow
def test_training_resumes_from_its_last_checkpoint(tiny_llama_dir, tmp_path):
    rows = [PolicyRow(i, f"p{i}", q) for i, q in enumerate(["Name a fruit.", "Say hi."])]
    settings = GRPOSettings(**{**TINY, "max_steps": 3})
    gen = fake_engine(_rubric_json(("a", 1), ("e", 2)))
    _train_until_a_crash_at_the_third_step(tiny_llama_dir, rows, gen, settings, tmp_path / "p")
    assert not (tmp_path / "p" / "final").exists()
    assert grpo.last_checkpoint(tmp_path / "p" / "checkpoints").name == "checkpoint-2"
    result = grpo.train_policy(tiny_llama_dir, rows, gen, fake_engine(), settings, tmp_path / "p")
    assert result.resumed_from.endswith("checkpoint-2") and result.steps == 3
    assert [e["step"] for e in result.history] == [0, 1, 2]
    assert grpo.is_complete(tmp_path / "p" / "final")
    assert not (tmp_path / "p" / "checkpoints").exists()  # the final model is saved: resume state is dropped


@pytest.mark.slow
@pytest.mark.parametrize("bf16", [False, True])
def test_a_lora_update_resumes_and_saves_the_merged_model(tiny_llama_dir, tmp_path, bf16):
    """The tiny preset trains LoRA adapters: a crashed LoRA update resumes from its adapter checkpoint, and the final
    checkpoint is a plain float32 model (the adapter merged in, no PEFT files) whose linear layers moved and whose
    embeddings, which LoRA does not train, did not, and whose linear weights are not rounded to bf16 (bf16 mixed
    precision; the bf16 base of vLLM rollouts is tested in test_lora_bf16_base_*)."""
    from dr_core.config.numerics import native_bf16

    if bf16 and not native_bf16():
        pytest.skip("bf16 is emulated on this CPU (dr_core/config/numerics.py): its training runs in float32")
    rows = [PolicyRow(i, f"p{i}", q) for i, q in enumerate(["Name a fruit.", "Say hi."])]
    settings = GRPOSettings(**{**TINY, "max_steps": 3, "use_lora": True, "lora_r": 4, "lora_alpha": 8, "bf16": bf16})
    gen = fake_engine(_rubric_json(("a", 1), ("e", 2)))
    _train_until_a_crash_at_the_third_step(tiny_llama_dir, rows, gen, settings, tmp_path / "p")
    assert (grpo.last_checkpoint(tmp_path / "p" / "checkpoints") / "adapter_model.safetensors").is_file()
    result = grpo.train_policy(tiny_llama_dir, rows, gen, fake_engine(), settings, tmp_path / "p")
    assert result.resumed_from.endswith("checkpoint-2") and result.steps == 3
    final = tmp_path / "p" / "final"
    assert grpo.is_complete(final) and not (final / "adapter_config.json").exists()
    base, trained = _weights(tiny_llama_dir), _weights(final)
    assert trained.keys() == base.keys()
    linear = [k for k in base if k.endswith("proj.weight")]
    assert linear and _changed({k: base[k] for k in linear}, {k: trained[k] for k in linear})
    assert (trained["model.embed_tokens.weight"] == base["model.embed_tokens.weight"]).all()
    import torch
    from safetensors.torch import load_file

    stored = load_file(str(final / "model.safetensors"))
    assert {t.dtype for t in stored.values()} == {torch.float32}
    for k in linear:  # the base's float32 precision is kept: the update is small, and not a bf16 rounding
        assert (trained[k] - base[k]).abs().max() < 0.5
        assert (trained[k] != trained[k].to(torch.bfloat16).float()).float().mean() > 0.5


def test_lora_bf16_base_gives_the_same_forward_and_merges_onto_the_float32_base(tiny_llama_dir, tmp_path):
    """``dr_core.train.lora``: a LoRA model whose frozen linear weights are bf16 computes, under bf16 autocast, the
    logits of the same model with float32 linear weights (autocast casts them to bf16 for the matmul anyway), and
    ``save_merged`` writes the float32 base plus the adapters' deltas, bit for bit what PEFT merges onto the float32
    model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from dr_core.train import lora

    def peft(bf16_base: bool):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
        if bf16_base:
            assert lora.bf16_linears(model) > 0
        torch.manual_seed(0)
        return get_peft_model(
            model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
        )

    ref, ours = peft(False), peft(True)
    adapters = {n: p for n, p in ours.named_parameters() if "lora_" in n}
    with torch.no_grad():  # the same adapters on both (PEFT initialised ours in bf16 before casting them up)
        for n, p in ref.named_parameters():
            if "lora_" in n:
                p.copy_(adapters[n])
    assert not lora.has_bf16_base(ref) and lora.has_bf16_base(ours)
    assert all(p.dtype == torch.float32 for n, p in ours.named_parameters() if p.requires_grad)  # the adapters
    assert ours.get_base_model().model.embed_tokens.weight.dtype == torch.float32
    ids = torch.randint(5, 1000, (2, 16))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(ref(input_ids=ids).logits, ours(input_ids=ids).logits)
    lora.save_merged(ours, tiny_llama_dir, tmp_path / "ours")
    ref.merge_and_unload().save_pretrained(tmp_path / "ref")
    got = load_file(str(tmp_path / "ours" / "model.safetensors"))
    want = load_file(str(tmp_path / "ref" / "model.safetensors"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert {t.dtype for t in got.values()} == {torch.float32}


@pytest.mark.slow
def test_resume_checkpoints_kept_on_request(tiny_llama_dir, tmp_path):
    rows = [PolicyRow(i, f"p{i}", q) for i, q in enumerate(["Name a fruit.", "Say hi."])]
    settings = GRPOSettings(**{**TINY, "max_steps": 1, "keep_resume_checkpoints": True})
    grpo.train_policy(
        tiny_llama_dir, rows, fake_engine(_rubric_json(("a", 1))), fake_engine(), settings, tmp_path / "p"
    )
    assert grpo.is_complete(tmp_path / "p" / "final")
    assert grpo.last_checkpoint(tmp_path / "p" / "checkpoints").name == "checkpoint-1"


def test_lines_dataset_renders_the_primer_after_the_generation_prompt(tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama_dir))
    rows = grpo.generator_dataset(GEN_ROWS, GRPOSettings(num_generations=2, per_device_train_batch_size=2), tok)
    assert isinstance(rows[0]["prompt"], str) and rows[0]["prompt"].endswith("assistant\n[3] The response")
    assert "[5] The response names at least three specific examples." in rows[0]["prompt"]
    as_json = grpo.generator_dataset(
        GEN_ROWS, GRPOSettings(num_generations=2, per_device_train_batch_size=2, rubric_format="json")
    )
    assert as_json[0]["prompt"][-1]["role"] == "user"


@pytest.mark.slow
def test_first_step_without_the_reference_forward_is_the_same_update(tiny_llama_dir, tmp_path, monkeypatch):
    """At step 0 the policy is the reference, so the KL term and its gradient are 0: skipping the reference model's
    forward pass there (the default) must give the same weights as computing it, and later steps keep it."""
    import torch

    rows = [PolicyRow(i, f"p{i}", q) for i, q in enumerate(["Name a fruit.", "Say hi."])]
    settings = GRPOSettings(**{**TINY, "beta": 0.5, "max_steps": 2})
    trainers = []
    cls = grpo_trainer.grpo_trainer_class

    def recording(skip):
        def make():
            base = cls()

            class T(base):
                dr_skip_ref_at_start = skip

                def __init__(self, *a, **k):
                    super().__init__(*a, **k)
                    trainers.append(self)

            return T

        return make

    out = {}
    for skip in (True, False):
        monkeypatch.setattr(grpo_trainer, "grpo_trainer_class", recording(skip))
        torch.manual_seed(0)
        grpo.train_policy(
            tiny_llama_dir,
            rows,
            fake_engine(_rubric_json(("a", 1), ("e", 2))),
            fake_engine(),
            settings,
            tmp_path / f"p{skip}",
        )
        out[skip] = _weights(tmp_path / f"p{skip}" / "final")
    skipped, computed = trainers
    assert skipped.dr_ref_forwards_skipped == 1 and computed.dr_ref_forwards_skipped == 0  # step 0 only
    assert skipped.beta == computed.beta == 0.5  # restored after the first step
    assert _changed(_weights(tiny_llama_dir), out[True])
    for k in out[True]:
        torch.testing.assert_close(out[True][k], out[False][k], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_one_step_update_without_a_reference_model_is_the_same_update(tiny_llama_dir, tmp_path, monkeypatch):
    """A one-step update never leaves the reference: TRL gets beta = 0 (no reference model loaded), and the weights
    equal those of the same update computed with the reference model and the configured beta."""
    import torch

    rows = [PolicyRow(i, f"p{i}", q) for i, q in enumerate(["Name a fruit.", "Say hi."])]
    settings = GRPOSettings(**{**TINY, "beta": 0.5, "max_steps": 1})
    assert grpo_trainer.effective_beta(settings) == 0.0
    assert grpo_trainer.effective_beta(settings.model_copy(update={"max_steps": 2})) == 0.5
    grpo.train_policy(
        tiny_llama_dir, rows, fake_engine(_rubric_json(("a", 1), ("e", 2))), fake_engine(), settings, tmp_path / "fast"
    )
    cls = grpo_trainer.grpo_trainer_class

    def with_reference():
        class T(cls()):
            dr_skip_ref_at_start = False

        return T

    monkeypatch.setattr(grpo_trainer, "effective_beta", lambda s: s.beta)
    monkeypatch.setattr(grpo_trainer, "grpo_trainer_class", with_reference)
    grpo.train_policy(
        tiny_llama_dir, rows, fake_engine(_rubric_json(("a", 1), ("e", 2))), fake_engine(), settings, tmp_path / "full"
    )
    fast, full = _weights(tmp_path / "fast" / "final"), _weights(tmp_path / "full" / "final")
    assert _changed(_weights(tiny_llama_dir), fast)
    for k in fast:
        torch.testing.assert_close(fast[k], full[k], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("bf16", [False, True])
def test_completion_only_log_probs_equal_trls_fused_head(tiny_llama_dir, tmp_path, bf16):
    """On one CPU process the trainer scores only the completion positions
    (``dr_core.train.logprobs.completion_logps``) instead of TRL's fused LM head over every position: the same
    log-probabilities, entropies and gradient as TRL's own method, in
    float32 and under bf16 autocast (where the head runs in float32 on both sides), with padding and a
    ``batch_size`` that splits the batch."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from dr_core.train import logprobs

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        num_generations=2,
        per_device_train_batch_size=2,
        max_steps=1,
        bf16=bf16,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        dataloader_pin_memory=False,
        temperature=0.7,
    )
    trainer = grpo_trainer.grpo_trainer_class()(
        model=AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32),
        args=args,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        train_dataset=Dataset.from_list([{"prompt": "hi"}]),
        processing_class=tok,
    )
    assert logprobs.completion_only_head(trainer, torch.zeros(1, dtype=torch.long), False, {"pixel_values": None})
    torch.manual_seed(0)
    ids = torch.randint(5, len(tok) - 1, (3, 20))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # a left-padded prompt
    mask[1, -3:] = 0  # a completion padded on the right

    def run(method):
        trainer.model.zero_grad(set_to_none=True)
        logps, ent, _ = method(trainer, trainer.model, ids, mask, 7, batch_size=2, compute_entropy=True)
        logps.sum().backward()
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        return logps.detach(), ent.detach(), grad

    ours = run(type(trainer)._get_per_token_logps_and_entropies)
    theirs = run(GRPOTrainer._get_per_token_logps_and_entropies)
    assert ours[0].shape == theirs[0].shape == (3, 7)
    keep = mask[:, -7:].bool()
    tol = 2e-2 if bf16 else 1e-4  # bf16: the two backbones round alike; only summation order differs
    torch.testing.assert_close(ours[0][keep], theirs[0][keep], atol=tol, rtol=0)
    torch.testing.assert_close(ours[1][keep], theirs[1][keep], atol=tol, rtol=0)
    assert torch.nn.functional.cosine_similarity(ours[2], theirs[2], dim=0) > (0.999 if bf16 else 0.99999)
