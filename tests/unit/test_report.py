"""`dr report` from small hand-made stores (rows written with Store.write, no model): the page has its sections,
names the gap, carries inline SVG that parses, references nothing online, escapes the data, and shows "no data" for
what a run lacks; the stale-versus-fresh plan found from the store; the SVG charts on their own."""

from __future__ import annotations

import datetime as dt
import json
import re
import xml.etree.ElementTree as ET
from html import escape
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from dr_core.config import DEFAULT_MODEL
from dr_core.report import collect, render
from dr_core.report.svg import bar_chart, line_chart
from dr_core.report.write import write_report
from dr_core.runs.stale_fresh import plan
from dr_core.store.artifacts import Store
from dr_core.store.schemas import TABLES

SECTIONS = [
    "signal",
    "gap",
    "training",
    "policy-training",
    "saturation",
    "accuracy",
    "win-rate",
    "stale-fresh",
    "examples",
    "cost",
]
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)


def _write_stage(s: Store, run: str, t: int, stage: str, verdict_c, verdict_a, weights=(3, 1), prompt_ids=("p0", "p1")):
    """One stage of one round: 2 sets of 2 responses, a rubric per set, verdicts on C and on 2 anchors, scores and
    rewards consistent with them (Eq. 12: weighted share of yes)."""
    samples, rubrics, verdicts, scores, rewards = [], [], [], [], []
    for set_id, pid in enumerate(prompt_ids):
        samples += [
            dict(
                stage=stage,
                set_id=set_id,
                prompt_id=pid,
                response_idx=i,
                policy_ckpt=f"P{t}",
                response=f"answer {i} to {pid}, see https://example.com/x <script>alert(1)</script>",
                prompt_tokens=20,
                response_tokens=30 + i,
            )
            for i in range(2)
        ]
        rubrics += [
            dict(
                stage=stage,
                set_id=set_id,
                generator_ckpt=f"G{t}-{stage}",
                rollout=0,
                item=m,
                criterion=f"Does it cite a source? <b>{m}</b>",
                weight=w,
                error=None,
            )
            for m, w in enumerate(weights)
        ]
        for target, matrix, first in (("C", verdict_c, 0), ("anchor", verdict_a, 1)):
            for i, row in enumerate(matrix):
                verdicts += [
                    dict(
                        stage=stage,
                        set_id=set_id,
                        rollout=0,
                        item=m,
                        target=target,
                        response=first + i,
                        verdict=bool(v),
                        verifier="V",
                    )
                    for m, v in enumerate(row)
                ]
                scores.append(
                    dict(
                        stage=stage,
                        set_id=set_id,
                        rollout=0,
                        target=target,
                        response=first + i,
                        score=sum(w * v for w, v in zip(weights, row)) / sum(weights),
                    )
                )
        rewards.append(dict(stage=stage, set_id=set_id, rollout=0, r_disc=0.1 * t, r_anchor=-0.5))
    keys = dict(run_id=run, round=t)
    for table, rows in (
        ("samples", samples),
        ("rubrics", rubrics),
        ("verdicts", verdicts),
        ("scores", scores),
        ("rewards", rewards),
    ):
        s.write(table, rows, part=f"{stage}-{table}", **keys)


