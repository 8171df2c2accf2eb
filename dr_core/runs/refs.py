"""What the pipeline's steps pass each other: where a step writes (``StepContext``) and what it wrote (typed
references), never frames.

- ``StepContext``: the store, the run id, the round and the stage of one step's artifacts, passed to a task as one
  argument. Only the stage is part of what the step computes: the cache key sees ``cache_identity()`` (the stage),
  never the store, the run id or the round, so the same work under another run id or in another round hits the
  cache (tasks/options.py).
- ``ArtifactRef``: one Parquet part file, ``{uri, sha256, rows}``, and what the step measured beside it (``cost``
  of model calls). The cache key of a step that reads it sees its content hash, never its URI. ``ShardRef`` adds
  which shard of a step wrote it (``shard`` of ``shards``, the ``sets`` range); ``EvalRef`` the metrics of an
  evaluation.
- ``CheckpointRef``: a model checkpoint, ``{uri, fingerprint}``: the cache key sees its identity, never its URI.
  ``UpdateRef`` adds what a GRPO update measured (steps, rewards, timings, degenerate-signal counts).
- ``RoundInputs`` (prompts and anchors of a round) and ``Scored`` (Eq. 12 scores and the generator's rewards).
- ``RoundSummary`` (a measurement's figures), ``UpdateSummary`` and ``CoevolveRound`` (one co-evolution round), and
  ``RoundResult`` and ``CoevolveResult``: what the flows return.
- ``write_ref``: write a step's rows and return their ``ArtifactRef``.

All are frozen pydantic models: Prefect persists them as task and flow results, and ``model_dump()`` gives the plain
dicts that the CLI prints and writes (``--json``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from dr_core.store.artifacts import Store


class _Ref(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepContext(_Ref):
    """Where one step's artifacts go: the store URL, the run id (partition), round t and the stage
    (``dr_core.store.schemas.STAGES``)."""

    store: str
    run_id: str
    round_no: int
    stage: str = "measure"

    def at(self, *, round_no: int | None = None, stage: str | None = None) -> StepContext:
        """The same run in another round or stage."""
        return self.model_copy(update={k: v for k, v in (("round_no", round_no), ("stage", stage)) if v is not None})

    def cache_identity(self) -> dict:
        """What the cache key sees of the context: the stage (the rows carry it); not where the rows go."""
        return {"stage": self.stage}

    @property
    def partition(self) -> dict:
        """The partition keys of the step's run tables: ``{"run_id", "round"}``."""
        return {"run_id": self.run_id, "round": self.round_no}


class ArtifactRef(_Ref):
    """One step's Parquet part: where it is, its content hash, its row count, and the cost of the model calls that
    made it (``dr_core.evaluator.endpoints``; None for a step without model calls)."""

    uri: str
    sha256: str
    rows: int
    cost: dict[str, Any] | None = None


class ShardRef(ArtifactRef):
    """One shard's part of a model step (``dr_core.runs.shards``): shard ``shard`` of ``shards``, holding the sets
    ``sets`` = [start, stop)."""

    shard: int
    shards: int
    sets: tuple[int, int]


class EvalRef(ArtifactRef):
    """An evaluation's ``eval`` rows and its headline metrics."""

    metrics: dict[str, Any]


class RoundInputs(_Ref):
    """The round's prompts and ranked anchor lists (``select-inputs``)."""

    prompts: ArtifactRef
    anchors: ArtifactRef


class SampleInputs(_Ref):
    """What the ``sample`` step reads: the round's prompts, and the identity of the policy that answers them."""

    prompts: ArtifactRef
    policy_model: str


class RubricInputs(_Ref):
    """What ``generate-rubrics`` reads: the prompts, the policy's response sets, the generator's identity."""

    prompts: ArtifactRef
    samples: ArtifactRef
    generator_model: str


class VerifyInputs(_Ref):
    """What ``verify`` reads: the prompts, the response sets, the ranked anchors, the rubrics, the verifier's
    identity."""

    prompts: ArtifactRef
    samples: ArtifactRef
    anchors: ArtifactRef
    rubrics: ArtifactRef
    verifier_model: str


class Scored(_Ref):
    """Eq. 12 scores per response and R_disc / R_anchor / advantages per rubric rollout (``score``)."""

    scores: ArtifactRef
    rewards: ArtifactRef


class CheckpointRef(_Ref):
    """A model checkpoint: ``uri`` where it lives (a bundled model's name for a start model), ``fingerprint`` its
    identity (``tasks.runtime.model_id``)."""

    uri: str
    fingerprint: str


class UpdateRef(CheckpointRef):
    """The checkpoint a GRPO update wrote, with what the update measured (tasks/train.py): its GRPO steps, the mean
    reward of its first and last step, seconds (all, per step), the rollouts and their group size G, the rollouts
    without a usable reward (the generator's ``unparseable`` rubrics, the policy's ``unscorable`` responses; None for
    the other role), the zero-spread groups per step with the steps that had no gradient, TRL's per-step KL
    (``kl_by_step``, beta > 0) and TRL's per-step log (``trl_log``, what ``--track mlflow`` logs; not registered with
    the checkpoint)."""

    steps: int
    reward_first: float | None = None
    reward_last: float | None = None
    seconds: float
    step_seconds: float | None = None
    resumed_from: str | None = None
    history: list[dict] = []
    rollout_stats: dict | None = None
    rollouts: int = 0
    group_size: int
    zero_std_by_step: list[dict] = []
    no_gradient_steps: int = 0
    unparseable: int | None = None
    unscorable: int | None = None
    kl_by_step: list[dict] = []
    trl_log: list[dict] = []

    @property
    def checkpoint(self) -> CheckpointRef:
        """The reference alone, without the metrics."""
        return CheckpointRef(uri=self.uri, fingerprint=self.fingerprint)


