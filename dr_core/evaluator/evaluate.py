"""The DynamicRubric evaluator on a real model, batch first: generate rubrics for many sets, verify every
(prompt, response, criterion) check in one batched engine call, score with Eq. 12 / 13 / 15.

Pure apart from the engine calls: no printing, no files, no CLI. The CLI (``dr score``, ``dr eval-evaluator``),
the Prefect tasks and the GRPO reward functions all call these.

- ``generate_rubrics(engine, items, seeds)``: one rubric per (item, seed). In dynamic mode the generator sees the
  item's candidates in an order shuffled by ``random.Random(f"{seed}:{item_index}")`` (the permutation is kept);
  in static mode (RaR baseline) it sees the prompt only.
- ``verify(engine, checks)``: yes/no verdicts by structured choice; a verdict that is not a clean yes/no, or was
  cut, or whose prompt did not fit, is ``UNSCORABLE`` (None), never 0. Identical checks are sent once and checks
  of one response are sent next to each other so the prefix cache serves them. The verifier engine's
  ``config.verdict_mode`` picks how a verdict is read: "choice" (above), "calibrated" (contextual calibration,
  Zhao et al. 2021, "Calibrate Before Use": yes iff the unconstrained first-token log-odds of yes vs no exceed
  their average over content-free checks; ``verdict_bias``, ``yes_no_logodds``) or "balanced" (the same log-odds,
  yes iff above their median over the bundled balanced probe). Which suits which model is measured, not assumed:
  infra/benchmarks/bench_verdicts.py and README "Choosing the verdict procedure" (SmolLM2-135M with the choice
  says yes to every check; Qwen2.5-Coder-0.5B with the system prompt says no to every check).
- ``score_rubrics`` / ``evaluate_sets``: verdict matrices on the candidates (and on an optional ranked anchor
  list), Eq. 12 scores, R_disc (Eq. 13), R_anchor (Eq. 15), and what could not be scored.

    python -c "from dr_core.evaluator.evaluate import evaluate_sets, EvalItem; help(evaluate_sets)"
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

from dr_core.rubric import prompts
from dr_core.config import VerdictMode, VerifierPrompt
from dr_core.engines.base import PROMPT_TOO_LONG, Completion, Engine
from dr_core.rubric.schema import UNSCORABLE, Rubric, RubricError, parse_rubric
from dr_core.scoring.equations import anchor_reward, discriminability_reward, rubric_scores

Mode = Literal["dynamic", "static"]
#: finish reasons of a complete generation (vLLM says "stop" for EOS and stop strings)
_DONE = {"stop"}


@dataclass(frozen=True)
class EvalItem:
    """One set to evaluate: the conditioning candidates C the generator sees (and that are scored), plus an
    optional ranked anchor list (best first) that the same rubric is applied to but the generator never sees."""

    prompt: str
    candidates: tuple[str, ...]
    anchors: tuple[str, ...] | None = None


@dataclass
class StageStats:
    """Cost of one stage: conversations sent, tokens, prefix-cache hits (when the engine reports them), seconds."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0

    def add(self, completions: Sequence[Completion], seconds: float) -> None:
        self.requests += len(completions)
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.completion_tokens += sum(sum(c.completion_tokens) for c in completions)
        self.cached_tokens += sum(c.cached_tokens or 0 for c in completions)
        self.seconds += seconds

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GeneratedRubric:
    """One generator output. ``permutation[k]`` is the original index of the candidate shown k-th (label k+1);
    empty in static mode. ``rubric`` is None (unscorable) when the output was cut or did not parse; ``error``
    says why."""

    item: int
    seed: int
    permutation: tuple[int, ...]
    text: str
    finish_reason: str
    rubric: Rubric | None
    error: str | None
    prompt_tokens: int
    completion_tokens: int

    @property
    def dropped(self) -> int:
        """Items seen in the output but not usable (repeated, malformed), when the rest made a rubric."""
        return self.rubric.dropped if self.rubric is not None else 0


@dataclass(frozen=True)
class Check:
    """One verification: does ``response`` to ``prompt`` meet ``criterion``?"""

    prompt: str
    response: str
    criterion: str


