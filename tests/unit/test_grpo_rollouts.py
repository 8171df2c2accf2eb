"""GRPO rollouts on an in-process vLLM engine (dr_core/train/rollouts.py), on the real default model: after a weight
sync the engine samples the trainer's model (the same greedy tokens and log-probabilities as transformers); and
a LoRA model's sync gives the engine exactly the merged model (the engine's outputs equal those of an engine
loaded from the merged checkpoint); and how TRL's ``rollout_func`` calls are turned into requests and syncs (pure
logic, a fake engine). The tiny preset's
training with these rollouts runs end to end in tests/integration/test_quiet_log.py."""

from __future__ import annotations

from dr_core.train.rollouts import run_lengths

PROMPTS = [[{"role": "user", "content": "Name three colours."}], [{"role": "user", "content": "What is 2 + 2?"}]]


def test_run_lengths():
    assert run_lengths([]) == []
    assert run_lengths(["a", "a", "b", "a"]) == [(0, 2), (2, 1), (3, 1)]


def test_rollouts_sync_once_per_new_step_and_send_each_prompt_once():
    """``VLLMRollouts`` as TRL drives it: each prompt repeated G times becomes one request with n = G; the trainer's
    weights go to the engine only when the optimiser step changed since the last sync (the engine starts with the
    base weights, step 0); the outputs line up with TRL's repeated prompts."""
    from types import SimpleNamespace

    import torch

    from dr_core.train.rollouts import VLLMRollouts

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [ord(ch) for ch in text]

    class Engine:
        def __init__(self):
            self.requests, self.loads = [], []

        def sample_ids(self, prompts, counts, **kw):
            self.requests.append((prompts, counts, kw))
            return [[([p[0], 100 + j], [-0.5, -0.25]) for j in range(n)] for p, n in zip(prompts, counts)]

        def load_weights(self, named):
            self.loads.append(dict(named))

    model = torch.nn.Linear(2, 2)
    state = SimpleNamespace(global_step=0)
    trainer = SimpleNamespace(
        model=model,
        state=state,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        args=SimpleNamespace(
            temperature=0.9, max_completion_length=7, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0
        ),
    )
    engine = Engine()
    r = VLLMRollouts(engine, Tok(), seed=3)
    out = r(["ab", "ab", "cd", "cd"], trainer)
    assert engine.loads == []  # step 0: the engine already has the base weights
    prompts, counts, kw = engine.requests[0]
    assert prompts == [[97, 98], [99, 100]] and counts == [2, 2]
    assert kw["temperature"] == 0.9 and kw["max_tokens"] == 7 and kw["seed"] == 3
    assert out["prompt_ids"] == [[97, 98]] * 2 + [[99, 100]] * 2
    assert out["completion_ids"] == [[97, 100], [97, 101], [99, 100], [99, 101]]
    assert len(out["logprobs"]) == 4
    r(["ab", "ab"], trainer)
    assert engine.loads == []  # same step: no sync
    state.global_step = 1
    with torch.no_grad():
        model.weight.add_(1.0)
    r(["ab", "ab"], trainer)
    assert len(engine.loads) == 1 and set(engine.loads[0]) == {"weight", "bias"}
    assert torch.equal(engine.loads[0]["weight"], model.weight) and engine.requests[-1][2]["seed"] == 4
    assert r.syncs == 1
