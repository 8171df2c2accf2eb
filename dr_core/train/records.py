"""GRPO training inputs from round artifacts, and training rollouts back into artifact rows.

``generator_rows`` / ``policy_rows`` build the ``dr_core.train.grpo`` dataset rows from the stored prompts, samples and
anchors of a round. ``RolloutSink`` collects the rollout records the reward functions hand over (shapes in
``dr_core.train.rewards``' docstring) and turns them into rows of the rubrics, verdicts, scores, rewards and samples
tables (stage ``generator`` or ``policy``), so every training rollout can be audited with SQL.

Ids: a generator rollout is (set_id = group id, rollout = step * G + rollout index); a policy reward call makes a
new response set per group, numbered by a running ``set_id`` in arrival order, and its rewards rows number a
completion the same way (rollout = step * K + index in the set), so the GRPO step of every rollout of both updates
is in the rewards table (``sql/training_signal.sql``).
"""

from __future__ import annotations

from collections import defaultdict

from dr_core.scoring import signals
from dr_core.scoring.equations import ADV_EPS
from dr_core.store.rows import RewardRow, Row, SampleRow, ScoreRow, rubric_rows, verdict_rows
from dr_core.train.rows import GeneratorRow, PolicyRow

Rows = list[dict]


def _anchor_lists(anchor_rows: Rows) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = defaultdict(list)
    for a in anchor_rows:
        by[a["prompt_id"]].append(a)
    return {k: sorted(v, key=lambda a: a["rank"]) for k, v in by.items()}


def generator_rows(prompt_rows: Rows, sample_rows: Rows, anchor_rows: Rows) -> list[GeneratorRow]:
    """One row per response set: (prompt, C in response order, anchors best first); group_id = set_id."""
    text = {p["prompt_id"]: p["prompt"] for p in prompt_rows}
    anchors = _anchor_lists(anchor_rows)
    sets: dict[int, list[dict]] = defaultdict(list)
    for r in sample_rows:
        sets[r["set_id"]].append(r)
    rows = []
    for set_id, rs in sorted(sets.items()):
        rs.sort(key=lambda r: r["response_idx"])
        pid = rs[0]["prompt_id"]
        if len(anchors.get(pid, ())) < 2:
            raise ValueError(f"prompt {pid!r} has fewer than 2 anchor responses: R_anchor needs a ranked list")
        rows.append(
            GeneratorRow(
                set_id, text[pid], tuple(r["response"] for r in rs), tuple(a["response"] for a in anchors[pid])
            )
        )
    return rows


def anchor_ranks(prompt_rows: Rows, sample_rows: Rows, anchor_rows: Rows) -> dict[int, list[int]]:
    """group id (set_id) -> the anchor ranks in the order generator_rows lists the anchors."""
    lists = _anchor_lists(anchor_rows)
    pid = {r["set_id"]: r["prompt_id"] for r in sample_rows}
    return {s: [a["rank"] for a in lists.get(p, [])] for s, p in pid.items()}


def policy_rows(prompt_rows: Rows) -> list[PolicyRow]:
    return [PolicyRow(i, p["prompt_id"], p["prompt"]) for i, p in enumerate(prompt_rows)]


