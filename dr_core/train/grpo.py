"""GRPO training glue (TRL 1.16 ``GRPOTrainer``): the generator update G(t-1) -> G(t) and the policy update
P(t-1) -> P(t) of Algorithm 1, with the rewards of section 3.4 and the advantage combination of appendix D.

Generator update (``train_generator``), one dataset row per ``GeneratorRow`` (prompt x, the current policy's
response set C, the ranked anchor list, best first). The row's prompt is ``prompts.dynamic_generator_messages`` with
C shown in the seeded order ``evaluator.shuffled_order(K, settings.seed, group_id)``; each of the
``num_generations`` (G) rollouts is a rubric written from (x, C). By default (``rubric_format="lines"``) rollouts
write one ``[w] criterion`` per line and start from the primer ``prompts.LINES_ROLLOUT_PREFIX``, which is part of
the rollout's text for parsing: unconstrained, SmolLM2-135M wrote no parseable JSON rubric at temperature 1.0, while
primed lines parsed 16 of 16 (it copies the prompt's example criteria often: that is a weak model's behaviour and
exactly what R_disc penalises, since copied generic criteria rarely split the set). The frozen verifier applies each
rubric to C and
to the anchor list (``evaluator.score_rubrics``); the rewards are R_disc (Eq. 13, on C) and R_anchor (Eq. 15, on
the anchors). They are combined at the advantage level, Eq. 24-25:

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
kept; a rollout cut at ``max_completion_length`` is scored from its complete items and counted as truncated). A
rollout with no usable item, or whose verdicts are incomplete (a verifier answer that is not yes/no), gets the
floor rewards R_disc = 0 (its minimum) and R_anchor = the value of a rubric that separates nothing (all n anchor
scores equal: ``anchor_reward([0] * n)`` = sum of log(1/2) weights). They are counted per reward call in the
history (``unparseable``, ``unscorable_verdicts``) and recorded with their ``error``.

Policy update (``train_policy``), one row per ``PolicyRow``; ``num_generations`` = K rollouts per prompt. For each
group of K completions the FIXED generator G(t) (an ``Engine``) writes one rubric over the K completions
(``prompts.dynamic_generator_messages``, structured JSON by ``prompts.GENERATOR_JSON_SCHEMA``, parsed by
``evaluator.generate_rubrics``: strict JSON, keeping the usable items of a complete output), the frozen verifier
checks it on each completion, and the reward is the completion's Eq. 12 score. Advantages are TRL's default Eq. 21
(``scale_rewards="group"``). An unscorable rollout (the rubric failed, or one of its verdicts is missing) is
counted, recorded with ``score`` None, and returned to TRL as None: TRL 1.16 turns it into NaN, leaves it out of
the group's mean and std (nanmean/nanstd) and sets its advantage to 0 - the same as giving it the group mean of
the scorable ones. If no rollout of a group is scorable, every advantage of the group is 0.

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

Checkpoints and resume: TRL saves ``out_dir/checkpoints/checkpoint-N`` every ``save_steps``; a new call with the
same ``out_dir`` resumes from the newest checkpoint whose ``trainer_state.json`` exists (it is written last). The
final model (merged when LoRA) and its tokenizer go to ``out_dir/final``, written under a temporary name, with
``result.json`` and then the ``.dr-complete`` marker last, and renamed into place; a call that finds a complete
``out_dir/final`` returns its saved result without training again. Once ``final`` is in place the resumable
checkpoints are deleted (``keep_resume_checkpoints`` keeps them): for SmolLM2-135M they are 1.6 GB per update. The
reward history is appended to
``out_dir/history.jsonl`` so a resumed run reports the whole run. Likewise every rollout record goes to
``out_dir/records.jsonl`` as it is handed to ``on_rollouts``: a resumed call first hands ``on_rollouts`` the records
of the steps before its checkpoint (those after it are done again), and a call that finds the finished model hands
it every record of the run, so ``on_rollouts`` always sees each rollout of the whole run exactly once per call
(replayed records come back from JSON: tuples as lists).

On CPU: bf16 mixed precision where the CPU has bf16 instructions, float32 elsewhere (``GRPOSettings.bf16``
'auto', dr_core/numerics.py), ``OMP_NUM_THREADS=1``, ``use_vllm=False`` (TRL's vLLM modes need CUDA here);
several CPU processes (DeepSpeed tests) get ``ddp_backend="gloo"``, which accelerate does not pick by itself.
Multi-GPU: ``accelerate launch --config_file infra/accelerate/zero2.yaml -m dr_core.train.launch ...``.

    python -c "from dr_core.train.settings import GRPOSettings; print(GRPOSettings())"
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from dr_core import faults, progress
from dr_core.constants import COMPLETE_MARKER, UNSCORABLE
from dr_core.engines.base import Engine
from dr_core.evaluator.generate import shuffled_order
from dr_core.evaluator.items import EvalItem, GeneratedRubric
from dr_core.evaluator.score import evaluate_sets, score_rubrics
from dr_core.resources import return_freed_memory
from dr_core.rubric import prompts
from dr_core.rubric.schema import Rubric, RubricError, parse_rubric
from dr_core.scoring.equations import anchor_reward, combined_advantages
from dr_core.store.atomic import publish_dir, write_atomic
from dr_core.train import logprobs, lora
from dr_core.train.settings import GRPOSettings

FINAL_DIR = "final"
CHECKPOINTS_DIR = "checkpoints"
RESULT_FILE = "result.json"
HISTORY_FILE = "history.jsonl"
RECORDS_FILE = "records.jsonl"

OnRollouts = Callable[[list[dict]], None]


class GroupSplitError(RuntimeError):
    """A reward call got a group of rollouts that is split or incomplete: its set-level reward cannot be computed."""


@dataclass(frozen=True)
class GeneratorRow:
    """One generator training example: prompt x, the current policy's response set C, the ranked anchor list
    (best first; at least 2). ``group_id`` is unique within a call."""

    group_id: int
    prompt: str
    candidates: tuple[str, ...]
    anchors: tuple[str, ...]


@dataclass(frozen=True)
class PolicyRow:
    """One policy training prompt. ``group_id`` is unique within a call; ``prompt_id`` is the store's id."""

    group_id: int
    prompt_id: str
    prompt: str


