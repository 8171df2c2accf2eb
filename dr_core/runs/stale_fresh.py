"""What the stale-versus-fresh experiment (paper section 4.4, Figure 2) scores, found in a run's artifacts.

After round t of a co-evolution run, the response sets of P(t-1) are scored twice with the same frozen verifier:
by the **stale** generator G(t-1) (trained on P(t-2)'s outputs) and by the **fresh** G(t) (trained on P(t-1)'s),
written under stages ``stale`` and ``fresh`` of round t. ``plan`` finds, from the store alone, the checkpoints and
the sets; ``restage`` copies the sets under the new stage; ``flows/stale_fresh.py`` runs the scoring;
``dr_core.report`` shows the comparison.

Which sets: the measure-stage samples of round t-1 (P(t-1)'s sets, scored by G(t-1) when they were measured); when
round t-1 was not measured (round 0 without ``measure_start``), the generator-stage samples of round t (the sets
P(t-1) produced for G(t)'s training, which favours the fresh generator: the plan says which it used).

    python -c "from dr_core.runs.stale_fresh import plan; from dr_core.store.artifacts import Store
    print(plan(Store.from_url('./store'), 'demo'))"
"""

from __future__ import annotations

import pyarrow as pa

from dr_core.config import DEFAULT_MODEL
from dr_core.model import is_bundled
from dr_core.runs.refs import ArtifactRef, StepContext, write_ref
from dr_core.store.artifacts import Store


def _checkpoint(rows: list[dict], role: str, round_no: int) -> str | None:
    """The URI of ``role``'s checkpoint after round ``round_no``. Round 0 is the role's start model: the bundled model
    that round 1's checkpoint was trained from (its registered parent), else the default model."""
    if round_no == 0:
        parents = [r["parent"] for r in rows if r["role"] == role and r["round"] == 1 and r.get("parent")]
        return parents[0] if parents and is_bundled(parents[0]) else DEFAULT_MODEL
    hits = [r["uri"] for r in rows if r["role"] == role and r["round"] == round_no]
    return hits[0] if hits else None


def plan(store: Store, run_id: str, round_no: int | None = None) -> dict:
    """The experiment for round t = ``round_no`` (None: the run's latest round with a generator checkpoint):
    ``{"round", "stale_generator", "fresh_generator", "policy", "sets": {"uri", "round", "stage"}, "config_json"}``
    (generator/policy values are checkpoint URIs, ``default`` for the starting model; ``config_json`` the run's
    latest recorded round config, or None). ValueError saying what is missing otherwise."""
    ckpts = (
        store.read_table("checkpoints", run_id=run_id).to_pylist() if store.parts("checkpoints", run_id=run_id) else []
    )
    gen_rounds = sorted({r["round"] for r in ckpts if r["role"] == "generator"})
    if round_no is None:
        if not gen_rounds:
            raise ValueError(
                f"run {run_id!r} in {store.url} has no generator checkpoint: run `dr coevolve` first "
                "(two rounds for the paper's comparison)"
            )
        round_no = gen_rounds[-1]
    if round_no < 1:
        raise ValueError(f"round must be >= 1 (G(t-1) vs G(t)), got {round_no}")
    fresh = _checkpoint(ckpts, "generator", round_no)
    stale = _checkpoint(ckpts, "generator", round_no - 1)
    policy = _checkpoint(ckpts, "policy", round_no - 1)
    missing = [
        name
        for name, uri in (
            ("G(%d)" % round_no, fresh),
            ("G(%d)" % (round_no - 1), stale),
            ("P(%d)" % (round_no - 1), policy),
        )
        if uri is None
    ]
    if missing:
        raise ValueError(
            f"run {run_id!r}: no registered checkpoint for {', '.join(missing)} (checkpoints table of "
            f"{store.url}); registered generator rounds: {gen_rounds or 'none'}"
        )
    sets = None
    for t, stage in ((round_no - 1, "measure"), (round_no, "generator")):
        uri = store.uri_for("samples", part=f"{stage}-samples", run_id=run_id, round=t)
        if store.exists(uri):
            sets = {"uri": uri, "round": t, "stage": stage}
            break
    if sets is None:
        raise ValueError(
            f"run {run_id!r}: no sets of P({round_no - 1}) in the store (neither measure samples of round "
            f"{round_no - 1} nor generator samples of round {round_no})"
        )
    runs = store.read_table("runs", run_id=run_id).to_pylist() if store.parts("runs", run_id=run_id) else []
    runs = [r for r in runs if r["config_json"]]
    config_json = max(runs, key=lambda r: r["created_at"])["config_json"] if runs else None
    return {
        "round": round_no,
        "stale_generator": stale,
        "fresh_generator": fresh,
        "policy": policy,
        "sets": sets,
        "config_json": config_json,
    }


def restage(ctx: StepContext, source_uri: str) -> ArtifactRef:
    """Copy the samples file at ``source_uri`` to ``<stage>-samples`` of the context's run and round, with the
    context's stage (``stale`` or ``fresh``): each stage's rows then sit side by side in one partition, and every
    query joins them like any other stage. The copy's content is the same on every run, so the round tasks downstream
    hit their content cache on a re-run."""
    s = Store.from_url(ctx.store)
    t = s.read(source_uri).drop_columns(["run_id", "round", "stage"])
    t = t.append_column("stage", pa.array([ctx.stage] * t.num_rows, pa.string()))
    return write_ref(s, "samples", t, f"{ctx.stage}-samples", **ctx.partition)