def _store(tmp_path, *, training=True, stale_fresh=True) -> Store:
    s = Store.from_url(str(tmp_path / "store"))
    run = "demo"
    s.write("prompts", [dict(prompt_id=p, prompt=f"Explain {p} in detail.") for p in ("p0", "p1")], dataset="d")
    s.write(
        "anchors",
        [
            dict(prompt_id=p, prompt="x", rank=r, response=f"anchor {r} of {p}", source="s")
            for p in ("p0", "p1")
            for r in (1, 2)
        ],
        dataset="d",
    )
    # the gap closes round over round: round 0 separates both C and anchors, round 2 scores everything alike
    _write_stage(s, run, 0, "measure", [[1, 1], [0, 0]], [[1, 1], [0, 1]])
    _write_stage(s, run, 1, "measure", [[1, 1], [1, 0]], [[1, 1], [1, 0]])
    _write_stage(s, run, 2, "measure", [[1, 1], [1, 1]], [[1, 1], [1, 1]])
    if stale_fresh:
        _write_stage(s, run, 2, "stale", [[1, 1], [1, 1]], [[1, 1], [1, 1]])
        _write_stage(s, run, 2, "fresh", [[1, 0], [0, 1]], [[1, 1], [0, 1]])
    if training:
        for t in (1, 2):
            s.write(
                "rewards",
                [
                    dict(stage="generator", set_id=0, rollout=k, r_disc=0.01 * k * t, r_anchor=-1.0 + 0.1 * k)
                    for k in range(4)
                ],
                part="generator-train-rewards",
                run_id=run,
                round=t,
            )
            for role in ("generator", "policy"):
                s.write(
                    "checkpoints",
                    [
                        dict(
                            role=role,
                            uri=f"{s.url}/models/run_id={run}/round={t}/{role}",
                            parent=None,
                            metrics_json=json.dumps({"steps": 2, "seconds": 30.0 + t}),
                            created_at=T0,
                        )
                    ],
                    part=role,
                    run_id=run,
                    round=t,
                )
    for t in (0, 1, 2):
        s.write(
            "eval",
            [
                dict(benchmark="hh", checkpoint=f"G{t}", verifier="V", seed=seed, metric=m, value=v)
                for seed, m, v in (
                    (0, "accuracy", 0.5 + 0.1 * t),
                    (-1, "accuracy", 0.5 + 0.1 * t),
                    (-1, "ties", 0.2),
                    (-1, "unscorable", None),
                )
            ],
            part="evaluator",
            run_id=run,
            round=t,
        )
        if t:
            s.write(
                "eval",
                [
                    dict(benchmark="arena.vs-P0", checkpoint=f"P{t}", verifier="J", seed=-1, metric=m, value=v)
                    for m, v in (
                        ("win_rate", 0.5 + 0.1 * t),
                        ("tie_rate", 0.3),
                        ("win_rate_ci_low", 0.4),
                        ("win_rate_ci_high", 0.9),
                        ("n", 4.0),
                        ("unscorable", 0.0),
                    )
                ],
                part="policy-eval",
                run_id=run,
                round=t,
            )
        s.write(
            "runs",
            [
                dict(
                    created_at=T0 + dt.timedelta(seconds=100 * t),
                    status="coevolve-round-complete",
                    config_json=json.dumps({"round": t}),
                )
            ],
            part=f"round-{t}",
            run_id=run,
        )
    # two executions of one coevolve run: the first trained (round 1), the re-run was served from the cache
    for ex, state, secs, start in (("ex-1", "Completed", 60.0, 0), ("ex-2", "Cached", 0.5, 900)):
        s.write(
            "steps",
            [
                dict(
                    execution=ex,
                    flow="dynamicrubric-coevolve",
                    step=f"r1/{name}",
                    state=state,
                    started_at=T0 + dt.timedelta(seconds=start + i),
                    seconds=secs * (i + 1),
                )
                for i, name in enumerate(("train-generator", "train-policy"))
            ],
            part=f"exec-{ex}",
            run_id=run,
            round=1,
        )
    return s


class _Parser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.ids += [v for k, v in attrs if k == "id"]


def _check_offline(html: str) -> None:
    assert not re.search(r"https?://", html), "the page must reference nothing online"
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html), "only in-page links"


def test_report_has_sections_gap_svg_and_is_offline(tmp_path):
    s = _store(tmp_path)
    path = write_report(s, "demo", tmp_path / "out")
    html = path.read_text(encoding="utf-8")
    p = _Parser()
    p.feed(html)
    assert set(SECTIONS) <= set(p.ids)
    assert "score gap" in html.lower() and "Eq. 2" in html and "relative score gap" in html
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert len(svgs) >= 8  # gap, R_disc, R_anchor, saturation, accuracy, stale-fresh, tokens, train
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed
        assert root.find("title") is not None and len(root.findall("text")) >= 3  # title, axis names, ticks
    assert "round 0" in html and "round 2" in html and "could not render" not in html
    _check_offline(html)
    # data is escaped, never markup: the response's <script> and the criterion's <b> show as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;0&lt;/b&gt;" in html
    assert "https:&#8203;//example.com" in html
    assert (tmp_path / "out" / "report.json").is_file()