@dataclass
class TrainResult:
    """What one update produced. ``checkpoint``: the final model directory (with tokenizer and marker).
    ``history``: one dict per reward call of the whole run (resumed parts included). ``reward_first/last``: the
    mean reward of the first and last reward call (generator: R_disc + lam R_anchor; policy: Eq. 12 score of the
    scorable rollouts). ``step_seconds``: training seconds per optimiser step of this call. ``rollout_stats``: with
    ``rollouts="vllm"``, the weight syncs and the seconds spent syncing and generating (dr_core/train/rollouts.py)."""

    checkpoint: str
    steps: int
    history: list[dict]
    reward_first: float | None
    reward_last: float | None
    seconds: float
    resumed_from: str | None
    step_seconds: float | None = None
    rollout_stats: dict | None = None
    trl_advantages: list[list[float]] = field(default_factory=list, repr=False)


# ------------------------------------------------------------------------------------------------ reward logic


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


def anchor_floor(n: int) -> float:
    """R_anchor of a rubric that separates nothing: every anchor score equal (Eq. 15 at S_i = S_j)."""
    return anchor_reward([0.0] * n)


def _completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion)


def parse_rollout(text: str) -> Rubric | RubricError:
    """A GRPO rubric rollout (not grammar-constrained), every complete item kept."""
    return parse_rubric(text, recover=True)


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _step(trainer_state) -> int:
    return int(getattr(trainer_state, "global_step", 0) or 0)


