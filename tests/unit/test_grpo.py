"""GRPO training glue: whole-group checks, the generator's Eq. 24-25 reward, the policy's Eq. 12 reward with
unscorable rollouts, and real (tiny) TRL training: weights move, TRL's advantages equal ours, checkpoints resume.

Fakes stand in for the generator/verifier engines; the model is a tiny random Llama with the real tokenizer.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from dr_core.rubric import prompts
from dr_core.rubric.schema import Rubric
from dr_core.scoring.equations import (
    anchor_reward,
    combined_advantages,
    discriminability_reward,
    rubric_scores,
)
from dr_core.train import grpo
from dr_core.train.grpo import (
    GeneratorReward,
    GeneratorRow,
    GroupSplitError,
    GRPOSettings,
    PolicyReward,
    PolicyRow,
    anchor_all_tie,
    anchor_minimum,
    check_whole_groups,
)
from dr_core.train.rewards import yes_rate
from tests.support import fakes


def fake_engine(rubric_text: str = "") -> fakes.FakeEngine:
    """Verifier: a deterministic pseudo-random yes/no per (criterion, response). Generator: ``rubric_text``."""
    return fakes.FakeEngine(rubric_text, verdict=fakes.hashed_verdict)


def _rubric_json(*items) -> str:
    return json.dumps({"rubrics": [{"criterion": c, "weight": w} for c, w in items]})


GEN_ROWS = [
    GeneratorRow(0, "Name a fruit.", ("apple", "a pear", "rock", "banana!"), ("apple, a red fruit", "apple", "stone")),
    GeneratorRow(1, "Say hi.", ("hi", "hello there", "bye", "..."), ("Hello!", "hi", "no")),
]


# ------------------------------------------------------------------------------------------------ pure logic


def test_check_whole_groups_accepts_consecutive_groups():
    assert check_whole_groups([3, 3, 1, 1, 3, 3], 2) == [3, 1, 3]


@pytest.mark.parametrize("ids", [[0, 0, 0], [0, 1, 1, 1], [0, 0, 1, 0], []])
def test_check_whole_groups_rejects_split_or_incomplete(ids):
    with pytest.raises(GroupSplitError, match="multiple of num_generations"):
        check_whole_groups(ids, 2)


def test_settings_refuse_batches_that_split_groups():
    with pytest.raises(ValueError, match="not a multiple of num_generations"):
        GRPOSettings(num_generations=4, per_device_train_batch_size=6)
    GRPOSettings(num_generations=4, per_device_train_batch_size=2, gradient_accumulation_steps=2)


def test_anchor_all_tie_is_the_no_separation_value_and_not_the_minimum():
    assert anchor_all_tie(3) == pytest.approx(anchor_reward([0.7, 0.7, 0.7]))
    assert anchor_all_tie(3) == pytest.approx(np.log(0.5) * (1 + 1 / 2 + 1 / 2))  # -1.386
    # the minimum: the best anchor scored 0, the other two 1 (about -2.32), below the all-tie value
    assert anchor_minimum(3) == pytest.approx(anchor_reward([0.0, 1.0, 1.0]))
    assert anchor_minimum(3) == pytest.approx(-2.3165, abs=1e-4) and anchor_minimum(3) < anchor_all_tie(3)
    rng = np.random.default_rng(0)
    for n in (2, 3, 5):  # no scores in [0, 1] go below it
        worst = min(anchor_reward(list(rng.uniform(0, 1, n))) for _ in range(2000))
        assert anchor_minimum(n) <= worst + 1e-12


def test_an_unparseable_rollout_gets_its_groups_lowest_rewards():
    def scored(r_disc, r_anchor):
        return (SimpleNamespace(r_disc=r_disc, r_anchor=r_anchor),)

    rows = [scored(0.2, -2.0), scored(None, None), scored(0.05, -0.5), scored(0.1, -1.0)]
    rows += [scored(None, None), scored(None, None), scored(None, None), scored(None, None)]
    r_disc, r_anchor, ok = grpo.group_floor_rewards(rows, 4)
    assert ok == [True, False, True, True] + [False] * 4
    assert r_disc[1] == 0.05 and r_anchor[1] == -2.0  # each the lowest of its group's scorable rollouts
    adv = combined_advantages(r_disc, r_anchor, 4)
    assert adv[1] <= min(adv[0], adv[2], adv[3])  # never above a rubric that misorders the anchors (r_anchor -2.0)
    assert r_disc[4:] == [0.0] * 4 and r_anchor[4:] == [0.0] * 4 and not adv[4:].any()


def test_a_cut_off_last_line_is_not_an_item():
    text = "[3] The response names a city.\n[2] The response is short.\n[4] The response menti"
    whole = grpo.parse_rollout(text)
    cut = grpo.parse_rollout(text, truncated=True)
    assert len(whole.items) == 3  # as a complete text, the cut line would be an item
    assert cut.criteria == ["The response names a city.", "The response is short."] and cut.dropped == 1
    assert grpo.parse_rollout(text + "\n", truncated=True).criteria == whole.criteria  # cut after a full line
    assert not isinstance(grpo.parse_rollout("[3] The response is", truncated=True), Rubric)


def test_generator_reward_is_eq_24_25_with_the_group_floor_for_unparseable():
    g = 4
    texts = [
        _rubric_json(("mentions apple", 3), ("is short", 1)),
        "not a rubric at all",
        "[2] says hello\n[5] is polite",
        _rubric_json(("uses a noun", 2)),
    ]
    texts += [_rubric_json(("greets", 4)), "", _rubric_json(("greets", 4), ("ends with !", 2)), "[1] x"]
    verifier = fake_engine()
    records = []
    reward = GeneratorReward(
        GEN_ROWS,
        verifier,
        GRPOSettings(num_generations=g, per_device_train_batch_size=g, rubric_format="json"),
        on_rollouts=records.extend,
    )
    comps = [[{"role": "assistant", "content": t}] for t in texts]
    out = reward(prompts=[None] * 8, completions=comps, completion_ids=[[1, 2]] * 8, group_id=[0] * 4 + [1] * 4)

    r_disc, r_anchor = [], []
    for i, t in enumerate(texts):
        row = GEN_ROWS[i // g]
        parsed = grpo.parse_rollout(t)
        if not isinstance(parsed, Rubric):
            r_disc.append(None)
            r_anchor.append(None)
            continue
        vc = [[fakes.verdict_bit(c, y) for c in parsed.criteria] for y in row.candidates]
        va = [[fakes.verdict_bit(c, y) for c in parsed.criteria] for y in row.anchors]
        r_disc.append(discriminability_reward(parsed.weights, vc))
        r_anchor.append(anchor_reward(list(rubric_scores(parsed.weights, va))))
    for values in (r_disc, r_anchor):  # an unparseable rollout: the lowest of its group's parsed ones
        for b in range(0, 8, g):
            low = min(v for v in values[b : b + g] if v is not None)
            values[b : b + g] = [low if v is None else v for v in values[b : b + g]]
    expected = combined_advantages(r_disc, r_anchor, g, 1.0)
    np.testing.assert_allclose(out, expected, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out).reshape(2, g).mean(axis=1), 0.0, atol=1e-12)

    assert [r["rollout"] for r in records] == [0, 1, 2, 3] * 2
    bad = records[1]
    assert bad["items"] is None and bad["error"] and not bad["scorable"] and bad["verdicts_C"] is None
    assert bad["r_disc"] == min(r_disc[:4]) and bad["r_anchor"] == min(r_anchor[:4])
    good = records[0]
    assert good["items"] == [("mentions apple", 3), ("is short", 1)]
    assert np.asarray(good["verdicts_C"]).shape == (4, 2) and np.asarray(good["verdicts_anchor"]).shape == (3, 2)
    assert records[0]["advantage"] == pytest.approx(expected[0])
    (entry,) = reward.history
    assert entry["unparseable"] == 2 and entry["groups"] == 2 and entry["rollouts"] == 8
    assert entry["reward_mean"] == pytest.approx(np.mean(np.asarray(r_disc) + np.asarray(r_anchor)))


def test_generator_reward_lambda_scales_the_anchor_advantage():
    texts = [_rubric_json(("mentions apple", 3)), _rubric_json(("is short", 2)), "[4] has a colour", "[1] noun"]
    comps = [[{"role": "assistant", "content": t}] for t in texts]
    outs = {}
    for lam in (0.0, 1.0, 2.0):
        reward = GeneratorReward(
            GEN_ROWS, fake_engine(), GRPOSettings(num_generations=4, per_device_train_batch_size=4, lam=lam)
        )
        outs[lam] = np.asarray(reward(completions=comps, completion_ids=[[1]] * 4, group_id=[0] * 4))
    np.testing.assert_allclose(outs[2.0] - outs[1.0], outs[1.0] - outs[0.0], atol=1e-12)


def test_generator_reward_raises_on_a_split_group():
    reward = GeneratorReward(
        GEN_ROWS, fake_engine(), GRPOSettings(num_generations=2, per_device_train_batch_size=2, rubric_format="json")
    )
    with pytest.raises(GroupSplitError):
        reward(completions=["[1] a"] * 4, completion_ids=[[1]] * 4, group_id=[0, 1, 1, 0])


def test_policy_reward_scores_eq_12_and_marks_unscorable_none():
    rows = [PolicyRow(0, "p0", "Name a fruit."), PolicyRow(1, "p1", "Say hi.")]
    rubric = _rubric_json(("mentions apple", 3), ("is short", 1))
    records = []
    settings = GRPOSettings(num_generations=2, per_device_train_batch_size=4, rubric_format="json")
    reward = PolicyReward(rows, fake_engine(rubric), fake_engine(), settings, on_rollouts=records.extend)
    texts = ["apple", "pear", "hi", "hello"]
    out = reward(completions=texts, completion_ids=[[1]] * 4, group_id=[0, 0, 1, 1])
    crit, w = ["mentions apple", "is short"], [3, 1]
    expected = [float(rubric_scores(w, [[fakes.verdict_bit(c, t) for c in crit]])[0]) for t in texts]
    assert out == pytest.approx(expected)
    assert records[0]["rubric_items"] == [("mentions apple", 3), ("is short", 1)]
    assert records[0]["verdicts"] == [fakes.verdict_bit(c, "apple") for c in crit] and records[3]["prompt_id"] == "p1"

    failing = PolicyReward(rows, fake_engine("{not json"), fake_engine(), settings, on_rollouts=records.extend)
    out = failing(completions=texts, completion_ids=[[1]] * 4, group_id=[0, 0, 1, 1])
    assert out == [None] * 4
    assert failing.history[-1]["unscorable"] == 4 and failing.history[-1]["rubric_failed_groups"] == 2
    assert records[-1]["score"] is None and records[-1]["rubric_error"]


def test_policy_reward_raises_on_an_incomplete_group():
    rows = [PolicyRow(0, "p0", "x")]
    reward = PolicyReward(
        rows, fake_engine("[1] a"), fake_engine(), GRPOSettings(num_generations=2, per_device_train_batch_size=2)
    )
    with pytest.raises(GroupSplitError):
        reward(completions=["a", "b", "c"], completion_ids=[[1]] * 3, group_id=[0, 0, 0])


# ------------------------------------------------------------------------------------------------ real TRL training

TINY = dict(
    learning_rate=5e-2,
    num_generations=2,
    per_device_train_batch_size=4,
    max_completion_length=8,
    max_steps=2,
    save_steps=1,
    seed=1,
)


def _weights(path):
    import torch
    from safetensors.torch import load_file

    return {k: v.to(torch.float32) for k, v in load_file(str(path / "model.safetensors")).items()}


def _changed(a, b) -> bool:
    return any(not (a[k] == b[k]).all() for k in a)


def _train_until_a_crash_at_the_third_step(model_dir, rows, gen, settings, out) -> None:
    """A policy update whose rollout sink raises at the third step's rewards (its first two checkpoints saved)."""
    calls = []

    def crash_on_third_call(records):
        calls.append(records)
        if len(calls) == 3:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        grpo.train_policy(model_dir, rows, gen, fake_engine(), settings, out, crash_on_third_call)