def test_render_escapes_data_and_raises_on_a_missing_key(tmp_path):
    """Jinja2 autoescape and the nourl filter: text from the data is never markup and never a fetchable URL; with
    StrictUndefined a key the data lacks raises (in a section: that section's "could not render" placeholder)."""
    import jinja2

    d = collect.collect(_store(tmp_path).connect(), "demo")
    d["run_id"] = 'run <script>alert("x")</script> http://x'
    d["warnings"] = ["see http://x <script>bad()</script>"]
    html = render.render_html(d, "s3://bucket/<b>")
    _check_offline(html)
    assert "run &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; http:&#8203;//x" in html
    assert "<li>see http:&#8203;//x &lt;script&gt;bad()&lt;/script&gt;</li>" in html
    assert "store s3:&#8203;//bucket/&lt;b&gt;;" in html
    assert render.ENV.undefined is jinja2.StrictUndefined and render.ENV.autoescape is True
    broken = dict(d, training=[{k: v for k, v in r.items() if k != "group_size"} for r in d["training"]])
    training = re.search(r'<section id="training">.*?</section>', render.render_html(broken), re.S).group(0)
    assert "could not render: UndefinedError(" in training and "group_size" in training
    with pytest.raises(jinja2.UndefinedError, match="generated_at"):
        render.render_html({k: v for k, v in d.items() if k != "generated_at"})


def test_report_numbers(tmp_path):
    d = collect.collect(_store(tmp_path).connect(), "demo")
    assert d["errors"] == []
    m = {(r["round"], r["stage"]): r for r in d["metrics"]}
    # round 0 C: scores 1 and 0 -> spread 1; anchors 1 then .25 -> Eq. 2 gap .75; round 2: everything 1 -> 0
    assert m[(0, "measure")]["set_spread"] == pytest.approx(1.0)
    assert m[(0, "measure")]["anchor_gap"] == pytest.approx(0.75)
    assert m[(2, "measure")]["anchor_gap"] == 0 and m[(2, "measure")]["saturation"] == 1.0
    sf = d["stale_fresh"]
    assert sf["round"] == 2 and sf["stale"]["anchor_gap"] == 0 and sf["fresh"]["anchor_gap"] == pytest.approx(0.75)
    assert sf["fresh"]["set_spread"] == pytest.approx(0.5) and sf["stale"]["saturation"] == 1.0
    assert [(r["round"], r["step"], r["global_step"]) for r in d["training"]] == [
        (1, 0, 0),
        (1, 1, 1),
        (2, 0, 2),
        (2, 1, 3),
    ]
    assert [e["label"].split(":")[0] for e in d["examples"]] == [
        "round 0, measure",
        "round 2, measure",
        "round 2, stale",
        "round 2, fresh",
    ]
    grid = d["examples"][0]["sets"][0]
    assert grid["columns"] == ["C:0", "C:1", "anchor:1", "anchor:2"] and len(grid["items"]) == 2
    assert grid["scores"]["C:0"] == 1.0 and grid["items"][0]["verdicts"]["C:1"] is False
    costs = {(c["round"], c["stage"]): c for c in d["costs"]}
    assert costs[(1, "generator")]["train_seconds"] == 31.0 and costs[(0, "measure")]["response_tokens"] == 122
    assert [r["seconds_since_previous"] for r in d["run_log"]] == [None, 100.0, 100.0]
    assert [(r["execution"], r["step"], r["execution_ran"], r["execution_cached"]) for r in d["step_times"]] == [
        ("ex-1", "r1/train-generator", 2, 0),
        ("ex-1", "r1/train-policy", 2, 0),
        ("ex-2", "r1/train-generator", 0, 2),
        ("ex-2", "r1/train-policy", 0, 2),
    ]


def test_report_cost_lists_flow_executions_and_the_slowest_steps_that_ran(tmp_path):
    html = write_report(_store(tmp_path), "demo", tmp_path / "out").read_text(encoding="utf-8")
    cost = re.search(r'<section id="cost">.*?</section>', html, re.S).group(0)
    assert "Flow executions" in cost and "ex-1" in cost and "ex-2" in cost
    slow = cost[cost.index("Slowest steps that ran") :]
    assert slow.index("r1/train-policy") < slow.index("r1/train-generator")  # 120 s before 60 s
    assert "Cached" not in slow  # cache hits are not "slow steps"


