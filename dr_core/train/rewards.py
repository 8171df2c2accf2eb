"""The TRL reward functions of the two GRPO updates (``dr_core.train.grpo``): the rewards of section 3.4 and the
advantage combination of appendix D.

Generator update (``GeneratorReward``): each of the ``num_generations`` (G) rollouts of a ``GeneratorRow`` is a rubric
written from (x, C); with ``rubric_format="lines"`` its text starts with the primer ``prompts.LINES_ROLLOUT_PREFIX``
(``rollout_prefix``), which the parse sees. The frozen verifier applies each rubric to C and to the anchor list
(``evaluator.score_rubrics``); the rewards are R_disc (Eq. 13, on C) and R_anchor (Eq. 15, on the anchors). They are
combined at the advantage level, Eq. 24-25:

    A_i = (R_disc_i - mean_g) / (std_g + 1e-4) + lam * (R_anchor_i - mean_g) / (std_g + 1e-4)

computed by ``dr_core.scoring.equations.combined_advantages`` for each whole group inside ONE reward function, which
returns
A_i itself as the reward, and the trainer runs with ``GRPOConfig(scale_rewards="none")``. Why that is exactly
Eq. 24-25: in TRL 1.16 (trl/trainer/grpo_trainer.py, ``_generate_and_score_completions``, the default
``multi_objective_aggregation="sum_then_normalize"``) the advantage is ``rewards - mean_grouped_rewards`` and the
division by ``std_rewards + 1e-4`` is skipped when ``scale_rewards == "none"``. The group mean of A is already 0, so
TRL hands A on unchanged (up to float32 rounding). TRL's own ``normalize_then_sum`` is not Eq. 24-25: it also
normalises the sum over the whole batch.

Rollouts that do not give a rubric: TRL generation is not grammar-constrained, so every rollout is parsed with
``parse_rubric(text, recover=True)`` (every complete item of JSON, truncated JSON, or ``[w] criterion`` lines is
kept). A rollout cut at ``max_completion_length`` is scored from its complete items only: its last line, cut
mid-criterion, is not an item (``parse_rollout(text, truncated=True)``), and it is counted as truncated. A rollout
with no usable item, or whose verdicts are incomplete (a verifier answer that is not yes/no), gets the lowest reward
of its group: its R_disc and its R_anchor are each the lowest of the group's scorable rollouts
(``group_floor_rewards``), so after Eq. 24-25 its advantage is at most every scorable rollout's, and a rubric that
misorders the anchors is never beaten by one that failed to parse. (The old floor, R_disc 0 and R_anchor at the
all-tie value ``anchor_all_tie(n)``, beat every rubric whose scores reverse the anchors: R_anchor runs from
``anchor_minimum(n)``, about -2.32 for 3 anchors, up to 0, and the all-tie value, -1.386 for 3, is in between.) A
group with no scorable rollout gets 0 everywhere, which is no gradient. They are counted per reward call in the
history (``unparseable``, ``unscorable_verdicts``) and recorded with their ``error`` and ``scorable`` False.

Policy update (``PolicyReward``): for each group of K completions the FIXED generator G(t) (an ``Engine``) writes one
rubric over the K completions (``prompts.dynamic_generator_messages``, generated and parsed by
``evaluator.generate_rubrics``), the frozen verifier checks it on each completion, and the reward is the completion's
Eq. 12 score. G(t) is asked in the format it was trained in (``GRPOSettings.rubric_format``, the generator's: ``dr
coevolve`` copies it into the policy's settings): by default the primed 'lines' prompt of its GRPO rollouts
(``generate_rubrics(rubric_format="lines")``), never the grammar-constrained JSON it never saw in training. Advantages
are TRL's default Eq. 21 (``scale_rewards="group"``). An unscorable rollout (the rubric failed, or
one of its verdicts is missing) is counted, recorded with ``score`` None, and returned to TRL as None: TRL 1.16 turns
it into NaN, leaves it out of the group's mean and std (nanmean/nanstd) and sets its advantage to 0 - the same as
giving it the group mean of the scorable ones. If no rollout of a group is scorable, every advantage of the group
is 0.

Whole groups: TRL passes no group id, so each dataset row carries ``group_id`` (TRL hands extra columns to the
reward function, one entry per completion). Every reward call checks that its completions come in whole,
consecutive groups of ``num_generations`` with one group id each and raises ``GroupSplitError`` otherwise (with
several processes a group can be split across them: keep per_device_train_batch_size x steps_per_generation a
multiple of num_generations; ``GRPOSettings`` checks that up front).

Rollout records handed to ``on_rollouts(records)`` once per reward call (one process's completions):

- generator: ``{"group_id": int, "rollout": int (0..G-1), "step": int, "text": str, "truncated": bool,
  "items": [(criterion, weight), ...] | None, "dropped": int, "error": str | None,
  "verdicts_C": [[1/0/None] * M] * K | None (rows in the order of GeneratorRow.candidates),
  "verdicts_anchor": [[1/0/None] * M] * n | None (anchor order, best first), "scores_C": [float|None] * K | None,
  "scores_anchor": [float|None] * n | None, "r_disc": float, "r_anchor": float (floor values when unscorable),
  "scorable": bool, "advantage": float}``
- policy: ``{"group_id": int, "prompt_id": str, "rollout": int (0..K-1), "step": int, "text": str,
  "rubric_text": str, "rubric_items": [(criterion, weight), ...] | None, "rubric_error": str | None,
  "verdicts": [1/0/None] * M | None, "score": float | None}``

Each reward call also appends one entry to the reward's ``history`` (the counts above, the mean reward, the seconds).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from dr_core import progress
from dr_core.config.training import GRPOSettings
from dr_core.constants import UNSCORABLE
from dr_core.engines.base import Engine
from dr_core.errors import DRError
from dr_core.evaluator.generate import shuffled_order
from dr_core.evaluator.items import EvalItem, GeneratedRubric, RubricSampling
from dr_core.evaluator.score import evaluate_sets, score_rubrics
from dr_core.rubric import prompts
from dr_core.rubric.schema import Rubric, RubricError, parse_free_rubric
from dr_core.scoring.equations import anchor_reward, combined_advantages
from dr_core.train.rows import GeneratorRow, OnRollouts, PolicyRow


class GroupSplitError(DRError, RuntimeError):
    """A reward call got a group of rollouts that is split or incomplete: its set-level reward cannot be computed."""


def check_whole_groups(group_ids: Sequence[int], group_size: int) -> list[int]:
    """The group id of each consecutive block of ``group_size`` completions; raises ``GroupSplitError`` unless the
    completions come as whole groups (each block one id)."""
    ids = list(group_ids)
    hint = (
        "keep per_device_train_batch_size x steps_per_generation a multiple of num_generations, and do not shard "
        "the dataset by hand"
    )
    if not ids or len(ids) % group_size:
        raise GroupSplitError(
            f"a reward call got {len(ids)} completions, not whole groups of {group_size} (group ids {ids}): {hint}"
        )
    blocks = []
    for start in range(0, len(ids), group_size):
        block = ids[start : start + group_size]
        if len(set(block)) != 1:
            raise GroupSplitError(
                f"completions {start}..{start + group_size - 1} of a reward call mix groups {block}: a group is "
                f"split or incomplete; {hint}"
            )
        blocks.append(block[0])
    return blocks


def anchor_all_tie(n: int) -> float:
    """R_anchor of a rubric that separates nothing: every one of the n anchor scores equal (Eq. 15 at S_i = S_j),
    log(1/2) times the sum of the rank weights: -1.386 for 3 anchors. Not the minimum (``anchor_minimum``): a rubric
    that ranks the anchors in reverse scores lower."""
    return anchor_reward([0.0] * n)


def anchor_minimum(n: int) -> float:
    """The lowest R_anchor of n anchors (Eq. 15 with Eq. 12 scores in [0, 1]): Eq. 15 is concave in the scores (a
    positive sum of log-sigmoids of differences), so its minimum over the box [0, 1]^n is at a corner; every corner
    is tried (n <= 16). About -2.32 for 3 anchors (scores 0, 1, 1, best first)."""
    import itertools

    if not 2 <= n <= 16:
        raise ValueError(f"anchor_minimum takes 2..16 anchors, got {n}")
    return min(anchor_reward(list(c)) for c in itertools.product((0.0, 1.0), repeat=n))


def completion_text(completion) -> str:
    """A TRL completion's text (a string, or a conversational completion's messages joined)."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion)


