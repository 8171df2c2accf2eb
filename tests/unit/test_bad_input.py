"""Every bad input is a clear error (issue 12): one table of malformed inputs across every command that reads a user
file (`dr ingest`, `dr score`, `dr eval-evaluator`, `dr eval-policy`, engine configs, `dr round` / `dr coevolve`
overrides). Each case must exit 2 with ONE line on the terminal that names the file, the line (where there is one) and
the field, show no traceback, write nothing, and be refused before any model or flow starts (a guard fails the case
if one does: that is a product bug, recorded below as a strict xfail naming the file to change).

In-process (typer's CliRunner on the installed app), so the whole table runs in seconds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def _line(obj) -> str:
    return obj if isinstance(obj, str) else json.dumps(obj)


def jsonl(*rows) -> str:
    return "\n".join(_line(r) for r in rows) + "\n"


RANKED = {"id": "a", "prompt": "Say hi.", "responses": ["Hi there!", "Go away."], "scores": [2, 1]}
PAIR = {"id": "a", "prompt": "Say hi.", "chosen": "Hi there!", "rejected": "Go away."}
LISTWISE = {"id": "a", "prompt": "Say hi.", "best": "Hi there!", "others": ["Go away.", "No."]}
SET = {"id": "a", "prompt": "Say hi.", "responses": ["Hi there!", "Go away."]}
PROMPT = {"id": "a", "prompt": "Say hi.", "baseline": "Hello."}
VERIFIABLE = {"prompt": "1+1?", "answer": "2"}

HUGE_INT = "1" * 5000  # more digits than Python converts (sys.get_int_max_str_digits() is 4300)
DEEP = "[" * 100_000  # json.loads raises RecursionError on this

# what each command is run as; every output path must still be absent afterwards
INGEST_A = ["ingest", "anchors", "anchors.jsonl", "--store", "store"]
INGEST_P = ["ingest", "prompts", "prompts.jsonl", "--store", "store"]
SCORE = ["score", "sets.jsonl", "-o", "scored.jsonl"]
POLICY = [
    "eval-policy",
    "--policy",
    "default",
    "--data",
    "data.jsonl",
    "--judge",
    "default",
    "-o",
    "metrics.json",
    "--records",
    "records.jsonl",
]
TASK = ["eval-policy", "--policy", "default", "--data", "v.jsonl", "-o", "metrics.json", "--records", "records.jsonl"]
ROUND = ["round", "--store", "store", "--run-id", "t", "--json", "result.json"]
COEVOLVE = ["coevolve", "--store", "store", "--run-id", "t", "--json", "result.json"]


def ee(fmt: str) -> list[str]:
    return ["eval-evaluator", "data.jsonl", "--format", fmt, "-o", "metrics.json", "--seeds", "1"]


@dataclass
class Case:
    id: str
    argv: list[str]
    files: dict[str, str | bytes]
    expect: tuple[str, ...]  # fragments of the one error line: file (and :line), field, what is wrong
    xfail: str | None = None


def C(id, argv, files, *expect, xfail=None):
    return Case(id, argv, files, expect, xfail)


ENGINES_YAML = ["--config", "engines.yaml"]

CASES = [
    # -- dr ingest anchors: ranked lists ------------------------------------------------------------------------------
    C(
        "anchors-invalid-json",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED, '{"id": "b", "prompt": ')},
        "anchors.jsonl:2",
        "invalid JSON",
    ),
    C(
        "anchors-nan-score",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED, '{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [NaN, 1]}')},
        "anchors.jsonl:2",
        "field 'scores[0]'",
        "NaN",
    ),
    C(
        "anchors-infinity-score",
        INGEST_A,
        {"anchors.jsonl": jsonl('{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [Infinity, 1]}')},
        "anchors.jsonl:1",
        "field 'scores[0]'",
        "Infinity",
    ),
    C(
        "anchors-minus-infinity-score",
        INGEST_A,
        {"anchors.jsonl": jsonl('{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [1, -Infinity]}')},
        "anchors.jsonl:1",
        "field 'scores[1]'",
        "-Infinity",
    ),
    C(
        "anchors-overflowing-score",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED, '{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [1e400, 1]}')},
        "anchors.jsonl:2",
        "field 'scores[0]'",
        "overflows",
    ),
    C(
        "anchors-int-score-beyond-float",
        INGEST_A,
        {
            "anchors.jsonl": jsonl(
                '{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [1' + "0" * 400 + ", 1]}"
            )
        },
        "anchors.jsonl:1",
        "field 'scores[0]'",
        "too large",
    ),
    C(
        "anchors-score-not-a-number",
        INGEST_A,
        {"anchors.jsonl": jsonl({**RANKED, "scores": [2, "1"]})},
        "anchors.jsonl:1",
        "field 'scores[1]'",
        "number",
    ),
    C(
        "anchors-unranked-scores",
        INGEST_A,
        {"anchors.jsonl": jsonl({**RANKED, "scores": [1, 2]})},
        "anchors.jsonl:1",
        "field 'scores'",
        "best first",
    ),
    C(
        "anchors-surrogate-prompt",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED, '{"id": "b", "prompt": "bad \\ud800 text", "responses": ["x", "y"]}')},
        "anchors.jsonl:2",
        "field 'prompt'",
        "lone surrogate",
    ),
    C(
        "anchors-surrogate-response",
        INGEST_A,
        {"anchors.jsonl": jsonl('{"id": "b", "prompt": "p", "responses": ["x", "\\udfff"]}')},
        "anchors.jsonl:1",
        "field 'responses[1]'",
        "lone surrogate",
    ),
    C(
        "anchors-huge-int-id",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED, '{"id": ' + HUGE_INT + ', "prompt": "p", "responses": ["x", "y"]}')},
        "anchors.jsonl:2",
        "field 'id'",
        "too long",
    ),
    C("anchors-deep-nesting", INGEST_A, {"anchors.jsonl": jsonl(RANKED, DEEP)}, "anchors.jsonl:2", "nested too deeply"),
    C(
        "anchors-bool-id",
        INGEST_A,
        {"anchors.jsonl": jsonl({**RANKED, "id": True})},
        "anchors.jsonl:1",
        "field 'id'",
        "bool",
    ),
    C(
        "anchors-one-response",
        INGEST_A,
        {"anchors.jsonl": jsonl({**RANKED, "responses": ["x"], "scores": None})},
        "anchors.jsonl:1",
        "field 'responses'",
        "at least 2",
    ),
    C(
        "anchors-not-utf8",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED).encode() + b'{"id": "\xff"}\n'},
        "anchors.jsonl:2",
        "not UTF-8",
    ),
    C("anchors-missing-file", INGEST_A, {}, "anchors.jsonl", "cannot open"),
    C("anchors-empty-file", INGEST_A, {"anchors.jsonl": "\n\n"}, "anchors.jsonl", "no examples"),
    C("anchors-array-line", INGEST_A, {"anchors.jsonl": jsonl(RANKED, "[1, 2]")}, "anchors.jsonl:2", "JSON object"),
    C(
        "anchors-duplicate-id",
        INGEST_A,
        {"anchors.jsonl": jsonl(RANKED, RANKED)},
        "anchors.jsonl:2",
        "field 'id'",
        "duplicate",
    ),
    C(
        "anchors-duplicate-key",
        INGEST_A,
        {"anchors.jsonl": jsonl('{"id": "b", "prompt": "p", "prompt": "q", "responses": ["x", "y"]}')},
        "anchors.jsonl:1",
        "field 'prompt'",
        "twice",
    ),
    # -- dr ingest prompts -------------------------------------------------------------------------------------------
    C(
        "prompts-baseline-number",
        INGEST_P,
        {"prompts.jsonl": jsonl(PROMPT, {"id": "b", "prompt": "p", "baseline": 3})},
        "prompts.jsonl:2",
        "field 'baseline'",
        "string",
    ),
    C(
        "prompts-missing-prompt",
        INGEST_P,
        {"prompts.jsonl": jsonl({"id": "b"})},
        "prompts.jsonl:1",
        "field 'prompt'",
        "missing",
    ),
    C(
        "prompts-nan-in-extra-field",
        INGEST_P,
        {"prompts.jsonl": jsonl(PROMPT, '{"id": "b", "prompt": "p", "meta": {"weight": NaN}}')},
        "prompts.jsonl:2",
        "field 'meta.weight'",
        "NaN",
    ),
    C(
        "prompts-surrogate-baseline",
        INGEST_P,
        {"prompts.jsonl": jsonl('{"id": "b", "prompt": "p", "baseline": "\\udc00"}')},
        "prompts.jsonl:1",
        "field 'baseline'",
        "lone surrogate",
    ),
    C(
        "ingest-bad-dataset-name",
        INGEST_P + ["--dataset", "../x"],
        {"prompts.jsonl": jsonl(PROMPT)},
        "dataset '../x'",
        "path segment",
    ),
    C(
        "ingest-file-stem-not-a-dataset-name",
        ["ingest", "prompts", "my prompts.jsonl", "--store", "store"],
        {"my prompts.jsonl": jsonl(PROMPT)},
        "dataset 'my prompts'",
        "path segment",
    ),
    C(
        "ingest-unknown-kind",
        ["ingest", "rubrics", "prompts.jsonl", "--store", "store"],
        {"prompts.jsonl": jsonl(PROMPT)},
        "rubrics",
        "anchors, prompts",
    ),
    # -- dr score ----------------------------------------------------------------------------------------------------
    C(
        "score-response-not-string",
        SCORE,
        {"sets.jsonl": jsonl(SET, {**SET, "id": "b", "responses": ["x", 3]})},
        "sets.jsonl:2",
        "field 'responses[1]'",
        "string",
    ),
    C(
        "score-nan",
        SCORE,
        {"sets.jsonl": jsonl('{"id": "b", "prompt": "p", "responses": ["x"], "w": NaN}')},
        "sets.jsonl:1",
        "field 'w'",
        "NaN",
    ),
    C(
        "score-surrogate-response",
        SCORE,
        {"sets.jsonl": jsonl('{"id": "b", "prompt": "p", "responses": ["\\ud83d"]}')},
        "sets.jsonl:1",
        "field 'responses[0]'",
        "lone surrogate",
    ),
    C(
        "score-missing-id",
        SCORE,
        {"sets.jsonl": jsonl(SET, {"prompt": "p", "responses": ["x"]})},
        "sets.jsonl:2",
        "field 'id'",
        "missing",
    ),
    C(
        "score-empty-responses",
        SCORE,
        {"sets.jsonl": jsonl({**SET, "responses": []})},
        "sets.jsonl:1",
        "field 'responses'",
        "at least 1",
    ),
    C("score-deep-nesting", SCORE, {"sets.jsonl": jsonl(SET, '{"a": ' * 50_000)}, "sets.jsonl:2", "nested too deeply"),
    # -- engine configs (--config for score / eval-evaluator, --engines for round / coevolve) ------------------------
    C(
        "config-bad-yaml",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "generator: [kind: vllm\n"},
        "engines.yaml",
        "YAML",
    ),
    C(
        "config-unknown-role",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "judge:\n  kind: vllm\n"},
        "engines.yaml",
        "judge",
    ),
    C(
        "config-unknown-key",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "generator:\n  modle: default\n"},
        "engines.yaml",
        "generator.modle",
    ),
    C(
        "config-wrong-type",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "verifier:\n  max_model_len: big\n"},
        "engines.yaml",
        "verifier.max_model_len",
    ),
    C(
        "config-openai-http-without-base-url",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "generator:\n  kind: openai_http\n  model: m\n"},
        "engines.yaml",
        "generator",
        "base_url",
    ),
    C(
        "config-nan-timeout",
        SCORE + ENGINES_YAML,
        {
            "sets.jsonl": jsonl(SET),
            "engines.yaml": "generator:\n  kind: openai_http\n  base_url: http://h:1/v1\n  timeout_s: .nan\n",
        },
        "engines.yaml",
        "generator.timeout_s",
    ),
    C(
        "config-negative-timeout",
        SCORE + ENGINES_YAML,
        {
            "sets.jsonl": jsonl(SET),
            "engines.yaml": "verifier:\n  kind: openai_http\n  base_url: http://h:1/v1\n  timeout_s: -5\n",
        },
        "engines.yaml",
        "verifier.timeout_s",
    ),
    C(
        "config-json-nan-token",
        SCORE + ["--config", "engines.json"],
        {"sets.jsonl": jsonl(SET), "engines.json": '{"generator": {"gpu_memory_utilization": NaN}}'},
        "engines.json",
        "generator.gpu_memory_utilization",
    ),
    C("config-missing-file", SCORE + ENGINES_YAML, {"sets.jsonl": jsonl(SET)}, "engines.yaml", "cannot read"),
    C(
        "config-top-level-list",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "- generator\n"},
        "engines.yaml",
        "mapping",
    ),
    C(
        "config-model-not-a-checkpoint",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "policy:\n  model: ./no-such-dir\n"},
        "engines.yaml",
        "policy",
        "config.json",
    ),
    C(
        "config-not-utf8",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": b"generator:\n  model: \xff\n"},
        "engines.yaml",
        "UTF-8",
    ),
    C(
        "config-nan-verdict-bias",
        SCORE + ENGINES_YAML,
        {"sets.jsonl": jsonl(SET), "engines.yaml": "verifier:\n  verdict_mode: balanced\n  verdict_bias: .nan\n"},
        "engines.yaml",
        "verifier.verdict_bias",
    ),
    C(
        "config-infinite-timeout",
        SCORE + ENGINES_YAML,
        {
            "sets.jsonl": jsonl(SET),
            "engines.yaml": "generator:\n  kind: openai_http\n  base_url: http://h:1/v1\n  timeout_s: .inf\n",
        },
        "engines.yaml",
        "generator.timeout_s",
    ),
    # -- dr eval-evaluator -------------------------------------------------------------------------------------------
    C(
        "ee-pairwise-missing-rejected",
        ee("pairwise"),
        {"data.jsonl": jsonl(PAIR, {"id": "b", "prompt": "p", "chosen": "c"})},
        "data.jsonl:2",
        "field 'rejected'",
        "missing",
    ),
    C(
        "ee-pairwise-nan",
        ee("pairwise"),
        {"data.jsonl": jsonl('{"id": "b", "prompt": "p", "chosen": "c", "rejected": "r", "margin": NaN}')},
        "data.jsonl:1",
        "field 'margin'",
        "NaN",
    ),
    C(
        "ee-pairwise-huge-int-id",
        ee("pairwise"),
        {"data.jsonl": jsonl('{"id": ' + HUGE_INT + ', "prompt": "p", "chosen": "c", "rejected": "r"}')},
        "data.jsonl:1",
        "field 'id'",
        "too long",
    ),
    C(
        "ee-pairwise-limit-still-validates",
        ee("pairwise") + ["--limit", "1"],
        {"data.jsonl": jsonl(PAIR, {**PAIR, "id": "b"}, {**PAIR, "id": "c", "chosen": " "})},
        "data.jsonl:3",
        "field 'chosen'",
        "empty",
    ),
    C(
        "ee-listwise-others-empty",
        ee("listwise"),
        {"data.jsonl": jsonl({**LISTWISE, "others": []})},
        "data.jsonl:1",
        "field 'others'",
        "at least 1",
    ),
    C(
        "ee-listwise-others-not-string",
        ee("listwise"),
        {"data.jsonl": jsonl({**LISTWISE, "others": [None]})},
        "data.jsonl:1",
        "field 'others[0]'",
        "string",
    ),
    C(
        "ee-listwise-surrogate-best",
        ee("listwise"),
        {"data.jsonl": jsonl(LISTWISE, '{"id": "b", "prompt": "p", "best": "\\ud800", "others": ["o"]}')},
        "data.jsonl:2",
        "field 'best'",
        "lone surrogate",
    ),
    C(
        "ee-ranked-overflowing-score",
        ee("ranked"),
        {"data.jsonl": jsonl('{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [1, -1e400]}')},
        "data.jsonl:1",
        "field 'scores[1]'",
        "overflows",
    ),
    C(
        "ee-ranked-scores-length",
        ee("ranked"),
        {"data.jsonl": jsonl({**RANKED, "scores": [1]})},
        "data.jsonl:1",
        "field 'scores'",
        "one per response",
    ),
    C(
        "ee-config-unknown-role",
        ee("pairwise") + ENGINES_YAML,
        {"data.jsonl": jsonl(PAIR), "engines.yaml": "rubric_writer:\n  kind: vllm\n"},
        "engines.yaml",
        "rubric_writer",
    ),
    C(
        "ee-reward-model-bad-data",
        ee("pairwise") + ["--mode", "reward-model", "--reward-model", "rm"],
        {"data.jsonl": jsonl('{"id": "a", "prompt": "p", "chosen": "c", "rejected": 1e400}')},
        "data.jsonl:1",
        "field 'rejected'",
        "overflows",
    ),
    C(
        "ee-reward-model-not-a-checkpoint",
        ee("pairwise") + ["--mode", "reward-model", "--reward-model", "rm"],
        {"data.jsonl": jsonl(PAIR)},
        "rm",
        "config.json",
    ),
    # -- dr eval-policy, pairwise ------------------------------------------------------------------------------------
    C(
        "ep-prompt-not-string",
        POLICY,
        {"data.jsonl": jsonl(PROMPT, {"id": "b", "prompt": ["p"], "baseline": "x"})},
        "data.jsonl:2",
        "field 'prompt'",
        "string",
    ),
    C(
        "ep-nan-baseline",
        POLICY,
        {"data.jsonl": jsonl('{"id": "b", "prompt": "p", "baseline": NaN}')},
        "data.jsonl:1",
        "field 'baseline'",
        "NaN",
    ),
    C(
        "ep-missing-baseline-names-its-line",
        POLICY,
        {"data.jsonl": jsonl(PROMPT, {"id": "b", "prompt": "p"})},
        "data.jsonl:2",
        "field 'baseline'",
        "missing",
    ),
    C(
        "ep-surrogate-prompt",
        POLICY,
        {"data.jsonl": jsonl('{"id": "b", "prompt": "\\ud800", "baseline": "x"}')},
        "data.jsonl:1",
        "field 'prompt'",
        "lone surrogate",
    ),
    C(
        "ep-baseline-file-lacks-id",
        POLICY + ["--baseline", "base.jsonl"],
        {"data.jsonl": jsonl(PROMPT, {"id": "b", "prompt": "p"}), "base.jsonl": jsonl(PROMPT)},
        "base.jsonl",
        "field 'id'",
        "'b'",
    ),
    C(
        "ep-baseline-file-row-without-baseline",
        POLICY + ["--baseline", "base.jsonl"],
        {
            "data.jsonl": jsonl(PROMPT, {"id": "b", "prompt": "p"}),
            "base.jsonl": jsonl(PROMPT, {"id": "b", "prompt": "p"}),
        },
        "base.jsonl:2",
        "field 'baseline'",
        "missing",
    ),
    C(
        "ep-baseline-file-infinity",
        POLICY + ["--baseline", "base.jsonl"],
        {
            "data.jsonl": jsonl(PROMPT),
            "base.jsonl": jsonl('{"id": "a", "prompt": "p", "baseline": "x", "s": -Infinity}'),
        },
        "base.jsonl:1",
        "field 's'",
        "Infinity",
    ),
    C(
        "ep-baseline-file-invalid-json",
        POLICY + ["--baseline", "base.jsonl"],
        {"data.jsonl": jsonl(PROMPT), "base.jsonl": jsonl(PROMPT, "{'id': 'b'}")},
        "base.jsonl:2",
        "invalid JSON",
    ),
    C(
        "ep-baseline-file-missing",
        POLICY + ["--baseline", "base.jsonl"],
        {"data.jsonl": jsonl(PROMPT)},
        "base.jsonl",
        "cannot open",
    ),
    C(
        "ep-policy-not-a-checkpoint",
        [
            "eval-policy",
            "--policy",
            "./no-such-ckpt",
            "--data",
            "data.jsonl",
            "--judge",
            "default",
            "-o",
            "metrics.json",
        ],
        {"data.jsonl": jsonl(PROMPT)},
        "no-such-ckpt",
        "config.json",
    ),
    # -- dr eval-policy --task (verifiable) --------------------------------------------------------------------------
    C(
        "task-exact-missing-answer",
        TASK + ["--task", "exact"],
        {"v.jsonl": jsonl(VERIFIABLE, {"prompt": "p"})},
        "v.jsonl:2",
        "field 'answer'",
        "missing",
    ),
    C(
        "task-exact-answer-list",
        TASK + ["--task", "exact"],
        {"v.jsonl": jsonl({"prompt": "p", "answer": ["2"]})},
        "v.jsonl:1",
        "field 'answer'",
        "string",
    ),
    C(
        "task-numeric-not-a-number",
        TASK + ["--task", "numeric"],
        {"v.jsonl": jsonl(VERIFIABLE, {"prompt": "p", "answer": "about two"})},
        "v.jsonl:2",
        "field 'answer'",
        "not a number",
    ),
    C(
        "task-numeric-nan-token",
        TASK + ["--task", "numeric"],
        {"v.jsonl": jsonl('{"prompt": "p", "answer": NaN}')},
        "v.jsonl:1",
        "field 'answer'",
        "NaN",
    ),
    C(
        "task-numeric-overflowing-answer",
        TASK + ["--task", "numeric"],
        {"v.jsonl": jsonl(VERIFIABLE, '{"prompt": "p", "answer": 1e400}')},
        "v.jsonl:2",
        "field 'answer'",
        "overflows",
    ),
    C(
        "task-numeric-fraction-beyond-float",
        TASK + ["--task", "numeric"],
        {"v.jsonl": jsonl({"prompt": "p", "answer": "1" + "0" * 400 + "/3"})},
        "v.jsonl:1",
        "field 'answer'",
        "not a number",
    ),
    C(
        "task-numeric-inf-string",
        TASK + ["--task", "numeric"],
        {"v.jsonl": jsonl({"prompt": "p", "answer": "inf"})},
        "v.jsonl:1",
        "field 'answer'",
        "not a number",
    ),
    C(
        "task-with-answers-file",
        TASK + ["--task", "numeric", "--baseline", "base.jsonl"],
        {"v.jsonl": jsonl(VERIFIABLE), "base.jsonl": jsonl(PROMPT)},
        "base.jsonl",
        "model",
    ),
    # -- dr round / dr coevolve: --set overrides and --engines -------------------------------------------------------
    C("round-set-without-equals", ROUND + ["--set", "n_prompts"], {}, "n_prompts", "FIELD=VALUE"),
    C("round-set-zero-prompts", ROUND + ["--set", "n_prompts=0"], {}, "n_prompts", "greater than or equal to 1"),
    C("round-set-unknown-field", ROUND + ["--set", "n_promts=2"], {}, "n_promts", "Extra inputs"),
    C("round-set-nan-int", ROUND + ["--set", "k=NaN"], {}, "k", "finite number"),
    C("round-set-nan-temperature", ROUND + ["--set", "policy_temperature=NaN"], {}, "policy_temperature"),
    C("round-set-bad-choice", ROUND + ["--set", "eval_format=triplets"], {}, "eval_format", "pairwise"),
    C(
        "round-engines-unknown-key",
        ROUND + ["--engines", "engines.yaml"],
        {"engines.yaml": "verifier:\n  verdict: choice\n"},
        "engines.yaml",
        "verifier.verdict",
    ),
    C(
        "round-engines-bad-yaml",
        ROUND + ["--engines", "engines.yaml"],
        {"engines.yaml": "generator: {kind: vllm\n"},
        "engines.yaml",
        "YAML",
    ),
    C("round-unknown-preset", ROUND + ["--preset", "huge"], {}, "huge", "tiny"),
    C(
        "round-set-infinite-temperature",
        ROUND + ["--set", "generator_temperature=Infinity"],
        {},
        "generator_temperature",
    ),
    C("round-set-anchors-file-missing", ROUND + ["--set", "anchors=missing.jsonl"], {}, "missing.jsonl", "cannot open"),
    C(
        "round-set-anchors-file-bad-line",
        ROUND + ["--set", "anchors=anchors.jsonl"],
        {"anchors.jsonl": jsonl(RANKED, '{"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [NaN, 1]}')},
        "anchors.jsonl:2",
        "field 'scores[0]'",
    ),
    C("round-task-runner-unknown", ROUND + ["--task-runner", "spark"], {}, "--task-runner", "spark", "ray://"),
    C("round-more-shards-than-prompts", ROUND + ["--shards", "9"], {}, "scale.shards=9", "n_prompts=4"),
    C("coevolve-task-runner-empty-address", COEVOLVE + ["--task-runner", "ray://"], {}, "--task-runner", "ray://"),
    C("coevolve-set-unknown-field", COEVOLVE + ["--set", "generator.learning_rat=1e-6"], {}, "learning_rat"),
    C(
        "coevolve-engines-openai-http-without-base-url",
        COEVOLVE + ["--engines", "engines.yaml"],
        {"engines.yaml": "policy:\n  kind: openai_http\n"},
        "engines.yaml",
        "policy",
        "base_url",
    ),
]

assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


class ModelWorkStarted(AssertionError):
    """Raised by the guards: a case reached model or flow work, so validation came too late."""


@pytest.fixture
def guarded(monkeypatch, tmp_path):
    """Run in tmp_path (short relative names in messages), with every way to start a model or a flow replaced by a
    guard, and the process environment restored afterwards (the Prefect commands set defaults in os.environ)."""

    def boom(*_a, **_k):
        raise ModelWorkStarted("model or flow work started before the input was refused")

    # import every module that binds these names first: one imported while they are patched would keep the guard
    # for the rest of the session (``from dr_core.engines import make_engine``)
    import dr_core.evals.evaluate  # noqa: E401,F401
    import flows.anchor_refresh  # noqa: E401,F401
    import tasks.policy_eval  # noqa: E401,F401

    for target in (
        "dr_core.engines.pool.EnginePool.open_roles",
        "dr_core.engines.pool.EnginePool.get",
        "dr_core.model.prepare",
        "dr_core.engines.make_engine",
        "dr_core.evals.reward_model.RewardModel",
        "flows.round.round_flow",
        "flows.coevolve.coevolve_flow",
    ):
        monkeypatch.setattr(target, boom)
    monkeypatch.delenv("DR_DEBUG", raising=False)
    monkeypatch.delenv("DR_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    saved = dict(os.environ)
    yield tmp_path
    os.environ.clear()
    os.environ.update(saved)


def _tree(root) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
        for c in CASES
    ],
)
def test_bad_input_is_one_clear_error_and_writes_nothing(guarded, case):
    root = guarded
    for name, content in case.files.items():
        (root / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before = _tree(root)

    res = runner.invoke(app, case.argv)

    if isinstance(res.exception, ModelWorkStarted):
        pytest.fail(f"{case.id}: {res.exception} (exit {res.exit_code})")
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output  # ONE line on the terminal: the error, nothing before or after it
    line = lines[0]
    assert line.startswith("error:"), line
    assert line in res.stderr  # on stderr
    for fragment in case.expect:
        assert fragment in line, (fragment, line)
    assert _tree(root) == before  # nothing written, nothing touched
    for out in ("store", "scored.jsonl", "metrics.json", "records.jsonl", "result.json"):
        assert not (root / out).exists()


def test_an_old_style_checkpoint_ref_is_refused_before_the_flow():
    """A start checkpoint ref of the old shape ({uri, sha256}) is a validation error naming the field, not a
    KeyError inside the training step."""
    from pydantic import ValidationError

    from flows.coevolve import CoevolveParams

    with pytest.raises(ValidationError, match=r"policy_start[\s\S]*'fingerprint'"):
        CoevolveParams(policy_start={"uri": "/s/models/run_id=a/round=1/policy", "sha256": "x"})
    ok = {"uri": "/s/models/run_id=a/round=1/policy", "fingerprint": "policy@1f"}
    assert CoevolveParams(policy_start=ok, generator_start=None).policy_start == ok
