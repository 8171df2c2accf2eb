"""DynamicRubric co-evolution, Algorithm 1 end to end, as a Prefect flow over the artifact store.

    dr coevolve --preset tiny --rounds 1 --store ./store --run-id demo      # or: python -m flows.coevolve

G(0) and P(0) are the generator's and the policy's configured models (tasks/train.py::base_ref); the verifier
stays frozen (self-contained mode: one backbone for all three roles, set in the engines). For t = 1..T:
  1. sample C from P(t-1) on the round's prompts                               (stage "generator")
  2. generator update G(t-1) -> G(t): GRPO on R_disc + lam R_anchor            (tasks/train.py)
  3. policy update P(t-1) -> P(t): GRPO on Eq. 12 scores from the fixed G(t)  (tasks/train.py)
  4. measure P(t) with G(t): sets, rubrics, verdicts, scores, gap, accuracy    (flows/steps.py::measure)
  5. win rate of P(t) against P(0) on held-out prompts, pairwise judge        (tasks/policy_eval.py)
Round 0 (``measure_start``) measures P(0) with G(0): the "before" numbers. Every step is a cached, retryable task:
re-running a finished round does no training and no model work. The result's ``warnings`` say in words when the
signal degenerated (``dr_core.scoring.signals``): a GRPO step with no gradient, a verifier that says yes (or no) to
almost everything, sets whose scores are constant; they also go to the flow run's log.
"""

from __future__ import annotations

import contextlib

from prefect import flow, get_run_logger
from pydantic import Field, field_validator

from dr_core.config import CoevolveConfig, coevolve_preset, numerics
from dr_core.report import monitors
from dr_core.runs import tracking
from dr_core.runs.refs import (
    CheckpointRef,
    CoevolveResult,
    CoevolveRound,
    RoundInputs,
    StepContext,
    UpdateRef,
    UpdateSummary,
)
from dr_core.scoring import signals
from flows import artifacts, runners
from flows.steps import RunParams, Steps, measure, sample_step, with_models
from tasks import policy_eval as policy_eval_task
from tasks import round as round_tasks
from tasks import train
from tasks.runtime import model_id


class CoevolveParams(RunParams):
    """Parameters of one co-evolution flow run."""

    config: CoevolveConfig = Field(default_factory=lambda: coevolve_preset("tiny"), description="Algorithm 1 config.")
    start_round: int = Field(1, ge=1, description="Number of the first round to run (the anchor refresh continues).")
    generator_start: dict | None = Field(
        None, description="Checkpoint ref {uri, fingerprint} of G(start-1); None: G(0)."
    )
    policy_start: dict | None = Field(None, description="Checkpoint ref {uri, fingerprint} of P(start-1); None: P(0).")

    @field_validator("generator_start", "policy_start")
    @classmethod
    def _checkpoint_ref(cls, ref: dict | None) -> dict | None:
        if ref is not None and not all(isinstance(ref.get(k), str) and ref[k] for k in ("uri", "fingerprint")):
            raise ValueError(
                f"a checkpoint ref needs non-empty 'uri' and 'fingerprint' strings; got keys {sorted(ref)}"
            )
        return ref


def round_warnings(rounds: list[CoevolveRound]) -> list[str]:
    """The degenerate-signal warnings of the run's round summaries, in words (``dr_core.scoring.signals``)."""
    updates = [
        {"role": role, "round": r.round, "steps": u.zero_std_by_step}
        for r in rounds
        for role, u in (("generator", r.generator_update), ("policy", r.policy_update))
        if u is not None
    ]
    return signals.signal_warnings(
        updates,
        yes_rates={r.round: r.measure.verifier_yes_rate for r in rounds},
        constant_score_shares={r.round: r.measure.constant_score_sets_share for r in rounds},
        judge_position_rates={r.round: (r.policy_eval or {}).get("judge_position_a_rate") for r in rounds},
    )