def test_report_without_training_or_stale_fresh_says_no_data(tmp_path):
    s = _store(tmp_path, training=False, stale_fresh=False)
    html = write_report(s, "demo", tmp_path / "out").read_text(encoding="utf-8")
    for sid in ("training", "stale-fresh"):
        section = re.search(rf'<section id="{sid}">.*?</section>', html, re.S).group(0)
        assert "no data" in section and "<svg" not in section
    assert "dr stale-fresh" in html
    _check_offline(html)


def test_report_of_unknown_run_or_empty_store_is_an_error_and_writes_nothing(tmp_path):
    for store, run in ((_store(tmp_path), "nope"), (Store.from_url(str(tmp_path / "empty")), "demo")):
        with pytest.raises(collect.ReportError, match=f"no run '{run}'"):
            write_report(store, run, tmp_path / f"out-{run}")
        assert not (tmp_path / f"out-{run}").exists()
    with pytest.raises(collect.ReportError, match="not a run id"):
        write_report(_store(tmp_path), "../demo", tmp_path / "out-bad")


def _training_signal_store(tmp_path, *, varied: bool) -> Store:
    """One round: measured sets (every verdict yes, or a mix) and both GRPO updates of 2 steps x 2 groups of G=2:
    generator advantages and policy scores that vary within every group, or that are constant everywhere."""
    s = Store.from_url(str(tmp_path / "s"))
    run, keys = "sig", dict(run_id="sig", round=1)
    if varied:
        _write_stage(s, run, 1, "measure", [[1, 1], [0, 1]], [[1, 0], [0, 1]])
    else:
        _write_stage(s, run, 1, "measure", [[1, 1], [1, 1]], [[1, 1], [1, 1]])
    gen = [
        dict(
            stage="generator",
            set_id=g,
            rollout=step * 2 + i,
            r_disc=0.1,
            r_anchor=-1.0,
            advantage=(1.0 if i else -1.0) if varied else 0.0,
        )
        for step in range(2)
        for g in range(2)
        for i in range(2)
    ]
    pol_rewards, pol_scores = [], []
    for step in range(2):
        for g in range(2):
            set_id = step * 2 + g
            pol_rewards += [dict(stage="policy", set_id=set_id, rollout=step * 2 + i, advantage=0.0) for i in range(2)]
            pol_scores += [
                dict(
                    stage="policy",
                    set_id=set_id,
                    rollout=0,
                    target="C",
                    response=i,
                    score=(0.25 + 0.5 * i) if varied else 1.0,
                )
                for i in range(2)
            ]
    s.write("rewards", gen, part="generator-train-rewards", **keys)
    s.write("rewards", pol_rewards, part="policy-train-rewards", **keys)
    s.write("scores", pol_scores, part="policy-train-scores", **keys)
    for role in ("generator", "policy"):
        s.write(
            "checkpoints",
            [
                dict(
                    role=role,
                    uri=f"u-{role}",
                    parent=None,
                    created_at=T0,
                    metrics_json=json.dumps({"steps": 2, "seconds": 1.0, "group_size": 2}),
                )
            ],
            part=role,
            **keys,
        )
    return s


