"""Is there a training signal at all? The figures that show when co-evolution runs on nothing, and the warnings in
words that ``dr report`` and ``dr coevolve`` print.

Three ways the signal degenerates (section 3.1: the score gap is the optimisation signal):

- **No gradient.** A GRPO group (the ``num_generations`` rollouts of one prompt in one step) whose rewards do not
  vary (sample std below ``ZERO_STD``, or fewer than 2 scorable rewards) gives every rollout advantage 0. A step
  where every group is like that changed nothing (only the KL term pulls). ``zero_std_by_step`` gives the figures
  per step; ``sql/training_signal.sql`` computes the same from the stored rows. The reward of a rollout is what TRL
  got: generator update, A = A_disc + lam A_anchor itself (Eq. 24-25; the reward function returns A, stored as
  ``rewards.advantage``); policy update, the Eq. 12 score (NULL when unscorable: TRL leaves it out of the group's
  mean and std, as here).
- **A verifier that says yes (or no) to everything**: every response of a set gets the same Eq. 12 score, whatever
  the rubric. ``yes_rate`` above ``YES_RATE_HIGH`` or below ``YES_RATE_LOW`` is flagged.
- **Constant scores**: sets whose Eq. 12 scores are all equal (``constant_score_share``): the rubric separates
  nothing there, so R_disc and the gap are 0.

``signal_warnings`` turns the figures into sentences. Pure functions over plain data: no Prefect, no CLI.

    python -c "from dr_core.scoring.signals import signal_warnings; print(signal_warnings(yes_rates={0: 1.0}))"
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

from dr_core.constants import TRAINED_ROLES

#: A group whose reward std is below this has no gradient (TRL divides by std + 1e-4; rewards are O(1)).
ZERO_STD = 1e-6
#: Verifier yes-rates above / below these are flagged: scores can hardly separate responses.
YES_RATE_HIGH, YES_RATE_LOW = 0.95, 0.05
#: A step with at least this share of zero-std groups (but not all) is flagged as weak.
MOSTLY_ZERO_STD = 0.5
#: A round with at least this share of constant-score sets is flagged.
CONSTANT_SCORE_WARN = 0.5


def group_std(rewards: Iterable[float | None]) -> float | None:
    """Sample std (ddof 1, as TRL's nanstd) of the rewards that are not None; None with fewer than 2."""
    known = [float(r) for r in rewards if r is not None]
    return statistics.stdev(known) if len(known) >= 2 else None


def is_zero_std(std: float | None) -> bool:
    """True when a group with this reward std gives no gradient (None: fewer than 2 scorable rewards)."""
    return std is None or std < ZERO_STD


def zero_std_by_step(rollouts: Iterable[tuple[int, int, float | None]]) -> list[dict]:
    """Per GRPO step, how many groups had rewards that do not vary.

    rollouts: (step, group_id, reward) per rollout (reward None: unscorable). Returns one dict per step, in step
    order: {step, groups, zero_std_groups, zero_std_share, reward_std_mean}; reward_std_mean is the mean group std
    over the groups with at least 2 scorable rewards (None when there is none)."""
    groups: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for step, group_id, reward in rollouts:
        groups[int(step)][int(group_id)].append(reward)
    out = []
    for step in sorted(groups):
        stds = [group_std(rs) for rs in groups[step].values()]
        known = [s for s in stds if s is not None]
        zero = sum(is_zero_std(s) for s in stds)
        out.append(
            {
                "step": step,
                "groups": len(stds),
                "zero_std_groups": zero,
                "zero_std_share": zero / len(stds),
                "reward_std_mean": statistics.fmean(known) if known else None,
            }
        )
    return out


def no_gradient_steps(steps: Sequence[Mapping] | None) -> int:
    """How many of ``zero_std_by_step``'s steps had no gradient at all (every group zero-std)."""
    return sum(1 for s in steps or () if s["groups"] and s["zero_std_groups"] == s["groups"])


def yes_rate(verdicts: Iterable[bool | int | None]) -> tuple[float | None, int]:
    """(share of yes among the known verdicts, number of known verdicts); the share is None when none is known."""
    known = [bool(v) for v in verdicts if v is not None]
    return (sum(known) / len(known) if known else None), len(known)


def constant_score_share(score_rows: Iterable[Mapping]) -> float | None:
    """Share of the scored lists on C (one set under one rubric rollout, at least 2 scored responses) whose Eq. 12
    scores are all equal (max - min < ZERO_STD); None when no list has 2 scored responses. The same lists as
    ``sql/set_gap.sql``'s zero_spread_share."""
    lists: dict[tuple, list[float]] = defaultdict(list)
    for r in score_rows:
        if r["target"] == "C" and r["score"] is not None:
            lists[(r.get("stage"), r["set_id"], r["rollout"])].append(float(r["score"]))
    scored = [s for s in lists.values() if len(s) >= 2]
    if not scored:
        return None
    return sum(max(s) - min(s) < ZERO_STD for s in scored) / len(scored)


# -- warnings in words ------------------------------------------------------------------------------------------------
def _steps_text(steps: list[int]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    return "steps " + ", ".join(map(str, steps[:-1])) + f" and {steps[-1]}"


def _rate(value: float, threshold: float) -> str:
    """The value with 2 decimals, or more when 2 would print the threshold itself (0.951 -> 0.951, not 0.95)."""
    for digits in (2, 3, 4):
        text = f"{value:.{digits}f}"
        if float(text) != threshold:
            return text
    return f"{value:.6f}"


def update_warnings(role: str, round_no: int, steps: Sequence[Mapping] | None) -> list[str]:
    """Warnings about one GRPO update from its ``zero_std_by_step`` figures (None or empty: nothing to say)."""
    steps = [s for s in steps or () if s["groups"]]
    if not steps:
        return []
    dead = [s["step"] for s in steps if s["zero_std_groups"] == s["groups"]]
    weak = [s for s in steps if s["zero_std_groups"] < s["groups"] and s["zero_std_share"] >= MOSTLY_ZERO_STD]
    head = f"{role} update, round {round_no}"
    out = []
    if dead:
        tail = (
            "the update did nothing"
            if len(dead) == len(steps)
            else "the update did nothing at " + ("that step" if len(dead) == 1 else "those steps")
        )
        out.append(f"{head}: no gradient: every GRPO group had zero reward std at {_steps_text(dead)} ({tail})")
    if weak:
        counts = ", ".join(f"{s['zero_std_groups']} of {s['groups']} at step {s['step']}" for s in weak)
        out.append(
            f"{head}: weak gradient: most GRPO groups had zero reward std ({counts}); those groups taught nothing"
        )
    return out


def yes_rate_warning(round_no: int, rate: float | None) -> str | None:
    """A warning when the verifier's yes-rate of a round is above YES_RATE_HIGH or below YES_RATE_LOW."""
    if rate is None:
        return None
    if rate > YES_RATE_HIGH:
        what = "yes to everything" if rate == 1.0 else "yes to almost everything"
        return (
            f"verifier yes-rate {_rate(rate, YES_RATE_HIGH)} in round {round_no} is above {YES_RATE_HIGH}: the "
            f"verifier says {what}, so scores cannot separate responses"
        )
    if rate < YES_RATE_LOW:
        what = "no to everything" if rate == 0.0 else "no to almost everything"
        return (
            f"verifier yes-rate {_rate(rate, YES_RATE_LOW)} in round {round_no} is below {YES_RATE_LOW}: the "
            f"verifier says {what}, so scores cannot separate responses"
        )
    return None


def constant_score_warning(round_no: int, share: float | None) -> str | None:
    """A warning when at least CONSTANT_SCORE_WARN of a round's scored sets have one Eq. 12 score for every
    response."""
    if share is None or share < CONSTANT_SCORE_WARN:
        return None
    which = "every scored set" if share == 1.0 else f"{share:.0%} of the scored sets"
    return (
        f"constant scores in round {round_no}: {which} gave every response the same Eq. 12 score, so the rubrics "
        "separate nothing there (no gap, R_disc 0)"
    )


#: A pairwise judge that picks the first-shown answer at least this often (or at most 1 - this) is flagged.
JUDGE_POSITION_WARN = 0.95


def judge_position_warning(round_no: int, rate: float | None) -> str | None:
    """A warning when the policy-evaluation judge picked the same position (A, or B) in nearly every verdict: each
    pair is then judged once each way, so every prompt is a tie and the win rate cannot move from 0.5."""
    if rate is None or JUDGE_POSITION_WARN > rate > 1 - JUDGE_POSITION_WARN:
        return None
    side = "first" if rate >= JUDGE_POSITION_WARN else "second"
    return (
        f"policy evaluation, round {round_no}: the judge picked the {side}-shown answer in {max(rate, 1 - rate):.0%}"
        " of its verdicts, so nearly every prompt is a tie and the win rate cannot move from 0.5"
    )


def signal_warnings(
    updates: Iterable[Mapping] = (),
    yes_rates: Mapping[int, float | None] | None = None,
    constant_score_shares: Mapping[int, float | None] | None = None,
    judge_position_rates: Mapping[int, float | None] | None = None,
) -> list[str]:
    """Every degenerate-signal warning of a run, in round order (per round: generator update, policy update,
    verifier yes-rate, constant scores, the policy-evaluation judge's position bias).

    updates: {"role": "generator" | "policy", "round": t, "steps": zero_std_by_step(...) or None} per GRPO update;
    yes_rates: round -> the verifier's yes-rate on the round's measured sets (C and anchors); constant_score_shares:
    round -> the share of those sets with constant Eq. 12 scores. None values say nothing."""
    found: list[tuple[int, int, str]] = []
    for u in updates:
        order = TRAINED_ROLES.index(u["role"]) if u["role"] in TRAINED_ROLES else len(TRAINED_ROLES)
        found += [(u["round"], order, w) for w in update_warnings(u["role"], u["round"], u.get("steps"))]
    for t, rate in (yes_rates or {}).items():
        if (w := yes_rate_warning(t, rate)) is not None:
            found.append((t, 2, w))
    for t, share in (constant_score_shares or {}).items():
        if (w := constant_score_warning(t, share)) is not None:
            found.append((t, 3, w))
    for t, rate in (judge_position_rates or {}).items():
        if (w := judge_position_warning(t, rate)) is not None:
            found.append((t, 4, w))
    return [w for _, _, w in sorted(found, key=lambda f: (f[0], f[1]))]


#: The yes-rate band inside which a verifier's verdicts can separate responses (the main job's signal check).
YES_RATE_BAND = (0.15, 0.85)


def signal_checks(rounds: Sequence[Mapping]) -> list[dict]:
    """Whether a co-evolution run had a signal at all, as four checks over its round summaries (``dr coevolve``'s
    result rounds): {check, ok, detail} each; ``ok`` is None when the run has no data for it.

    - policy update: at every GRPO step, at least half of the groups have non-zero reward std;
    - generator update: at every step, at least one group has non-zero reward std (every group, with one a step);
    - verifier yes-rate on each measured round's sets within ``YES_RATE_BAND``;
    - Eq. 12 scores not constant within most sets (constant share below one half) in each measured round."""

    def steps_of(role):
        return [s for r in rounds for s in ((r.get(f"{role}_update") or {}).get("zero_std_by_step") or [])]

    out = []
    pol = steps_of("policy")
    out.append(
        {
            "check": "policy update: non-zero reward std in at least half of its groups at every step",
            "ok": all(s["zero_std_share"] <= 0.5 for s in pol) if pol else None,
            "detail": ", ".join(f"step {s['step']}: {s['groups'] - s['zero_std_groups']}/{s['groups']}" for s in pol)
            or "no policy update",
        }
    )
    gen = steps_of("generator")
    out.append(
        {
            "check": "generator update: non-zero reward std at every step",
            "ok": all(s["zero_std_groups"] < s["groups"] for s in gen) if gen else None,
            "detail": ", ".join(f"step {s['step']}: {s['groups'] - s['zero_std_groups']}/{s['groups']}" for s in gen)
            or "no generator update",
        }
    )
    lo, hi = YES_RATE_BAND
    rates = {r["round"]: (r.get("measure") or {}).get("verifier_yes_rate") for r in rounds}
    known = {t: v for t, v in rates.items() if v is not None}
    out.append(
        {
            "check": f"verifier yes-rate on the round's sets within {lo:.2f}-{hi:.2f}",
            "ok": all(lo <= v <= hi for v in known.values()) if known else None,
            "detail": ", ".join(f"round {t}: {v:.2f}" for t, v in sorted(known.items())) or "no verdicts",
        }
    )
    shares = {r["round"]: (r.get("measure") or {}).get("constant_score_sets_share") for r in rounds}
    known = {t: v for t, v in shares.items() if v is not None}
    out.append(
        {
            "check": "Eq. 12 scores not constant within most sets",
            "ok": all(v < 0.5 for v in known.values()) if known else None,
            "detail": ", ".join(f"round {t}: {v:.0%} constant" for t, v in sorted(known.items())) or "no scores",
        }
    )
    return out
