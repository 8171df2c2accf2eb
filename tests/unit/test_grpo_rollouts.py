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


def test_a_small_update_over_a_bf16_base_reaches_the_rollout_engine_whole(tmp_path, monkeypatch):
    """A LoRA update's trainer holds the frozen linears in bf16 (dr_core/train/lora.py). What the rollout engine is
    given is the float32 base read from the checkpoint plus the update, and the engine is float32 whatever the
    trainer's precision: so its weights move by exactly the update. (The trainer's bf16 base plus the delta moved a
    1e-5 update's weights by 3 % of it in a bf16 engine: infra/benchmarks/bench_rollout_sync.py.)"""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from dr_core.config.training import GRPOSettings
    from dr_core.train import rollouts
    from dr_core.train.lora import bf16_linears

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    model = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    bf16_linears(model)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    layers = rollouts._lora_layers(model)
    with torch.no_grad():  # an update of 1e-5 per entry, far below bf16's resolution of these weights
        for layer in layers.values():
            layer.lora_B["default"].weight.mul_(1e-5 / float(layer.get_delta_weight("default").pow(2).mean().sqrt()))
    base = rollouts.BaseWeights(str(tmp_path))
    with torch.no_grad():
        synced = dict(rollouts.named_weights(model, base))
        old = dict(rollouts.named_weights(model))  # the trainer's bf16 base + delta, as the sync used to send it
        dot = dd = 0.0
        for name, layer in layers.items():
            hf = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            delta = layer.get_delta_weight("default")
            assert torch.equal(synced[hf], base.get(hf) + delta), hf
            moved = old[hf].bfloat16().float() - base.get(hf).bfloat16().float()  # in a bf16 engine
            dot += float((moved * delta).sum())
            dd += float((delta * delta).sum())
    assert dot / dd < 0.5  # the old sync kept less than half of the update (3 % at this size, measured on SmolLM2)
    seen = {}

    def fake_engine(config):
        seen["config"] = config
        return object()

    monkeypatch.setattr("dr_core.engines.make_engine", fake_engine)

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [1] * len(text)

    settings = GRPOSettings(num_generations=2, per_device_train_batch_size=2, bf16=True, rollouts="vllm")
    r = rollouts.vllm_rollouts(str(tmp_path), ["a prompt"], Tok(), settings)
    assert seen["config"].dtype == "float32" and isinstance(r.base, rollouts.BaseWeights)


def test_a_primed_conversation_renders_as_the_generators_grpo_prompt(default_model_dir):
    """The in-process engine continues a final assistant message (a primer): the tokens it sees are exactly the
    generator update's rollout prompt, the chat template's opened turn plus the primer (grpo.generator_dataset), so
    the policy reward asks G(t) in the form it was trained on."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from dr_core.config.training import GRPOSettings
    from dr_core.engines.vllm_engine import VLLMEngine
    from dr_core.rubric import prompts
    from dr_core.train.grpo import GeneratorRow, generator_dataset

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    row = GeneratorRow(0, "Name a fruit.", ("apple", "pear"), ("apple", "rock"))
    settings = GRPOSettings(num_generations=2, per_device_train_batch_size=2, seed=0)
    (trained,) = generator_dataset([row], settings, tok)
    order = [1, 0] if trained["prompt"].index("pear") < trained["prompt"].index("apple") else [0, 1]
    conv = prompts.dynamic_generator_messages(row.prompt, [row.candidates[k] for k in order], answer="lines")
    conv += [{"role": "assistant", "content": prompts.LINES_ROLLOUT_PREFIX}]
    engine = SimpleNamespace(tokenizer=tok)
    assert VLLMEngine.render(engine, conv) == tok.encode(trained["prompt"], add_special_tokens=False)