def test_report_warns_in_words_when_there_is_no_gradient_and_the_verifier_says_yes(tmp_path):
    s = _training_signal_store(tmp_path, varied=False)
    html = write_report(s, "sig", tmp_path / "out").read_text(encoding="utf-8")
    d = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert d["warnings"] == [
        "generator update, round 1: no gradient: every GRPO group had zero reward std at steps 0 and 1 (the update "
        "did nothing)",
        "policy update, round 1: no gradient: every GRPO group had zero reward std at steps 0 and 1 (the update did "
        "nothing)",
        "verifier yes-rate 1.00 in round 1 is above 0.95: the verifier says yes to everything, so scores cannot "
        "separate responses",
        "constant scores in round 1: every scored set gave every response the same Eq. 12 score, so the rubrics "
        "separate nothing there (no gap, R_disc 0)",
    ]
    # at the top of the page, before the navigation and every section
    box = html.index('id="warnings"')
    assert box < html.index("<nav>") and "Warnings: degenerate signal" in html
    for w in d["warnings"]:
        assert html.index(escape(w)) > box
    assert [(r["stage"], r["step"], r["zero_std_share"]) for r in d["training_signal"]] == [
        ("generator", 0, 1.0),
        ("generator", 1, 1.0),
        ("policy", 0, 1.0),
        ("policy", 1, 1.0),
    ]
    for sid in ("training", "policy-training"):
        section = re.search(rf'<section id="{sid}">.*?</section>', html, re.S).group(0)
        assert "Zero-std GRPO groups per step" in section and "<svg" in section and "no gradient</span>" in section
    signal = re.search(r'<section id="signal">.*?</section>', html, re.S).group(0)
    assert "1.000" in signal and "2 of 2" in signal  # yes-rate, steps without gradient of each update
    _check_offline(html)


def test_report_with_varied_rewards_has_no_no_gradient_warning(tmp_path):
    s = _training_signal_store(tmp_path, varied=True)
    html = write_report(s, "sig", tmp_path / "out").read_text(encoding="utf-8")
    d = collect.collect(s.connect(), "sig")
    assert d["warnings"] == [] and d["errors"] == []
    assert [(r["stage"], r["zero_std_groups"]) for r in d["training_signal"]] == [
        ("generator", 0),
        ("generator", 0),
        ("policy", 0),
        ("policy", 0),
    ]
    assert "no gradient:" not in html and "no gradient</span>" not in html and "Warnings: degenerate signal" not in html
    assert "Signal checks passed" in html
    # the reward curves: generator R_disc + R_anchor = 0.1 - 1.0 everywhere; policy scores 0.25 and 0.75 per group
    # (mean 0.5, within-group sample std 0.5 / sqrt(2))
    by = {(r["stage"], r["step"]): r for r in d["training_signal"]}
    assert by[("generator", 0)]["reward_mean"] == pytest.approx(-0.9) and by[("generator", 0)]["reward_spread"] == 0
    assert by[("policy", 1)]["reward_mean"] == pytest.approx(0.5)
    assert by[("policy", 1)]["reward_spread"] == pytest.approx(0.5 / 2**0.5) and by[("policy", 1)]["n_scored"] == 4
    for sid in ("training", "policy-training"):
        section = re.search(rf'<section id="{sid}">.*?</section>', html, re.S).group(0)
        assert "Training reward per step" in section and "<polygon" in section  # the curve with its spread band


def test_dr_report_cli(tmp_path):
    from cli.main import app

    s = _store(tmp_path)
    res = CliRunner().invoke(app, ["report", "--store", s.url, "--run-id", "demo", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "report.html").is_file()


# -- stale-versus-fresh plan -------------------------------------------------------------------------------------------
def test_plan_finds_checkpoints_sets_and_config(tmp_path):
    s = _store(tmp_path)
    p = plan(s, "demo")
    assert p["round"] == 2
    assert p["fresh_generator"].endswith("round=2/generator") and p["stale_generator"].endswith("round=1/generator")
    assert p["policy"].endswith("round=1/policy")
    assert p["sets"] == {
        "uri": s.uri_for("samples", part="measure-samples", run_id="demo", round=1),
        "round": 1,
        "stage": "measure",
    }
    assert json.loads(p["config_json"]) == {"round": 2}  # the latest record
    p1 = plan(s, "demo", 1)
    assert (p1["stale_generator"], p1["policy"], p1["sets"]["round"]) == (DEFAULT_MODEL, DEFAULT_MODEL, 0)


def test_plan_takes_round_0_from_the_bundled_parent_of_round_1(tmp_path):
    s = _store(tmp_path)
    for role, parent in (("generator", "qwen2.5-coder-0.5b-instruct"), ("policy", "/not/a/bundled/name")):
        s.write(
            "checkpoints",
            [
                dict(
                    role=role,
                    uri=f"{s.url}/models/run_id=demo/round=1/{role}",
                    parent=parent,
                    metrics_json="{}",
                    created_at=T0,
                )
            ],
            part=role,
            run_id="demo",
            round=1,
        )
    p1 = plan(s, "demo", 1)
    assert (p1["stale_generator"], p1["policy"]) == ("qwen2.5-coder-0.5b-instruct", DEFAULT_MODEL)


def test_plan_says_what_is_missing(tmp_path):
    s = _store(tmp_path, training=False)
    with pytest.raises(ValueError, match="no generator checkpoint"):
        plan(s, "demo")
    with pytest.raises(ValueError, match=r"G\(2\)"):
        plan(s, "demo", 2)
    with pytest.raises(ValueError, match="round must be >= 1"):
        plan(_store(tmp_path / "b"), "demo", 0)


# -- SVG ---------------------------------------------------------------------------------------------------------------
def test_line_chart_labels_breaks_and_single_points():
    svg = line_chart(
        [("gap", [(0, 0.5), (1, None), (2, 0.25), (3, 0.0)]), ("flat", [(1, 0.0)])],
        "round t",
        "gap (score units)",
        title="Gap",
        x_tick_label="round {x}",
        markers=[(2, "round 2 starts")],
    )
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("text")]
    assert {"Gap", "round t", "gap (score units)", "round 0", "round 3", "round 2 starts"} <= set(texts)
    assert len(root.findall("polyline")) == 1  # the None breaks the line: only (2, 3) is a segment of 2+ points
    assert len(root.findall("circle")) == 4
    with pytest.raises(ValueError):
        line_chart([("x", [(0, None)])], "a", "b")