@dataclass(frozen=True)
class ScoredRubric:
    """One rubric applied to one set.

    verdicts: (N candidates, M items) of 1/0/None; scores: (N,) Eq. 12 (None where a verdict is missing);
    r_disc: Eq. 13 over the candidates; anchor_verdicts / anchor_scores / r_anchor: the same on the anchor list
    (None when the item has none). Everything is None when the rubric itself is unscorable. ``unscorable`` lists
    what could not be scored, empty when everything was.
    """

    generation: GeneratedRubric
    verdicts: list[list[int | None]] | None
    scores: list[float | None] | None
    r_disc: float | None
    anchor_verdicts: list[list[int | None]] | None = None
    anchor_scores: list[float | None] | None = None
    r_anchor: float | None = None
    unscorable: list[str] = field(default_factory=list)


@dataclass
class SetEvaluation:
    """``results[i][s]``: the rubric of seed ``seeds[s]`` for ``items[i]``, scored. Stats per stage."""

    items: list[EvalItem]
    seeds: list[int]
    mode: Mode
    results: list[list[ScoredRubric]]
    generation: StageStats
    verification: StageStats


def shuffled_order(n: int, seed: int, item_index: int) -> tuple[int, ...]:
    """The order (original indices) in which the generator sees n candidates for this (seed, item)."""
    order = list(range(n))
    random.Random(f"{seed}:{item_index}").shuffle(order)
    return tuple(order)


def _parse(text: str, finish_reason: str, structured: bool) -> tuple[Rubric | None, str | None]:
    """A complete generation parsed strictly; failing that, every complete item is kept (``Rubric.dropped`` counts
    the rest: a small model under a grammar still repeats criteria). The strict reason is kept when nothing is."""
    if finish_reason not in _DONE:
        return UNSCORABLE, f"generation_{finish_reason}"  # cut by max_tokens, or the prompt did not fit
    parsed = parse_rubric(text)
    if isinstance(parsed, RubricError):
        recovered = parse_rubric(text, recover=True)
        if isinstance(recovered, Rubric):
            return recovered, None
        return UNSCORABLE, str((parsed if structured else recovered).reason.value)
    return parsed, None


def generate_rubrics(
    engine: Engine,
    items: Sequence[EvalItem],
    seeds: Sequence[int],
    *,
    mode: Mode = "dynamic",
    temperature: float = 0.7,
    max_tokens: int = 512,
    structured: bool = True,
) -> tuple[list[list[GeneratedRubric]], StageStats]:
    """One rubric for every (item, seed), in one engine call. Returns ``rubrics[i][s]`` and the stage's cost.

    structured: constrain output to ``prompts.GENERATOR_JSON_SCHEMA``; False lets the model write freely (what GRPO
    rollouts do). Either way a complete output keeps every usable item (``parse_rubric(recover=True)``).
    """
    if mode not in ("dynamic", "static"):
        raise ValueError(f"mode must be 'dynamic' or 'static', got {mode!r}")
    if not seeds:
        raise ValueError("need at least one seed")
    convs, keys = [], []
    for i, item in enumerate(items):
        for seed in seeds:
            if mode == "dynamic":
                perm = shuffled_order(len(item.candidates), seed, i)
                convs.append(prompts.dynamic_generator_messages(item.prompt, [item.candidates[k] for k in perm]))
            else:
                perm = ()
                convs.append(prompts.static_generator_messages(item.prompt))
            keys.append((i, seed, perm))
    stats = StageStats()
    if not convs:
        return [[] for _ in items], stats
    start = time.perf_counter()
    outs = engine.chat(
        convs,
        n=1,
        temperature=temperature,
        max_tokens=max_tokens,
        json_schema=prompts.GENERATOR_JSON_SCHEMA if structured else None,
        seed=seeds[0],
    )
    stats.add(outs, time.perf_counter() - start)
    result: list[list[GeneratedRubric]] = [[] for _ in items]
    for (i, seed, perm), out in zip(keys, outs):
        rubric, error = _parse(out.texts[0], out.finish_reasons[0], structured)
        result[i].append(
            GeneratedRubric(
                i, seed, perm, out.texts[0], out.finish_reasons[0], rubric, error, out.prompt_tokens,
                out.completion_tokens[0],
            )
        )
    return result, stats