@flow(name="dynamicrubric-coevolve", task_runner=runners.from_env())
def coevolve_flow(params: CoevolveParams) -> CoevolveResult:
    cfg = params.config
    measure_start = cfg.measure_start and params.start_round == 1
    steps = Steps(
        StepContext(store=params.store, run_id=params.run_id, round_no=0 if measure_start else params.start_round)
    )
    gen = _start(params.generator_start) or train.base_ref(cfg.round.engines.generator)
    pol = _start(params.policy_start) or train.base_ref(cfg.round.engines.policy)
    numbers = numerics.describe(cfg.round.engines, {"generator": cfg.generator, "policy": cfg.policy})
    get_run_logger().info(numbers)  # once per run, in the CLI's log and a deployment's alike

    tracker = tracking.open_tracker(params.track, params.store, warn=get_run_logger().warning)
    tracker.start(params.run_id, "coevolve", {"config": cfg.model_dump(mode="json"), "start_round": params.start_round})
    found: list[dict] = []  # the monitors' findings, after each round
    with steps.log, tracked(tracker):  # select-inputs goes with the first round flushed (0 or start_round)
        inputs = steps.run(round_tasks.select_inputs, "select-inputs", cfg.round, params.store)
        rounds = []
        if measure_start:
            m0 = measure(steps, with_models(cfg.round, steps.store, gen.uri, pol.uri), inputs, prefix="r0/")
            rounds.append(CoevolveRound(round=0, generator=gen.uri, policy=pol.uri, measure=m0.summary))
            steps.log.flush()
            found = run_monitors(steps, cfg)
            publish_rounds(params.run_id, rounds, found, tracker)
        for t in range(params.start_round, params.start_round + cfg.rounds):
            steps.log.round = t
            gen, pol, summary = coevolve_round(steps.at(round_no=t), cfg, inputs, gen, pol)
            steps.log.flush()
            tracker.log_update(t, "generator", gen, cfg.generator.model_dump(mode="json"))
            tracker.log_update(t, "policy", pol, cfg.policy.model_dump(mode="json"))
            rounds.append(summary)
            found = run_monitors(steps, cfg)
            publish_rounds(params.run_id, rounds, found, tracker)
        if tracker.enabled:
            log_report(steps, cfg, tracker)
    warnings = round_warnings(rounds)
    for w in warnings + [f"monitor {f['monitor']}: {f['line']}" for f in found if f["level"] == monitors.WARN]:
        get_run_logger().warning(w)  # also in the flow run's log: a scheduled run (anchor refresh) has no CLI
    return CoevolveResult(
        run_id=params.run_id,
        numerics=numbers,
        rounds=rounds,
        steps=steps.log.entries(),
        generator=gen.model_dump(),
        policy=pol.model_dump(),
        warnings=warnings,
        signal_checks=signals.signal_checks([r.model_dump() for r in rounds]),
        monitors=found,
    )


def run_monitors(steps: Steps, cfg: CoevolveConfig) -> list[dict]:
    """The reward-hacking monitors' findings over what the run has stored so far (dr_core/report/monitors.py)."""
    con = steps.store.connect()
    try:
        return monitors.run_monitors(con, steps.ctx.run_id, cfg.monitors)
    finally:
        con.close()


def log_report(steps: Steps, cfg: CoevolveConfig, tracker: tracking.Tracker) -> None:
    """``dr report``'s page of the finished run as the tracker's ``report.html``; a page that cannot be made is one
    warning (the run's results are in the store either way)."""
    from dr_core.report.collect import collect
    from dr_core.report.render import render_html

    con = steps.store.connect()
    try:
        page = render_html(collect(con, steps.ctx.run_id, monitor_settings=cfg.monitors), steps.store.url)
    except Exception as e:  # the report is a view of the store: it must not fail the run
        get_run_logger().warning(f"report.html not logged to the tracker ({type(e).__name__}: {e})")
        return
    finally:
        con.close()
    tracker.log_text(page, "report.html")