def parse_rollout(text: str, truncated: bool = False) -> Rubric | RubricError:
    """A GRPO rubric rollout (not grammar-constrained), every complete item kept; ``truncated``: cut by
    ``max_completion_length``, so its last line is not an item (``schema.parse_free_rubric``)."""
    return parse_free_rubric(text, truncated)


def rollout_prefix(settings: GRPOSettings) -> str:
    """Text every generator rollout starts with (and that its parse sees): the primer of the 'lines' format."""
    return prompts.LINES_ROLLOUT_PREFIX if settings.rubric_format == "lines" else ""


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _step(trainer_state) -> int:
    return int(getattr(trainer_state, "global_step", 0) or 0)


def _rubric_items(rubric: Rubric | None) -> list[tuple] | None:
    return [(it.criterion, it.weight) for it in rubric.items] if rubric else None


class _GroupReward:
    """A TRL reward function over whole groups of ``settings.num_generations`` completions of ``rows``' group ids.
    TRL calls it as ``(prompts, completions, completion_ids, group_id, trainer_state=..., log_metric=..., **kwargs)``;
    a subclass's ``_rewards`` gets the completions, their token ids, the group id of each block, the trainer step,
    TRL's ``log_metric`` and the call's start time (``time.perf_counter``)."""

    def __init__(self, rows, settings: GRPOSettings, on_rollouts: OnRollouts | None, history: list[dict] | None):
        self.rows = {r.group_id: r for r in rows}
        self.settings, self.on_rollouts = settings, on_rollouts
        self.history = history if history is not None else []

    def __call__(
        self,
        prompts=None,
        completions=(),
        completion_ids=None,
        group_id=(),
        trainer_state=None,
        log_metric=None,
        **_kwargs,
    ) -> list:
        started = time.perf_counter()
        blocks = check_whole_groups(group_id, self.settings.num_generations)
        return self._rewards(completions, completion_ids, blocks, _step(trainer_state), log_metric, started)

    def _rewards(self, completions, completion_ids, blocks: list[int], step: int, log_metric, started: float) -> list:
        raise NotImplementedError


