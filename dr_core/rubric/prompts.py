"""Every prompt the pipeline sends to a model: rubric generator (dynamic and static), frozen verifier, policy,
pairwise policy judge, scalar reward model (baseline).

These templates are our own. The paper's appendix K templates are not public, so the wording here is written for
this project and sized for small models: the rubric generator answers with one short JSON object
(``{"rubrics": [{"criterion": ..., "weight": 1..5}]}``, the shape ``dr_core.rubric.schema.parse_rubric`` reads; its
``recover`` mode also reads ``[w] criterion`` lines), shown by a complete example, because GRPO rollouts of a
135M generator are not grammar-constrained and must still follow the format.

Layouts that matter for cost:
- The verifier sees the shared part first (instructions, prompt, response) and the criterion last, so the K x M
  checks of one response share one cached prefix (vLLM prefix caching); ``verifier_messages(..., layout=
  "criterion_first")`` is the naive layout, kept for the benchmark only (infra/benchmarks/bench_verify.py).
- The dynamic generator sees the prompt and every candidate, labelled 1..N in the order given (the caller
  shuffles), never the preference label. The static generator (the paper's RaR baseline) sees the prompt only.

Long texts are clipped to a character budget (marked "[...]"; the candidates share one total budget) so a prompt
fits a 4k-token context with room for the rubric.

    python -c "from dr_core.rubric.prompts import verifier_messages as v; print(v('Q?', 'A.', 'Is it short?'))"
"""

from __future__ import annotations

from typing import Literal, Sequence

from dr_core.constants import WEIGHT_MAX, WEIGHT_MIN
from dr_core.rubric.schema import rubric_json_schema

#: The rubric length the generator is asked for (the schema below enforces the upper bound).
MIN_ITEMS, MAX_GEN_ITEMS = 2, 8
#: Longest criterion the generator may write under grammar constraints (characters).
MAX_GEN_CRITERION_CHARS = 200
#: Character budgets that keep prompts inside a 4k-token context with up to 8 candidates.
PROMPT_CHARS = 2000
CANDIDATE_CHARS = 1200
#: All candidates together: an 11-response list gets about 720 characters each (about 3k tokens of prompt in all).
CANDIDATES_TOTAL_CHARS = 8000
VERIFIED_RESPONSE_CHARS = 4000
CLIP_MARK = " [...]"

#: Generation schema: the rubric model's schema (RUBRIC_JSON_SCHEMA) with tighter bounds, on purpose: a constrained
#: rubric then ends well within max_tokens. ``rubric_json_schema`` refuses bounds looser than the parser's.
GENERATOR_JSON_SCHEMA: dict = rubric_json_schema(max_items=MAX_GEN_ITEMS, max_criterion_chars=MAX_GEN_CRITERION_CHARS)

#: The verifier's only allowed answers (structured choice); the first means the criterion is met.
VERDICT_CHOICES = ("yes", "no")

RUBRIC_EXAMPLE = (
    '{"rubrics": [\n'
    '  {"criterion": "The response gives the correct final answer.", "weight": 5},\n'
    '  {"criterion": "The response explains each step.", "weight": 3},\n'
    '  {"criterion": "The response is free of irrelevant text.", "weight": 1}\n'
    "]}"
)

GENERATOR_SYSTEM = (
    f"You write grading rubrics: short lists of yes/no criteria, each weighted {WEIGHT_MIN} (minor) to {WEIGHT_MAX} "
    "(essential). A criterion is checked on one response at a time, so never mention response numbers."
)

#: The rollout's prompt is most of what a generator GRPO step computes (the trainer's forward and backward passes run
#: over prompt + rubric), so it carries no words the model does not need: the section markers open a section and the
#: next marker closes it, and the instructions say once what the rubric is for (docs/benchmarks/performance.md: tokens).
DYNAMIC_GENERATOR_TEMPLATE = """[PROMPT]
{prompt}

{candidates}

Write {min_items} to {max_items} yes/no criteria that the better of these {n} responses meet and the worse ones do \
not (correctness, completeness, following the instructions, safety, clarity). Weight important criteria higher.

{answer_format}"""

#: How the generator is asked to answer: JSON (grammar-constrained by vLLM structured outputs) or one "[w] criterion"
#: line per item (free-form GRPO rollouts of small models, which rarely write valid JSON unconstrained).
JSON_ANSWER_FORMAT = "Answer with JSON only, in this format:\n{example}"
LINE_RUBRIC_EXAMPLE = "[5] The response names at least three specific examples.\n[2] The response is under 200 words."
LINES_ANSWER_FORMAT = (
    "One criterion per line: the weight in square brackets, then the criterion. For example:\n{example}"
)
#: The start of the first line, appended after the chat template's generation prompt for "lines" rollouts: it keeps a
#: small model in the format (measured on SmolLM2-135M: 16/16 rollouts parse with it, 1/16 with "[" alone). The
#: first item's weight is therefore 3, the middle of the scale.
LINES_ROLLOUT_PREFIX = "[3] The response"

