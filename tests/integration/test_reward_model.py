"""Scalar reward-model baseline on a tiny random LlamaForSequenceClassification (num_labels=1) saved with the
default model's tokenizer: scores come out one per candidate, the "w/ responses" input differs, the command writes
metrics, and a checkpoint that is not a scalar reward model is refused."""

import json

import pytest
from typer.testing import CliRunner

from cli.app import app
from dr_core.evals.reward_model import RewardModel, RewardModelError, score_items, score_metrics
from dr_core.rubric import prompts


def _tiny(default_model_dir, path, num_labels=1):
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        num_labels=num_labels,
        pad_token_id=tok.pad_token_id or tok.eos_token_id,
    )
    LlamaForSequenceClassification(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_rm(default_model_dir, tmp_path_factory):
    return _tiny(default_model_dir, tmp_path_factory.mktemp("rm") / "tiny-rm")


def test_scores_one_float_per_candidate_and_the_set_changes_the_input(tiny_rm):
    from dr_core.evaluator.items import EvalItem

    rm = RewardModel(tiny_rm, batch_size=2)
    items = [EvalItem("Say hi.", ("Hi!", "Go away.")), EvalItem("2+2?", ("4", "5", "four, since 2+2=4"))]
    alone = score_items(rm, items)
    again = score_items(rm, items)
    with_set = score_items(rm, items, with_responses=True)
    assert [len(s) for s in alone] == [2, 3] and all(isinstance(x, float) for s in alone for x in s)
    flat = [x for s in alone for x in s]
    assert [x for s in again for x in s] == pytest.approx(flat)  # deterministic (eval mode)
    assert with_set[0] != pytest.approx(alone[0])  # the candidate set is in the input
    # padding does not change a score: a batch of one gives the same as the padded batch
    single = RewardModel(tiny_rm, batch_size=1)
    assert [x for s in score_items(single, items) for x in s] == pytest.approx(flat, abs=1e-4)


def test_messages_with_and_without_the_response_set():
    plain = prompts.reward_model_messages("Q", "R")
    assert plain == [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "R"}]
    both = prompts.reward_model_messages("Q", "R", ["R", "S"])
    assert "[RESPONSE 2]\nS" in both[0]["content"] and both[1]["content"] == "R"


def test_score_metrics_strict():
    m = score_metrics("pairwise", [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]], [[1, 0]] * 3)
    assert m["accuracy"] == pytest.approx(1 / 3) and m["ties"] == pytest.approx(1 / 3)
    m = score_metrics("listwise", [[2.0, 1.0, 0.0]], [[1, 0, 0]])
    assert m["accuracy"] == 1 and m["ndcg"] == pytest.approx(1.0)


def test_not_a_scalar_reward_model_is_refused(default_model_dir, tmp_path):
    with pytest.raises(RewardModelError, match="num_labels=2"):
        RewardModel(_tiny(default_model_dir, tmp_path / "two", num_labels=2))
    with pytest.raises(RewardModelError, match="config.json"):
        RewardModel(tmp_path)


def test_eval_evaluator_reward_model_mode(tiny_rm, tmp_path):
    from dr_core.paths import bundled

    runner = CliRunner()
    for extra, mode in (([], "reward-model"), (["--with-responses"], "reward-model-with-responses")):
        out = tmp_path / f"{mode}.json"
        res = runner.invoke(
            app,
            [
                "eval-evaluator",
                str(bundled("eval_hh_harmless_pairs.jsonl")),
                "--format",
                "pairwise",
                "--limit",
                "3",
                "--mode",
                "reward-model",
                "--reward-model",
                str(tiny_rm),
                *extra,
                "--output",
                str(out),
            ],
        )
        assert res.exit_code == 0, res.output
        m = json.loads(out.read_text())
        assert m["mode"] == mode and m["n"] == 3 and len(m["scores"]) == 3
        # strict pairwise accuracy and ties of the scores it reports (candidate 0 is the chosen one)
        assert m["accuracy"] == pytest.approx(sum(c > r for c, r in m["scores"]) / 3)
        assert m["ties"] == pytest.approx(sum(c == r for c, r in m["scores"]) / 3)
    res = runner.invoke(
        app,
        [
            "eval-evaluator",
            str(bundled("eval_hh_harmless_pairs.jsonl")),
            "--format",
            "pairwise",
            "--mode",
            "reward-model",
            "--output",
            str(tmp_path / "x.json"),
        ],
    )
    assert res.exit_code == 2 and "--reward-model DIR" in res.output