class GeneratorReward:
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
        self.rows = {r.group_id: r for r in rows}
        self.verifier, self.settings, self.on_rollouts = verifier, settings, on_rollouts
        self.history = history if history is not None else []
        self.eos_token_id = eos_token_id

    def _truncated(self, ids) -> bool:
        ids = list(ids) if ids is not None else []
        return len(ids) >= self.settings.max_completion_length and (not ids or ids[-1] != self.eos_token_id)

    def __call__(
        self,
        prompts=None,
        completions=(),
        completion_ids=None,
        group_id=(),
        trainer_state=None,
        log_metric=None,
        **_kwargs,
    ) -> list[float]:
        started = time.perf_counter()
        g = self.settings.num_generations
        blocks = check_whole_groups(group_id, g)
        step = _step(trainer_state)
        texts = [rollout_prefix(self.settings) + _completion_text(c) for c in completions]
        ids = completion_ids if completion_ids is not None else [None] * len(texts)
        items, gens = [], []
        for i, text in enumerate(texts):
            row = self.rows[blocks[i // g]]
            truncated = self._truncated(ids[i])
            parsed = parse_rollout(text)
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
        with progress.activity("reward verdicts", "verdicts"):
            scored, _stats = score_rubrics(self.verifier, items, gens)
        r_disc, r_anchor, scorable = [], [], []
        for item, (s,) in zip(items, scored):
            ok = s.r_disc is not UNSCORABLE and s.r_anchor is not UNSCORABLE
            scorable.append(ok)
            r_disc.append(s.r_disc if ok else 0.0)
            r_anchor.append(s.r_anchor if ok else anchor_floor(len(item.anchors)))
        adv = combined_advantages(r_disc, r_anchor, g, self.settings.lam)
        records = []
        for i, (s,) in enumerate(scored):
            gen = s.generation
            records.append(
                {
                    "group_id": blocks[i // g],
                    "rollout": i % g,
                    "step": step,
                    "text": gen.text,
                    "truncated": gen.finish_reason == "length",
                    "items": [(it.criterion, it.weight) for it in gen.rubric.items] if gen.rubric else None,
                    "dropped": gen.dropped,
                    "error": gen.error or (None if scorable[i] else "; ".join(s.unscorable)),
                    "verdicts_C": s.verdicts,
                    "verdicts_anchor": s.anchor_verdicts,
                    "scores_C": s.scores,
                    "scores_anchor": s.anchor_scores,
                    "r_disc": float(r_disc[i]),
                    "r_anchor": float(r_anchor[i]),
                    "scorable": scorable[i],
                    "advantage": float(adv[i]),
                }
            )
        lam = self.settings.lam
        entry = {
            "step": step,
            "rollouts": len(texts),
            "groups": len(blocks),
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
        self.history.append(entry)
        if log_metric is not None:
            for key in ("r_disc_mean", "r_anchor_mean", "unparseable"):
                log_metric(f"dr/{key}", float(entry[key]))
        if self.on_rollouts is not None:
            self.on_rollouts(records)
        return [float(a) for a in adv]


class PolicyReward:
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
        self.rows = {r.group_id: r for r in rows}
        self.generator, self.verifier, self.settings, self.on_rollouts = generator, verifier, settings, on_rollouts
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
    ) -> list[float | None]:
        started = time.perf_counter()
        k = self.settings.num_generations
        blocks = check_whole_groups(group_id, k)
        step = _step(trainer_state)
        texts = [_completion_text(c) for c in completions]
        items = [EvalItem(self.rows[gid].prompt, tuple(texts[b * k : (b + 1) * k])) for b, gid in enumerate(blocks)]
        with progress.activity("reward rubrics and verdicts", "requests"):
            ev = evaluate_sets(
                self.generator,
                self.verifier,
                items,
                [self.settings.seed + step],
                temperature=self.settings.rubric_temperature,
                max_tokens=self.settings.rubric_max_tokens,
                structured=True,
            )
        rewards: list[float | None] = []
        records = []
        for b, (gid, (s,)) in enumerate(zip(blocks, ev.results)):
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
                        "rubric_items": [(it.criterion, it.weight) for it in gen.rubric.items] if gen.rubric else None,
                        "rubric_error": gen.error,
                        "verdicts": s.verdicts[r] if s.verdicts is not None else None,
                        "score": score,
                    }
                )
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
        self.history.append(entry)
        if log_metric is not None:
            log_metric("dr/unscorable", float(entry["unscorable"]))
        if self.on_rollouts is not None:
            self.on_rollouts(records)
        return rewards


# ------------------------------------------------------------------------------------------------ training


def is_complete(path: str | Path) -> bool:
    """True when ``path`` is a finished final model directory (its marker is written last)."""
    return (Path(path) / COMPLETE_MARKER).is_file()


def last_checkpoint(checkpoints_dir: str | Path) -> Path | None:
    """The newest ``checkpoint-N`` whose ``trainer_state.json`` (written last by transformers) exists."""
    d = Path(checkpoints_dir)
    if not d.is_dir():
        return None
    done = [
        p for p in d.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return max(done, key=lambda p: int(p.name.split("-")[-1])) if done else None


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _history_path(out_dir: Path) -> Path:
    rank = _rank()
    return out_dir / (HISTORY_FILE if rank == 0 else f"history.rank{rank}.jsonl")


def _read_jsonl(path: Path) -> list[dict]:
    """The entries of a JSON-lines file we append to; a last line torn by a crash mid-append is left out."""
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
    return out


def _load_history(out_dir: Path, before_step: int) -> list[dict]:
    """History of earlier calls up to the resumed step (later entries are re-done after the resume)."""
    return [e for e in _read_jsonl(_history_path(out_dir)) if e["step"] < before_step]


def _records_path(out_dir: Path) -> Path:
    rank = _rank()
    return out_dir / (RECORDS_FILE if rank == 0 else f"records.rank{rank}.jsonl")


def _jsonable(value):
    return value.item() if hasattr(value, "item") else str(value)


class _PersistedRecords:
    """``on_rollouts`` that first appends the records to a JSON-lines file, then hands them on."""

    def __init__(self, path: Path, initial: list[dict], downstream: OnRollouts | None):
        self.path, self.downstream = path, downstream
        write_atomic(path, "".join(json.dumps(r, default=_jsonable) + "\n" for r in initial))  # as the history

    def __call__(self, records: list[dict]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, default=_jsonable) + "\n" for r in records)
        if self.downstream is not None:
            self.downstream(records)


def _replay_records(reward, out_dir: Path, before_step: int | None) -> list[dict]:
    """Hand ``reward.on_rollouts`` the saved records of an earlier call (all of them, or those of the steps before
    ``before_step``) and return them."""
    saved = _read_jsonl(_records_path(out_dir))
    if before_step is not None:
        saved = [r for r in saved if r["step"] < before_step]
    if saved and getattr(reward, "on_rollouts", None) is not None:
        reward.on_rollouts(saved)
    return saved


class _PersistedHistory(list):
    """A list that also appends each entry to a JSON-lines file (so a resumed run reports the whole run)."""

    def __init__(self, path: Path, initial: list[dict]):
        super().__init__(initial)
        self.path = path
        # rewritten whole and atomically: a crash here must not lose the entries of the steps before the resume
        write_atomic(path, "".join(json.dumps(e) + "\n" for e in initial))

    def append(self, entry: dict) -> None:
        super().append(entry)
        with self.path.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")


def _fault_callback():
    """A TRL/transformers callback with the ``grpo-step`` fault point (``dr_core.faults``) at the end of every
    optimiser step, before that step's checkpoint is saved: a fault there strikes between two checkpoints."""
    from transformers import TrainerCallback

    class FaultPoint(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            faults.fault_point("grpo-step")  # DR_FAULT hook (dr_core/faults.py)

    return FaultPoint()


def _effective_beta(settings: GRPOSettings) -> float:
    """The KL coefficient given to TRL. A one-step update (one generation per step) never leaves the reference
    model: the KL term (k3 estimator) and its gradient are 0 at that step, so beta = 0 is the same update and TRL
    then loads no reference model (its memory and its forward pass saved). Otherwise the settings' beta; the first
    step of a longer update still skips the reference forward (``dr_skip_ref_at_start``)."""
    one_step = settings.max_steps == 1
    return (
        0.0
        if one_step and _one_generation_per_step(settings.steps_per_generation, settings.gradient_accumulation_steps)
        else settings.beta
    )


def _one_generation_per_step(steps_per_generation: int | None, gradient_accumulation_steps: int) -> bool:
    """True when every completion generated is trained on within its own optimiser step (TRL generates once per
    ``steps_per_generation`` micro-steps; None means once per step)."""
    return (steps_per_generation or gradient_accumulation_steps) == gradient_accumulation_steps


def _progress_callback(max_steps: int):
    """A TRL/transformers callback that counts optimiser steps in ``dr_core.progress`` (the CLI's bar)."""
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        work = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.work = progress.Work("GRPO steps", max_steps, "steps")
            if state.global_step:
                self.work.advance(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            if self.work is not None:
                self.work.advance(1)

        def on_train_end(self, args, state, control, **kwargs):
            if self.work is not None:
                self.work.close()
                self.work = None

    return StepProgress()


def _grpo_trainer_class():
    from trl import GRPOTrainer

    class RecordingGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that keeps the advantages TRL computed (this process's slice), for checks and tests."""

        dr_advantages: list[list[float]]

        dr_skip_ref_at_start = True
        dr_ref_forwards_skipped = 0

        def _reference_is_policy(self) -> bool:
            """True while the policy still has the reference's weights (the first optimiser step of a fresh run)
            and every completion generated now is trained on within this step (one generation per step)."""
            a = self.args
            return (
                self.dr_skip_ref_at_start
                and self.state.global_step == 0
                and self.beta != 0.0
                and self.num_iterations == 1
                and _one_generation_per_step(a.steps_per_generation, a.gradient_accumulation_steps)
            )

        def training_step(self, model, inputs, num_items_in_batch=None):
            # At the first step the policy IS the reference, so the KL term (k3 estimator) and its gradient are
            # exactly 0 there: training with beta = 0 for that step is the same update, without the reference
            # model's forward pass over every prompt and completion.
            if not self._reference_is_policy():
                return super().training_step(model, inputs, num_items_in_batch)
            beta, self.beta = self.beta, 0.0
            self._dr_beta_held = True
            try:
                return super().training_step(model, inputs, num_items_in_batch)
            finally:
                self.beta, self._dr_beta_held = beta, False

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **multimodal,
        ):
            if not logprobs.completion_only_head(self, input_ids, compute_aux_loss, multimodal):
                return super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size=batch_size,
                    compute_entropy=compute_entropy,
                    compute_aux_loss=compute_aux_loss,
                    **multimodal,
                )
            return logprobs.completion_logps(
                self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy
            )

        def _generate_and_score_completions(self, inputs):
            if getattr(self, "_dr_beta_held", False):
                self.dr_ref_forwards_skipped += 1
            output = super()._generate_and_score_completions(inputs)
            self.dr_advantages.append(output["advantages"].detach().float().cpu().reshape(-1).tolist())
            return output

    return RecordingGRPOTrainer


def _train(
    base_checkpoint: str | Path,
    dataset_rows: list[dict],
    reward,
    settings: GRPOSettings,
    out_dir: str | Path,
    scale_rewards: str,
) -> TrainResult:
    start = time.perf_counter()
    out_dir = Path(out_dir)
    final = out_dir / FINAL_DIR
    if is_complete(final):
        _replay_records(reward, out_dir, None)
        return TrainResult(**json.loads((final / RESULT_FILE).read_text()))

    import torch

    if not torch.cuda.is_available():  # DeepSpeed (imported by TRL) would warn it "was unable to detect" a GPU
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    ckpt_dir = out_dir / CHECKPOINTS_DIR
    resume = last_checkpoint(ckpt_dir)
    resumed_step = json.loads((resume / "trainer_state.json").read_text())["global_step"] if resume else 0
    reward.history = _PersistedHistory(_history_path(out_dir), _load_history(out_dir, resumed_step) if resume else [])
    earlier = _replay_records(reward, out_dir, resumed_step) if resume else []
    reward.on_rollouts = _PersistedRecords(_records_path(out_dir), earlier, reward.on_rollouts)

    tokenizer = AutoTokenizer.from_pretrained(str(base_checkpoint))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if hasattr(reward, "eos_token_id"):
        reward.eos_token_id = tokenizer.eos_token_id
    # float32 master weights always: with bf16 the trainer runs mixed precision (autocast), so AdamW's small updates
    # (lr 1e-6 moves a weight by about 1e-6, far below bf16's resolution of 2**-8 relative) are not rounded away
    model = AutoModelForCausalLM.from_pretrained(str(base_checkpoint), dtype=torch.float32)
    peft_config = None
    if settings.use_lora:
        from peft import LoraConfig

        if lora.bf16_base_fits(settings, torch.cuda.is_available()):
            lora.bf16_linears(model)  # frozen linear weights in bf16: what autocast computes with anyway

        peft_config = LoraConfig(
            r=settings.lora_r, lora_alpha=settings.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    args = GRPOConfig(
        output_dir=str(ckpt_dir),
        learning_rate=settings.learning_rate,
        beta=_effective_beta(settings),
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        per_device_train_batch_size=settings.per_device_train_batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        steps_per_generation=settings.steps_per_generation,
        max_steps=settings.max_steps,
        temperature=settings.temperature,
        seed=settings.seed,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.save_total_limit,
        logging_steps=settings.logging_steps,
        bf16=settings.bf16,
        fp16=False,
        gradient_checkpointing=settings.gradient_checkpointing,
        # transformers accepts bf16 without a GPU only with use_cpu; accelerate then autocasts the CPU to bf16
        use_cpu=settings.bf16 and not torch.cuda.is_available(),
        deepspeed=settings.deepspeed,
        scale_rewards=scale_rewards,
        use_vllm=False,
        # several processes without CUDA (DeepSpeed on CPU): accelerate finds no backend by itself
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available() else None,
        report_to="none",
        disable_tqdm=True,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning without an accelerator only warns
    )
    rollouts = None
    if settings.rollouts == "vllm":
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("rollouts='vllm' runs one in-process engine: start one process (or use rollouts='trl')")
        from dr_core.train.rollouts import vllm_rollouts

        rollouts = vllm_rollouts(str(base_checkpoint), [r["prompt"] for r in dataset_rows], tokenizer, settings)
    try:
        trainer = _grpo_trainer_class()(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_list(dataset_rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[_fault_callback(), _progress_callback(settings.max_steps)],
            rollout_func=rollouts,
        )
        if not progress.verbose():
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # it prints every log dict to stdout
        trainer.dr_advantages = []
        train_start = time.perf_counter()
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        train_seconds = time.perf_counter() - train_start
    finally:
        if rollouts is not None:
            rollouts.close()  # free the engine (its model and KV cache) before the save
            return_freed_memory()  # and give its pages back: the save's copies come on top of what is resident
    steps = int(trainer.state.global_step)

    partial = out_dir / f"{FINAL_DIR}.partial"
    main = trainer.accelerator.is_main_process
    if main and partial.exists():
        shutil.rmtree(partial)
    trainer.accelerator.wait_for_everyone()
    if settings.use_lora:
        if main:
            peft_model = trainer.accelerator.unwrap_model(trainer.model)
            if lora.has_bf16_base(peft_model):  # merged onto the float32 base, never onto its bf16 copy
                lora.save_merged(peft_model, base_checkpoint, partial)
            else:
                peft_model.merge_and_unload().save_pretrained(partial)
    else:
        trainer.save_model(str(partial))  # every rank: gathers ZeRO-3 shards
    history = list(reward.history)
    result = TrainResult(
        checkpoint=str(final),
        steps=steps,
        history=history,
        reward_first=history[0]["reward_mean"] if history else None,
        reward_last=history[-1]["reward_mean"] if history else None,
        seconds=time.perf_counter() - start,
        resumed_from=str(resume) if resume else None,
        step_seconds=train_seconds / max(1, steps - resumed_step),
        trl_advantages=list(trainer.dr_advantages),
        rollout_stats=None
        if rollouts is None
        else {
            "engine": "vllm",
            "weight_syncs": rollouts.syncs,
            "sync_seconds": round(rollouts.sync_seconds, 2),
            "generate_seconds": round(rollouts.generate_seconds, 2),
        },
    )
    if main:
        tokenizer.save_pretrained(partial)
        saved = asdict(result)
        saved["trl_advantages"] = []
        (partial / RESULT_FILE).write_text(json.dumps(saved))
        (partial / COMPLETE_MARKER).write_text(json.dumps({"steps": steps}) + "\n")  # last: the model is whole
        publish_dir(partial, final)
    trainer.accelerator.wait_for_everyone()
    if main and not settings.keep_resume_checkpoints:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    return result


def _check_ids(rows) -> None:
    ids = [r.group_id for r in rows]
    if not rows:
        raise ValueError("no training rows")
    if len(set(ids)) != len(ids):
        raise ValueError("group_id must be unique within one training call")


def rollout_prefix(settings: GRPOSettings) -> str:
    """Text every generator rollout starts with (and that its parse sees): the primer of the 'lines' format."""
    return prompts.LINES_ROLLOUT_PREFIX if settings.rubric_format == "lines" else ""


def generator_dataset(rows: Sequence[GeneratorRow], settings: GRPOSettings, tokenizer=None) -> list[dict]:
    """TRL dataset rows: the generator prompt (C in the seeded shuffled order) and the group id. 'json' rollouts get
    the conversational prompt; 'lines' rollouts a rendered text prompt (the chat template's generation prompt plus
    the primer), because TRL's GRPO always opens a fresh assistant turn for conversational prompts."""
    out = []
    for row in rows:
        order = shuffled_order(len(row.candidates), settings.seed, row.group_id)
        messages = prompts.dynamic_generator_messages(
            row.prompt, [row.candidates[k] for k in order], answer=settings.rubric_format
        )
        if settings.rubric_format == "lines":
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            out.append({"prompt": text + rollout_prefix(settings), "group_id": row.group_id})
        else:
            out.append({"prompt": messages, "group_id": row.group_id})
    return out


def train_generator(
    base_checkpoint: str | Path,
    rows: list[GeneratorRow],
    verifier: Engine,
    settings: GRPOSettings,
    out_dir: str | Path,
    on_rollouts: OnRollouts | None = None,
) -> TrainResult:
    """G(t-1) -> G(t): GRPO on rubric rollouts with the Eq. 24-25 advantage of R_disc and lam * R_anchor.

    base_checkpoint: G(t-1) (a Hugging Face directory). rows: the sets to write rubrics for (each with >= 2 anchors).
    verifier: the frozen DR-Verifier. Returns the TrainResult; the model is in ``out_dir/final``.
    """
    _check_ids(rows)
    for r in rows:
        if not r.candidates:
            raise ValueError(f"group {r.group_id}: no candidate responses")
        if len(r.anchors) < 2:
            raise ValueError(f"group {r.group_id}: the anchor list needs at least 2 ranked responses")
    reward = GeneratorReward(rows, verifier, settings, on_rollouts)
    tokenizer = None
    if settings.rubric_format == "lines":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(base_checkpoint))
    return _train(base_checkpoint, generator_dataset(rows, settings, tokenizer), reward, settings, out_dir, "none")


def train_policy(
    base_checkpoint: str | Path,
    rows: list[PolicyRow],
    generator: Engine,
    verifier: Engine,
    settings: GRPOSettings,
    out_dir: str | Path,
    on_rollouts: OnRollouts | None = None,
) -> TrainResult:
    """P(t-1) -> P(t): GRPO (Eq. 21 advantages) with each rollout's Eq. 12 score under the rubric the fixed G(t)
    writes for its group of K. Returns the TrainResult; the model is in ``out_dir/final``."""
    _check_ids(rows)
    reward = PolicyReward(rows, generator, verifier, settings, on_rollouts)
    dataset = [{"prompt": prompts.policy_messages(r.prompt), "group_id": r.group_id} for r in rows]
    return _train(base_checkpoint, dataset, reward, settings, out_dir, "group")


def result_dict(result: TrainResult) -> dict[str, Any]:
    """The result as plain JSON-able data (without the per-call TRL advantages)."""
    out = asdict(result)
    out.pop("trl_advantages", None)
    return out