class RoundSummary(_Ref):
    """A measurement's summary figures (``dr_core.runs.round_steps.summarise``; what ``dr round`` prints). Counts of
    prompts, sets C, responses, rubric rollouts (failed: no usable item), items, verdicts (unscorable, scored),
    scores without a value; ``verifier_yes_rate`` and ``constant_score_sets_share`` are the signal checks
    (``dr_core.scoring.signals``); R_disc (Eq. 13), R_anchor (Eq. 15) and the anchor gap (Eq. 2) as avg@k; the
    evaluator's held-out accuracy over ``eval_n`` pairs. None: nothing to compute it from (never a silent 0)."""

    prompts: int
    sets: int
    responses: int
    rubric_rollouts: int
    rubric_failures: int
    rubric_items: int
    verdicts: int
    unscorable_verdicts: int
    verdicts_scored: int
    verifier_yes_rate: float | None
    constant_score_sets_share: float | None
    unscorable_scores: int
    r_disc: float | None
    r_anchor: float | None
    anchor_gap: float | None
    eval_accuracy: float | None
    eval_n: int | None


class UpdateSummary(_Ref):
    """What a round's summary shows of a GRPO update (``UpdateRef`` less its history): mean reward of the first and
    last step (4 decimals), steps, seconds (all, per step), the rollouts without a usable reward (``unparseable``
    for the generator, ``unscorable`` for the policy, None for the other role), the rollouts and their statistics,
    and the zero-spread groups per step with the steps that had no gradient."""

    reward_first: float | None
    reward_last: float | None
    steps: int
    seconds: float
    step_seconds: float | None
    unparseable: int | None
    unscorable: int | None
    rollouts: int
    rollout_stats: dict | None
    zero_std_by_step: list[dict]
    no_gradient_steps: int

    @classmethod
    def of(cls, ref: UpdateRef) -> UpdateSummary:
        """The summary of the update that wrote ``ref``."""
        rounded = {k: None if getattr(ref, k) is None else round(float(getattr(ref, k)), 4) for k in _REWARDS}
        return cls(**rounded, **{k: getattr(ref, k) for k in cls.model_fields if k not in _REWARDS})


_REWARDS = ("reward_first", "reward_last")


class CoevolveRound(_Ref):
    """One round of a co-evolution run: round t, the G(t) and P(t) checkpoints (URIs), P(t) measured with G(t),
    P(t) against P(0) on held-out prompts (its metrics by name; None: not configured) and the two updates. Round 0,
    the start measured, has no evaluation and no updates."""

    round: int
    generator: str
    policy: str
    measure: RoundSummary
    policy_eval: dict[str, Any] | None = None
    generator_update: UpdateSummary | None = None
    policy_update: UpdateSummary | None = None


class RoundResult(_Ref):
    """What a round flow returns (flows/round.py; ``dr round --json`` writes its ``model_dump``): the run and round,
    the numerics line, the round's summary figures, each step's state, seconds and peak memory by step name, and the
    URI of each table's part."""

    run_id: str
    round: int
    numerics: str
    summary: RoundSummary
    steps: dict[str, dict[str, Any]]
    artifacts: dict[str, str]


class CoevolveResult(_Ref):
    """What a co-evolution flow returns (flows/coevolve.py; ``dr coevolve --json``): the run, the numerics line, one
    summary per round (round 0: the start measured), each step by name, the last G(t) and P(t) with what their
    updates measured, the degenerate-signal warnings in words, the signal checks over the rounds and the
    reward-hacking monitors' findings (``dr_core.report.monitors``)."""

    run_id: str
    numerics: str
    rounds: list[CoevolveRound]
    steps: dict[str, dict[str, Any]]
    generator: dict[str, Any]
    policy: dict[str, Any]
    warnings: list[str]
    signal_checks: list[dict[str, Any]]
    monitors: list[dict[str, Any]]


def write_ref(store: Store, table: str, rows, part: str, **keys) -> ArtifactRef:
    """Write one step's rows as ``<table>/<keys>/<part>.parquet`` and return its reference (uri, content hash,
    row count)."""
    uri = store.write(table, rows, part=part, **keys)
    return ArtifactRef(uri=uri, sha256=store.content_hash(uri), rows=len(rows))


def _refs(obj):
    """Every ArtifactRef and CheckpointRef inside a step's result (models, dicts, lists, tuples)."""
    if isinstance(obj, (ArtifactRef, CheckpointRef)):
        yield obj
    elif isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            yield from _refs(getattr(obj, name))
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _refs(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _refs(v)


def unavailable(result, store: Store) -> list[str]:
    """What a step's result points at in ``store`` that the store no longer holds as the step wrote it: a part file
    that is missing or whose bytes differ from its ``sha256``, a checkpoint without its completion marker. Empty
    when everything is there. A cached result is only as good as this: a store that lost writes (an S3 server's
    host crashed, a part was deleted by hand) keeps a Prefect cache record pointing at nothing. References to other
    stores and to bundled models are not checked."""
    from dr_core.constants import COMPLETE_MARKER

    problems = []
    for ref in _refs(result):
        if not ref.uri.startswith(store.url + "/"):
            continue
        if isinstance(ref, ArtifactRef):
            if not store.exists(ref.uri):
                problems.append(f"{ref.uri} is missing")
            elif (found := store.content_hash(ref.uri)) != ref.sha256:
                problems.append(f"{ref.uri} holds other bytes ({found}) than the step wrote ({ref.sha256})")
        elif not store.exists(f"{ref.uri}/{COMPLETE_MARKER}"):
            problems.append(f"checkpoint {ref.uri} is missing or incomplete (no {COMPLETE_MARKER})")
    return problems