def test_launch_reads_rows_and_names_a_missing_field(tmp_path):
    from dr_core.train.launch import load_rows, parse_args

    gen = tmp_path / "gen.jsonl"
    gen.write_text(json.dumps({"group_id": 3, "prompt": "x", "candidates": ["a", "b"], "anchors": ["c", "d"]}) + "\n")
    assert load_rows(gen, "generator") == [GeneratorRow(3, "x", ("a", "b"), ("c", "d"))]
    pol = tmp_path / "pol.jsonl"
    pol.write_text(json.dumps({"group_id": 1, "prompt": "x"}) + "\n")
    with pytest.raises(ValueError, match="prompt_id"):
        load_rows(pol, "policy")
    args = parse_args(["policy", "--base", "b", "--rows", "r", "--settings", "s", "--out", "o"])
    assert args.role == "policy" and args.engines is None


def test_importing_the_glue_loads_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, dr_core.train.grpo, dr_core.train.launch; print(any(m in sys.modules for m in ('torch', 'trl')))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_lines_rollouts_are_parsed_with_their_primer():
    settings = GRPOSettings(num_generations=2, per_device_train_batch_size=2)  # rubric_format="lines" by default
    assert grpo.rollout_prefix(settings) == "[3] The response"
    records = []
    reward = GeneratorReward(GEN_ROWS, fake_engine(), settings, on_rollouts=records.extend)
    # what the model continues after the primer
    comps = [" greets the user.\n[5] The response mentions apple.", " x"]
    reward(prompts=[None] * 2, completions=comps, completion_ids=[[1, 2]] * 2, group_id=[0, 0])
    assert records[0]["items"] == [("The response greets the user.", 3), ("The response mentions apple.", 5)]
    assert records[1]["items"] == [("The response x", 3)]


