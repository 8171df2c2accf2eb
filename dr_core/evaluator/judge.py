"""The pairwise judge: which of two answers to a prompt is better, asked in both orders so that the order cancels.

Two procedures (docs/benchmarks/evaluator.md, "The pairwise judge", has their measured accuracy, tie rate and
position bias):

"logodds" (the default): the judge's first-token log-odds l = log P("A") - log P("B"), read from its top
log-probabilities exactly as the balanced verifier reads yes against no (``dr_core.evaluator.calibrate``), once
with the policy's answer shown as A (l1) and once shown as B (l2). The order cancels in

    d = (l1 - l2) / 2          > 0: the policy's answer is preferred
    position bias = (l1 + l2) / 2  (> 0: the judge leans to the first-shown answer whatever it is)

The policy wins when d > threshold, loses when d < -threshold, ties when |d| <= threshold (identical answers give
d = 0 exactly). A verdict whose top log-probabilities hold neither letter, or whose prompt did not fit, is
unscorable. A judge that returns no log-probabilities at all (an HTTP server without logprobs) falls back to
"choice", and the metrics say so.

"choice": the judge's structured choice "A"/"B" in both orders; a split verdict is a tie. A judge that picks by
position only gives nothing but ties.
"""

from __future__ import annotations

from typing import Literal, Sequence

from dr_core.config import EngineConfig
from dr_core.engines.base import PROMPT_TOO_LONG, Completion, Engine
from dr_core.evaluator.calibrate import label_logodds
from dr_core.rubric import prompts

JudgeProcedure = Literal["logodds", "choice"]
JUDGE_PROCEDURES = ("logodds", "choice")
DEFAULT_PROCEDURE: JudgeProcedure = "logodds"
#: |d| at or below which a pair is a tie (nats; 0.01 is an odds ratio of 1.01 between the two answers). Identical
#: answers give d = 0 exactly; a small judge's preferences between different answers are often a few hundredths.
TIE_THRESHOLD = 0.01
#: Top log-probabilities asked for the judge's first token (as a calibrated verdict).
JUDGE_LOGPROBS = 20


def judge_engine_config(cfg: EngineConfig, procedure: JudgeProcedure = DEFAULT_PROCEDURE) -> EngineConfig:
    """The engine a judge runs on: an in-process engine reads its log-odds from float32 logits. In bf16 a logit
    near 20 is rounded to a multiple of 1/8 nat, which is coarser than the differences a small judge makes between
    two answers (measured with Qwen2.5-Coder-0.5B: the same l in both orders, so every pair tied)."""
    if procedure == "logodds" and cfg.kind == "vllm" and cfg.dtype != "float32":
        return cfg.model_copy(update={"dtype": "float32"})
    return cfg


def choice_of(c: Completion) -> str | None:
    """The judge's choice from one completion, None when it is not one of the allowed labels (or was cut)."""
    text = c.texts[0].strip() if c.texts else ""
    if c.finish_reasons and c.finish_reasons[0] == PROMPT_TOO_LONG:
        return None
    return text if text in prompts.JUDGE_CHOICES else None


def _ab_label(token: str) -> int | None:
    word = token.strip()
    return 1 if word == prompts.JUDGE_CHOICES[0] else 0 if word == prompts.JUDGE_CHOICES[1] else None


def ab_logodds(top: dict[str, float] | None) -> float | None:
    """log P("A") - log P("B") at the first generated token from its top-N {token text: logprob}: every token that
    reads A once stripped adds to P(A), likewise B; read as the verifier's yes against no
    (``calibrate.label_logodds``: a letter absent from the top N gets the smallest shown, None when neither shows,
    capped at +-50)."""
    return label_logodds(top, _ab_label)


def first_ab_logodds(c: Completion) -> float | None:
    if c.finish_reasons and c.finish_reasons[0] == PROMPT_TOO_LONG:
        return None
    if not c.top_logprobs or not c.top_logprobs[0]:
        return None
    return ab_logodds(c.top_logprobs[0][0])


def both_orders(texts: Sequence[str], first: Sequence[str], second: Sequence[str]) -> list[list[dict]]:
    """Judge conversations, two per prompt: ``first`` shown as A, then ``second`` shown as A."""
    convs = []
    for t, x, y in zip(texts, first, second, strict=True):
        convs.append(prompts.pairwise_judge_messages(t, x, y))
        convs.append(prompts.pairwise_judge_messages(t, y, x))
    return convs


def ask_choices(judge: Engine, texts, first, second) -> list[tuple[str | None, str | None]]:
    """(choice with ``first`` as A, choice with ``first`` as B) per prompt: 2n structured calls in one batch."""
    outs = judge.chat(
        both_orders(texts, first, second), n=1, temperature=0.0, max_tokens=2, choices=list(prompts.JUDGE_CHOICES)
    )
    c = [choice_of(o) for o in outs]
    return list(zip(c[0::2], c[1::2]))