def test_bar_chart_negative_and_missing_values():
    svg = bar_chart(["gap", "R_anchor"], [("stale", [0.0, -1.5]), ("fresh", [0.3, None])], "value", title="T")
    root = ET.fromstring(svg)
    assert len(root.findall("rect")) == 3 + 2  # 3 bars + 2 legend swatches
    assert "n/a" in [t.text for t in root.iter("text")]
    with pytest.raises(ValueError):
        bar_chart(["a"], [("g", [None])], "v")


def test_training_with_only_unusable_rubrics_says_so(tmp_path):
    s = Store.from_url(str(tmp_path / "s"))
    s.write(
        "rewards",
        [dict(stage="generator", set_id=0, rollout=k, r_disc=None, r_anchor=None) for k in range(2)],
        part="generator-train-rewards",
        run_id="u",
        round=1,
    )
    html = write_report(s, "u", tmp_path / "out").read_text(encoding="utf-8")
    section = re.search(r'<section id="training">.*?</section>', html, re.S).group(0)
    assert "no training rollout could be scored" in section and "<svg" not in section


def test_report_shows_policy_win_rate_per_round(tmp_path):
    html = write_report(_store(tmp_path), "demo", tmp_path / "out").read_text(encoding="utf-8")
    assert 'id="win-rate"' in html and "Policy win rate per round" in html
    assert "0.7000" in html and "[0.4000, 0.9000]" in html  # round 2 win rate and its interval
    bare_store = _store(tmp_path / "b", training=False)
    import datetime as dt

    bare_store.write(
        "runs",
        [dict(created_at=dt.datetime.now(dt.timezone.utc), status="completed", config_json="{}")],
        part="record",
        run_id="bare",
    )
    bare = write_report(bare_store, "bare", tmp_path / "out2")
    html = bare.read_text(encoding="utf-8")
    assert "Policy win rate per round" in html and "no data for this run id" in html


def test_run_warnings_name_a_judge_that_always_picks_the_first_answer():
    from dr_core.report.collect import run_warnings

    summary = [
        {"round": 1, "metric": "judge_position_a_rate", "mean": 1.0},
        {"round": 1, "metric": "win_rate", "mean": 0.5},
    ]
    out = run_warnings([], [], [], summary)
    assert out == [
        "policy evaluation, round 1: the judge picked the first-shown answer in 100% of its verdicts, "
        "so nearly every prompt is a tie and the win rate cannot move from 0.5"
    ]
    assert run_warnings([], [], [], [{"round": 1, "metric": "judge_position_a_rate", "mean": 0.6}]) == []