def test_policy_reward_asks_the_generator_in_the_format_it_was_trained_in():
    """The generator trains on the primed 'lines' prompt (GeneratorReward), so the policy reward asks it the same
    way: the lines prompt, the primer as the start of its answer, no grammar, the primer part of the parsed text."""
    rows = [PolicyRow(0, "p0", "Name a fruit.")]
    generator = fake_engine(" mentions apple.\n[1] The response is short.\n")
    settings = GRPOSettings(num_generations=2, per_device_train_batch_size=2)  # rubric_format "lines", the default
    records = []
    reward = PolicyReward(rows, generator, fake_engine(), settings, on_rollouts=records.extend)
    out = reward(completions=["apple", "pear"], completion_ids=[[1]] * 2, group_id=[0, 0])
    (call,) = generator.calls
    (conv,) = call.conversations
    assert call.json_schema is None and conv[-1] == {"role": "assistant", "content": prompts.LINES_ROLLOUT_PREFIX}
    shown = [
        prompts.dynamic_generator_messages("Name a fruit.", c, answer="lines")
        for c in (["apple", "pear"], ["pear", "apple"])
    ]
    assert conv[:-1] in shown  # the lines prompt, in the seeded order
    assert records[0]["rubric_items"] == [("The response mentions apple.", 3), ("The response is short.", 1)]
    assert records[0]["rubric_text"].startswith(prompts.LINES_ROLLOUT_PREFIX) and None not in out