STATIC_GENERATOR_TEMPLATE = """Here is a user prompt.

[PROMPT]
{prompt}
[END PROMPT]

Write {min_items} to {max_items} yes/no criteria that a good response to this prompt meets \
(correctness, completeness, following the instructions, safety, clarity). Give important criteria higher weights.

Answer with JSON only, in this format:
{example}"""

CANDIDATE_TEMPLATE = "[RESPONSE {label}]\n{text}"

VERIFIER_SYSTEM = (
    "You check one criterion on one response. Answer yes if the response meets the criterion, otherwise no. "
    "Answer with one word: yes or no."
)

#: The shared part: identical for every criterion checked on this (prompt, response).
VERIFIER_PREFIX_TEMPLATE = """[PROMPT]
{prompt}
[END PROMPT]

[RESPONSE]
{response}
[END RESPONSE]

"""
#: The varying part, last.
VERIFIER_CRITERION_TEMPLATE = "Criterion: {criterion}\nDoes the response meet the criterion? Answer yes or no."

#: The "plain" verifier prompt (``EngineConfig.verifier_prompt="plain"``): one user turn, no system turn, the
#: instructions first, then the prompt, the response and the criterion, the question last. The system turn above
#: made Qwen2.5-Coder-0.5B answer "no" to every check of the probe (dr_core/data/verifier_probe.jsonl); this form
#: did not (docs/benchmarks/evaluator.md, "Verdict procedures, per model"). Still shared prefix first, criterion last.
VERIFIER_PLAIN_PREFIX_TEMPLATE = """You will check whether a response to a user prompt satisfies one criterion.

[User prompt]
{prompt}

[Response]
{response}

"""
VERIFIER_PLAIN_CRITERION_TEMPLATE = (
    "[Criterion]\n{criterion}\n\nDoes the response satisfy this criterion? Answer yes or no."
)
#: Verifier prompt styles: "system" (a system turn with the instructions) and "plain" (above).
VERIFIER_PROMPTS = ("system", "plain")

POLICY_SYSTEM = "You are a helpful, honest and harmless assistant. Answer the user's request well."


def clip(text: str, limit: int) -> str:
    """The text cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[: limit - len(CLIP_MARK)] + CLIP_MARK


def candidate_label(index: int) -> str:
    """Label of the index-th (0-based) candidate as shown to the generator: 1, 2, ..."""
    return str(index + 1)


def dynamic_generator_messages(prompt: str, candidates: Sequence[str], answer: str = "json") -> list[dict]:
    """DR-Generator input: the prompt and every candidate, labelled in the given (already shuffled) order.
    answer: "json" (for structured output) or "lines" (one "[w] criterion" per line, for free-form rollouts)."""
    if answer not in ("json", "lines"):
        raise ValueError(f"answer must be 'json' or 'lines', got {answer!r}")
    if not candidates:
        raise ValueError("the dynamic generator needs at least one candidate response")
    each = min(CANDIDATE_CHARS, CANDIDATES_TOTAL_CHARS // len(candidates))
    shown = "\n\n".join(
        CANDIDATE_TEMPLATE.format(label=candidate_label(i), text=clip(c, each)) for i, c in enumerate(candidates)
    )
    user = DYNAMIC_GENERATOR_TEMPLATE.format(
        n=len(candidates),
        prompt=clip(prompt, PROMPT_CHARS),
        candidates=shown,
        min_items=MIN_ITEMS,
        max_items=MAX_GEN_ITEMS,
        answer_format=JSON_ANSWER_FORMAT.format(example=RUBRIC_EXAMPLE)
        if answer == "json"
        else LINES_ANSWER_FORMAT.format(example=LINE_RUBRIC_EXAMPLE),
    )
    return [{"role": "system", "content": GENERATOR_SYSTEM}, {"role": "user", "content": user}]


def static_generator_messages(prompt: str) -> list[dict]:
    """Prompt-only rubric generator (RaR baseline): never sees any response."""
    user = STATIC_GENERATOR_TEMPLATE.format(
        prompt=clip(prompt, PROMPT_CHARS), min_items=MIN_ITEMS, max_items=MAX_GEN_ITEMS, example=RUBRIC_EXAMPLE
    )
    return [{"role": "system", "content": GENERATOR_SYSTEM}, {"role": "user", "content": user}]


def verifier_messages(
    prompt: str,
    response: str,
    criterion: str,
    layout: Literal["shared_prefix_first", "criterion_first"] = "shared_prefix_first",
    style: str = "system",
) -> list[dict]:
    """DR-Verifier input for one (prompt, response, criterion) check.

    The default layout puts the criterion last so checks of one response share their prefix in the KV cache.
    "criterion_first" is the naive layout (no shared prefix beyond the system prompt), for benchmarks.
    style: "system" (instructions in a system turn) or "plain" (one user turn, instructions first; see
    ``VERIFIER_PLAIN_PREFIX_TEMPLATE``); the engine's ``verifier_prompt`` picks it.
    """
    if style not in VERIFIER_PROMPTS:
        raise ValueError(f"unknown verifier prompt style {style!r}; choose one of {', '.join(VERIFIER_PROMPTS)}")
    prefix, question = (
        (VERIFIER_PREFIX_TEMPLATE, VERIFIER_CRITERION_TEMPLATE)
        if style == "system"
        else (VERIFIER_PLAIN_PREFIX_TEMPLATE, VERIFIER_PLAIN_CRITERION_TEMPLATE)
    )
    shared = prefix.format(prompt=clip(prompt, PROMPT_CHARS), response=clip(response, VERIFIED_RESPONSE_CHARS))
    varying = question.format(criterion=criterion)
    if style == "plain":
        if layout != "shared_prefix_first":
            raise ValueError("the plain verifier prompt has only the shared-prefix-first layout")
        return [{"role": "user", "content": shared + varying}]
    if layout == "shared_prefix_first":
        user = shared + varying
    elif layout == "criterion_first":
        user = varying + "\n\n" + shared.rstrip()
    else:
        raise ValueError(f"unknown verifier layout {layout!r}")
    return [{"role": "system", "content": VERIFIER_SYSTEM}, {"role": "user", "content": user}]


def policy_messages(prompt: str) -> list[dict]:
    """DR-Policy input: answer the user's prompt."""
    return [{"role": "system", "content": POLICY_SYSTEM}, {"role": "user", "content": prompt}]