class GeneratorReward(_GroupReward):
    """TRL reward function of the generator update: Eq. 24-25 advantages of whole groups, returned as the reward.

    Call signature is TRL's: ``(prompts, completions, completion_ids, group_id, trainer_state=..., **kwargs)``.
    """

    __name__ = "dr_generator_advantage"

    def __init__(
        self,
        rows: Sequence[GeneratorRow],
        verifier: Engine,
        settings: GRPOSettings,
        on_rollouts: OnRollouts | None = None,
        history: list[dict] | None = None,
        eos_token_id: int | None = None,
    ):
        super().__init__(rows, settings, on_rollouts, history)
        self.verifier, self.eos_token_id = verifier, eos_token_id

    def _truncated(self, ids) -> bool:
        ids = list(ids) if ids is not None else []
        return len(ids) >= self.settings.max_completion_length and (not ids or ids[-1] != self.eos_token_id)

    def _rewards(self, completions, completion_ids, blocks, step, log_metric, started) -> list[float]:
        g = self.settings.num_generations
        texts = [rollout_prefix(self.settings) + completion_text(c) for c in completions]
        ids = completion_ids if completion_ids is not None else [None] * len(texts)
        items, gens = self._rubrics(texts, ids, blocks)
        with progress.activity("reward verdicts", "verdicts"):
            scored, _stats = score_rubrics(self.verifier, items, gens)
        r_disc, r_anchor, scorable = group_floor_rewards(scored, g)
        adv = combined_advantages(r_disc, r_anchor, g, self.settings.lam)
        records = [
            _generator_record(s, blocks[i // g], i % g, step, r_disc[i], r_anchor[i], scorable[i], adv[i])
            for i, (s,) in enumerate(scored)
        ]
        entry = self._entry(step, len(texts), len(blocks), r_disc, r_anchor, records, started)
        # TRL's own "reward" is the mean of what this hands it, the advantages (about 0): log the reward itself too
        _hand_on(self, entry, records, log_metric, ("reward_mean", "r_disc_mean", "r_anchor_mean", "unparseable"))
        return [float(a) for a in adv]

    def _rubrics(self, texts: list[str], ids, blocks: list[int]) -> tuple[list[EvalItem], list[list[GeneratedRubric]]]:
        """Each rollout parsed as a rubric (UNSCORABLE with its parse error when it gives none), and the item it is
        scored on: its row's prompt, C and anchors."""
        g = self.settings.num_generations
        items, gens = [], []
        for i, text in enumerate(texts):
            row = self.rows[blocks[i // g]]
            truncated = self._truncated(ids[i])
            parsed = parse_rollout(text, truncated)
            rubric = parsed if isinstance(parsed, Rubric) else UNSCORABLE
            error = None if rubric is not None else str(parsed.reason.value)
            items.append(EvalItem(row.prompt, tuple(row.candidates), tuple(row.anchors)))
            gens.append(
                [
                    GeneratedRubric(
                        item=i,
                        seed=self.settings.seed,
                        permutation=shuffled_order(len(row.candidates), self.settings.seed, row.group_id),
                        text=text,
                        finish_reason="length" if truncated else "stop",
                        rubric=rubric,
                        error=error,
                        prompt_tokens=0,
                        completion_tokens=len(ids[i]) if ids[i] is not None else 0,
                    )
                ]
            )
        return items, gens

    def _entry(self, step, rollouts, groups, r_disc, r_anchor, records, started) -> dict:
        """The reward call's history entry."""
        lam = self.settings.lam
        return {
            "step": step,
            "rollouts": rollouts,
            "groups": groups,
            "reward_mean": float(np.mean(np.asarray(r_disc) + lam * np.asarray(r_anchor))),
            "r_disc_mean": float(np.mean(r_disc)),
            "r_anchor_mean": float(np.mean(r_anchor)),
            "unparseable": sum(r["items"] is None for r in records),
            "unscorable_verdicts": sum(r["items"] is not None and not r["scorable"] for r in records),
            "truncated": sum(r["truncated"] for r in records),
            "dropped_items": sum(r["dropped"] for r in records),
            "verdicts": sum(
                len(r["items"] or ()) * (len(r["scores_C"] or ()) + len(r["scores_anchor"] or ())) for r in records
            ),
            "reward_seconds": round(time.perf_counter() - started, 2),
        }


def yes_rate(records: Sequence[dict]) -> float | None:
    """The verifier's yes-rate over a reward call's verdicts; None when it gave none.

    Read from the rollout records: the generator's ``verdicts_C`` and ``verdicts_anchor``, the policy's ``verdicts``;
    unscorable verdicts are left out."""
    said = [
        v
        for r in records
        for key in ("verdicts_C", "verdicts_anchor", "verdicts")
        for row in (r.get(key) or ())
        for v in (row if isinstance(row, (list, tuple)) else (row,))
        if v is not None
    ]
    return sum(bool(v) for v in said) / len(said) if said else None


def group_floor_rewards(scored, group_size: int) -> tuple[list[float], list[float], list[bool]]:
    """R_disc, R_anchor and scorable per rollout (``scored``: one ``(ScoredRubric,)`` per rollout, in whole
    consecutive groups of ``group_size``). An unscorable rollout gets the lowest R_disc and the lowest R_anchor of
    its group's scorable rollouts; a group without any scorable rollout gets 0 for both (no gradient)."""
    r_disc, r_anchor, scorable = [], [], []
    for (s,) in scored:
        ok = s.r_disc is not UNSCORABLE and s.r_anchor is not UNSCORABLE
        scorable.append(ok)
        r_disc.append(float(s.r_disc) if ok else None)
        r_anchor.append(float(s.r_anchor) if ok else None)
    for start in range(0, len(scored), group_size):
        block = range(start, start + group_size)
        for values in (r_disc, r_anchor):
            known = [values[i] for i in block if scorable[i]]
            low = min(known) if known else 0.0
            for i in block:
                if not scorable[i]:
                    values[i] = low
    return r_disc, r_anchor, scorable


def _generator_record(s, group_id: int, rollout: int, step: int, r_disc, r_anchor, scorable: bool, adv) -> dict:
    """The rollout record of one scored generator rollout (shape in the module docstring)."""
    gen = s.generation
    return {
        "group_id": group_id,
        "rollout": rollout,
        "step": step,
        "text": gen.text,
        "truncated": gen.finish_reason == "length",
        "items": _rubric_items(gen.rubric),
        "dropped": gen.dropped,
        "error": gen.error or (None if scorable else "; ".join(s.unscorable)),
        "verdicts_C": s.verdicts,
        "verdicts_anchor": s.anchor_verdicts,
        "scores_C": s.scores,
        "scores_anchor": s.anchor_scores,
        "r_disc": float(r_disc),
        "r_anchor": float(r_anchor),
        "scorable": scorable,
        "advantage": float(adv),
    }


def _hand_on(reward, entry: dict, records: list[dict], log_metric, metrics: Sequence[str]) -> None:
    """Append the history entry, log its ``metrics`` to TRL and hand the records on.

    TRL's log gets each metric as ``dr/<key>``, and the verifier's yes-rate over the call's verdicts as
    ``dr/yes_rate`` when it gave any."""
    reward.history.append(entry)
    if log_metric is not None:
        for key in metrics:
            log_metric(f"dr/{key}", float(entry[key]))
        yes = yes_rate(records)
        if yes is not None:
            log_metric("dr/yes_rate", yes)
    if reward.on_rollouts is not None:
        reward.on_rollouts(records)


class PolicyReward(_GroupReward):
    """TRL reward function of the policy update: each completion's Eq. 12 score under the rubric the fixed G(t)
    writes for its group; None (TRL: zero advantage) when unscorable."""

    __name__ = "dr_policy_score"

    def __init__(
        self,
        rows: Sequence[PolicyRow],
        generator: Engine,
        verifier: Engine,
        settings: GRPOSettings,
        on_rollouts: OnRollouts | None = None,
        history: list[dict] | None = None,
    ):
        super().__init__(rows, settings, on_rollouts, history)
        self.generator, self.verifier = generator, verifier

    def _rewards(self, completions, completion_ids, blocks, step, log_metric, started) -> list[float | None]:
        k = self.settings.num_generations
        texts = [completion_text(c) for c in completions]
        items = [EvalItem(self.rows[gid].prompt, tuple(texts[b * k : (b + 1) * k])) for b, gid in enumerate(blocks)]
        with progress.activity("reward rubrics and verdicts", "requests"):
            ev = evaluate_sets(
                self.generator,
                self.verifier,
                items,
                [self.settings.seed + step],
                RubricSampling(
                    temperature=self.settings.rubric_temperature,
                    max_tokens=self.settings.rubric_max_tokens,
                    rubric_format=self.settings.rubric_format,
                ),
            )
        rewards, records = self._scores(blocks, ev.results, texts, step)
        entry = {
            "step": step,
            "rollouts": len(texts),
            "groups": len(blocks),
            "reward_mean": _mean(rewards),
            "scorable": sum(r is not None for r in rewards),
            "unscorable": sum(r is None for r in rewards),
            "rubric_failed_groups": sum(s.generation.rubric is None for (s,) in ev.results),
            "reward_seconds": round(time.perf_counter() - started, 2),
        }
        _hand_on(self, entry, records, log_metric, ("unscorable",))
        return rewards

    def _scores(self, blocks: list[int], results, texts: list[str], step: int) -> tuple[list, list[dict]]:
        """Each completion's Eq. 12 score (UNSCORABLE when it has none) and its rollout record, group by group."""
        k = self.settings.num_generations
        rewards: list[float | None] = []
        records = []
        for b, (gid, (s,)) in enumerate(zip(blocks, results)):
            gen = s.generation
            for r in range(k):
                score = s.scores[r] if s.scores is not None else UNSCORABLE
                rewards.append(score)
                records.append(
                    {
                        "group_id": gid,
                        "prompt_id": self.rows[gid].prompt_id,
                        "rollout": r,
                        "step": step,
                        "text": texts[b * k + r],
                        "rubric_text": gen.text,
                        "rubric_items": _rubric_items(gen.rubric),
                        "rubric_error": gen.error,
                        "verdicts": s.verdicts[r] if s.verdicts is not None else None,
                        "score": score,
                    }
                )
        return rewards, records
