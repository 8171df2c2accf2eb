"""Verdict calibration: how a verifier's yes/no is read when its configured ``verdict_mode`` is not "choice".

"calibrated" (contextual calibration, Zhao et al. 2021, "Calibrate Before Use"): yes iff the unconstrained
first-token log-odds of yes vs no exceed their average over content-free checks. "balanced": the same log-odds, yes
iff above their median over the bundled balanced probe. The threshold is measured once per engine object, mode and
prompt style and kept by the engine itself (``Engine.measured``), so it goes with the engine. Which
procedure suits which model is measured, not assumed: infra/benchmarks/bench_verdicts.py and
docs/how-to/evaluate-the-evaluator.md.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from typing import Callable, Sequence

from dr_core.config import VerdictMode, VerifierPrompt
from dr_core.constants import UNSCORABLE
from dr_core.engines.base import PROMPT_TOO_LONG, Completion, Engine
from dr_core.evaluator.items import Check, StageStats
from dr_core.rubric import prompts
from dr_core.scoring.mathutil import logsumexp

# ------------------------------------------------------------------------------------ calibrated verdicts
#: Top log-probabilities asked for the first token of a calibrated verdict (vLLM's default maximum).
VERDICT_LOGPROBS = 20


#: Content-free checks (Zhao et al. 2021 use "N/A", "" and "[MASK]"): every (prompt, response) pair with every
#: criterion; the verifier's bias is the mean yes-vs-no log-odds over them.
CONTENT_FREE_INPUTS = (("N/A", "N/A"), ("", ""), ("[MASK]", "[MASK]"))


CONTENT_FREE_CRITERIA = ("N/A", "[MASK]", "The response meets the criterion.")


#: |log-odds| cap: a verdict word missing from the top-N gets the N-th log-probability, which may be -inf.
_LOGODDS_CAP = 50.0


def _verdict_word(token: str) -> int | None:
    """1 for a token reading yes ("yes", "Yes", " yes", "YES"), 0 for one reading no, else None."""
    word = token.strip().lower()
    return 1 if word == prompts.VERDICT_CHOICES[0] else 0 if word == prompts.VERDICT_CHOICES[1] else None


def yes_no_logodds(top: dict[str, float] | None) -> float | None:
    """log P(yes) - log P(no) at the first generated token, from its top-N {token text: logprob}.

    Every token that reads yes (any case, any surrounding space) adds to P(yes), likewise no. A verdict word
    absent from the top N is given the smallest log-probability shown (an upper bound on its own). None when
    neither word is among them (nothing to read) or nothing was returned. Capped at +-50.
    """
    return label_logodds(top, _verdict_word)


def label_logodds(top: dict[str, float] | None, label: Callable[[str], int | None]) -> float | None:
    """log P(label 1) - log P(label 0) at the first generated token, ``label`` reading each token of the top-N as 1,
    0 or neither; the rules of ``yes_no_logodds`` (floor for an absent label, None when neither shows, +-50 cap)."""
    if not top:
        return None
    yes = [lp for t, lp in top.items() if label(t) == 1]
    no = [lp for t, lp in top.items() if label(t) == 0]
    if not yes and not no:
        return None
    floor = min(top.values())
    odds = (logsumexp(yes) if yes else floor) - (logsumexp(no) if no else floor)
    return max(-_LOGODDS_CAP, min(_LOGODDS_CAP, odds)) if not math.isnan(odds) else None


def first_logodds(out: Completion) -> float | None:
    """Log-odds of one calibrated verification; None when the prompt did not fit or no logprobs came back."""
    if out.finish_reasons[0] == PROMPT_TOO_LONG or not out.top_logprobs or not out.top_logprobs[0]:
        return None
    return yes_no_logodds(out.top_logprobs[0][0])


def ask_logodds(engine: Engine, checks: Sequence[Check], style: str | None = None) -> list[Completion]:
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


def verdict_bias(
    engine: Engine, stats: StageStats | None = None, style: str | None = None, mode: str = "calibrated"
) -> float | None:
    """The verifier's threshold b on the yes-vs-no log-odds. Computed once per engine object, mode and prompt style
    (its cost is added to ``stats`` that once): "calibrated", the mean over content-free checks (Zhao et al. 2021);
    "balanced", the median over the bundled balanced probe (the verifier then says yes to half of it). None when no
    check gave log-probabilities."""
    if mode not in LOGODDS_MODES:
        raise ValueError(f"no threshold for verdict mode {mode!r}")
    style = style or verifier_prompt_of(engine)
    known, key = engine.measured(), ("verdict_threshold", mode, style)  # None: no yes/no log-probabilities
    if key in known:
        return known[key]
    start = time.perf_counter()
    outs = ask_logodds(engine, content_free_checks() if mode == "calibrated" else probe_checks(), style)
    if stats is not None:
        stats.add(outs, time.perf_counter() - start)
    odds = [o for o in map(first_logodds, outs) if o is not None]
    known[key] = None if not odds else sum(odds) / len(odds) if mode == "calibrated" else statistics.median(odds)
    return known[key]


def calibrated_verdict(logodds: float | None, bias: float) -> int | None:
    """1 iff the log-odds beat the content-free bias, 0 otherwise, ``UNSCORABLE`` when there are none."""
    return UNSCORABLE if logodds is None else int(logodds - bias > 0)


def verdict_mode_of(engine: Engine) -> VerdictMode:
    """The engine's configured verdict mode ("choice" for engines without a config, e.g. test fakes)."""
    return getattr(getattr(engine, "config", None), "verdict_mode", "choice")


def verifier_prompt_of(engine: Engine) -> VerifierPrompt:
    """The engine's configured verifier prompt style ("system" for engines without a config)."""
    return getattr(getattr(engine, "config", None), "verifier_prompt", "system")