def test_the_rewards_log_their_own_figures_and_the_yes_rate_to_trl():
    rows = [PolicyRow(0, "p0", "Name a fruit."), PolicyRow(1, "p1", "Say hi.")]
    settings = GRPOSettings(num_generations=2, per_device_train_batch_size=4, rubric_format="json")
    logged: dict[str, float] = {}
    records = []
    reward = PolicyReward(
        rows, fake_engine(_rubric_json(("mentions apple", 3), ("is short", 1))), fake_engine(), settings,
        on_rollouts=records.extend,
    )  # fmt: skip
    reward(completions=["apple", "pear", "hi", "hello"], completion_ids=[[1]] * 4, group_id=[0, 0, 1, 1],
           log_metric=logged.__setitem__)  # fmt: skip
    said = [v for r in records for v in r["verdicts"]]
    assert logged == {"dr/unscorable": 0.0, "dr/yes_rate": pytest.approx(sum(said) / len(said))}

    g = 4
    gen = GeneratorReward(
        GEN_ROWS, fake_engine(), GRPOSettings(num_generations=g, per_device_train_batch_size=g, rubric_format="json"),
        on_rollouts=[].extend,
    )  # fmt: skip
    logged.clear()
    texts = [_rubric_json(("mentions apple", 3), ("is short", 1))] * 4 + ["not a rubric"] * 4
    gen(prompts=[None] * 8, completions=[[{"role": "assistant", "content": t}] for t in texts],
        completion_ids=[[1, 2]] * 8, group_id=[0] * 4 + [1] * 4, log_metric=logged.__setitem__)  # fmt: skip
    (entry,) = gen.history
    # TRL's own "reward" is the mean advantage (about 0): the reward itself is logged beside it
    assert logged["dr/reward_mean"] == pytest.approx(entry["reward_mean"])
    assert logged["dr/r_disc_mean"] == pytest.approx(entry["r_disc_mean"]) and logged["dr/unparseable"] == 4.0
    assert 0.0 <= logged["dr/yes_rate"] <= 1.0
    assert yes_rate([{"verdicts": [True, None, False]}, {"verdicts_C": [[True], [True]]}]) == pytest.approx(0.75)
    assert yes_rate([{"verdicts": None}]) is None