# -- policy evaluation: the pairwise judge and the reward-model baseline (dr_core/evals/policy_eval/, reward_model.py)
# --
#: The judge's only allowed answers (structured choice): the label of the better answer.
JUDGE_CHOICES = ("A", "B")
#: Character budgets of a judge prompt: the user prompt and each answer (two answers fit a 4k-token context).
JUDGE_PROMPT_CHARS = 1500
JUDGE_ANSWER_CHARS = 2500

JUDGE_SYSTEM = (
    "You are an impartial judge. You compare two assistant answers to the same user prompt and decide which one "
    "is better: more helpful, correct, complete and relevant, and better at following the instructions. Do not "
    "prefer an answer for its position or its length. Answer with one letter: A or B."
)

PAIRWISE_JUDGE_TEMPLATE = """[USER PROMPT]
{prompt}
[END USER PROMPT]

[ANSWER A]
{answer_a}
[END ANSWER A]

[ANSWER B]
{answer_b}
[END ANSWER B]

Which answer is better? Answer with one letter: A or B."""

#: Reward model "w/ responses" (paper Table 1-2): the candidate set goes into the user turn before the scored answer.
REWARD_MODEL_WITH_RESPONSES_TEMPLATE = """{prompt}

[CANDIDATE RESPONSES TO THIS PROMPT, FOR REFERENCE]
{candidates}
[END CANDIDATE RESPONSES]"""


def pairwise_judge_messages(prompt: str, answer_a: str, answer_b: str) -> list[dict]:
    """Pairwise judge input: the user prompt and two answers labelled A and B (the caller asks both orders)."""
    user = PAIRWISE_JUDGE_TEMPLATE.format(
        prompt=clip(prompt, JUDGE_PROMPT_CHARS),
        answer_a=clip(answer_a, JUDGE_ANSWER_CHARS),
        answer_b=clip(answer_b, JUDGE_ANSWER_CHARS),
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def reward_model_messages(prompt: str, response: str, candidates: Sequence[str] | None = None) -> list[dict]:
    """Scalar reward model input: a user turn and the scored answer as the assistant turn. With ``candidates``
    (the "w/ responses" variant) the user turn also lists the whole candidate set, labelled 1..N."""
    user = prompt
    if candidates:
        each = min(CANDIDATE_CHARS, CANDIDATES_TOTAL_CHARS // len(candidates))
        shown = "\n\n".join(
            CANDIDATE_TEMPLATE.format(label=candidate_label(i), text=clip(c, each)) for i, c in enumerate(candidates)
        )
        user = REWARD_MODEL_WITH_RESPONSES_TEMPLATE.format(prompt=clip(prompt, PROMPT_CHARS), candidates=shown)
    return [{"role": "user", "content": user}, {"role": "assistant", "content": response}]