def parse_verdict(text: str, finish_reason: str) -> int | None:
    """1 for a clean yes, 0 for a clean no, ``UNSCORABLE`` for anything else (cut, empty, other words)."""
    if finish_reason not in _DONE:
        return UNSCORABLE
    word = text.strip().lower().rstrip(".")
    return 1 if word == "yes" else 0 if word == "no" else UNSCORABLE


# ------------------------------------------------------------------------------------ calibrated verdicts
#: Top log-probabilities asked for the first token of a calibrated verdict (vLLM's default maximum).
VERDICT_LOGPROBS = 20
#: Content-free checks (Zhao et al. 2021 use "N/A", "" and "[MASK]"): every (prompt, response) pair with every
#: criterion; the verifier's bias is the mean yes-vs-no log-odds over them.
CONTENT_FREE_INPUTS = (("N/A", "N/A"), ("", ""), ("[MASK]", "[MASK]"))
CONTENT_FREE_CRITERIA = ("N/A", "[MASK]", "The response meets the criterion.")
#: |log-odds| cap: a verdict word missing from the top-N gets the N-th log-probability, which may be -inf.
_LOGODDS_CAP = 50.0
#: verifier engine -> (verdict mode, prompt style) -> its threshold (None: its checks gave no yes/no log-probabilities)
_BIAS: "weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], float | None]]" = weakref.WeakKeyDictionary()


def _verdict_word(token: str) -> int | None:
    """1 for a token reading yes ("yes", "Yes", " yes", "YES"), 0 for one reading no, else None."""
    word = token.strip().lower()
    return 1 if word == prompts.VERDICT_CHOICES[0] else 0 if word == prompts.VERDICT_CHOICES[1] else None


def _logsumexp(xs: Sequence[float]) -> float:
    hi = max(xs)
    return hi if hi == -math.inf else hi + math.log(sum(math.exp(x - hi) for x in xs))


def yes_no_logodds(top: dict[str, float] | None) -> float | None:
    """log P(yes) - log P(no) at the first generated token, from its top-N {token text: logprob}.

    Every token that reads yes (any case, any surrounding space) adds to P(yes), likewise no. A verdict word
    absent from the top N is given the smallest log-probability shown (an upper bound on its own). None when
    neither word is among them (nothing to read) or nothing was returned. Capped at +-50.
    """
    if not top:
        return None
    yes = [lp for t, lp in top.items() if _verdict_word(t) == 1]
    no = [lp for t, lp in top.items() if _verdict_word(t) == 0]
    if not yes and not no:
        return None
    floor = min(top.values())
    odds = (_logsumexp(yes) if yes else floor) - (_logsumexp(no) if no else floor)
    return max(-_LOGODDS_CAP, min(_LOGODDS_CAP, odds)) if not math.isnan(odds) else None


def _first_logodds(out: Completion) -> float | None:
    """Log-odds of one calibrated verification; None when the prompt did not fit or no logprobs came back."""
    if out.finish_reasons[0] == PROMPT_TOO_LONG or not out.top_logprobs or not out.top_logprobs[0]:
        return None
    return yes_no_logodds(out.top_logprobs[0][0])


def _ask_logodds(engine: Engine, checks: Sequence[Check], style: str | None = None) -> list[Completion]:
    style = style or verifier_prompt_of(engine)
    return engine.chat(
        [prompts.verifier_messages(c.prompt, c.response, c.criterion, style=style) for c in checks],
        n=1,
        temperature=0.0,
        max_tokens=1,
        logprobs=VERDICT_LOGPROBS,
    )


def content_free_checks() -> list[Check]:
    return [Check(p, r, c) for p, r in CONTENT_FREE_INPUTS for c in CONTENT_FREE_CRITERIA]


