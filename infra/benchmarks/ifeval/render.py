"""A finished IFEval-benchmark result as Markdown (``bench_ifeval.py --render RESULT.json``; a finished run prints it):
the gate, the three criteria, each policy's held-out accuracies, the agreement per generator, and the training
curves' first and last thirds. ``dr report --learning`` draws the same JSON as a page."""

from __future__ import annotations

POLICY_ORDER = ("P0", "oracle", "PGS", "PG0")
NAMES = {"P0": "P(0)", "oracle": "control (code's reward)", "PGS": "P_G(S)", "PG0": "P_G(0)"}


def fmt(c: dict | None) -> str:
    if not c or c.get("mean") is None:
        return "not tested" if c and c.get("not_tested") else "-"
    return f"{c['mean']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]"


def markdown(r: dict) -> str:
    return "\n".join(_head(r) + _criteria(r) + _policies(r) + _agreement(r) + _curves(r))


def _head(r: dict) -> list[str]:
    p, g = r["protocol"], r["gate"]
    minutes = f"{r['seconds'] / 60:.0f} min" if r.get("seconds") else "unfinished"
    return [
        f"One run of the protocol, version {r.get('version', 1)} (sha256 {r['protocol_sha256'][:12]}, {minutes}): "
        f"seeds "
        f"{', '.join(map(str, p['seeds']))}; {r['args']['train']} training, {r['args']['tune']} tuning and "
        f"{r['args']['heldout']} held-out prompts{_from(r)} (audit: {r['audit_overlap_rows']} overlapping); generator "
        f"{p['generator_steps']} steps x {p['generator_prompts_per_step']} prompt x {p['rubric_rollouts']} "
        "rubrics, "
        f"policies {p['policy_steps']} steps x {p['policy_prompts_per_step']} prompts x {p['policy_rollouts']} "
        "answers.",
        "",
        f"Gate: the verifier's balanced accuracy against the checkers on {g['checks']} checks was "
        f"**{g['balanced_accuracy']:.3f}** (threshold {g['threshold']}: "
        + ("passed" if g["passed"] else "**not passed**")
        + f"; yes-rate {g['yes_rate']:.2f}, met share {g['met_share']:.2f}, kappa "
        + ("-" if g["kappa"] is None else f"{g['kappa']:+.3f}")
        + ").",
        "",
    ]


def _from(r: dict) -> str:
    start = r["protocol"].get("heldout_offset") or 0
    return f" (scorable IFEval prompts {start + 1}-{start + r['args']['heldout']})" if start else ""


def _criteria(r: dict) -> list[str]:
    out = ["| criterion | difference, mean [95 % CI] (seeds, then prompts) | met |", "|---|---|---|"]
    for c, crit in r["criteria"].items():
        met = "not tested" if not crit["tested"] else ("**yes**" if crit["met"] else "no")
        out.append(f"| ({c}) {crit['key']} | {fmt(r['pooled'][crit['key']])} | {met} |")
    for key in ("PGS_minus_P0", "PG0_minus_P0"):
        if key in r["pooled"]:
            out.append(f"| (not a criterion) {key} | {fmt(r['pooled'][key])} | |")
    return out + [""]


def _policies(r: dict) -> list[str]:
    out = [
        "| policy | prompt-level strict | instruction-level strict | prompt-level loose | identical to P(0) |",
        "|---|---|---|---|---|",
    ]
    for name, pol in sorted(r["policies"].items(), key=lambda kv: (POLICY_ORDER.index(kv[0].split("-")[0]), kv[0])):
        a = pol["accuracies"]
        arm, _, seed = name.partition("-")
        label = NAMES[arm] + (f" seed {seed}" if seed else "")
        out.append(
            f"| {label} | {a['prompt_level_strict_acc']:.3f} | {a['inst_level_strict_acc']:.3f} | "
            f"{a['prompt_level_loose_acc']:.3f} | {pol['identical_to_P0']} |"
        )
    return out + [""]


def _agreement(r: dict) -> list[str]:
    if "agreement" not in r:
        return []
    a = r["agreement"]
    out = [
        f"Agreement with the code on the held-out sets ({a['sets_with_order']} of {r['args']['heldout']} sets whose "
        "counts differ; Spearman of the Eq. 12 scores over C and the anchors):",
        "",
        "| generator | agreement | unparseable | items a rubric | yes-rate |",
        "|---|---|---|---|---|",
    ]
    for key, s in a["summary"].items():
        name, _, seed = key.partition("-")
        out.append(
            f"| {'G(0)' if name == 'G0' else 'G(S)'} seed {seed} | {fmt(s['agreement'])} | {s['unparseable']:.2f} | "
            + ("-" if s["mean_items"] is None else f"{s['mean_items']:.1f}")
            + " | "
            + ("-" if s["yes_rate"] is None else f"{s['yes_rate']:.2f}")
            + " |"
        )
    return out + [""]


def _curves(r: dict) -> list[str]:
    out = ["| update | reward, first third of steps | last third | steps without gradient |", "|---|---|---|---|"]
    for seed, parts in r["seeds"].items():
        for part, u in parts.items():
            c = u["curve"]
            first = "-" if c["first"] is None else f"{c['first']:.3f}"
            last = "-" if c["last"] is None else f"{c['last']:.3f}"
            out.append(f"| {NAMES.get(part, part)} seed {seed} | {first} | {last} | {c['steps_without_gradient']} |")
    return out
