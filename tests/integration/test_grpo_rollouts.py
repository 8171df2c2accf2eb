"""The integration half of tests/unit/test_grpo_rollouts.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import math

import pytest

from dr_core.train.rollouts import named_weights, prompt_ids
from tests.unit.test_grpo_rollouts import PROMPTS


@pytest.mark.slow
def test_engine_samples_the_trainer_weights_after_a_sync(default_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dr_core.config import EngineConfig
    from dr_core.engines.vllm_engine import VLLMEngine

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    ids = [prompt_ids(tok, p) for p in PROMPTS]

    def hf_greedy(n_tokens=12):
        out = []
        for p in ids:
            x = torch.tensor([p])
            with torch.no_grad():
                g = model.generate(
                    x,
                    max_new_tokens=n_tokens,
                    do_sample=False,
                    output_scores=True,
                    return_dict_in_generate=True,
                    pad_token_id=tok.eos_token_id,
                )
            new = g.sequences[0, len(p) :].tolist()
            first_lp = torch.log_softmax(g.scores[0][0], -1)[new[0]].item()
            out.append((new, first_lp))
        return out

    # float32 on purpose: the engine is compared with transformers' float32 greedy tokens (bf16 rounding would let a
    # near-tie pick another token); the bf16 engine is compared with a bf16 engine in the LoRA test below
    engine = VLLMEngine(
        EngineConfig(model=str(default_model_dir), dtype="float32", max_model_len=512, kv_cache_gib=0.25)
    )
    try:

        def vllm_greedy(n_tokens=12):
            res = engine.sample_ids(ids, [1, 1], temperature=0.0, max_tokens=n_tokens)
            return [(c, lps[0]) for [(c, lps)] in res]

        before = vllm_greedy()
        base = hf_greedy()
        assert [c for c, _ in before] == [c for c, _ in base]  # same model, same greedy tokens
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():  # a different model: every weight moved by noise of 20 % of its spread
            for _, p in model.named_parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.2 * p.std())
        trained = hf_greedy()
        assert [c for c, _ in trained] != [c for c, _ in before], "the perturbation did not change the outputs"
        engine.load_weights(named_weights(model))
        after = vllm_greedy()
        assert [c for c, _ in after] == [c for c, _ in trained]
        for (_, lp_v), (_, lp_h) in zip(after, trained):
            assert math.isclose(lp_v, lp_h, abs_tol=2e-3), (lp_v, lp_h)
    finally:
        engine.close()


@pytest.mark.slow
def test_a_lora_sync_gives_the_engine_the_merged_model(default_model_dir, tmp_path):
    """What the rollout engine gets from ``VLLMRollouts.sync`` of a PEFT model is the merged model, and the trainer's
    model is left exactly as it was: the synced tensors equal ``merge_and_unload()``'s bit for bit, and the engine's
    greedy tokens and log-probabilities equal those of a new engine loaded from the merged checkpoint, in the
    machine's dtype (bf16 here: both engines round the same float32 weights). The adapter is random (B not zero), so
    the merged model differs from the base."""
    from types import SimpleNamespace

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dr_core.config import EngineConfig
    from dr_core.engines.vllm_engine import VLLMEngine
    from dr_core.train.rollouts import VLLMRollouts, named_weights

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    ids = [prompt_ids(tok, p) for p in PROMPTS]
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False),
    )
    adapter = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    base_weight = model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight.detach().clone()

    def greedy(engine):
        return [(c, lps) for [(c, lps)] in engine.sample_ids(ids, [1, 1], temperature=0.0, max_tokens=12)]

    rollout_engine = VLLMEngine(EngineConfig(model=str(default_model_dir), max_model_len=512, kv_cache_gib=0.25))
    try:
        before = greedy(rollout_engine)
        trainer = SimpleNamespace(
            model=model, state=SimpleNamespace(global_step=1), accelerator=SimpleNamespace(unwrap_model=lambda m: m)
        )
        VLLMRollouts(rollout_engine, tok, seed=0).sync(trainer)
        synced = greedy(rollout_engine)
    finally:
        rollout_engine.close()
    # the sync left the trainer's model as it was: adapter unmerged, base weights untouched
    assert torch.equal(model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight, base_weight)
    assert all(torch.equal(p, adapter[n]) for n, p in model.named_parameters() if "lora_" in n)
    synced_tensors = dict(named_weights(model))
    merged = model.merge_and_unload()
    reference_tensors = merged.state_dict()
    assert synced_tensors.keys() <= reference_tensors.keys()
    assert all(torch.equal(t, reference_tensors[n]) for n, t in synced_tensors.items())
    merged_dir = tmp_path / "merged"
    merged.save_pretrained(merged_dir)
    tok.save_pretrained(merged_dir)
    fresh = VLLMEngine(EngineConfig(model=str(merged_dir), max_model_len=512, kv_cache_gib=0.25))
    try:
        assert fresh.config.dtype == rollout_engine.config.dtype
        reference = greedy(fresh)
    finally:
        fresh.close()
    assert [c for c, _ in synced] != [c for c, _ in before], "the random adapter did not change the outputs"
    assert synced == reference