def probe_checks() -> list[Check]:
    """The bundled probe (dr_core/data/verifier_probe.jsonl): 24 checks with obvious answers, 12 true and 12 false.
    The "balanced" verdict mode uses it unlabelled: only the fact that half of it is true."""
    from dr_core.paths import bundled

    rows = [json.loads(line) for line in bundled("verifier_probe.jsonl").read_text().splitlines() if line.strip()]
    return [Check(r["prompt"], r["response"], r["criterion"]) for r in rows]


#: verdict modes that read the first token's yes-vs-no log-odds against a threshold
LOGODDS_MODES = ("calibrated", "balanced")


def verdict_bias(engine: Engine, stats: StageStats | None = None, style: str | None = None,
                 mode: str = "calibrated") -> float | None:
    """The verifier's threshold b on the yes-vs-no log-odds, computed once per engine object, mode and prompt style
    (its cost is added to ``stats`` that once): "calibrated", the mean over content-free checks (Zhao et al. 2021);
    "balanced", the median over the bundled balanced probe (the verifier then says yes to half of it). None when no
    check gave log-probabilities."""
    if mode not in LOGODDS_MODES:
        raise ValueError(f"no threshold for verdict mode {mode!r}")
    style = style or verifier_prompt_of(engine)
    known = _BIAS.setdefault(engine, {})
    if (mode, style) in known:
        return known[(mode, style)]
    start = time.perf_counter()
    outs = _ask_logodds(engine, content_free_checks() if mode == "calibrated" else probe_checks(), style)
    if stats is not None:
        stats.add(outs, time.perf_counter() - start)
    odds = [o for o in map(_first_logodds, outs) if o is not None]
    known[(mode, style)] = (None if not odds else sum(odds) / len(odds) if mode == "calibrated"
                            else statistics.median(odds))
    return known[(mode, style)]


def calibrated_verdict(logodds: float | None, bias: float) -> int | None:
    """1 iff the log-odds beat the content-free bias, 0 otherwise, ``UNSCORABLE`` when there are none."""
    return UNSCORABLE if logodds is None else int(logodds - bias > 0)


def verdict_mode_of(engine: Engine) -> VerdictMode:
    """The engine's configured verdict mode ("choice" for engines without a config, e.g. test fakes)."""
    return getattr(getattr(engine, "config", None), "verdict_mode", "choice")


def verifier_prompt_of(engine: Engine) -> VerifierPrompt:
    """The engine's configured verifier prompt style ("system" for engines without a config)."""
    return getattr(getattr(engine, "config", None), "verifier_prompt", "system")


def verify(
    engine: Engine,
    checks: Sequence[Check],
    *,
    max_tokens: int = 4,
    structured: bool = True,
    verdict_mode: VerdictMode | None = None,
    verifier_prompt: VerifierPrompt | None = None,
) -> tuple[list[int | None], StageStats]:
    """Verdicts for every check (1 yes, 0 no, None unscorable), in input order, from one engine call.

    Greedy decoding. Identical checks are asked once; the rest are grouped by (prompt, response) so that checks
    sharing a prefix are adjacent in the batch.

    verifier_prompt: None reads the engine's ``config.verifier_prompt`` ("system" or "plain" wording).
    verdict_mode: None reads the engine's ``config.verdict_mode``. "balanced" is "calibrated" with the threshold
    from the bundled probe (``verdict_bias(mode="balanced")``). "calibrated" asks for the first token's top
    log-probabilities without the choice constraint (one token) and compares its yes-vs-no log-odds with the
    engine's bias: ``config.verdict_bias`` when set, else the content-free estimate (``verdict_bias``; its first
    computation is counted in the stats). It falls back
    to "choice" when the engine does not return log-probabilities (``supports_logprobs`` False, or none came
    back, or the content-free checks gave none) or when ``structured`` is False.
    """
    stats = StageStats()
    unique = list(dict.fromkeys(checks))
    unique.sort(key=lambda c: (c.prompt, c.response))
    if not unique:
        return [], stats
    mode = verdict_mode or verdict_mode_of(engine)
    style = verifier_prompt or verifier_prompt_of(engine)
    if mode not in ("choice", *LOGODDS_MODES):
        raise ValueError(f"verdict_mode must be 'choice', 'calibrated' or 'balanced', got {mode!r}")
    if mode in LOGODDS_MODES and structured and getattr(engine, "supports_logprobs", False):
        fixed = getattr(getattr(engine, "config", None), "verdict_bias", None)
        bias = fixed if fixed is not None else verdict_bias(engine, stats, style, mode)
        if bias is not None:
            start = time.perf_counter()
            outs = _ask_logodds(engine, unique, style)
            stats.add(outs, time.perf_counter() - start)
            if any(o.top_logprobs is not None for o in outs):
                verdict = {c: calibrated_verdict(_first_logodds(o), bias) for c, o in zip(unique, outs)}
                return [verdict[c] for c in checks], stats
    start = time.perf_counter()
    outs = engine.chat(
        [prompts.verifier_messages(c.prompt, c.response, c.criterion, style=style) for c in unique],
        n=1,
        temperature=0.0,
        max_tokens=max_tokens,
        choices=list(prompts.VERDICT_CHOICES) if structured else None,
    )
    stats.add(outs, time.perf_counter() - start)
    verdict = {c: parse_verdict(o.texts[0], o.finish_reasons[0]) for c, o in zip(unique, outs)}
    return [verdict[c] for c in checks], stats