class RolloutSink:
    """Collects training rollout records and renders them as artifact rows."""

    def __init__(
        self,
        model: str,
        verifier: str,
        group_size: int,
        anchor_ranks: dict[int, list[int]] | None = None,
        generator: str | None = None,
    ):
        """model: identity of the model being trained (G(t-1) or P(t-1)); generator: the fixed G(t) that writes the
        policy update's rubrics; anchor_ranks: group id -> the anchor ranks of GeneratorRow.anchors, in order."""
        self.model, self.verifier, self.group_size = model, verifier, group_size
        self.anchor_ranks, self.generator = anchor_ranks or {}, generator
        self.records: list[dict] = []

    def __call__(self, records: list[dict]) -> None:
        self.records.extend(records)

    def zero_std_by_step(self, reward: str) -> list[dict]:
        """Per GRPO step, the groups whose rewards do not vary (``signals.zero_std_by_step``); ``reward``: the record
        field TRL got as the reward (generator: ``advantage``, policy: ``score``)."""
        return signals.zero_std_by_step((r["step"], r["group_id"], r[reward]) for r in self.records)

    # -- generator --------------------------------------------------------------------------------------------
    def generator_tables(self) -> dict[str, list[Row]]:
        rubrics, verdicts, scores, rewards = [], [], [], []
        for rec in self.records:
            set_id, rollout = rec["group_id"], rec["step"] * self.group_size + rec["rollout"]
            error = rec["error"] or "unparseable"
            rubrics += rubric_rows("generator", set_id, rollout, self.model, rec["items"], error)
            ranks = self.anchor_ranks.get(rec["group_id"])
            for target, matrix, score_list in (
                ("C", rec["verdicts_C"], rec["scores_C"]),
                ("anchor", rec["verdicts_anchor"], rec["scores_anchor"]),
            ):
                for j, row in enumerate(matrix or []):
                    number = (ranks[j] if ranks else j + 1) if target == "anchor" else j
                    verdicts += verdict_rows("generator", set_id, rollout, target, number, row, self.verifier)
                    sc = score_list[j] if score_list else None
                    scores.append(ScoreRow("generator", set_id, rollout, target, number, sc))
            r_disc, r_anchor = (rec["r_disc"], rec["r_anchor"]) if rec["scorable"] else (None, None)
            rewards.append(RewardRow("generator", set_id, rollout, r_disc, r_anchor, None, None, rec["advantage"]))
        return {"rubrics": rubrics, "verdicts": verdicts, "scores": scores, "rewards": rewards}

    # -- policy -----------------------------------------------------------------------------------------------
    def policy_tables(self) -> dict[str, list[Row]]:
        """samples, rubrics, verdicts, scores (the Eq. 12 score is the rollout's reward) and rewards (one row per
        completion: rollout = step * K + index, the Eq. 21 advantage TRL gives it; no R_disc / R_anchor)."""
        samples, rubrics, verdicts, scores, rewards = [], [], [], [], []
        set_ids: dict[tuple[int, int], int] = {}
        for rec, advantage in zip(self.records, _policy_advantages(self.records)):
            key = (rec["step"], rec["group_id"])
            new_set = key not in set_ids
            set_id = set_ids.setdefault(key, len(set_ids))
            k = rec["rollout"]
            samples.append(SampleRow("policy", set_id, rec["prompt_id"], k, self.model, rec["text"], None, None))
            if new_set:  # the set's rubric, from its first record: one row per item, or one error row
                rubrics += rubric_rows(
                    "policy", set_id, 0, self.generator, rec["rubric_items"], rec["rubric_error"] or "unparseable"
                )
            verdicts += verdict_rows("policy", set_id, 0, "C", k, rec["verdicts"] or [], self.verifier)
            scores.append(ScoreRow("policy", set_id, 0, "C", k, rec["score"]))
            rollout = rec["step"] * self.group_size + k
            rewards.append(RewardRow("policy", set_id, rollout, None, None, None, None, advantage))
        return {"samples": samples, "rubrics": rubrics, "verdicts": verdicts, "scores": scores, "rewards": rewards}


def _policy_advantages(records: list[dict]) -> list[float]:
    """Eq. 21 as TRL 1.16 computes it with unscorable rewards: within each (step, group), (score - mean) / (std + eps)
    over the scored completions (sample std), 0 for an unscorable one; 0 for all when fewer than 2 are scored."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, rec in enumerate(records):
        groups[(rec["step"], rec["group_id"])].append(i)
    out = [0.0] * len(records)
    for idx in groups.values():
        scored = [records[i]["score"] for i in idx if records[i]["score"] is not None]
        std = signals.group_std(scored)
        if std is None:
            continue
        mean = sum(scored) / len(scored)
        for i in idx:
            if records[i]["score"] is not None:
                out[i] = (records[i]["score"] - mean) / (std + ADV_EPS)
    return out
