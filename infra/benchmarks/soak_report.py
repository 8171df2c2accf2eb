"""What bench_soak.py computes and prints from its records: the per-window counts, throughput and latency, the
resident memory's growth, the p95's flatness, the store rows expected of the answers and their comparison with the
stored ones, the goals, the totals, and the markdown report (pure: no server, no store, no clock)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from serve_harness import fmt, percentile

ROLLOUTS = 1  # dr serve --rubric-rollouts (the default) and /v1/score-set's rubric_rollouts (not sent: 1)
SCORING = ("score-set", "rewards", "get_reward")
GOAL_P95_RATIO = 1.2
GOAL_RSS_GROWTH_PCT = 10.0  # issue 41 (issue 28 asked 5 %)


# -- the pure pieces: windows, rows, goals -------------------------------------------------------------------------
def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def _statuses(recs: list[dict]) -> str:
    c = Counter(
        "transport" if r["status"] is None else str(r["status"]) if r["status"] != 200 else r["error"] for r in recs
    )
    return ", ".join(f"{k}: {v}" for k, v in sorted(c.items())) or "-"


def bucket_stats(recs: list[dict], seconds: float) -> dict:
    """Counts, throughput and latency of the requests ``recs`` (answered within ``seconds`` of wall time)."""
    ok = [r for r in recs if r["error"] is None]
    scoring = [r["latency_s"] for r in ok if r["op"] in SCORING]
    probes = [r["latency_s"] for r in ok if r["op"] in ("health", "metrics")]
    answered = Counter(r["op"] for r in ok)
    sets = sum(r["sets"] for r in ok)
    errors = [r for r in recs if r["error"] is not None]
    return {
        "score_set": answered["score-set"],
        "rewards_members": answered["rewards"],
        "get_reward": answered["get_reward"],
        "probes": answered["health"] + answered["metrics"],
        "replays": answered["replay"],
        "sets": sets,
        "sets_per_s": _r(sets / seconds, 4) if seconds > 0 else None,
        "p50_s": _r(percentile(scoring, 0.5), 3),
        "p95_s": _r(percentile(scoring, 0.95), 3),
        "latencies": len(scoring),
        "probe_p95_s": _r(percentile(probes, 0.95), 4),
        "errors": len(errors),
        "error_statuses": _statuses(errors),
    }


def rss_at(samples: list[tuple[float, int]], t: float) -> int | None:
    """The last RSS sample at or before ``t`` (seconds since the soak started); None if none."""
    before = [b for s, b in samples if s <= t]
    return before[-1] if before else None


def window_stats(
    records: list[dict], rss: list[tuple[float, int]], window_s: float, duration_s: float, warmup_s: float
) -> tuple[list[dict], dict]:
    """Per window (by the time each request was answered, ``t_end`` seconds since the start): ``bucket_stats``,
    whether it is warm-up (it starts before ``warmup_s``), and the RSS at its end and its peak within it. Then the
    drain: what was answered after ``duration_s``."""
    n = max(1, round(duration_s / window_s))
    bounds = [i * window_s for i in range(n)] + [duration_s]  # the last window ends with the soak
    windows = []
    for i in range(n):
        lo, hi = bounds[i], bounds[i + 1]
        recs = [r for r in records if lo <= r["t_end"] < hi]
        inside = [b for s, b in rss if lo <= s <= hi]
        end = rss_at(rss, hi)
        windows.append(
            {
                "window": i + 1,
                "from_min": _r(lo / 60, 2),
                "to_min": _r(hi / 60, 2),
                "warmup": lo < warmup_s,
                **bucket_stats(recs, hi - lo),
                "rss_end_mb": _r(end / 2**20, 1) if end is not None else None,
                "rss_peak_mb": _r(max(inside) / 2**20, 1) if inside else None,
            }
        )
    drained = [r for r in records if r["t_end"] >= duration_s]
    last = max((r["t_end"] for r in drained), default=duration_s)
    drain = {"seconds": _r(max(0.0, last - duration_s), 1), **bucket_stats(drained, max(last - duration_s, 0.0))}
    drain["sets_per_s"] = None  # not a window: the clients were stopping
    return windows, drain


def memory_growth(rss: list[tuple[float, int]], warmup_s: float, end_s: float) -> dict:
    """RSS at the end of warm-up, at the end (the last sample before the drain) and the growth between, in %."""
    base, end = rss_at(rss, warmup_s), rss_at(rss, end_s)
    vals = [b for _, b in rss]
    growth = (end - base) / base * 100 if base and end is not None else None
    return {
        "rss_warmup_end_mb": _r(base / 2**20, 1) if base is not None else None,
        "rss_end_mb": _r(end / 2**20, 1) if end is not None else None,
        "rss_growth_pct": _r(growth, 2),
        "rss_peak_mb": _r(max(vals) / 2**20, 1) if vals else None,
        "samples": len(rss),
    }


def p95_flatness(windows: list[dict]) -> dict:
    """max / min of the post-warm-up windows' p95 (windows with no scoring latency left out)."""
    p95 = [w["p95_s"] for w in windows if not w["warmup"] and w["p95_s"] is not None]
    ratio = max(p95) / min(p95) if len(p95) >= 2 and min(p95) > 0 else None
    return {
        "windows": len(p95),
        "p95_min_s": min(p95, default=None),
        "p95_max_s": max(p95, default=None),
        "ratio": _r(ratio, 3),
    }