def _as_list(scores) -> list[float | None]:
    return [UNSCORABLE if s is UNSCORABLE else float(s) for s in scores]


def score_rubrics(
    verifier: Engine, items: Sequence[EvalItem], rubrics: Sequence[Sequence[GeneratedRubric]]
) -> tuple[list[list[ScoredRubric]], StageStats]:
    """Verify every rubric item on every candidate (and anchor) of its set in one batched call, then score."""
    checks: list[Check] = []
    for item, gens in zip(items, rubrics):
        for g in gens:
            if g.rubric is None:
                continue
            for resp in item.candidates + (item.anchors or ()):
                checks.extend(Check(item.prompt, resp, crit) for crit in g.rubric.criteria)
    verdicts, stats = verify(verifier, checks)
    it = iter(verdicts)
    results: list[list[ScoredRubric]] = []
    for item, gens in zip(items, rubrics):
        row = []
        for g in gens:
            if g.rubric is None:
                row.append(ScoredRubric(g, None, None, UNSCORABLE, unscorable=[f"rubric: {g.error}"]))
                continue
            m = len(g.rubric.items)
            cand = [[next(it) for _ in range(m)] for _ in item.candidates]
            anch = [[next(it) for _ in range(m)] for _ in item.anchors] if item.anchors else None
            problems = []
            missing = sum(v is UNSCORABLE for r in cand for v in r)
            if missing:
                problems.append(f"verdicts: {missing} of {m * len(cand)} on candidates unscorable")
            scores = _as_list(rubric_scores(g.rubric.weights, cand))
            r_disc = discriminability_reward(g.rubric.weights, cand)
            a_scores = r_anchor = None
            if anch is not None:
                a_missing = sum(v is UNSCORABLE for r in anch for v in r)
                if a_missing:
                    problems.append(f"verdicts: {a_missing} of {m * len(anch)} on anchors unscorable")
                a_scores = _as_list(rubric_scores(g.rubric.weights, anch))
                r_anchor = anchor_reward(a_scores)
            row.append(ScoredRubric(g, cand, scores, r_disc, anch, a_scores, r_anchor, problems))
        results.append(row)
    return results, stats


def evaluate_sets(
    generator: Engine,
    verifier: Engine,
    items: Sequence[EvalItem],
    seeds: Sequence[int],
    *,
    mode: Mode = "dynamic",
    temperature: float = 0.7,
    max_tokens: int = 512,
    structured: bool = True,
) -> SetEvaluation:
    """Generate one rubric per (item, seed), verify and score them all: the whole evaluator, batch first."""
    items = list(items)
    rubrics, gen_stats = generate_rubrics(
        generator, items, seeds, mode=mode, temperature=temperature, max_tokens=max_tokens, structured=structured
    )
    results, ver_stats = score_rubrics(verifier, items, rubrics)
    return SetEvaluation(items, list(seeds), mode, results, gen_stats, ver_stats)
