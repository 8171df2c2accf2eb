"""The IFEval testbed (dr_core/ifeval/): rows validated before any model work, verdicts that are the library's own,
lm-eval's four accuracies, code-ranked anchors whose order the checkers confirm, and the bundled splits rebuilt byte
for byte. No model is loaded."""

from __future__ import annotations

import json
import random

import pytest

from dr_core.datasets import DataError, load
from dr_core.ifeval import checks, constraints, edits, metrics, testbed
from dr_core.paths import bundled

HELDOUT = bundled(testbed.HELDOUT_FILE)


def _write(tmp_path, *objs) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return str(path)


def test_the_bundled_heldout_file_is_googles_byte_for_byte():
    import hashlib

    digest = hashlib.sha256(HELDOUT.read_bytes()).hexdigest()
    assert digest == "67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49"
    rows = checks.load_rows(HELDOUT)
    assert len(rows) == 541 and sum(len(r.instruction_id_list) for r in rows) == 834


@pytest.mark.parametrize(
    "obj, field, words",
    [
        ({"prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}, "key", "missing"),
        (
            {"key": 1, "prompt": "p", "instruction_id_list": ["no:such"], "kwargs": [{}]},
            "instruction_id_list[0]",
            "unknown instruction id",
        ),
        (
            {"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{"num_words": 3}]},
            "kwargs[0].num_words",
            "takes no argument",
        ),
        (
            {
                "key": 1,
                "prompt": "p",
                "instruction_id_list": ["length_constraints:number_words"],
                "kwargs": [{"num_words": 3, "relation": "more than"}],
            },
            "kwargs[0]",
            "refuses these arguments",
        ),
        ({"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": []}, "kwargs", "one per"),
        (
            {"key": 1, "prompt": " ", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
            "prompt",
            "non-empty",
        ),
    ],
)
def test_a_malformed_line_is_one_error_naming_its_line_and_field(tmp_path, obj, field, words):
    good = {"key": 7, "prompt": "Say hi.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    path = _write(tmp_path, good, obj)
    with pytest.raises(DataError) as exc:
        checks.load_rows(path)
    assert exc.value.line == 2 and exc.value.field == field and words in str(exc.value)


def test_null_kwargs_are_ignored_as_the_library_ignores_them(tmp_path):
    hf_style = {"num_words": None, "relation": None, "num_highlights": 2}  # Hugging Face's copy gives every key
    path = _write(
        tmp_path,
        {
            "id": "a",
            "prompt": "p",
            "instruction_id_list": ["detectable_format:number_highlighted_sections"],
            "kwargs": [hf_style],
        },
    )
    (row,) = checks.load_rows(path)
    assert row.kwargs == ({"num_highlights": 2},) and row.id == "a"


def test_verdicts_are_the_librarys_own_and_an_empty_answer_fails_everything():
    from if_verifiable.common import evaluate_instructions

    rows = [r for r in checks.load_rows(HELDOUT) if checks.scorable(r)]
    rng = random.Random(0)
    answers = [r.prompt if i % 3 == 0 else r.prompt.lower().replace(",", "") for i, r in enumerate(rows)]
    answers = [a if rng.random() < 0.8 else '"' + a + '"' for a in answers]
    for row, answer in zip(rows, answers):
        ours = checks.check(row, answer)
        with checks.seeded_global_random(0):  # row 1122's letter '#' makes its checker draw one (checks.py)
            lib, scores = evaluate_instructions(
                answer, list(row.instruction_id_list), [dict(k) for k in row.kwargs], row.prompt, checks.registry()
            )
        assert [(v.strict, v.loose) for v in ours] == [(r.strict_pass, r.loose_pass) for r in lib]
        assert all(v.strict for v in ours) == bool(scores.binary_strict)
    assert all(not v.strict and not v.loose for v in checks.check(rows[0], ""))
    assert len(checks.check(rows[0], "")) == len(rows[0].instruction_id_list)


def test_a_row_whose_checker_needs_punkt_is_unscorable_not_failed():
    rows = checks.load_rows(HELDOUT)
    needs = [r for r in rows if "length_constraints:number_sentences" in r.instruction_id_list]
    assert needs and len(testbed.heldout()) == 541 - sum(not checks.scorable(r) for r in rows)
    if "length_constraints:number_sentences" in checks.unavailable_instructions():
        assert not checks.scorable(needs[0])
        with pytest.raises(ValueError, match="punkt"):
            checks.check(needs[0], "One. Two.")


def test_accuracies_are_lm_evals_with_intervals():
    verdicts = [[(True, True)], [(True, True), (False, True)], [(False, False), (False, True), (True, True)]]
    m = metrics.accuracies(verdicts)
    assert m["prompt_level_strict_acc"] == pytest.approx(1 / 3)
    assert m["inst_level_strict_acc"] == pytest.approx(3 / 6)
    assert m["prompt_level_loose_acc"] == pytest.approx(2 / 3)
    assert m["inst_level_loose_acc"] == pytest.approx(5 / 6)
    for name in metrics.METRICS:
        lo, hi = m[f"{name}_ci95"]
        assert 0 <= lo <= m[name] <= hi <= 1
    assert metrics.accuracies([])["prompt_level_strict_acc"] is None


def test_attached_instructions_come_from_the_registry_and_never_conflict():
    table = constraints.conflicts()
    for i in range(60):
        row = constraints.attach(f"p{i}", "Describe a cat.", 1 + i % 3, i, 100)
        ids = row.instruction_id_list
        assert len(ids) == 1 + i % 3 and set(ids) <= edits.EDITABLE
        assert not any(b in table[a] for a in ids for b in ids if a != b)
        rebuilt = checks.build_checker(ids[0], row.kwargs[0], row.prompt).build_description(**row.kwargs[0])
        assert rebuilt in row.prompt  # the registry's own text, built from the recorded arguments
    assert constraints.attach("p1", "Describe a cat.", 3, 5, 100) == constraints.attach(
        "p1", "Describe a cat.", 3, 5, 100
    )
    state = random.getstate()
    constraints.attach("p2", "Describe a dog.", 3, 1, 100)
    assert random.getstate() == state  # the registry's draws do not move the process's global random


def test_code_ranked_anchors_meet_one_instruction_fewer_each_as_the_checkers_say():
    answer = (
        "Cats are small, carnivorous mammals. They sleep for most of the day. Many people keep them as pets. "
        "A cat can jump five times its height. Cats communicate by meowing and purring."
    )
    built = 0
    for i in range(40):
        row = constraints.attach(f"c{i}", "Describe a cat.", 3, i, 40, 5)
        levels = edits.anchor_list(row, answer)
        if levels is None:
            continue
        built += 1
        counts = [sum(v.strict for v in checks.check(row, lv.text)) for lv in levels]
        assert counts == [lv.met for lv in levels] == list(range(counts[0], counts[0] - len(levels), -1))
        assert len(levels) == len(edits.editable(row)) + 1
    assert built >= 30  # most combinations can be edited both ways


def test_the_bundled_splits_are_current_and_load_as_anchors_and_as_ifeval_rows():
    built = testbed.build()
    for name, (lines, _dropped) in built.items():
        path = bundled(testbed.SPLIT_FILES[name])
        assert path.read_text(encoding="utf-8") == testbed.render(lines), (
            f"rerun python -m dr_core.ifeval.testbed ({name})"
        )
        ranked = load(path, "ranked")
        assert all(
            list(r.scores) == sorted(r.scores, reverse=True) and len(set(r.scores)) == len(r.scores) for r in ranked
        )
    train, tune = testbed.split("train"), testbed.split("tune")
    assert len(train) >= 60 and len(tune) >= 20
    base = {p.row.id.rsplit("-v", 1)[0] for p in train}
    assert not base & {p.row.id.rsplit("-v", 1)[0] for p in tune}  # no base prompt in both splits
    heldout_prompts = {p.row.prompt for p in testbed.heldout()}
    assert not heldout_prompts & {p.row.prompt for p in train + tune}


def test_dr_ingest_takes_the_code_ranked_anchors(tmp_path):
    from dr_core.runs.ingest import ingest

    uri, n = ingest("anchors", bundled(testbed.SPLIT_FILES["tune"]), str(tmp_path / "store"))
    assert n == sum(len(p.anchors.responses) for p in testbed.split("tune")) and "ifeval_tune" in uri


# -- dr eval-policy --task ifeval ----------------------------------------------------------------------------------
def _cli(args):
    from typer.testing import CliRunner

    from cli.app import app

    return CliRunner().invoke(app, ["eval-policy", "--task", "ifeval", *args])


def test_eval_policy_ifeval_agrees_with_the_library_on_saved_answers(tmp_path):
    """IFEval's 541 prompts answered by code-made answers (some followed, some not), scored by ``dr eval-policy`` and
    by the library's ``evaluate_instructions`` directly: the four accuracies agree exactly, on the same prompts."""
    from if_verifiable.common import evaluate_instructions

    rows = checks.load_rows(HELDOUT)
    rng = random.Random(1)
    texts = {}
    for r in rows:
        t = r.prompt if rng.random() < 0.5 else r.prompt.lower().replace(",", "")
        texts[r.id] = ('"' + t + '"' if rng.random() < 0.3 else t) + ("\nP.S. done" if rng.random() < 0.3 else "")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": i, "answer": t}) + "\n" for i, t in texts.items()))
    out = tmp_path / "m.json"
    res = _cli(["--policy", str(answers), "--data", str(HELDOUT), "-o", str(out)])
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())
    strict = loose = n_inst = 0
    prompt_strict, prompt_loose = [], []
    for r in rows:
        if not checks.scorable(r):
            continue
        with checks.seeded_global_random(0):
            lib, scores = evaluate_instructions(
                texts[r.id], list(r.instruction_id_list), [dict(k) for k in r.kwargs], r.prompt, checks.registry()
            )
        strict += sum(x.strict_pass for x in lib)
        loose += sum(x.loose_pass for x in lib)
        n_inst += len(lib)
        prompt_strict.append(scores.binary_strict)
        prompt_loose.append(scores.binary_loose)
    assert m["scored"] == len(prompt_strict) and m["unscorable"] == 541 - len(prompt_strict)
    assert m["policy_prompt_level_strict_acc"] == pytest.approx(sum(prompt_strict) / len(prompt_strict), abs=1e-12)
    assert m["policy_prompt_level_loose_acc"] == pytest.approx(sum(prompt_loose) / len(prompt_loose), abs=1e-12)
    assert m["policy_inst_level_strict_acc"] == pytest.approx(strict / n_inst, abs=1e-12)
    assert m["policy_inst_level_loose_acc"] == pytest.approx(loose / n_inst, abs=1e-12)
    assert 0 < m["policy_prompt_level_strict_acc"] < m["policy_inst_level_loose_acc"] < 1


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"key": 9, "prompt": "p", "instruction_id_list": ["startend:nope"], "kwargs": [{}]}, "instruction_id_list[0]"),
        (
            {"key": 9, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{"x": 1}]},
            "kwargs[0].x",
        ),
    ],
)
def test_eval_policy_ifeval_refuses_a_malformed_line_before_any_model_work(tmp_path, monkeypatch, bad, field):
    from dr_core.engines.pool import EnginePool

    def boom(*a, **k):
        raise AssertionError("model work started")

    monkeypatch.setattr(EnginePool, "get", boom)
    good = {"key": 1, "prompt": "Say hi.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    out = tmp_path / "m.json"
    res = _cli(["--policy", "default", "--data", str(data), "-o", str(out)])
    assert res.exit_code == 2 and f"d.jsonl:2: field '{field}'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()