def test_dr_report_names_failed_queries_and_refuses_when_all_fail(tmp_path):
    """A foreign-schema part file makes the queries over its table fail: the page lists them, the terminal warns;
    when every query fails, nothing is written and the exit is 2."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from cli.main import app

    store = _store(tmp_path)
    part = store._path(store.parts("verdicts")[0])
    pq.write_table(pa.table({"foreign": [1]}), part)
    res = CliRunner().invoke(app, ["report", "--store", store.url, "--run-id", "demo", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "warning: query " in res.output and (tmp_path / "r" / "report.html").exists()
    assert "Query errors" in (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    for table in TABLES:
        for uri in store.parts(table):
            if "run_id=demo" in uri:
                pq.write_table(pa.table({"foreign": [1], "run_id": ["demo"]}), store._path(uri))
    res = CliRunner().invoke(app, ["report", "--store", store.url, "--run-id", "demo", "--out", str(tmp_path / "r2")])
    assert res.exit_code == 2 and "queries failed" in res.output, res.output
    assert not (tmp_path / "r2").exists()


# -- the learning benchmark's page ------------------------------------------------------------------------------------
def _learning_result():
    ci = lambda m, lo, hi: {"mean": m, "ci95": [lo, hi], "n": 24}  # noqa: E731
    metrics = {
        m: ci(0.01, -0.02, 0.04)
        for m in ("r_disc", "saturated_items", "anchor_tie_rate", "anchor_strict_accuracy", "unparseable")
    }
    steps = [{"step": i, "reward_mean": -1.3 + 0.01 * i, "group_std": 0.1, "r_disc_mean": 0.1} for i in range(12)]
    curve = {
        "steps": steps,
        "first10": -1.25,
        "last10": -1.2,
        "r_disc_first10": 0.1,
        "r_disc_last10": 0.12,
        "window": 10,
        "steps_without_gradient": 1,
    }
    seed = {"curve": curve, "GS_minus_G0": metrics}
    return {
        "version": 2,
        "chosen": {"lr": 5e-5, "lora_r": 16, "k": 3},
        "sweep": [{"setting": {"lr": 5e-5, "lora_r": 16, "k": 3}, "GS_minus_G0": metrics, "curve": curve}],
        "seeds": {"0": seed, "1": seed},
        "pooled": {"GS_minus_G0": metrics},
        "policy": {
            "updates": {
                "P_GS": {
                    "steps": [{"step": i, "reward_mean": 0.4, "group_std": 0.2} for i in (0, 1)],
                    "groups": 2,
                    "zero_std_groups": 0,
                    "unscorable": 0,
                }
            },
            "judged": {
                "P_GS_vs_P0": {
                    "win_rate": 0.6,
                    "win_rate_ci95": [0.45, 0.75],
                    "wins": 10,
                    "ties": 4,
                    "losses": 6,
                    "identical_answers": 2,
                    "judge_position_bias": 0.3,
                }
            },
        },
    }


def test_learning_page_draws_curves_and_deltas_with_intervals(tmp_path):
    from cli.main import app

    src = tmp_path / "bench.json"
    src.write_text(json.dumps(_learning_result()))
    res = CliRunner().invoke(app, ["report", "--learning", str(src), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "o" / "learning.html").read_text(encoding="utf-8")
    assert html.count("<svg") == 1 + 1 + 5 + 1  # generator curves, policy curves, 5 held-out deltas, win rates
    assert html.count("<polygon") == 2 + 1  # a spread band per seed, and the policy update's
    assert "seed 0" in html and "pooled" in html and "P_GS_vs_P0" in html
    assert "0.01 [-0.02, 0.04]" in html  # a delta's point with its interval, in the hover text
    _check_offline(html)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "cannot read it as JSON"),
        ("[]", "expected a JSON object"),
        (json.dumps({"version": 2, "partial": True, "sweep": []}), "no key 'chosen' (the run stopped early"),
        (json.dumps({**_learning_result(), "version": 1}), "version 1"),
    ],
)
def test_learning_page_refuses_what_is_not_a_complete_result(tmp_path, content, message):
    from cli.main import app

    src = tmp_path / "bench.json"
    src.write_text(content)
    res = CliRunner().invoke(app, ["report", "--learning", str(src), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and message in res.output.replace("\n", ""), res.output
    assert not (tmp_path / "o").exists()
