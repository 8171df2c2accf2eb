"""infra/benchmarks/bench_soak.py: its windows, memory growth, p95 flatness and the store rows expected of the
answers (the pure pieces; the soak itself is a benchmark, run by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "infra/benchmarks/bench_soak.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = mod
    spec.loader.exec_module(mod)
    return mod


def rec(op: str, t_end: float, latency: float = 1.0, status: int | None = 200, error=None, sets: int = 0) -> dict:
    route = {"score-set": "/v1/score-set", "rewards": "/v1/rewards", "get_reward": "/get_reward"}.get(op, f"/{op}")
    return {
        "op": op,
        "route": route,
        "t_end": t_end,
        "latency_s": latency,
        "status": status,
        "error": error,
        "sets": sets,
    }


def test_windows_count_by_answer_time_and_keep_the_drain_apart(soak):
    records = [
        rec("score-set", 10, 2.0, sets=1),
        rec("rewards", 50, 4.0),
        rec("rewards", 55, 5.0, sets=1),
        rec("health", 20, 0.01),
        rec("replay", 30, 0.02),
        rec("score-set", 70, 3.0, sets=1),
        rec("get_reward", 80, 6.0, status=503, error="{...}"),
        rec("metrics", 90, None, status=None, error="ConnectError: refused"),
        rec("score-set", 125, 9.0, sets=1),  # after the 120 s soak: the drain
    ]
    rss = [(0, 100 * 2**20), (60, 110 * 2**20), (100, 130 * 2**20), (120, 121 * 2**20)]
    windows, drain = soak.window_stats(records, rss, window_s=60, duration_s=120, warmup_s=60)
    w1, w2 = windows
    assert (w1["warmup"], w2["warmup"]) == (True, False)
    assert (w1["score_set"], w1["rewards_members"], w1["probes"], w1["replays"], w1["sets"]) == (1, 2, 1, 1, 2)
    assert w1["sets_per_s"] == round(2 / 60, 4)
    assert w1["latencies"] == 3 and w1["p50_s"] == 4.0  # the scoring requests only: not the probe, not the replay
    assert w1["errors"] == 0 and w1["error_statuses"] == "-"
    assert w2["errors"] == 2 and w2["error_statuses"] == "503: 1, transport: 1"
    assert w2["latencies"] == 1 and w2["p95_s"] == 3.0  # failed requests have no latency in the p95
    assert (w1["rss_end_mb"], w2["rss_end_mb"], w2["rss_peak_mb"]) == (110.0, 121.0, 130.0)
    assert drain["score_set"] == 1 and drain["seconds"] == 5.0 and drain["sets_per_s"] is None


def test_the_last_window_ends_with_the_soak(soak):
    windows, _ = soak.window_stats([rec("score-set", 149, sets=1)], [], window_s=60, duration_s=150, warmup_s=60)
    assert [(w["from_min"], w["to_min"]) for w in windows] == [(0.0, 1.0), (1.0, 2.5)]
    assert windows[-1]["sets"] == 1 and windows[-1]["rss_end_mb"] is None


def test_memory_growth_is_from_the_end_of_warm_up(soak):
    rss = [(0, 50 * 2**20), (59, 100 * 2**20), (61, 200 * 2**20), (119, 104 * 2**20), (125, 300 * 2**20)]
    m = soak.memory_growth(rss, warmup_s=60, end_s=120)
    assert (m["rss_warmup_end_mb"], m["rss_end_mb"], m["rss_growth_pct"], m["rss_peak_mb"]) == (
        100.0,
        104.0,
        4.0,
        300.0,
    )
    assert soak.memory_growth([], 60, 120)["rss_growth_pct"] is None


def test_p95_flatness_leaves_out_warm_up_and_empty_windows(soak):
    ws = [
        {"warmup": True, "p95_s": 100.0},
        {"warmup": False, "p95_s": 10.0},
        {"warmup": False, "p95_s": None},
        {"warmup": False, "p95_s": 11.5},
    ]
    assert soak.p95_flatness(ws) == {"windows": 2, "p95_min_s": 10.0, "p95_max_s": 11.5, "ratio": 1.15}
    assert soak.p95_flatness(ws[:2])["ratio"] is None  # one window: nothing to compare


def test_rows_expected_of_the_answers(soak):
    report = sys.modules["soak_report"]  # bench_soak's reporting half, imported by it
    answer = {  # a /v1/score-set answer: rollout 0 has 2 items over 3 responses, rollout 1 no rubric
        "set_id": 7,
        "rubrics": [
            {"rubric": [{"criterion": "a", "weight": 1}, {"criterion": "b", "weight": 2}], "verdicts": [[1, 0]] * 3},
            {"rubric": None, "verdicts": None},
        ],
    }
    assert soak.set_answer_rows(answer) == {"rollouts": 2, "rubrics": 3, "verdicts": 6}
    answered = [
        {"op": "score-set", "members": 1, "responses": 3, "set_id": 7, "answer_rows": soak.set_answer_rows(answer)},
        {"op": "rewards", "members": 4, "responses": 4, "set_id": 8, "answer_rows": None},
        {"op": "get_reward", "members": 4, "responses": 4, "set_id": None, "answer_rows": None},
    ]
    exp = report.expected_rows(answered, rollouts=1)
    assert exp["requests"] == 9 and exp["requests:rewards"] == 4 and exp["requests:get_reward"] == 4
    assert (exp["samples"], exp["scores"], exp["rewards"], exp["sets"]) == (11, 3 * 2 + 4 + 4, 2 + 1 + 1, 3)
    assert (exp["rubrics:score-set"], exp["verdicts:score-set"]) == (3, 6)

    stored = {**exp, "request_ids": 9, "set_ids": {7, 8, 99}}
    rows = report.compare_rows(exp, stored, known_set_ids={7, 8})
    assert all(r["equal"] for r in rows), rows
    assert {r["table"] for r in rows} >= {"requests", "samples", "verdicts:score-set", "request_ids", "set_ids_found"}

    doubled = report.compare_rows(exp, {**stored, "requests": 10, "set_ids": {7}}, known_set_ids={7, 8})
    bad = {r["table"]: (r["expected"], r["stored"]) for r in doubled if not r["equal"]}
    assert bad == {"requests": (9, 10), "set_ids_found": (2, 1)}


def test_goals(soak):
    flat = {"ratio": 1.1}
    mem = {"rss_growth_pct": 10.0}
    met = soak.goals(0, flat, mem, [{"expected": 3, "equal": True}])
    assert [g["met"] for g in met] == [True, True, True, True]
    rows = [{"expected": 3, "equal": True}, {"expected": 3, "equal": False}]
    missed = soak.goals(3, {"ratio": 1.3}, {"rss_growth_pct": 10.5}, rows)
    assert [g["met"] for g in missed] == [False, False, False, False]
    unknown = soak.goals(0, {"ratio": None}, {"rss_growth_pct": None}, None)
    assert [g["met"] for g in unknown] == [True, None, None, None]
    nothing = soak.goals(0, flat, mem, [{"expected": 0, "equal": True}])  # nothing answered: nothing to compare
    assert nothing[-1]["met"] is None


def test_defaults(soak):
    args = soak.parse_args([])
    assert (args.minutes, args.window_minutes, args.warmup_minutes, args.clients) == (20.0, 2.0, 2.0, 2)
    assert args.engines is None and args.output.endswith("infra/benchmarks/results/bench_soak.json")
    assert soak.parse_args(["--window-minutes", "0.5"]).warmup_minutes == 0.5
    with pytest.raises(SystemExit):
        soak.parse_args(["--minutes", "2", "--warmup-minutes", "2"])


def test_grpo_steps_repeat_a_few_sets_per_prompt(soak):
    sets = [{"prompt": f"p{i}", "responses": [f"r{i}.{k}" for k in range(4)]} for i in range(40)]
    steps = soak.grpo_sets(sets)
    assert len(steps) == soak.GRPO_PROMPTS * soak.GRPO_VARIANTS
    assert {s["prompt"] for s in steps} == {f"p{i}" for i in range(soak.GRPO_PROMPTS)}
    assert len({(s["prompt"], tuple(s["responses"])) for s in steps}) == len(steps)  # the variants differ
    assert all(sum(a != b for a, b in zip(s["responses"], sets[int(s["prompt"][1:])]["responses"])) <= 1 for s in steps)


def test_cache_stats_from_the_metrics(soak):
    m = {"dr_verdict_cache_hits_total": 30.0, "dr_verdict_cache_misses_total": 10.0, "dr_verdict_cache_entries": 10.0}
    got = soak.cache_stats({**m, "dr_stage_seconds_total:verification": 2.0})
    assert (got["hit_rate"], got["s_per_verdict_asked"], got["saved_s_estimate"]) == (0.75, 0.2, 6.0)
    assert soak.cache_stats({})["hit_rate"] is None  # the cache off: said, not a 0


def test_fresh_sets_are_each_sent_once_and_the_grpo_steps_cycle(soak):
    steps = soak.grpo_sets(soak.make_sets(soak.N_SETS, 4))
    fresh = soak.fresh_sets(4, seed=0, exclude=steps)
    keys = [(s["prompt"], tuple(s["responses"])) for s in fresh]
    assert len(set(keys)) == len(keys) and len(keys) > 10_000  # distinct: a 60-minute soak sends under 2,000
    assert not set(keys) & {(s["prompt"], tuple(s["responses"])) for s in steps}  # the GRPO sets repeat, these not
    assert keys[:50] == [(s["prompt"], tuple(s["responses"])) for s in soak.fresh_sets(4, 0, steps)[:50]]
    assert keys[:50] != [(s["prompt"], tuple(s["responses"])) for s in soak.fresh_sets(4, 1, steps)[:50]]
    state = soak.Soak("http://127.0.0.1:1", soak.make_sets(soak.N_SETS, 4), "t", 0, 1.0, proc=None)
    taken = [state.next_set("fresh") for _ in range(3)]
    assert taken == state.fresh[:3]
    cycle = [state.next_set("grpo") for _ in range(2 * len(state.grpo_sets))]
    assert cycle == state.grpo_sets + state.grpo_sets and state.sent == {"fresh": 3, "grpo": 2 * len(steps)}


def test_p95_noise_deals_whole_groups_and_sees_a_drift(soak):
    report = sys.modules["soak_report"]
    # 6 windows of 60 s, the first warm-up, each with the same ten latencies: observed 1.0, dealt at random above
    flat = [rec("score-set", 60 * w + 5 + i, 1.0 + i) for w in range(6) for i in range(10)]
    z = report.p95_noise(flat, window_s=60, duration_s=360, warmup_s=60, draws=50)
    assert z["units"] == 50 and z["draws"] == 50  # the warm-up window's ten left out
    assert z["halves_ratio"] == 1.0 and 1.0 <= z["chance_ratio_median"] <= z["chance_ratio_p95"]
    # a drift: the second half twice as slow; the halves say so
    drift = [dict(r, latency_s=r["latency_s"] * (2 if r["t_end"] >= 210 else 1)) for r in flat]
    assert report.p95_noise(drift, 60, 360, 60, draws=10)["halves_ratio"] == 2.0
    # a /v1/rewards group is one unit: its 4 members move together
    group = [dict(rec("rewards", 130, 3.0), unit="g1") for _ in range(4)]
    assert report.p95_noise(flat + group, 60, 360, 60, draws=10)["units"] == 51
    assert report.p95_noise([], 60, 360, 60)["chance_ratio_median"] is None  # nothing answered: said, not a 1
