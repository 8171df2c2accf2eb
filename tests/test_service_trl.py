"""A real TRL ``GRPOTrainer`` trains against a running ``dr serve``: the service on the embedded default (no engines
file: the bundled SmolLM2-135M on in-process vLLM for generator and verifier), the trainer a tiny random Llama
(tests/fixtures_grpo.py) whose reward function is ``dr_core.service.clients.DynamicRubricReward``: each step's
groups go to /v1/score-set as whole sets, and the rewards the trainer logs are the service's answers.
"""

from __future__ import annotations

import json

import pytest

from dr_core.store.artifacts import Store
from tests.serve_proc import ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PROMPTS = ["Give one tip for sleeping better.", "Name a healthy breakfast.", "How do I boil an egg?",
           "Suggest a name for a cat."]


def test_trl_grpo_trains_two_steps_on_rewards_from_dr_serve(default_model_dir, tiny_llama_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from dr_core.service.clients import DynamicRubricReward

    store = tmp_path / "store"
    with ServeProcess(tmp_path, store=store, ready_timeout=600, env={"OMP_NUM_THREADS": "1"}) as srv:
        reward = DynamicRubricReward(srv.url, run_tag="trl-test")
        tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        rows = [{"prompt": p, "group_id": f"prompt-{i}"} for i, p in enumerate(PROMPTS[:2])] * 2
        args = GRPOConfig(output_dir=str(tmp_path / "ckpt"), max_steps=2, num_generations=2,
                          per_device_train_batch_size=2, gradient_accumulation_steps=1, max_completion_length=12,
                          learning_rate=1e-3, beta=0.0, logging_steps=1, save_strategy="no", report_to="none",
                          disable_tqdm=True, use_cpu=True, dataloader_pin_memory=False, seed=0)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
                              processing_class=tok)
        trainer.train()
        with srv.client() as c:
            metrics = c.get("/metrics").text
    assert trainer.state.global_step == 2
    # every reward call sent whole groups and got the service's scores back
    assert len(reward.history) == 2 and all(h["groups"] == 1 and h["completions"] == 2 for h in reward.history)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    req = Store.from_url(str(store)).read_table("requests", run_id="service", round=0).to_pylist()
    assert len(req) == 2 and {r["route"] for r in req} == {"score-set"}
    served_scores = [s for r in req for s in json.loads(r["answer_json"])["scores"]]
    scorable = [s for s in served_scores if s is not None]
    if scorable:  # TRL's logged mean reward is the mean of what the service answered (None left out)
        assert [h["reward"] for h in logged] == pytest.approx(
            [sum(x for x in json.loads(r["answer_json"])["scores"] if x is not None)
             / max(1, sum(x is not None for x in json.loads(r["answer_json"])["scores"])) for r in req], abs=1e-5)
    assert 'dr_requests_total{route="/v1/score-set",status="200"} 2' in metrics
    if any(h.get("reward_std", 0) > 0 for h in logged):
        assert any((before[k] != v).any() for k, v in trainer.model.state_dict().items())
