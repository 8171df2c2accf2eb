"""The evaluator's phases of the IFEval benchmark: P(0)'s response sets C and held-out answers, the held-out prompts'
code-ranked anchors, the gate (the frozen verifier against the checkers), G(0) -> G(S) per seed, and criterion (b):
the agreement of each generator's Eq. 12 scores with the code's counts on the held-out sets."""

from __future__ import annotations

import numpy as np

from dr_core.config import engine_config
from dr_core.evals.policy_eval.answers import answer_prompts
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import Check, EvalItem, RubricSampling
from dr_core.evaluator.score import score_rubrics
from dr_core.evaluator.verify import verify
from dr_core.ifeval.checks import check, describe
from dr_core.ifeval.edits import anchor_list
from dr_core.rubric import prompts
from dr_core.train.grpo import GeneratorRow, GRPOSettings, train_generator
from infra.benchmarks.ifeval.run import Run
from infra.benchmarks.ifeval.stats import agreement, curve, hierarchical_ci
from infra.benchmarks.learning.run import log


def _engine(model, **kw):
    from dr_core.engines import make_engine

    return make_engine(engine_config(model=str(model), max_model_len=4096, **kw))


# -- P(0): C and the held-out answers -----------------------------------------------------------------------------
def sample_c(run: Run) -> dict[str, list[str]]:
    """``k`` answers of P(0) to every training and held-out prompt (temperature ``c_temperature``, seed 0; the
    machine's dtype: P(0) is the checkpoint as it is), by prompt id."""
    everything = run.train + run.held
    eng = _engine(run.models["policy"])
    try:
        outs = eng.chat(
            [prompts.policy_messages(p.row.prompt) for p in everything],
            n=run.p.k,
            temperature=run.p.c_temperature,
            max_tokens=run.p.answer_tokens,
            seed=0,
        )
    finally:
        eng.close()
    return {p.row.id: list(o.texts) for p, o in zip(everything, outs)}


def greedy_answers(run: Run, model) -> list[str]:
    """A policy's greedy answers to the held-out prompts, in a float32 engine (as every trained policy answers: a
    bf16 engine would round a LoRA update away)."""
    eng = _engine(model, dtype="float32")
    try:
        return [a.text for a in answer_prompts(eng, [p.row.prompt for p in run.held], max_tokens=run.p.answer_tokens)]
    finally:
        eng.close()


def heldout_anchors(run: Run, p0_answers: list[str]) -> dict[str, dict]:
    """Each held-out prompt's anchors: P(0)'s greedy answer edited by code to meet n..0 of its editable
    instructions (``dr_core.ifeval.edits``), with the checker's count of all its instructions met; {} entries for
    prompts whose edits give no strict list (their sets are C alone)."""
    out = {}
    for p, answer in zip(run.held, p0_answers):
        levels = anchor_list(p.row, answer)
        out[p.row.id] = {"texts": [lv.text for lv in levels], "met": [lv.met for lv in levels]} if levels else {}
    return out


# -- the gate ---------------------------------------------------------------------------------------------------
def gate(run: Run, verifier) -> dict:
    """The verifier against the checkers on every (anchor, instruction) check of the tuning and training anchors:
    the instruction's own text as the criterion. Balanced accuracy (the yes-rate on met checks and the no-rate on
    unmet ones, averaged; an unscorable verdict counts as wrong), plain agreement, Cohen's kappa, the yes-rate."""
    checks_, truth = [], []
    for p in run.tune + run.train:
        for response in p.anchors.responses:
            met = check(p.row, response)
            for iid, kw, v in zip(p.row.instruction_id_list, p.row.kwargs, met):
                checks_.append(Check(p.row.prompt, response, describe(iid, kw, p.row.prompt)))
                truth.append(int(v.strict))
    verdicts, stats = verify(verifier, checks_)
    t, v = np.asarray(truth), np.asarray([-1 if x is None else x for x in verdicts])
    tpr = float(np.mean(v[t == 1] == 1)) if (t == 1).any() else None
    tnr = float(np.mean(v[t == 0] == 0)) if (t == 0).any() else None
    bal = (tpr + tnr) / 2 if tpr is not None and tnr is not None else None
    agree = float(np.mean(v == t))
    yes = float(np.mean(v == 1))
    chance = yes * t.mean() + (1 - yes) * (1 - t.mean())
    p = run.p
    passed = bal is not None and bal >= p.gate_threshold and len(checks_) >= p.gate_min_checks
    result = {
        "checks": len(checks_),
        "met_share": float(t.mean()),
        "balanced_accuracy": bal,
        "accuracy": agree,
        "kappa": (agree - chance) / (1 - chance) if chance < 1 else None,
        "yes_rate": yes,
        "unscorable": int(sum(x is None for x in verdicts)),
        "true_positive_rate": tpr,
        "true_negative_rate": tnr,
        "threshold": p.gate_threshold,
        "passed": passed,
        "seconds": round(stats.seconds, 1),
    }
    log(
        f"gate: balanced accuracy {bal:.3f} on {len(checks_)} checks (threshold {p.gate_threshold}): "
        + ("passed" if passed else "NOT passed")
    )
    return result


