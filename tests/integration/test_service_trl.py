"""A real TRL ``GRPOTrainer`` trains against a running ``dr serve``: the service on the embedded default (no engines
file: the tiny preset's models on in-process vLLM, SmolLM2-135M generator and Qwen2.5-Coder-0.5B verifier; its log
has none of the known noise and says so in one models line), the trainer a tiny random Llama
(tests/support/fixtures_grpo.py) whose reward function is ``dr_core.service.clients.DynamicRubricReward``: each step's
groups go to /v1/score-set as whole sets, and the rewards the trainer logs are the service's answers.
"""

from __future__ import annotations

import json

import pytest

from dr_core.store.artifacts import Store
from tests.support.noise import assert_quiet, user_env
from tests.support.serve_proc import ServeProcess

pytestmark = [pytest.mark.slow]

PROMPTS = [
    "Give one tip for sleeping better.",
    "Name a healthy breakfast.",
    "How do I boil an egg?",
    "Suggest a name for a cat.",
]


def test_trl_grpo_trains_two_steps_on_rewards_from_dr_serve(default_model_dir, tiny_llama_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from dr_core.service.clients import DynamicRubricReward

    store = tmp_path / "store"
    served = ServeProcess(tmp_path, store=store, ready_timeout=600, env={"OMP_NUM_THREADS": "1"})
    served.env = user_env() | {"OMP_NUM_THREADS": "1"}  # the log a user gets (tests/support/noise.py)
    with served as srv:
        reward = DynamicRubricReward(srv.url, run_tag="trl-test")
        tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        rows = [{"prompt": p, "group_id": f"prompt-{i}"} for i, p in enumerate(PROMPTS)]
        # 2 prompts x 4 completions a step: the reward call sends its 2 groups concurrently, as 2 whole sets
        args = GRPOConfig(
            output_dir=str(tmp_path / "ckpt"),
            max_steps=2,
            num_generations=4,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=1,
            max_completion_length=12,
            learning_rate=1e-3,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
            dataloader_pin_memory=False,
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows), processing_class=tok
        )
        trainer.train()
        with srv.client() as c:
            metrics = c.get("/metrics").text
    assert_quiet(srv.logs(), "models: preset tiny — generator smollm2-135m-instruct, verifier qwen2.5-coder-0.5b")
    assert trainer.state.global_step == 2
    # every reward call sent whole groups and got the service's scores back
    assert len(reward.history) == 2 and all(h["groups"] == 2 and h["completions"] == 8 for h in reward.history)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    req = Store.from_url(str(store)).read_table("requests", run_id="service", round=0).to_pylist()
    assert len(req) == 4 and {r["route"] for r in req} == {"score-set"}
    # TRL's logged mean reward per step is the mean of what the service answered that step (None left out)
    by_step: dict[str, list] = {}
    for r in req:
        by_step.setdefault(r["request_id"].split("-")[2], []).extend(json.loads(r["answer_json"])["scores"])
    served = [[x for x in by_step[f"s{step}"] if x is not None] for step in (0, 1)]
    for h, scores in zip(logged, served):
        assert (
            h["reward"] == pytest.approx(sum(scores) / len(scores), abs=1e-4) if scores else h["reward"] != h["reward"]
        )
    assert 'dr_requests_total{route="/v1/score-set",status="200"} 4' in metrics
    moved = any((before[k] != v).any() for k, v in trainer.model.state_dict().items())
    if any(h["reward_std"] > 0 for h in logged):
        assert moved  # a group whose rewards differ gives an advantage, and the weights move
    else:
        # every group's rewards were equal (the random policy writes token soup the verifier judges alike): zero
        # advantage, beta 0, so the update had no gradient and the weights must not have moved
        assert not moved and all(h["grad_norm"] == 0 for h in logged)