def ask_logodds(judge: Engine, texts, first, second) -> list[tuple[float | None, float | None]] | None:
    """(l1, l2) per prompt: the A-vs-B log-odds with ``first`` shown as A, then as B. None when the judge cannot
    return log-probabilities or returned none for any verdict (the caller falls back to choices)."""
    if not getattr(judge, "supports_logprobs", False):
        return None
    outs = judge.chat(both_orders(texts, first, second), n=1, temperature=0.0, max_tokens=1, logprobs=JUDGE_LOGPROBS)
    fitted = [o for o in outs if not (o.finish_reasons and o.finish_reasons[0] == PROMPT_TOO_LONG)]
    if fitted and all(o.top_logprobs is None for o in fitted):
        return None
    lo = [first_ab_logodds(o) for o in outs]
    return list(zip(lo[0::2], lo[1::2]))


def logodds_outcome(l1: float | None, l2: float | None, threshold: float = TIE_THRESHOLD) -> float | None:
    """1.0 (the first answer preferred: d > threshold), 0.0 (d < -threshold), 0.5 (a tie), None (a verdict is
    missing: unscorable)."""
    if l1 is None or l2 is None:
        return None
    d = (l1 - l2) / 2
    return 1.0 if d > threshold else 0.0 if d < -threshold else 0.5


def choice_outcome(as_a: str | None, as_b: str | None) -> float | None:
    """1.0 (first answer picked in both orders), 0.0 (the other in both), 0.5 (split: a tie), None (missing)."""
    if as_a not in prompts.JUDGE_CHOICES or as_b not in prompts.JUDGE_CHOICES:
        return None
    return ((as_a == "A") + (as_b == "B")) / 2


def judge_both_orders(
    judge: Engine,
    texts: Sequence[str],
    first: Sequence[str],
    second: Sequence[str],
    *,
    procedure: JudgeProcedure = DEFAULT_PROCEDURE,
    threshold: float = TIE_THRESHOLD,
) -> tuple[list[dict], dict]:
    """Judge ``first[i]`` against ``second[i]`` for every prompt with ``procedure``.

    Returns (one verdict per prompt: {"outcome": 1/0.5/0/None for ``first``, "as_a", "as_b"} where as_a/as_b are the
    log-odds l1/l2 ("logodds") or the letters ("choice"), and "d" for logodds), and the judge diagnostics:
    procedure used (and why, on a fallback), threshold, position bias.
    """
    if procedure not in JUDGE_PROCEDURES:
        raise ValueError(f"judge procedure must be one of {', '.join(JUDGE_PROCEDURES)}, got {procedure!r}")
    info: dict = {"judge_procedure": procedure, "judge_tie_threshold": None, "judge_fallback": None}
    if procedure == "logodds":
        pairs = ask_logodds(judge, texts, first, second)
        if pairs is not None:
            info["judge_tie_threshold"] = threshold
            verdicts, diagnostics = _logodds_verdicts(pairs, threshold)
            return verdicts, info | diagnostics
        info |= {
            "judge_procedure": "choice",
            "judge_fallback": "the judge returned no log-probabilities: structured choice in both orders",
        }
    verdicts, diagnostics = _choice_verdicts(ask_choices(judge, texts, first, second))
    return verdicts, info | diagnostics


def _logodds_verdicts(pairs: list[tuple[float | None, float | None]], threshold: float) -> tuple[list[dict], dict]:
    """The verdicts of (l1, l2) pairs, and their diagnostics: position bias, lean to the first-shown answer,
    mean |d|."""
    verdicts = [
        {
            "outcome": logodds_outcome(a, b, threshold),
            "as_a": a,
            "as_b": b,
            "d": None if a is None or b is None else (a - b) / 2,
        }
        for a, b in pairs
    ]
    sums = [(a + b) / 2 for a, b in pairs if a is not None and b is not None]
    firsts = [x for a, b in pairs for x in (a, b) if x is not None]
    return verdicts, {
        "judge_verdicts": 2 * len(pairs),
        "judge_invalid": sum(x is None for p in pairs for x in p),
        "judge_position_bias": (sum(sums) / len(sums)) if sums else None,
        # the order cancels in d: no verdict is decided by position, so there is no pick rate
        "judge_position_a_rate": None,
        # share of verdicts whose log-odds leaned to the first-shown answer (0.5: no lean)
        "judge_first_shown_rate": (sum(x > 0 for x in firsts) / len(firsts)) if firsts else None,
        "judge_mean_abs_d": (sum(abs(v["d"]) for v in verdicts if v["d"] is not None) / len(sums)) if sums else None,
    }


def _choice_verdicts(pairs: list[tuple[str | None, str | None]]) -> tuple[list[dict], dict]:
    """The verdicts of (choice as A, choice as B) pairs, and their diagnostics: the first-shown pick rate."""
    picks = [c for p in pairs for c in p if c is not None]
    return [{"outcome": choice_outcome(a, b), "as_a": a, "as_b": b, "d": None} for a, b in pairs], {
        "judge_verdicts": 2 * len(pairs),
        "judge_invalid": sum(c is None for p in pairs for c in p),
        "judge_position_bias": None,
        # share of valid verdicts that picked the first-shown answer: 0.5 = no position bias
        "judge_position_a_rate": (sum(c == "A" for c in picks) / len(picks)) if picks else None,
        "judge_first_shown_rate": (sum(c == "A" for c in picks) / len(picks)) if picks else None,
        "judge_mean_abs_d": None,
    }