# -- G(0) -> G(S) -------------------------------------------------------------------------------------------------
def generator_settings(run: Run, seed: int) -> GRPOSettings:
    p = run.p
    return run.grpo_settings(
        seed,
        p.generator_steps,
        learning_rate=p.generator_lr,
        num_generations=p.rubric_rollouts,
        max_completion_length=p.rubric_tokens,
        per_device_train_batch_size=p.rubric_rollouts * p.generator_prompts_per_step,
    )


def train_seed(run: Run, sets: dict[str, list[str]], verifier, seed: int) -> dict:
    """G(0) -> G(S) of one seed on the training prompts: R_disc on C plus R_anchor on the code-ranked anchors, at
    the advantage level (Eq. 24-25); its checkpoint and training curve."""
    import shutil

    rows = [
        GeneratorRow(i, p.row.prompt, tuple(sets[p.row.id]), tuple(p.anchors.responses))
        for i, p in enumerate(run.train)
    ]
    out = run.work / f"generator-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    records: list[dict] = []
    settings = generator_settings(run, seed)
    log(f"generator seed {seed}: {run.p.generator_steps} GRPO steps, {run.p.rubric_rollouts} rubrics a prompt")
    tr = train_generator(run.models["generator"], rows, verifier, settings, out, on_rollouts=records.extend)
    for r in records:
        r["reward"] = r["r_disc"] + settings.lam * r["r_anchor"]
    return {"checkpoint": tr.checkpoint, "seconds": tr.seconds, "curve": curve(tr.history, records, "reward")}


# -- (b): agreement with the code on the held-out sets ------------------------------------------------------------
def agreement_phase(run: Run, sets: dict[str, list[str]], anchors: dict[str, dict], verifier, gs: dict) -> dict:
    """One rubric per held-out set (the first ``agreement_heldout``) from G(0) sampled with each seed and from each
    seed's G(S) (in the format they are trained in: the primed lines prompt, rollout temperature), all verified in one
    call; per (model, seed, prompt)
    the Spearman agreement of the Eq. 12 scores over C and the anchors with the code's counts."""
    items, counts = [], []
    for p in run.held[: run.p.agreement_heldout]:
        a = anchors[p.row.id]
        c = sets[p.row.id]
        items.append(EvalItem(p.row.prompt, tuple(c), tuple(a["texts"]) if len(a.get("texts", ())) >= 2 else None))
        counts.append([sum(v.strict for v in check(p.row, x)) for x in c] + (a["met"] if items[-1].anchors else []))
    models = [("G0", s, run.models["generator"]) for s in run.p.seeds] + [("GS", s, gs[s]) for s in run.p.seeds]
    rubrics = [[] for _ in items]
    for name, seed, ckpt in models:
        eng = _engine(ckpt, dtype="float32")
        try:
            gen, _ = generate_rubrics(
                eng,
                items,
                [seed],
                RubricSampling(
                    temperature=run.p.temperature,
                    max_tokens=run.p.rubric_tokens,
                    structured=False,
                    rubric_format="lines",
                ),
            )
        finally:
            eng.close()
        for i, g in enumerate(gen):
            rubrics[i].extend(g)
        log(f"agreement: {name} seed {seed} wrote {sum(g[0].rubric is not None for g in gen)}/{len(gen)} rubrics")
    scored, stats = score_rubrics(verifier, items, rubrics)
    per = {f"{name}-{seed}": [] for name, seed, _ in models}
    detail = {f"{name}-{seed}": {"unparseable": 0, "items": [], "yes": []} for name, seed, _ in models}
    for i, row in enumerate(scored):
        for (name, seed, _), s in zip(models, row):
            key = f"{name}-{seed}"
            scores = None if s.scores is None else list(s.scores) + list(s.anchor_scores or [])
            per[key].append(agreement(scores, counts[i]))
            d = detail[key]
            d["unparseable"] += s.generation.rubric is None
            if s.generation.rubric is not None:
                d["items"].append(len(s.generation.rubric.items))
                d["yes"] += [v for r in (s.verdicts or []) + (s.anchor_verdicts or []) for v in r if v is not None]
    summary = {
        k: {
            "agreement": hierarchical_ci([v], n_boot=run.p.n_boot),
            "unparseable": d["unparseable"] / len(items),
            "mean_items": float(np.mean(d["items"])) if d["items"] else None,
            "yes_rate": float(np.mean(d["yes"])) if d["yes"] else None,
        }
        for k, (v, d) in ((k, (per[k], detail[k])) for k in per)
    }
    return {
        "per_prompt": per,
        "summary": summary,
        "sets_with_order": sum(len(set(c)) > 1 for c in counts),
        "verify_seconds": round(stats.seconds, 1),
    }
