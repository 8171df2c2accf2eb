"""Phase 6 of the learning benchmark: P(0) trained by G(S) of the first seed and by G(0), the three policies'
greedy answers on the held-out prompts, and ``dr eval-policy`` judging them in pairs."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np

from dr_core.config import engine_config
from dr_core.rubric import prompts
from dr_core.train.grpo import GRPOSettings, PolicyRow, train_policy
from infra.benchmarks.learning.run import ROOT, Run, log
from infra.benchmarks.learning.stats import policy_curve

#: The judged pairs: policy vs baseline.
PAIRS = (("P_GS", "P0"), ("P_G0", "P0"), ("P_GS", "P_G0"))


def policies(run: Run) -> dict[str, list[str]]:
    """The two policy updates (recorded under ``policy.updates``) and the held-out answers of P(0) and both."""
    args = run.args
    gs_ckpt = run.result["seeds"][args.seeds[0]]["checkpoint"]
    pset = GRPOSettings(
        learning_rate=args.policy_lr,
        num_generations=args.policy_k,
        max_completion_length=64,
        per_device_train_batch_size=2 * args.policy_k,
        max_steps=args.policy_steps,
        save_steps=args.policy_steps,
        temperature=1.0,
        rubric_max_tokens=256,
        seed=0,
        rollouts="vllm",
        use_lora=True,
    )
    pols = {
        "P_GS": run.phases.run("policy-GS", lambda: policy_update(run, "GS", gs_ckpt, pset)),
        "P_G0": run.phases.run("policy-G0", lambda: policy_update(run, "G0", run.base, pset)),
    }
    run.result["policy"] = {"updates": pols}
    return run.phases.run("answers", lambda: answers(run, pols))


def policy_update(run: Run, name: str, generator_ckpt, pset: GRPOSettings) -> dict:
    """P(0) trained on the training prompts with rewards from the generator at ``generator_ckpt``."""
    from dr_core.engines import make_engine

    args = run.args
    log(f"policy update with {name}: {args.policy_steps} steps, 2 groups of K={args.policy_k} per step")
    prec: list[dict] = []
    out = run.work / f"policy-{name}"
    shutil.rmtree(out, ignore_errors=True)
    gen_engine = make_engine(engine_config(model=str(generator_ckpt), max_model_len=4096))
    try:
        ptr = train_policy(
            run.base,
            [PolicyRow(i, r.id, r.prompt) for i, r in enumerate(run.train)],
            gen_engine,
            run.verifier,
            pset,
            out,
            on_rollouts=prec.extend,
        )
    finally:
        gen_engine.close()
    steps, groups = policy_curve(prec)
    return {
        "checkpoint": str(ptr.checkpoint),
        "seconds": ptr.seconds,
        "steps": steps,
        "zero_std_groups": sum(float(np.std(v)) < 1e-6 for v in groups.values()),
        "groups": len(groups),
        "unscorable": sum(r["score"] is None for r in prec),
    }


def answers(run: Run, pols: dict) -> dict[str, list[str]]:
    """Greedy answers of P(0), P_G(S) and P_G(0) to the held-out prompts (float32 engines)."""
    from dr_core.engines import make_engine

    out = {}
    for name, ckpt in (
        ("P0", run.base),
        ("P_GS", pols["P_GS"]["checkpoint"]),
        ("P_G0", pols["P_G0"]["checkpoint"]),
    ):
        eng = make_engine(engine_config(model=str(ckpt), max_model_len=4096, dtype="float32"))
        try:
            outs = eng.chat(
                [prompts.policy_messages(r.prompt) for r in run.held],
                n=1,
                temperature=0.0,
                max_tokens=run.args.answer_tokens,
                seed=0,
            )
        finally:
            eng.close()
        out[name] = [o.texts[0] for o in outs]
    return out


def judge(run: Run, ans: dict[str, list[str]]) -> None:
    """Write the held-out prompts and each policy's answers as files, count identical answers per pair, and judge
    each pair with ``dr eval-policy --policy FILE --baseline FILE`` (recorded under ``policy.judged``)."""
    work, held, pol = run.work, run.held, run.result["policy"]
    data = work / "heldout_prompts.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "prompt": r.prompt}) + "\n" for r in held))
    for name, texts in ans.items():
        (work / f"answers_{name}.jsonl").write_text(
            "".join(json.dumps({"id": r.id, "answer": a}) + "\n" for r, a in zip(held, texts))
        )
    pol["identical_answers"] = {f"{a}_vs_{b}": sum(x == y for x, y in zip(ans[a], ans[b])) for a, b in PAIRS}
    pol["judged"] = {}
    for a, b in PAIRS:
        out = work / f"judge_{a}_vs_{b}.json"
        cmd = [
            str(ROOT / ".venv" / "bin" / "dr"),
            "eval-policy",
            "--data",
            str(data),
            "--policy",
            str(work / f"answers_{a}.jsonl"),
            "--baseline",
            str(work / f"answers_{b}.jsonl"),
            "--judge",
            run.args.verifier,
            "--output",
            str(out),
        ]
        log("judging: " + " ".join(cmd[1:]))
        subprocess.run(cmd, check=True)
        pol["judged"][f"{a}_vs_{b}"] = json.loads(out.read_text())
