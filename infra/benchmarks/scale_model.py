"""A scale model on paper: model calls, tokens and GPU-hours of one co-evolution round of a preset, per role.

    python infra/benchmarks/scale_model.py                       # the paper preset, docs/benchmarks/scale.md's table
    python infra/benchmarks/scale_model.py --response-tokens 2000 --items 16 --decode-tps 3000

Counts come from the preset (dr_core.config.coevolve_preset): prompts, K, anchors, rubric rollouts, GRPO steps and
batch sizes. Lengths the preset only bounds (a response, a rubric, items per rubric) are assumptions, given as
flags and printed with the table. Throughput per GPU is a published figure, not a measurement (no GPU was lent to
this issue): decode 5,777 output tokens/s for Llama-3.1-8B on one H100 with vLLM (Red Hat's MLPerf Inference v5.1
offline result, FP8; bf16 is slower), and prefill from arithmetic: 2 x 8e9 FLOP per token at 40 % of the H100's
989 TFLOP/s bf16 dense peak, about 24,700 tokens/s. Verification is prefill: every check shares its response's
prefix (prefix caching), so its cost is the unique prefix once per (set, rollout, response) plus the criterion.
Training is 6 x parameters FLOP per trained token, at the same 40 %.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass
class Work:
    role: str
    step: str
    calls: int
    prefill: float  # unique prompt tokens computed
    decode: float  # generated tokens

    def gpu_hours(self, prefill_tps: float, decode_tps: float) -> float:
        return (self.prefill / prefill_tps + self.decode / decode_tps) / 3600


def round_work(cfg, a) -> list[Work]:
    """The model work of one round of Algorithm 1 (measurement, generator update, policy update)."""
    r, g, p = cfg.round, cfg.generator, cfg.policy
    n, k, anchors, rollouts = r.n_prompts, r.k, r.n_anchor, r.rubric_rollouts
    targets = k + anchors
    gen_in = a.prompt_tokens + k * a.response_tokens + a.template_tokens  # x and the set C, shown to the generator
    check = a.criterion_tokens + a.template_tokens // 4  # what a check adds after its cached response prefix
    out = []
    # measurement (and sample-P(t-1)): the same sampling twice per round
    for step in ("sample P(t-1) (generator's sets)", "measure: sample P(t)"):
        out.append(Work("policy", step, n, n * a.prompt_tokens, n * k * a.response_tokens))
    out.append(
        Work("generator", "measure: rubrics", n * rollouts, n * rollouts * gen_in, n * rollouts * a.rubric_tokens)
    )
    verdicts = n * rollouts * a.items * targets
    out.append(
        Work(
            "verifier",
            "measure: verdicts",
            verdicts,
            n * rollouts * targets * (a.prompt_tokens + a.response_tokens) + verdicts * check,
            verdicts,
        )
    )
    # generator update: per step, per_device x accumulation rubric rollouts = groups of G over sets
    g_rollouts = g.max_steps * g.per_device_train_batch_size * g.gradient_accumulation_steps
    out.append(
        Work("generator", "update: rubric rollouts", g_rollouts, g_rollouts * gen_in, g_rollouts * a.rubric_tokens)
    )
    gv = g_rollouts * a.items * targets
    out.append(
        Work(
            "verifier",
            "update: R_disc + R_anchor verdicts",
            gv,
            g_rollouts * targets * (a.prompt_tokens + a.response_tokens) + gv * check,
            gv,
        )
    )
    # policy update: responses in groups of K; each group one rubric from G(t), verified on its K responses
    p_resp = p.max_steps * p.per_device_train_batch_size * p.gradient_accumulation_steps
    groups = p_resp // p.num_generations
    out.append(
        Work(
            "policy",
            "update: rollouts",
            p_resp // p.num_generations,
            groups * a.prompt_tokens,
            p_resp * a.response_tokens,
        )
    )
    out.append(Work("generator", "update: G(t) rubric per group", groups, groups * gen_in, groups * a.rubric_tokens))
    pv = groups * a.items * p.num_generations
    out.append(
        Work("verifier", "update: Eq. 12 verdicts", pv, p_resp * (a.prompt_tokens + a.response_tokens) + pv * check, pv)
    )
    return out


def training_hours(cfg, a) -> dict[str, float]:
    """GPU-hours of the two GRPO updates' forward and backward passes (6 x params FLOP per token)."""
    per_token = 6 * a.params / a.mfu_flops  # seconds of one GPU per trained token
    g, p = cfg.generator, cfg.policy
    g_tok = (
        g.max_steps
        * g.per_device_train_batch_size
        * g.gradient_accumulation_steps
        * (a.prompt_tokens + cfg.round.k * a.response_tokens + a.template_tokens + a.rubric_tokens)
    )
    p_tok = (
        p.max_steps
        * p.per_device_train_batch_size
        * p.gradient_accumulation_steps
        * (a.prompt_tokens + a.response_tokens)
    )
    return {
        "generator": g_tok * per_token / 3600,
        "policy": p_tok * per_token / 3600,
        "generator_tokens": g_tok,
        "policy_tokens": p_tok,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--prompt-tokens", type=int, default=300, help="assumed mean prompt length")
    ap.add_argument("--response-tokens", type=int, default=1500, help="assumed mean policy response (max 8K)")
    ap.add_argument("--rubric-tokens", type=int, default=600, help="assumed mean rubric list (max 8K)")
    ap.add_argument("--items", type=int, default=12, help="assumed rubric items per list")
    ap.add_argument("--criterion-tokens", type=int, default=30, help="assumed tokens of one criterion")
    ap.add_argument("--template-tokens", type=int, default=400, help="instructions around a prompt")
    ap.add_argument("--params", type=float, default=8e9, help="parameters of each role's model")
    ap.add_argument("--decode-tps", type=float, default=5777.0, help="output tokens/s per GPU (published)")
    ap.add_argument("--prefill-tps", type=float, default=None, help="prompt tokens/s per GPU (default: FLOP estimate)")
    ap.add_argument("--mfu", type=float, default=0.40, help="share of the 989 TFLOP/s bf16 peak reached")
    a = ap.parse_args(argv)
    a.mfu_flops = a.mfu * 989e12
    prefill_tps = a.prefill_tps or a.mfu_flops / (2 * a.params)

    from dr_core.config import coevolve_preset

    cfg = coevolve_preset(a.preset)
    work = round_work(cfg, a)
    print(
        f"preset {a.preset}: {cfg.round.n_prompts} prompts, K={cfg.round.k}, {cfg.round.n_anchor} anchors, "
        f"{cfg.round.rubric_rollouts} rubric rollouts, GRPO {cfg.generator.max_steps} steps x "
        f"{cfg.generator.per_device_train_batch_size * cfg.generator.gradient_accumulation_steps} rollouts per update"
    )
    print(
        f"assumed: prompt {a.prompt_tokens}, response {a.response_tokens}, rubric {a.rubric_tokens} tokens, "
        f"{a.items} items; per GPU decode {a.decode_tps:,.0f} tok/s, prefill {prefill_tps:,.0f} tok/s\n"
    )
    print("| role | step | model calls | prompt tokens (unique) | generated tokens | GPU-hours |")
    print("|---|---|---:|---:|---:|---:|")
    per_role: dict[str, float] = {}
    for w in work:
        h = w.gpu_hours(prefill_tps, a.decode_tps)
        per_role[w.role] = per_role.get(w.role, 0) + h
        print(f"| {w.role} | {w.step} | {w.calls:,} | {w.prefill / 1e6:,.1f}M | {w.decode / 1e6:,.2f}M | {h:,.1f} |")
    t = training_hours(cfg, a)
    print(
        f"| generator | GRPO forward+backward | - | {t['generator_tokens'] / 1e6:,.1f}M trained | - | "
        f"{t['generator']:,.1f} |"
    )
    print(f"| policy | GRPO forward+backward | - | {t['policy_tokens'] / 1e6:,.1f}M trained | - | {t['policy']:,.1f} |")
    total = sum(per_role.values()) + t["generator"] + t["policy"]
    print(
        "\nper role, inference: "
        + ", ".join(f"{k} {v:,.1f} GPU-h" for k, v in per_role.items())
        + f"; training {t['generator'] + t['policy']:,.1f} GPU-h; round total {total:,.1f} GPU-h"
    )


if __name__ == "__main__":
    main()