def publish_rounds(
    run_id: str, rounds: list[CoevolveRound], found: list[dict] | None = None, tracker: tracking.Tracker | None = None
) -> bool:
    """The run so far as Prefect artifacts (flows/artifacts.py): its table, signal checks, warnings and monitor
    findings (``found``); and to the tracker, the newest round's figures and monitor levels and the same text. True
    when the artifacts were published."""
    found = found or []
    dumped = [r.model_dump() for r in rounds]
    checks, warnings = signals.signal_checks(dumped), round_warnings(rounds)
    if tracker is not None and tracker.enabled:
        figures = tracking.round_figures(dumped[-1], signals.signal_checks(dumped[-1:]))
        tracker.log_round(rounds[-1].round, figures | tracking.monitor_figures(found))
        tracker.log_text(artifacts.markdown_table(artifacts.coevolve_rows(dumped)), "summary.md")
        tracker.log_text(artifacts.signals_markdown(run_id, checks, warnings, found), "signals.md")
    return artifacts.publish_coevolve(run_id, dumped, checks, warnings, found)


@contextlib.contextmanager
def tracked(tracker: tracking.Tracker):
    """Close the tracker's parent run when the block ends: FINISHED, or FAILED when it raised."""
    try:
        yield tracker
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")


def _start(ref: dict | None) -> CheckpointRef | None:
    return None if ref is None else CheckpointRef(uri=ref["uri"], fingerprint=ref["fingerprint"])


def coevolve_round(
    steps: Steps, cfg: CoevolveConfig, inputs: RoundInputs, gen: CheckpointRef, pol: CheckpointRef
) -> tuple[UpdateRef, UpdateRef, CoevolveRound]:
    """Round t = ``steps.ctx.round_no`` of Algorithm 1: sample C from P(t-1), update G, update P with the new G,
    measure P(t) with G(t), evaluate P(t) against P(0). Returns G(t), P(t) and the round's summary."""
    t, st = steps.ctx.round_no, steps.store
    verifier = model_id(cfg.round.engines.verifier)
    rc = with_models(cfg.round, st, gen.uri, pol.uri)
    gen_steps = steps.at(stage="generator")
    sets = sample_step(gen_steps, rc, inputs, model_id(rc.engines.policy), f"r{t}/sample-P(t-1)")
    # served from another run's cache, the sets are that run's file: this run's partition gets its own copy
    sets = steps.run(round_tasks.adopt, f"r{t}/adopt-sample", gen_steps.ctx, {"samples": sets})["samples"]
    new_gen = steps.run(train.train_generator, f"r{t}/train-generator", gen_steps.ctx, cfg, inputs, sets, gen, verifier)
    new_pol = steps.run(
        train.train_policy,
        f"r{t}/train-policy",
        steps.ctx.at(stage="policy"),
        cfg,
        inputs.prompts,
        pol,
        new_gen,
        verifier,
    )
    m = measure(steps, with_models(cfg.round, st, new_gen.uri, new_pol.uri), inputs, prefix=f"r{t}/")
    pe = _evaluate_policy(steps, cfg, new_pol)
    steps.run(round_tasks.record_run, f"r{t}/record-run", steps.ctx, cfg.round, "coevolve-round-complete")
    summary = CoevolveRound(
        round=t,
        generator=new_gen.uri,
        policy=new_pol.uri,
        measure=m.summary,
        policy_eval=pe.metrics if pe else None,
        generator_update=UpdateSummary.of(new_gen),
        policy_update=UpdateSummary.of(new_pol),
    )
    return new_gen, new_pol, summary


def _evaluate_policy(steps: Steps, cfg: CoevolveConfig, pol: UpdateRef):
    """P(t) against P(0) on held-out prompts (tasks/policy_eval.py), its eval rows in this run's partition."""
    if cfg.policy_eval is None:
        return None
    t = steps.ctx.round_no
    pe = steps.run(policy_eval_task.evaluate_policy, f"r{t}/evaluate-policy", steps.ctx, cfg, pol.checkpoint)
    # served from another run's cache: copy its eval rows into this run's partition
    return steps.run(round_tasks.adopt, f"r{t}/adopt-policy-eval", steps.ctx, {"eval": pe})["eval"]


if __name__ == "__main__":
    print(coevolve_flow(CoevolveParams()))