def p95_noise(records: list[dict], window_s: float, duration_s: float, warmup_s: float, draws: int = 1000) -> dict:
    """How far the windows' p95 max / min moves on chance alone: the post-warm-up scoring latencies' units (a
    /v1/rewards group is one unit: its members' latencies are one size) dealt to the windows at random, ``draws``
    times (seeded); with the p95 of each half of the soak after warm-up, which a drift would move apart."""
    n = max(1, round(duration_s / window_s))
    first = next((i for i in range(n) if i * window_s >= warmup_s), n)
    units: dict = defaultdict(list)
    for k, r in enumerate(records):
        if r["error"] is None and r["op"] in SCORING and warmup_s <= r["t_end"] < duration_s:
            units[r.get("unit", k)].append((min(int(r["t_end"] // window_s), n - 1), r["latency_s"]))
    groups = [(lats[0][0], [x for _, x in lats]) for lats in units.values()]

    def ratio(labels: list[int]) -> float | None:
        per: dict = defaultdict(list)
        for w, (_, lats) in zip(labels, groups):
            per[w].extend(lats)
        p95 = [percentile(v, 0.95) for w, v in per.items() if w >= first]
        return max(p95) / min(p95) if len(p95) >= 2 and min(p95) > 0 else None

    labels = [w for w, _ in groups]
    rng, null = random.Random(0), []
    for _ in range(draws if groups else 0):
        rng.shuffle(labels)
        null.append(ratio(labels))
    null = sorted(x for x in null if x is not None)
    mid = warmup_s + (duration_s - warmup_s) / 2
    halves = [[x for w, lats in groups for x in lats if (w * window_s < mid) == h] for h in (True, False)]
    p_first, p_second = (percentile(h, 0.95) for h in halves)
    return {
        "units": len(groups),
        "draws": len(null),
        "chance_ratio_median": _r(percentile(null, 0.5), 3),
        "chance_ratio_p95": _r(percentile(null, 0.95), 3),
        "p95_first_half_s": _r(p_first, 3),
        "p95_second_half_s": _r(p_second, 3),
        "halves_ratio": _r(p_second / p_first, 3) if p_first and p_second else None,
    }


def set_answer_rows(answer: dict) -> dict:
    """The lineage rows a ``/v1/score-set`` answer stands for (``ledger.lineage_rows``): per rollout, one
    ``rubrics`` row per item (one error row when it has no rubric) and one ``verdicts`` row per response and item."""
    rubrics = verdicts = 0
    for roll in answer.get("rubrics") or []:
        items = roll.get("rubric")
        rubrics += len(items) if items else 1
        if items:
            verdicts += sum(len(row) for row in roll.get("verdicts") or [])
    return {"rollouts": len(answer.get("rubrics") or []), "rubrics": rubrics, "verdicts": verdicts}


def expected_rows(answered: list[dict], rollouts: int = ROLLOUTS) -> dict:
    """The rows the answered sets must have left in the store. ``answered``: one entry per set that got at least one
    answer, ``{"op", "members" (answered requests of it), "responses", "set_id" (None: not in the answer),
    "answer_rows" (``set_answer_rows``, score-set only)}``."""
    exp = Counter()
    for a in answered:
        r = a["answer_rows"]["rollouts"] if a.get("answer_rows") else rollouts
        exp["requests"] += a["members"]
        exp[f"requests:{a['op']}"] += a["members"]
        exp["samples"] += a["responses"]
        exp["scores"] += a["responses"] * r
        exp["rewards"] += r
        exp["sets"] += 1
        if a.get("answer_rows"):
            exp["rubrics:score-set"] += a["answer_rows"]["rubrics"]
            exp["verdicts:score-set"] += a["answer_rows"]["verdicts"]
    return dict(exp)


ROW_CHECKS = (
    ("requests", "one per answered request (score-set, rewards member, get_reward query; replays none)"),
    ("requests:score-set", "of them, route score-set"),
    ("requests:rewards", "of them, route rewards"),
    ("requests:get_reward", "of them, route get_reward"),
    ("request_ids", "distinct request ids in requests (no row twice)"),
    ("samples", "one per response of an answered set"),
    ("scores", "one per response and rubric rollout"),
    ("rewards", "one per answered set and rollout"),
    ("sets", "distinct set ids in samples"),
    ("set_ids_found", "set ids named in the answers that samples holds"),
    ("rubrics:score-set", "score-set sets: one per rubric item (from the answers)"),
    ("verdicts:score-set", "score-set sets: one per response and item (from the answers)"),
)


def compare_rows(expected: dict, stored: dict, known_set_ids: set[int]) -> list[dict]:
    """One row per check of ``ROW_CHECKS``: expected (from the answers) against stored (``store_counts``)."""
    exp = {**expected, "request_ids": expected.get("requests", 0), "set_ids_found": len(known_set_ids)}
    got = {**stored, "set_ids_found": len(known_set_ids & stored.get("set_ids", set()))}
    return [
        {
            "table": name,
            "expected": exp.get(name, 0),
            "stored": got.get(name, 0),
            "equal": exp.get(name, 0) == got.get(name, 0),
            "per": per,
        }
        for name, per in ROW_CHECKS
    ]


def goals(errors: int, flat: dict, memory: dict, rows: list[dict] | None) -> list[dict]:
    growth, ratio = memory["rss_growth_pct"], flat["ratio"]
    answered = rows is not None and any(r["expected"] for r in rows)
    rows_equal = all(r["equal"] for r in rows) if answered else None  # None: nothing to compare
    return [
        {"goal": "0 errors", "value": errors, "met": errors == 0},
        {
            "goal": f"p95 flat within {GOAL_P95_RATIO - 1:.0%} (post-warm-up max / min)",
            "value": ratio,
            "met": None if ratio is None else ratio <= GOAL_P95_RATIO,
        },
        {
            "goal": f"RSS growth <= {GOAL_RSS_GROWTH_PCT:g} % after warm-up",
            "value": growth,
            "met": None if growth is None else growth <= GOAL_RSS_GROWTH_PCT,
        },
        {"goal": "store rows equal to answers", "value": rows_equal, "met": rows_equal},
    ]


def totals(records: list[dict]) -> dict:
    """The whole soak's counts (the drain included): sets, scoring requests, probes, replays, errors."""
    errors = [r for r in records if r["error"] is not None]
    ok = [r for r in records if r["error"] is None]
    return {
        "sets": sum(r["sets"] for r in ok),
        "scoring_requests": sum(1 for r in ok if r["op"] in SCORING),
        "probes": sum(1 for r in ok if r["op"] in ("health", "metrics")),
        "replays": sum(1 for r in records if r["op"] == "replay"),
        "replay_mismatches": sum(1 for r in records if r["error"] == "replay_mismatch"),
        "errors": len(errors),
        "error_statuses": _statuses(errors),
    }


# -- the report ------------------------------------------------------------------------------------------------------
def md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def print_windows(result: dict) -> None:
    """The windows' table: one row per window, then the drain."""
    ws = result["windows"]
    rows = []
    for w in [*ws, {**result["drain"], "window": "drain", "from_min": "", "to_min": "", "warmup": False}]:
        label = f"{w['window']}" + (" (warm-up)" if w["warmup"] else "")
        span = f"{w['from_min']}-{w['to_min']}" if w["from_min"] != "" else f"+{w['seconds']} s"
        rows.append(
            [
                label,
                span,
                w["score_set"],
                w["rewards_members"],
                w["get_reward"],
                w["probes"],
                w["replays"],
                w["sets"],
                fmt(w["sets_per_s"], ".3f"),
                fmt(w["p50_s"], ".2f"),
                fmt(w["p95_s"], ".2f"),
                w["latencies"],
                fmt(w["probe_p95_s"], ".3f"),
                w["errors"],
                fmt(w.get("rss_end_mb"), ".0f"),
            ]
        )
    header = ["window", "min", "score-set", "rewards members", "get_reward", "probes", "replays", "sets", "sets/s"]
    header += ["p50 s", "p95 s", "latencies", "probe p95 s", "errors", "RSS end MiB"]
    print()
    print(md_table(header, rows))


def print_report(result: dict) -> None:
    """The windows' table, memory, p95 and totals, the rows' table, the goals, the errors and the timings."""
    print_windows(result)
    m, f = result["memory"], result["p95_flatness"]
    print(
        f"\nRSS (dr serve and children): {fmt(m['rss_warmup_end_mb'], '.0f')} MiB at the end of warm-up, "
        f"{fmt(m['rss_end_mb'], '.0f')} MiB at the end, growth {fmt(m['rss_growth_pct'], '.2f')} %, "
        f"peak {fmt(m['rss_peak_mb'], '.0f')} MiB ({m['samples']} samples)"
    )
    print(
        f"p95 over {f['windows']} post-warm-up windows: {fmt(f['p95_min_s'], '.2f')}-{fmt(f['p95_max_s'], '.2f')} s, "
        f"max / min {fmt(f['ratio'], '.3f')}"
    )
    if result.get("p95_noise"):
        z = result["p95_noise"]
        print(
            f"  on chance alone ({z['units']} units dealt to the windows at random, {z['draws']} times) that ratio is "
            f"{fmt(z['chance_ratio_median'], '.2f')} (median), {fmt(z['chance_ratio_p95'], '.2f')} (95th percentile); "
            f"p95 of the first / second half after warm-up {fmt(z['p95_first_half_s'], '.2f')} / "
            f"{fmt(z['p95_second_half_s'], '.2f')} s ({fmt(z['halves_ratio'], '.3f')})"
        )
    t = result["totals"]
    print(
        f"totals: {t['sets']} sets, {t['scoring_requests']} scoring requests, {t['probes']} probes, {t['replays']} "
        f"replays ({t['replay_mismatches']} answered differently), {t['errors']} errors ({t['error_statuses']})"
    )
    vc = result.get("verdict_cache") or {}
    if vc.get("hits") is not None:
        print(
            f"verdict cache: {vc['hits']} hits, {vc['misses']} misses (hit rate {fmt(vc['hit_rate'], '.3f')}), "
            f"{vc['entries']} held; about {fmt(vc['saved_s_estimate'], '.0f')} s of verification saved "
            f"({fmt(vc['s_per_verdict_asked'], '.4f')} s per verdict asked)"
        )
    if result["rows"] is not None:
        print()
        print(
            md_table(
                ["rows", "expected", "stored", "equal", "per"],
                [
                    [r["table"], r["expected"], r["stored"], "yes" if r["equal"] else "NO", r["per"]]
                    for r in result["rows"]
                ],
            )
        )
    else:
        print(f"\nrows: not counted ({result['rows_note']})")
    print()
    for g in result["goals"]:
        verdict = {True: "met", False: "MISSED", None: "n/a"}[g["met"]]
        print(f"goal {g['goal']}: {verdict} ({g['value']})")
    missed = [g["goal"] for g in result["goals"] if g["met"] is not True]
    print("all goals met" if not missed else f"NOT MET: {'; '.join(missed)} (a benchmark: exit code 0)")
    if result.get("server_died"):
        print(f"!! {result['server_died']}")
    for e in result["error_samples"][:5]:
        print(f"  error: {e['op']} {e['route']} status {e['status']}: {e['error'][:300]}")
    print(
        f"engine start-up {result['startup_s']:.1f} s; soak {result['soak_wall_s']:.1f} s (drain included); "
        f"total wall {result['total_wall_s']:.1f} s; server exit code {result['server_exit_code']}"
    )


def cache_stats(metrics: dict) -> dict:
    """The verdict cache over the soak: hits, misses, hit rate, and the time saved (hits times the verification
    seconds per verdict asked: an estimate)."""
    hits, misses = metrics.get("dr_verdict_cache_hits_total"), metrics.get("dr_verdict_cache_misses_total")
    if hits is None or misses is None:
        return {"hits": None, "misses": None, "hit_rate": None, "note": "no dr_verdict_cache series: cache off"}
    verify_s = metrics.get("dr_stage_seconds_total:verification", 0.0)
    per = verify_s / misses if misses else None
    return {
        "hits": int(hits),
        "misses": int(misses),
        "hit_rate": round(hits / (hits + misses), 4) if hits + misses else None,
        "entries": int(metrics.get("dr_verdict_cache_entries", 0)),
        "verification_s": round(verify_s, 1),
        "s_per_verdict_asked": None if per is None else round(per, 5),
        "saved_s_estimate": None if per is None else round(hits * per, 1),
    }


# -- the store -------------------------------------------------------------------------------------------------------
def store_counts(store_dir, run_id: str, score_set_ids: set[int]) -> dict:
    """What the service left in the store (read after it stopped): rows per table of run ``run_id``, the requests by
    route, distinct request ids and set ids, and the rubrics / verdicts rows of the score-set sets."""
    from dr_core.service.ledger import COMMIT_TABLE, LINEAGE_TABLES, ROUND
    from dr_core.store.artifacts import Store

    store = Store.from_url(str(store_dir))
    got: dict = {}
    for table in (COMMIT_TABLE, *LINEAGE_TABLES):
        t = store.read_table(table, run_id=run_id, round=ROUND)
        got[table] = t.num_rows
        if table in ("rubrics", "verdicts"):
            got[f"{table}:score-set"] = sum(1 for x in t.column("set_id").to_pylist() if x in score_set_ids)
        if table == COMMIT_TABLE:
            routes = Counter(t.column("route").to_pylist())
            got.update({f"requests:{k}": v for k, v in routes.items()})
            got["request_ids"] = len(set(t.column("request_id").to_pylist()))
        if table == "samples":
            got["set_ids"] = set(t.column("set_id").to_pylist())
            got["sets"] = len(got["set_ids"])
    return got


def count_rows(answered: list[dict], server_died, store, run_id: str, exit_code) -> tuple[list | None, str | None]:
    """The store's rows against the answers (``compare_rows``), and a note when they were not (all) counted."""
    rows, rows_note = None, None
    if exit_code is None or server_died:
        rows_note = server_died or "the server did not stop"
    try:
        score_set_ids = {a["set_id"] for a in answered if a["op"] == "score-set"}
        known = {a["set_id"] for a in answered if a["set_id"] is not None}
        rows = compare_rows(expected_rows(answered), store_counts(store, run_id, score_set_ids), known)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the soak's numbers stand
        rows, rows_note = None, f"reading the store failed: {type(exc).__name__}: {exc}"
    return rows, rows_note
